"""GPU-only behaviour of xent.torch: peak memory, streams, CUDA graphs, devices.

Skipped without a CUDA device or without the library's CUDA backend.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import xent  # noqa: E402
import xent.torch as xt  # noqa: E402
from helpers import make_logits, make_targets  # noqa: E402
from reference import cross_entropy_ref  # noqa: E402
from tolerances import assert_close, tol  # noqa: E402
from torch_helpers import DTYPES, f64, requires_cuda, tensor  # noqa: E402

pytestmark = requires_cuda
MIB = 1 << 20


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_peak_memory_is_the_logits_plus_o_rows(dtype_name, compiled):
    """Forward + backward of logits = hidden @ W^T: the only N x V buffer is
    the logits themselves (the gradient is written over them and scaled in
    place); everything else is O(N) or the matmul's own gradients."""
    torch._dynamo.reset()
    n, h, v = 4096, 64, 32768
    dt = DTYPES[dtype_name]
    elem = torch.empty((), dtype=dt).element_size()
    hid = (torch.randn(n, h, device="cuda") * 0.5).to(dt).requires_grad_()
    w = (torch.randn(v, h, device="cuda") * 0.1).to(dt).requires_grad_()
    y = torch.randint(0, v, (n,), device="cuda")
    y[::9] = -100

    def forward(a, b, t):
        return xt.cross_entropy(a @ b.t(), t, label_smoothing=0.1) * 2.0

    fwd = torch.compile(forward, fullgraph=True) if compiled else forward

    def step():
        hid.grad = None
        w.grad = None
        fwd(hid, w, y).backward()

    step()  # warm-up: compilation, cuBLAS workspace, allocator pools
    step()
    hid.grad = None
    w.grad = None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    logits_bytes = n * v * elem
    # hid.grad and w.grad stay allocated; the matmul's backward may hold a
    # transposed copy of one of them for a moment: twice their size.
    grads_bytes = 2 * (n * h + v * h) * elem
    small = xent._lib.workspace_size(n) + 64 * n + 8 * MIB
    assert peak <= logits_bytes + grads_bytes + small, (
        f"peak {peak / MIB:.1f} MiB > logits {logits_bytes / MIB:.1f} MiB + "
        f"matmul gradients {grads_bytes / MIB:.1f} MiB + {small / MIB:.1f} MiB")
    assert peak >= logits_bytes  # the measurement saw the step at all


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_leaf_logits_need_no_second_buffer(dtype_name, reduction):
    """Logits that are a leaf: after the warm-up, forward + backward (with an
    upstream gradient other than 1) allocate only O(N) bytes beyond them; the
    leaf's .grad is the logits' own storage."""
    n, v = 2048, 65536
    dt = DTYPES[dtype_name]
    y = torch.randint(0, v, (n,), device="cuda")
    up = torch.full((n,) if reduction == "none" else (), 0.5, device="cuda", dtype=dt)
    for attempt in range(2):
        x = torch.randn(n, v, device="cuda").to(dt).requires_grad_()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        xt.cross_entropy(x, y, reduction=reduction, label_smoothing=0.1).backward(up)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        assert x.grad.data_ptr() == x.data_ptr()
        del x
    small = xent._lib.workspace_size(n) + 64 * n + 1 * MIB
    assert peak <= small, f"peak {peak / MIB:.2f} MiB above the logits; allowed {small / MIB:.2f}"


@pytest.mark.parametrize("check_targets", [True, False])
def test_runs_on_the_current_stream(rng, check_targets):
    """The logits are written on a side stream right before the loss; a call
    that ran on another stream would read them before they are there."""
    n, v = 512, 4099
    x32 = make_logits(rng, n, v)
    y_np = make_targets(rng, x32)
    src = tensor(x32, torch.float32, "cuda")
    y = torch.from_numpy(y_np).cuda()
    x = torch.zeros(n, v, device="cuda")
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # keep the side stream busy for a while
        x.copy_(src)
        loss = xt.cross_entropy(x, y, reduction="none", check_targets=check_targets)
    torch.cuda.synchronize()
    ref = cross_entropy_ref(x32.astype(np.float64), y_np, reduction="none")
    assert_close(f64(loss), ref["loss"], tol("float32", "loss"), "loss")


def test_cuda_graph_capture_of_forward_and_backward(rng):
    """With check_targets=False nothing synchronises with the host, so a whole
    training step (forward, backward, scaled gradient) can be captured and
    replayed on new data."""
    n, h, v = 96, 32, 1003
    hid = torch.randn(n, h, device="cuda")
    w = (torch.randn(v, h, device="cuda") * 0.3).requires_grad_()
    y = torch.randint(0, v, (n,), device="cuda")

    def step():
        loss = xt.cross_entropy(hid @ w.t(), y, label_smoothing=0.1, check_targets=False)
        (loss * 1.5).backward()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            w.grad = None
            step()
    torch.cuda.current_stream().wait_stream(side)
    w.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = step()
    for _ in range(2):
        x32 = rng.standard_normal((n, h)).astype(np.float32)
        hid.copy_(torch.from_numpy(x32))
        y_np = make_targets(rng, make_logits(rng, n, v))
        y.copy_(torch.from_numpy(y_np))
        graph.replay()
        torch.cuda.synchronize()
        logits64 = x32.astype(np.float64) @ f64(w).T
        ref = cross_entropy_ref(logits64, y_np, label_smoothing=0.1)
        t = tol("float32", "training")
        assert_close(f64(static_loss), ref["loss"], t, "loss")
        assert_close(f64(w.grad), 1.5 * ref["grad"].T @ x32.astype(np.float64), t,
                     "weight gradient")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_tensor_on_another_device_than_the_current_one(rng):
    x32 = make_logits(rng, 64, 999)
    y_np = make_targets(rng, x32)
    torch.cuda.set_device(0)
    x = tensor(x32, torch.bfloat16, "cuda:1").requires_grad_()
    x64 = f64(x)
    loss = xt.cross_entropy(x, torch.from_numpy(y_np).to("cuda:1"))
    loss.backward()
    assert loss.device == torch.device("cuda:1") and torch.cuda.current_device() == 0
    ref = cross_entropy_ref(x64, y_np)
    assert_close(f64(loss), ref["loss"], tol("bfloat16", "loss"), "loss")
    assert_close(f64(x.grad), ref["grad"], tol("bfloat16", "grad"), "gradient")


def test_large_vocabulary_on_the_gpu(rng):
    n, v = 8, 262147
    x32 = make_logits(rng, n, v, scale=4.0)
    y_np = make_targets(rng, x32, ignore_frac=0.0)
    x = tensor(x32, torch.bfloat16, "cuda").requires_grad_()
    x64 = f64(x)
    loss = xt.cross_entropy(x, torch.from_numpy(y_np).cuda(), label_smoothing=0.1,
                            reduction="sum")
    loss.backward()
    ref = cross_entropy_ref(x64, y_np, label_smoothing=0.1, reduction="sum")
    assert_close(f64(loss), ref["loss"], tol("bfloat16", "loss"), "loss")
    assert_close(f64(x.grad), ref["grad"], tol("bfloat16", "grad"), "gradient")


def _bad_case(rng):
    x = tensor(make_logits(rng, 64, 500), torch.bfloat16, "cuda").requires_grad_()
    y = torch.tensor(make_targets(rng, x.detach().float().cpu().numpy(), ignore_frac=0.0),
                     device="cuda")
    y[7] = 500
    y[9] = -3
    return x, y


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_bad_target_raises_in_the_backward_once_the_device_has_checked(rng, reduction):
    """A loss that requires grad checks its targets on the device and the
    host never waits for it: the forward returns at once with a NaN loss and
    a zero gradient in the logits; a backward that finds the device past the
    check raises naming the first bad row, and no gradient reaches the leaf.
    The next step runs."""
    x, y = _bad_case(rng)
    loss = xt.cross_entropy(x, y, reduction=reduction)  # no exception here
    torch.cuda.synchronize()
    assert torch.isnan(loss).item()
    assert not x.detach().any(), "a rejected call leaves a zero gradient"
    with pytest.raises(xent.XentValueError, match=r"targets\[7\] = 500"):
        loss.backward()
    assert x.grad is None
    xt.check_pending()  # nothing left
    y[7], y[9] = 3, 4
    loss = xt.cross_entropy(x, y, reduction=reduction)
    loss.backward()
    assert torch.isfinite(loss).item() and x.grad is not None


def test_bad_target_found_late_raises_at_check_pending_with_a_zero_gradient(rng):
    """The device still busy when the backward runs: the backward returns the
    rejected call's zero gradient without waiting, and the error surfaces at
    the next poll (check_pending here; the next xent loss also polls)."""
    x, y = _bad_case(rng)
    torch.cuda._sleep(200_000_000)  # about 0.1 s of device time ahead of the loss
    loss = xt.cross_entropy(x, y)
    loss.backward()  # the verdict is not in yet: no exception, no wait
    with pytest.raises(xent.XentValueError, match=r"deferred target check.*targets\[7\] = 500"):
        xt.check_pending()
    assert torch.isnan(loss).item()
    assert x.grad is not None and not x.grad.any()
    xt.check_pending()
    # The next loss polls the earlier verdicts before its own call.
    x2, y2 = _bad_case(rng)
    torch.cuda._sleep(200_000_000)
    xt.cross_entropy(x2, y2).backward()
    torch.cuda.synchronize()
    with pytest.raises(xent.XentValueError, match=r"targets\[7\] = 500"):
        xt.cross_entropy(x2.detach().clone().requires_grad_(), torch.zeros_like(y2))
    xt.check_pending()


def test_bad_target_without_grad_raises_in_the_forward(rng):
    x = tensor(make_logits(rng, 16, 300), torch.float32, "cuda")
    y = torch.zeros(16, dtype=torch.int64, device="cuda")
    y[5] = 300
    for reduction in ("mean", "none"):
        with pytest.raises(xent.XentValueError, match=r"targets\[5\] = 300"):
            xt.cross_entropy(x, y, reduction=reduction)
    x.requires_grad_()
    with pytest.raises(xent.XentValueError, match=r"targets\[5\] = 300"):
        xt.cross_entropy(x, y, reduction="none")  # per-row losses: checked at once
