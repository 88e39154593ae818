"""xent.torch against torch.nn.functional.cross_entropy and the float64 reference.

Every feature and combination, every reduction, fp32/bf16/fp16, on the CPU
and (when present) the GPU. Torch's own cross_entropy is run in float64 on
the same values: it checks the reference where torch has the feature, and
xent against torch directly.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
import torch.nn.functional as F  # noqa: E402

import xent  # noqa: E402
import xent.torch as xt  # noqa: E402
from helpers import FEATURES, REDUCTIONS, make_logits, make_targets, make_weight  # noqa: E402
from reference import cross_entropy_ref  # noqa: E402
from tolerances import assert_close, tol, with_cancellation  # noqa: E402
from torch_helpers import DEVICES, DTYPES, f64, tensor  # noqa: E402

TORCH_HAS = {"weight", "label_smoothing", "ignore_index"}


def torch_reference(x64, y, reduction, weight=None, ignore_index=-100, label_smoothing=0.0):
    """torch.nn.functional.cross_entropy in float64: loss and d(loss)/dx."""
    x = torch.from_numpy(x64).requires_grad_()
    w = None if weight is None else torch.from_numpy(weight.astype(np.float64))
    loss = F.cross_entropy(x, torch.from_numpy(y), weight=w, ignore_index=ignore_index,
                           label_smoothing=label_smoothing, reduction=reduction)
    loss.backward(torch.ones_like(loss))
    return loss.detach().numpy(), x.grad.numpy()


def run_case(rng, device, dtype_name, reduction, feature, n=48, v=1003):
    opts = dict(FEATURES[feature])
    weight = make_weight(rng, v) if opts.pop("weight", False) else None
    x32 = make_logits(rng, n, v)
    y = make_targets(rng, x32, ignore_index=opts.get("ignore_index", -100))
    x = tensor(x32, DTYPES[dtype_name], device).requires_grad_()
    x64 = f64(x)
    w = None if weight is None else torch.from_numpy(weight).to(device)
    out = xt.cross_entropy(x, torch.from_numpy(y).to(device), weight=w, reduction=reduction,
                           return_z_loss=True, return_token_accuracy=True,
                           return_predicted_tokens=True, **opts)
    out.loss.backward(torch.ones_like(out.loss))
    ref = cross_entropy_ref(x64, y, weight=weight, reduction=reduction, **opts)
    return dict(x=x, x64=x64, y=y, weight=weight, opts=opts, out=out, ref=ref)


@pytest.mark.parametrize("feature", list(FEATURES))
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("device", DEVICES)
def test_parity(rng, device, dtype_name, reduction, feature):
    c = run_case(rng, device, dtype_name, reduction, feature)
    out, ref, x = c["out"], c["ref"], c["x"]
    dt = DTYPES[dtype_name]

    # Types and shapes as torch (and the peer) give them.
    assert isinstance(out, xt.CrossEntropyOutput)
    assert out.loss.dtype == dt and out.z_loss.dtype == dt
    assert out.token_accuracy.dtype == torch.float32
    assert out.predicted_tokens.dtype == torch.int64
    assert out.loss.device == x.device
    shape = (x.shape[0],) if reduction == "none" else ()
    assert out.loss.shape == shape and out.z_loss.shape == shape
    assert out.token_accuracy.shape == shape
    assert out.predicted_tokens.shape == (x.shape[0],)
    assert x.grad.shape == x.shape and x.grad.dtype == dt

    assert_close(f64(out.loss), ref["loss"], tol(dtype_name, "loss"), "loss")
    assert_close(f64(out.z_loss), ref["z_loss"], tol(dtype_name, "loss"), "z_loss")
    # The arg-max: the reference's, but where another class ties it within
    # fp32 rounding of x' (the softcap's tanh flattens the top logits), any
    # of the tied ones; the accuracy is then that of the library's own pick.
    pred = out.predicted_tokens.cpu().numpy()
    y = c["y"]
    valid = y != c["opts"].get("ignore_index", -100)
    cap = c["opts"].get("softcap")
    xp = cap * np.tanh(c["x64"] / cap) if cap else c["x64"]
    top = xp.max(axis=1)
    near = xp >= (top - 4 * 2.0**-23 * np.abs(top))[:, None]
    tied = near.sum(axis=1) > 1
    np.testing.assert_array_equal(pred[~tied], ref["predicted"][~tied])
    rows = np.flatnonzero(tied & valid)
    assert np.all(near[rows, pred[rows]]), "a predicted token is not a maximum of x'"
    hit = np.where(valid, pred == y, False).astype(np.float64)
    acc = hit if reduction == "none" else (hit.sum() / valid.sum() if valid.any() else np.nan)
    np.testing.assert_array_equal(f64(out.token_accuracy),
                                  np.float32(acc).astype(np.float64))
    if not tied.any():
        np.testing.assert_array_equal(f64(out.token_accuracy),
                                      np.float32(ref["token_accuracy"]).astype(np.float64))
    assert_close(f64(x.grad), ref["grad"], tol(dtype_name, "grad"), "gradient")

    if set(c["opts"]) | ({"weight"} if c["weight"] is not None else set()) <= TORCH_HAS:
        t_loss, t_grad = torch_reference(c["x64"], c["y"], reduction, weight=c["weight"],
                                         **c["opts"])
        # The reference agrees with torch (to float64 rounding) ...
        assert_close(ref["loss"], t_loss, type(tol("float32", "loss"))(rtol=1e-12, atol_rel=1e-12),
                     "reference vs torch loss")
        assert_close(ref["grad"], t_grad, type(tol("float32", "grad"))(rtol=1e-10, atol_rel=1e-12),
                     "reference vs torch gradient")
        # ... and so does xent, within its dtype's tolerance.
        assert_close(f64(out.loss), t_loss, tol(dtype_name, "loss"), "loss vs torch")
        assert_close(f64(x.grad), t_grad, tol(dtype_name, "grad"), "gradient vs torch")


@pytest.mark.parametrize("device", DEVICES)
def test_float32_matches_torch_float32_directly(rng, device):
    x32 = make_logits(rng, 64, 2051)
    y = torch.from_numpy(make_targets(rng, x32)).to(device)
    w = torch.from_numpy(make_weight(rng, 2051)).to(device)
    a = tensor(x32, torch.float32, device).requires_grad_()
    b = tensor(x32, torch.float32, device).requires_grad_()
    la = xt.cross_entropy(a, y, weight=w, label_smoothing=0.1)
    lb = F.cross_entropy(b, y, weight=w, label_smoothing=0.1)
    la.backward()
    lb.backward()
    # Two fp32 computations: each within tolerance of float64, so within twice that.
    t = tol("float32", "loss")
    assert_close(f64(la), f64(lb), type(t)(rtol=2 * t.rtol, atol_rel=2 * t.atol_rel), "loss")
    g = tol("float32", "grad")
    assert_close(f64(a.grad), f64(b.grad), type(g)(rtol=2 * g.rtol, atol_rel=2 * g.atol_rel),
                 "gradient")


@pytest.mark.parametrize("v", [1, 7, 8, 9, 255, 4097])
@pytest.mark.parametrize("device", DEVICES)
def test_vocab_sizes(rng, device, v):
    n = 19
    x32 = make_logits(rng, n, v)
    y = make_targets(rng, x32)
    x = tensor(x32, torch.bfloat16, device).requires_grad_()
    x64 = f64(x)
    loss = xt.cross_entropy(x, torch.from_numpy(y).to(device), label_smoothing=0.05)
    loss.backward()
    ref = cross_entropy_ref(x64, y, label_smoothing=0.05)
    loss_tol = with_cancellation(tol("bfloat16", "loss"), float(np.abs(x64).max()))
    assert_close(f64(loss), ref["loss"], loss_tol, "loss")
    # The gradient is a p - b - c: at V = 1 it vanishes, up to ulps of a = 1/n.
    grad_tol = with_cancellation(tol("bfloat16", "grad"), 1.0 / n)
    assert_close(f64(x.grad), ref["grad"], grad_tol, "gradient")


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("device", DEVICES)
def test_three_dimensional_input(rng, device, reduction):
    b, t, v = 3, 7, 515
    x32 = make_logits(rng, b * t, v)
    y = make_targets(rng, x32)
    x = tensor(x32.reshape(b, t, v), torch.float32, device).requires_grad_()
    yt = torch.from_numpy(y.reshape(b, t)).to(device)
    # torch's own (N, V) call on the flattened view (before xent writes the
    # gradient over x): the loss has the target's shape.
    expect = F.cross_entropy(x.detach().view(-1, v).double(), yt.view(-1), reduction=reduction)
    out = xt.cross_entropy(x, yt, reduction=reduction, return_token_accuracy=True,
                           return_predicted_tokens=True)
    if reduction == "none":
        assert out.loss.shape == (b, t) and out.token_accuracy.shape == (b, t)
        expect = expect.view(b, t)
    assert out.predicted_tokens.shape == (b, t)
    assert_close(f64(out.loss), f64(expect), tol("float32", "loss"), "loss")
    out.loss.backward(torch.ones_like(out.loss))
    ref = cross_entropy_ref(x32.astype(np.float64), y, reduction=reduction)
    assert x.grad.shape == (b, t, v)
    assert_close(f64(x.grad).reshape(-1, v), ref["grad"], tol("float32", "grad"), "gradient")


@pytest.mark.parametrize("target_dtype", [torch.int32, torch.int64, torch.int16, torch.uint8])
@pytest.mark.parametrize("device", DEVICES)
def test_target_dtypes(rng, device, target_dtype):
    x32 = make_logits(rng, 23, 100)
    y = make_targets(rng, x32, ignore_frac=0.0)
    x = tensor(x32, torch.float32, device).requires_grad_()
    loss = xt.cross_entropy(x, torch.from_numpy(y).to(device=device, dtype=target_dtype))
    loss.backward()
    ref = cross_entropy_ref(x32.astype(np.float64), y)
    assert_close(f64(loss), ref["loss"], tol("float32", "loss"), "loss")
    assert_close(f64(x.grad), ref["grad"], tol("float32", "grad"), "gradient")


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("device", DEVICES)
def test_strided_rows_are_used_in_place(rng, device, dtype_name):
    n, v, pad = 16, 1001, 24
    base = tensor(make_logits(rng, n, v + pad), DTYPES[dtype_name], device).requires_grad_()
    x = base[:, :v]
    assert x.stride() == (v + pad, 1)
    x64 = f64(x)
    pad_before = base.detach()[:, v:].clone()
    y = make_targets(rng, x64)
    loss = xt.cross_entropy(x, torch.from_numpy(y).to(device), label_smoothing=0.1)
    # The gradient went into the strided storage itself (no contiguous copy).
    ref = cross_entropy_ref(x64, y, label_smoothing=0.1)
    assert_close(f64(base.detach()[:, :v]), ref["grad"], tol(dtype_name, "grad"),
                 "gradient in the logits' storage")
    assert torch.equal(base.detach()[:, v:], pad_before)
    loss.backward()
    assert_close(f64(loss), ref["loss"], tol(dtype_name, "loss"), "loss")
    assert_close(f64(base.grad[:, :v]), ref["grad"], tol(dtype_name, "grad"), "gradient")
    assert torch.count_nonzero(base.grad[:, v:]) == 0


@pytest.mark.parametrize("device", DEVICES)
def test_transposed_logits_are_copied(rng, device):
    x32 = make_logits(rng, 40, 30)
    y = make_targets(rng, x32)
    base = tensor(x32.T.copy(), torch.float32, device).requires_grad_()
    x = base.t()  # (40, 30) with stride (1, 40): last dim not contiguous
    loss = xt.cross_entropy(x, torch.from_numpy(y).to(device))
    loss.backward()
    ref = cross_entropy_ref(x32.astype(np.float64), y)
    assert_close(f64(loss), ref["loss"], tol("float32", "loss"), "loss")
    assert_close(f64(base.grad.t()), ref["grad"], tol("float32", "grad"), "gradient")
    assert torch.equal(base.detach(), tensor(x32.T.copy(), torch.float32, device))


@pytest.mark.parametrize("device", DEVICES)
def test_module_matches_functional(rng, device):
    v = 301
    x32 = make_logits(rng, 30, v)
    y = torch.from_numpy(make_targets(rng, x32)).to(device)
    w = torch.from_numpy(make_weight(rng, v))
    m = xt.CrossEntropyLoss(weight=w, label_smoothing=0.1, lse_square_scale=1e-3, softcap=6.0,
                            reduction="sum", return_z_loss=True).to(device)
    assert m.weight.device.type == torch.device(device).type
    assert "weight" not in m.state_dict()
    a = tensor(x32, torch.float32, device).requires_grad_()
    b = tensor(x32, torch.float32, device).requires_grad_()
    oa = m(a, y)
    ob = xt.cross_entropy(b, y, weight=w.to(device), label_smoothing=0.1, lse_square_scale=1e-3,
                          softcap=6.0, reduction="sum", return_z_loss=True)
    assert oa.token_accuracy is None and oa.predicted_tokens is None
    assert torch.equal(oa.loss, ob.loss) and torch.equal(oa.z_loss, ob.z_loss)
    oa.loss.backward()
    ob.loss.backward()
    assert torch.equal(a.grad, b.grad)
    plain = xt.CrossEntropyLoss()(tensor(x32, torch.float32, device), y)
    assert isinstance(plain, torch.Tensor) and plain.dim() == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_all_rows_ignored(rng, device, dtype_name):
    """A fully masked micro-batch: the mean is 0 with a zero gradient, as in
    the peer library (torch's F.cross_entropy gives NaN), through the
    functional form and the module, with and without grad, every optional
    output 0; a sum is 0."""
    dt = getattr(torch, dtype_name)
    y = torch.full((9,), -100, device=device)
    for make in (lambda **kw: (lambda x, t: xt.cross_entropy(x, t, **kw)),
                 lambda **kw: xt.CrossEntropyLoss(**kw)):
        x = tensor(make_logits(rng, 9, 50), dt, device).requires_grad_()
        assert torch.isnan(F.cross_entropy(x.detach().float(), y))
        out = make(return_token_accuracy=True, return_z_loss=True,
                   lse_square_scale=1e-3)(x, y)
        assert out.loss.item() == 0.0 and out.z_loss.item() == 0.0
        assert out.token_accuracy.item() == 0.0
        out.loss.backward()
        assert torch.count_nonzero(x.grad) == 0
        with torch.no_grad():
            assert make()(x.detach(), y).item() == 0.0
        assert make(reduction="sum")(x.detach(), y).item() == 0.0


def _liger_style_reference(x, y, weight, ignore_index, reduction, label_smoothing):
    return F.cross_entropy(x.float(), y, weight=weight, ignore_index=ignore_index,
                           reduction=reduction, label_smoothing=label_smoothing)


@pytest.mark.parametrize("device", DEVICES)
def test_functional_takes_the_peers_positional_order(rng, device):
    """liger_cross_entropy(input, target, weight, size_average, ignore_index,
    reduce, reduction, label_smoothing, lse_square_scale, softcap,
    return_z_loss, return_token_accuracy, return_predicted_tokens): every
    argument after `weight` given by position lands where the peer takes it."""
    x = tensor(make_logits(rng, 16, 40), torch.float32, device)
    y = torch.tensor(rng.integers(0, 40, 16), device=device)
    y[3] = 5
    w = torch.tensor(rng.uniform(0.5, 2.0, 40), dtype=torch.float32, device=device)
    out = xt.cross_entropy(x, y, w, None, 5, None, "sum", 0.1, 0.0, None, True, True, True)
    ref = _liger_style_reference(x, y, w, 5, "sum", 0.1)
    assert torch.allclose(out.loss.float(), ref, rtol=1e-5, atol=1e-5)
    assert out.z_loss is not None and out.token_accuracy is not None
    assert out.predicted_tokens.shape == (16,) and out.predicted_tokens[3].item() == -1
    # torch's deprecated reduction arguments: reduce=False is "none", size_average=False "sum"
    none = xt.cross_entropy(x, y, None, None, -100, False)
    assert none.shape == (16,)
    summed = xt.cross_entropy(x, y, None, False)
    assert torch.allclose(summed.float(), F.cross_entropy(x, y, reduction="sum"), rtol=1e-5)
    # lse_square_scale and softcap by position
    zl = xt.cross_entropy(x, y, None, None, -100, None, "mean", 0.0, 1e-2, 30.0, True)
    xs = 30.0 * torch.tanh(x / 30.0)
    lse = torch.logsumexp(xs, dim=-1)
    assert torch.allclose(zl.z_loss.float(), (1e-2 * lse * lse).mean(), rtol=1e-4)


def test_module_checks_its_options_when_made():
    """As the peer's asserts: bad label_smoothing, softcap or reduction raise
    when the module is made, not at the first call."""
    for kwargs, what in (({"label_smoothing": 1.5}, "label_smoothing"),
                         ({"label_smoothing": -0.1}, "label_smoothing"),
                         ({"softcap": 0.0}, "softcap"),
                         ({"softcap": -3.0}, "softcap"),
                         ({"softcap": float("inf")}, "softcap"),
                         ({"reduction": "avg"}, "reduction")):
        with pytest.raises(xent.XentValueError, match=what):
            xt.CrossEntropyLoss(**kwargs)
    xt.CrossEntropyLoss(label_smoothing=1.0, softcap=30.0, reduction="none")


@pytest.mark.parametrize("device", DEVICES)
def test_target_shape_must_match(rng, device):
    """torch raises when the targets' shape is not input.shape[:-1], even when
    the counts agree; so does xent, before anything is written."""
    x = tensor(make_logits(rng, 64, 30), torch.float32, device).reshape(2, 32, 30)
    y = torch.tensor(rng.integers(0, 30, 64), device=device)
    before = x.clone()
    with pytest.raises((RuntimeError, ValueError)):
        F.cross_entropy(x.reshape(64, 30), y.reshape(32, 2))
    for bad in (y.reshape(32, 2), y, y.reshape(2, 32, 1)):
        with pytest.raises(ValueError, match="shape"):
            xt.cross_entropy(x.requires_grad_(), bad)
        x = x.detach()
    assert torch.equal(x, before)
    ok = xt.cross_entropy(x, y.reshape(2, 32), reduction="none")
    assert ok.shape == (2, 32)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_inputs_give_xents_own_message(device):
    """No class at all: a message of xent's naming the input, not torch's."""
    for shape in ((0,), (5, 0), (2, 3, 0)):
        x = torch.zeros(shape, device=device)
        y = torch.zeros(shape[:-1], dtype=torch.int64, device=device)
        with pytest.raises(xent.XentValueError, match="no classes"):
            xt.cross_entropy(x, y)
    # no rows but classes: fine (a mean over no rows is 0)
    x = torch.zeros((0, 7), device=device, requires_grad=True)
    loss = xt.cross_entropy(x, torch.zeros((0,), dtype=torch.int64, device=device))
    assert loss.item() == 0.0


def test_library_version_is_the_package_version():
    assert xent.library_version() == xent.__version__
