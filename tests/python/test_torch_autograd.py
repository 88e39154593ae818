"""Autograd behaviour of xent.torch: in-place gradient, upstream gradients,
no_grad, version counters, backward more than once, bad input."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
import torch.nn.functional as F  # noqa: E402

import xent  # noqa: E402
import xent.torch as xt  # noqa: E402
from helpers import make_logits, make_targets  # noqa: E402
from reference import cross_entropy_ref  # noqa: E402
from tolerances import assert_close, tol  # noqa: E402
from torch_helpers import DEVICES, DTYPES, f64, requires_cuda, tensor  # noqa: E402


def _case(rng, device, dtype_name, n=32, v=777, **opts):
    x32 = make_logits(rng, n, v)
    y = make_targets(rng, x32, ignore_index=opts.get("ignore_index", -100))
    x = tensor(x32, DTYPES[dtype_name], device).requires_grad_()
    return x, f64(x), torch.from_numpy(y).to(device), y


# ---------------------------------------------------------------------------
# Not the last layer: upstream gradients other than 1
# ---------------------------------------------------------------------------

OPTS = {"label_smoothing": 0.1, "lse_square_scale": 1e-3, "softcap": 10.0}


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("device", DEVICES)
def test_loss_times_scalar(rng, device, dtype_name, reduction):
    x, x64, yt, y = _case(rng, device, dtype_name)
    loss = xt.cross_entropy(x, yt, reduction=reduction, **OPTS)
    (loss * 2.5).backward()
    ref = cross_entropy_ref(x64, y, reduction=reduction, **OPTS)
    assert_close(f64(x.grad), 2.5 * ref["grad"], tol(dtype_name, "grad_scaled"), "gradient")


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("device", DEVICES)
def test_loss_through_another_op(rng, device, dtype_name, reduction):
    x, x64, yt, y = _case(rng, device, dtype_name)
    loss = xt.cross_entropy(x, yt, reduction=reduction, **OPTS)
    scale = 0.05 if reduction == "sum" else 1.0
    out = torch.sin(loss * scale) + loss.detach()  # d/dloss = scale * cos(scale * loss)
    out.backward()
    # The upstream gradient as autograd computed it, in the loss' dtype.
    with torch.no_grad():
        g = (torch.cos(loss * scale) * scale).to(loss.dtype)
    ref = cross_entropy_ref(x64, y, reduction=reduction, **OPTS)
    assert_close(f64(x.grad), float(g.float()) * ref["grad"], tol(dtype_name, "grad_scaled"),
                 "gradient")


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("device", DEVICES)
def test_reduction_none_per_row_upstream(rng, device, dtype_name):
    x, x64, yt, y = _case(rng, device, dtype_name)
    loss = xt.cross_entropy(x, yt, reduction="none", **OPTS)
    rows = torch.from_numpy(rng.uniform(-2, 2, x.shape[0]).astype(np.float32)).to(device)
    rows = rows.to(loss.dtype)
    (loss * rows).sum().backward()
    ref = cross_entropy_ref(x64, y, reduction="none", **OPTS)
    assert_close(f64(x.grad), f64(rows)[:, None] * ref["grad"], tol(dtype_name, "grad_scaled"),
                 "gradient")


@pytest.mark.parametrize("device", DEVICES)
def test_mean_of_none_equals_mean(rng, device):
    x, x64, yt, y = _case(rng, device, "float32", ignore_index=-100)
    loss = xt.cross_entropy(x, yt, reduction="none")
    (loss.sum() / (yt != -100).sum()).backward()
    ref = cross_entropy_ref(x64, y, reduction="mean")
    assert_close(f64(x.grad), ref["grad"], tol("float32", "grad_scaled"), "gradient")


@pytest.mark.parametrize("device", DEVICES)
def test_logits_from_a_layer(rng, device):
    """The usual case: logits = hidden @ W^T, gradients reach both factors."""
    n, h, v = 24, 16, 515
    hid = tensor(rng.standard_normal((n, h)).astype(np.float32), torch.float32, device)
    w = tensor((rng.standard_normal((v, h)) * 0.5).astype(np.float32), torch.float32, device)
    y = torch.from_numpy(make_targets(rng, make_logits(rng, n, v))).to(device)
    hid.requires_grad_()
    w.requires_grad_()
    hid2 = hid.detach().clone().double().requires_grad_()
    w2 = w.detach().clone().double().requires_grad_()
    (xt.cross_entropy(hid @ w.t(), y, label_smoothing=0.1) * 3.0).backward()
    (F.cross_entropy(hid2 @ w2.t(), y, label_smoothing=0.1) * 3.0).backward()
    t = tol("float32", "grad_scaled")
    # One matmul of fp32 gradients on top: a little more than the gradient's tolerance.
    loose = type(t)(rtol=10 * t.rtol, atol_rel=10 * t.atol_rel)
    assert_close(f64(hid.grad), f64(hid2.grad), loose, "hidden gradient")
    assert_close(f64(w.grad), f64(w2.grad), loose, "weight gradient")


# ---------------------------------------------------------------------------
# Forward only, in-place semantics, version counters
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("device", DEVICES)
def test_no_grad_leaves_logits_unchanged(rng, device, dtype_name):
    x, x64, yt, y = _case(rng, device, dtype_name)
    before = x.detach().clone()
    with torch.no_grad():
        out = xt.cross_entropy(x, yt, return_z_loss=True, lse_square_scale=1e-3)
    assert torch.equal(x.detach(), before) and x.grad is None
    assert out.loss.grad_fn is None and not out.loss.requires_grad
    assert out.loss.dtype == x.dtype
    ref = cross_entropy_ref(x64, y, lse_square_scale=1e-3)
    assert_close(f64(out.loss), ref["loss"], tol(dtype_name, "loss"), "loss")
    with torch.inference_mode():
        xt.cross_entropy(x, yt)
    assert torch.equal(x.detach(), before)
    plain = x.detach().clone()  # does not require grad
    xt.cross_entropy(plain, yt)
    assert torch.equal(plain, before)


@pytest.mark.parametrize("device", DEVICES)
def test_forward_writes_the_gradient_over_the_logits(rng, device):
    x, x64, yt, y = _case(rng, device, "float32")
    loss = xt.cross_entropy(x, yt)
    ref = cross_entropy_ref(x64, y)
    assert_close(f64(x), ref["grad"], tol("float32", "grad"), "logits after forward")
    loss.backward()
    assert torch.equal(x.grad, x.detach())  # the gradient is that very buffer


@pytest.mark.parametrize("device", DEVICES)
def test_backward_does_not_bump_the_version_counter(rng, device):
    x, _, yt, _ = _case(rng, device, "bfloat16")
    logits = x * 1.0  # a non-leaf, like a layer's output
    loss = xt.cross_entropy(logits, yt)
    after_forward = logits._version
    (loss * 3.0).backward()
    assert logits._version == after_forward


@pytest.mark.parametrize("device", DEVICES)
def test_overwriting_a_tensor_saved_upstream_is_detected(rng, device):
    # exp() saves its output for its backward; xent then overwrites that output.
    # The forward bumps the version counter, so autograd refuses instead of
    # computing a wrong gradient.
    x, _, yt, _ = _case(rng, device, "float32")
    loss = xt.cross_entropy(torch.exp(x * 0.1), yt)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.parametrize("device", DEVICES)
def test_auxiliary_outputs_are_not_differentiable(rng, device):
    x, _, yt, _ = _case(rng, device, "float32")
    out = xt.cross_entropy(x, yt, lse_square_scale=1e-3, return_z_loss=True,
                           return_token_accuracy=True, return_predicted_tokens=True)
    assert out.loss.requires_grad
    for t in (out.z_loss, out.token_accuracy, out.predicted_tokens):
        assert not t.requires_grad


# ---------------------------------------------------------------------------
# The eager step's lean path (2-D logits, 1-D targets, no weights, no extra
# outputs) against the general one
# ---------------------------------------------------------------------------


def _path(loss):
    """The autograd.Function that made `loss` (past the view of "none")."""
    fn = loss.grad_fn
    while type(fn).__name__.startswith("View"):
        fn = fn.next_functions[0][0]
    return type(fn).__name__


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("device", DEVICES)
def test_lean_step_matches_the_general_path(rng, device, dtype_name, reduction):
    """The common call takes the lean path, and gives what the general path
    (the same call on (1, N, V) logits) gives, bit for bit, loss and gradient,
    both against the float64 reference; the upstream gradient is not 1."""
    x32 = make_logits(rng, 45, 1001)
    y = make_targets(rng, x32, ignore_index=-100)
    yt = torch.from_numpy(y).to(device)
    ref = cross_entropy_ref(f64(tensor(x32, DTYPES[dtype_name], "cpu")), y,
                            reduction=reduction, softcap=12.0, label_smoothing=0.05)
    got = {}
    for name in ("lean", "general"):
        x = tensor(x32, DTYPES[dtype_name], device).requires_grad_()
        inp = x if name == "lean" else x.view(1, *x.shape)
        t = yt if name == "lean" else yt.view(1, -1)
        loss = xt.cross_entropy(inp, t, reduction=reduction, softcap=12.0,
                                label_smoothing=0.05)
        assert _path(loss) == ("_StepFunctionBackward" if name == "lean"
                               else "_CrossEntropyFunctionBackward"), _path(loss)
        up = torch.full(loss.shape, -1.5, dtype=loss.dtype, device=device)
        loss.backward(up)
        got[name] = (loss.detach().reshape(-1).float().cpu(), x.grad.float().cpu())
        assert loss.dtype == x.dtype
        assert_close(f64(got[name][0]), np.asarray(ref["loss"]).reshape(-1),
                     tol(dtype_name, "loss"), f"{name} loss")
        assert_close(f64(x.grad), -1.5 * ref["grad"], tol(dtype_name, "grad_scaled"),
                     f"{name} gradient")
    assert torch.equal(got["lean"][0], got["general"][0])
    assert torch.equal(got["lean"][1], got["general"][1])


@pytest.mark.parametrize("device", DEVICES)
def test_other_calls_take_the_general_path(rng, device):
    """Weights, extra outputs, no grad, a 3-D shape or a strided target: the
    general path, which handles them."""
    x, x64, yt, y = _case(rng, device, "float32", n=8, v=50)
    w = torch.ones(50, device=device)
    assert _path(xt.cross_entropy(x.clone(), yt, weight=w)) == "_CrossEntropyFunctionBackward"
    out = xt.cross_entropy(x.clone(), yt, return_z_loss=True)
    assert _path(out.loss) == "_CrossEntropyFunctionBackward"
    y2 = torch.stack([yt, yt], 1)[:, 0]  # stride 2
    assert _path(xt.cross_entropy(x.clone(), y2)) == "_CrossEntropyFunctionBackward"
    with torch.no_grad():
        assert xt.cross_entropy(x, yt).grad_fn is None


# ---------------------------------------------------------------------------
# Backward more than once (retain_graph) and higher order
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("device", DEVICES)
def test_backward_twice_with_retain_graph(rng, device, dtype_name, reduction):
    """Each backward gets the gradient for its own upstream gradient."""
    n, h, v = 20, 8, 300
    hid = tensor(rng.standard_normal((n, h)).astype(np.float32), DTYPES[dtype_name], device)
    w = tensor((rng.standard_normal((v, h)) * 0.5).astype(np.float32), DTYPES[dtype_name],
               device).requires_grad_()
    y = torch.from_numpy(make_targets(rng, make_logits(rng, n, v))).to(device)
    logits = hid @ w.t()
    x64 = f64(logits)
    loss = xt.cross_entropy(logits, y, reduction=reduction, label_smoothing=0.1)
    shape = loss.shape
    ups = [torch.full(shape, 2.0), torch.full(shape, 1.0), torch.full(shape, -0.5)]
    if reduction == "none":
        ups[2] = torch.from_numpy(rng.uniform(-1, 1, n).astype(np.float32))
    grads = []
    for g in ups:
        w.grad = None
        loss.backward(g.to(device=device, dtype=loss.dtype), retain_graph=True)
        grads.append(f64(w.grad))
    ref = cross_entropy_ref(x64, y.cpu().numpy(), reduction=reduction, label_smoothing=0.1)
    hid64 = f64(hid)
    t = tol(dtype_name, "grad_scaled")
    # The weight gradient is g_logits^T @ hidden. Each element of g_logits is rounded to the
    # dtype up to three times (the forward, two rescales) before torch's matmul, which rounds
    # its sum once more: the bound is in the sum of the terms' magnitudes, since a sum that
    # cancels (a target column's -1 against the rest) keeps its terms' absolute errors.
    unit = {"float32": 2.0**-24, "bfloat16": 2.0**-8, "float16": 2.0**-11}[dtype_name]
    for i, (g, got) in enumerate(zip(ups, grads)):
        gl = ref["grad"] * f64(g.to(loss.dtype)).reshape(-1, 1)
        want = gl.T @ hid64
        bound = 4 * unit * (np.abs(gl).T @ np.abs(hid64)) + t.rtol * np.abs(want) + 1e-7
        err = np.abs(got - want)
        worst = np.unravel_index(np.argmax(err - bound), err.shape)
        assert (err <= bound).all(), (
            f"weight gradient of backward {i}: {int((err > bound).sum())} of {err.size} out of "
            f"bound; worst got {got[worst]!r} want {want[worst]!r} (bound {bound[worst]:.3e})")


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("device", DEVICES)
def test_backward_twice_after_the_caller_changes_its_upstream_gradient(rng, device, reduction):
    """The backward keeps its own copy of the upstream gradient it applied: changing the
    caller's tensor in place between two backward calls must not change the result."""
    x, x64, yt, y = _case(rng, device, "float32")
    logits = x * 1.0  # not a leaf: each backward's gradient lands in x.grad
    loss = xt.cross_entropy(logits, yt, reduction=reduction)
    g = torch.full(loss.shape, 2.0, device=device)
    loss.backward(g, retain_graph=True)
    x.grad = None
    g.mul_(3.0)  # now 6
    loss.backward(g)
    ref = cross_entropy_ref(x64, y, reduction=reduction)["grad"]
    assert_close(f64(x.grad), 6.0 * ref, tol("float32", "grad_scaled"), "second backward")


@pytest.mark.parametrize("device", DEVICES)
def test_leaf_logits_backward_twice_accumulates(rng, device):
    x, x64, yt, y = _case(rng, device, "float32")
    loss = xt.cross_entropy(x, yt)
    loss.backward(retain_graph=True)
    loss.backward()
    assert_close(f64(x.grad), 2 * cross_entropy_ref(x64, y)["grad"], tol("float32", "grad"),
                 "accumulated gradient")


@pytest.mark.parametrize("device", DEVICES)
def test_second_order_gradients_are_not_built(rng, device):
    x, _, yt, _ = _case(rng, device, "float32")
    loss = xt.cross_entropy(x, yt)
    (g,) = torch.autograd.grad(loss, x, create_graph=True)
    assert g.grad_fn is None and not g.requires_grad


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("requires_grad", [True, False])
@pytest.mark.parametrize("bad", [-1, 777, 10**9])
@pytest.mark.parametrize("device", DEVICES)
def test_out_of_range_target_raises_and_leaves_logits(rng, device, bad, requires_grad):
    """The forward raises and leaves the logits; on CUDA with grad the check
    is read later (check_pending here) and the rejected call's gradient is
    zero."""
    x, _, yt, _ = _case(rng, device, "bfloat16")
    x.requires_grad_(requires_grad)
    yt[11] = bad
    before = x.detach().clone()
    late = device == "cuda" and requires_grad
    with pytest.raises(xent.XentValueError) as info:
        xt.cross_entropy(x, yt)
        if late:
            xt.check_pending()
    assert info.value.status_name == "XENT_ERROR_BAD_TARGET"
    assert f"targets[11] = {bad}" in str(info.value)
    assert isinstance(info.value, ValueError)
    if late:
        assert not x.detach().any()
    else:
        assert torch.equal(x.detach(), before)


@requires_cuda
def test_unchecked_targets_on_the_gpu_give_nan_without_raising(rng):
    x, x64, yt, y = _case(rng, "cuda", "float32")
    yt[5] = 10**6
    loss = xt.cross_entropy(x, yt, check_targets=False, reduction="none")
    assert torch.isnan(loss[5]) and not torch.isnan(loss[:5]).any()
    loss.sum().backward()
    assert torch.count_nonzero(x.grad[5]) == 0


@pytest.mark.parametrize("device", DEVICES)
def test_bad_options_raise_with_the_c_message(rng, device):
    x, _, yt, _ = _case(rng, device, "float32")
    before = x.detach().clone()
    with pytest.raises(xent.XentValueError, match="label_smoothing is 1.5"):
        xt.cross_entropy(x, yt, label_smoothing=1.5)
    with pytest.raises(xent.XentValueError, match="softcap"):
        xt.cross_entropy(x, yt, softcap=-2.0)
    w = torch.ones(x.shape[1], device=device)
    w[3] = float("inf")
    with pytest.raises(xent.XentValueError, match=r"weights\[3\]"):
        xt.cross_entropy(x, yt, weight=w)
        xt.check_pending()  # CUDA with grad: the check is read later, the gradient zero
    if device == "cpu":
        assert torch.equal(x.detach(), before)
    else:
        assert not x.detach().any()


@pytest.mark.parametrize("device", DEVICES)
def test_python_side_argument_errors(rng, device):
    x, _, yt, _ = _case(rng, device, "float32")
    with pytest.raises(ValueError, match="reduction"):
        xt.cross_entropy(x, yt, reduction="avg")
    with pytest.raises(ValueError, match="reduction"):
        xt.CrossEntropyLoss(reduction="avg")
    with pytest.raises(ValueError, match="shape"):
        xt.cross_entropy(x, yt[:-1])
    with pytest.raises(ValueError, match="class indices"):
        xt.cross_entropy(x, yt.float())
    with pytest.raises(ValueError, match="weight must have shape"):
        xt.cross_entropy(x, yt, weight=torch.ones(3, device=device))
    with pytest.raises(ValueError, match="float32, bfloat16 or float16"):
        xt.cross_entropy(x.detach().double(), yt)
    if device == "cpu" and torch.cuda.is_available():
        with pytest.raises(ValueError, match="is on"):
            xt.cross_entropy(x, yt.cuda())
