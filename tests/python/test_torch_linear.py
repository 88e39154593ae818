"""xent.torch's fused linear cross-entropy against a float64 reference.

The reference computes the logits x W^T + b in float64 from the values the
library saw (on the GPU rounded to the inputs' dtype first, as the library
stores them), then tests/python/reference.py's cross-entropy, the token
scaling and the upstream gradient, then dX = G W, dW = G^T x, db = sum G.
Medium shapes on the GPU are also compared with torch itself (matmul, then
fp32 cross_entropy), eagerly, under torch.compile and with gradient
accumulation, and the scratch memory is measured.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
import torch.nn.functional as F  # noqa: E402

import xent  # noqa: E402
import xent.torch as xt  # noqa: E402
from reference import cross_entropy_ref  # noqa: E402
from tolerances import Tol, assert_close  # noqa: E402
from torch_helpers import DEVICES, DTYPES, f64, requires_cuda  # noqa: E402


def _blas_or_skip(device):
    """The CPU backend needs a CBLAS library (the test command installs OpenBLAS)."""
    if device != "cpu":
        return
    try:
        xt.fused_linear_cross_entropy(torch.zeros(1, 2), torch.zeros(3, 2), torch.zeros(1).long())
    except xent.XentError as e:
        if "CBLAS" in str(e):
            pytest.skip(str(e))
        raise


# Elementwise: |got - ref| <= atol_rel * max|ref| + rtol * |ref|. CPU: every
# product in fp32, the results rounded once to the dtype. GPU: the logits and
# their gradient also rounded to the dtype, then multiplied (fp32
# accumulation) and rounded again; the weight gradient of a 16-bit dtype
# once more per chunk.
def _tol(dtype, device, what, chunks=1, slabs=1):
    u = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}[dtype]
    if what == "loss":
        return Tol(rtol=2e-5 + (4 * u if device != "cpu" else 0), atol_rel=1e-6)
    # fp16's subnormal spacing, twice: the backward's upstream gradient rounds again
    sub = 2.0**-23 if dtype == torch.float16 else 0.0
    if device == "cpu":
        return Tol(rtol=2 * u + 1e-5, atol_rel=3e-5, atol=sub)
    # the gradient that adds up over the pieces: dW over row chunks, dX over
    # the vocabulary's slabs, one rounding each in a 16-bit dtype
    pieces = chunks if what == "weight" else slabs if what == "hidden" else 1
    extra = pieces * u if pieces > 1 and dtype != torch.float32 else 0.0
    return Tol(rtol=2 * u + 1e-5, atol_rel=8 * u + 3e-5 + extra, atol=sub)


def _problem(rng, n, h, v, dtype, device, bias=True, sigma=2.0):
    x = torch.from_numpy(rng.standard_normal((n, h)).astype(np.float32)).to(device, dtype)
    w = torch.from_numpy((rng.standard_normal((v, h)) * sigma / np.sqrt(h)).astype(np.float32))
    w = w.to(device, dtype)
    b = (torch.from_numpy((0.5 * rng.standard_normal(v)).astype(np.float32)).to(device, dtype)
         if bias else None)
    t = rng.integers(0, v, n)
    t[rng.random(n) < 0.15] = -100
    return x, w, b, torch.from_numpy(t).to(device)


def _reference(x, w, b, t, device, go=None, ce_weight=None, token_scaling=False, **kw):
    """Loss, extras and the three gradients in float64 (numpy)."""
    x64, w64 = f64(x), f64(w)
    z = x64 @ w64.T + (f64(b) if b is not None else 0.0)
    if device != "cpu":  # the GPU stores the logits in the inputs' dtype
        z = f64(torch.from_numpy(z).to(x.dtype))
    y = t.cpu().numpy()
    ref = cross_entropy_ref(z, y, weight=None if ce_weight is None else f64(ce_weight), **kw)
    red = kw.get("reduction", "mean")
    grad = ref["grad"]
    if token_scaling:
        valid = y != -100
        xs = z if kw.get("softcap") is None else kw["softcap"] * np.tanh(z / kw["softcap"])
        f = np.where(valid, np.exp(xs[np.arange(len(y)), np.where(valid, y, 0)] - ref["lse"]), 0.0)
        # rebuild the reduced loss from the scaled per-row terms
        per = cross_entropy_ref(z, y, weight=None if ce_weight is None else f64(ce_weight),
                                **{**kw, "reduction": "none"})
        loss_r, z_r = per["loss"] - per["z_loss"], per["z_loss"]
        n_valid = valid.sum()
        if red == "none":
            ref["loss"], ref["z_loss"] = per["loss"] * f, z_r * f
        elif red == "sum":
            ref["loss"], ref["z_loss"] = ((loss_r + z_r) * f).sum(), (z_r * f).sum()
        else:
            denom = n_valid if ce_weight is None else f64(ce_weight)[y[valid]].sum()
            ref["loss"] = (loss_r * f).sum() / denom + (z_r * f).sum() / n_valid
            ref["z_loss"] = (z_r * f).sum() / n_valid
        grad = grad * f[:, None]
    g = 1.0 if go is None else f64(go)
    grad = grad * (g[:, None] if np.ndim(g) == 1 else g)
    ref["dx"] = grad @ w64
    ref["dw"] = grad.T @ x64
    ref["db"] = grad.sum(axis=0)
    return ref


FEATURES = {
    "plain": {},
    "smoothing+weights": {"label_smoothing": 0.1, "ce_weight": True},
    "zloss+softcap": {"lse_square_scale": 1e-3, "softcap": 15.0},
    "token_scaling": {"use_token_scaling": True},
    "everything": {"label_smoothing": 0.1, "lse_square_scale": 1e-3, "softcap": 20.0,
                   "use_token_scaling": True, "ce_weight": True},
}


def _check_against_reference(rng, device, dtype, reduction, feature, n, h, v, **call):
    """Every output and gradient of one call (bias, all extras, an upstream
    gradient) against float64. call: the chunking arguments. Returns what
    xent._lib.last_linear() said of the call."""
    dt = DTYPES[dtype]
    x, w, b, t = _problem(rng, n, h, v, dt, device)
    opts = dict(FEATURES[feature])
    cw = None
    if opts.pop("ce_weight", False):
        cw = torch.from_numpy(rng.uniform(0.5, 2.0, v).astype(np.float32)).to(device)
    ts = opts.pop("use_token_scaling", False)
    x.requires_grad_(), w.requires_grad_(), b.requires_grad_()
    # the account of the call that made the gradients, read on the thread it
    # ran on: mean and sum's forward; none's backward, which for a CUDA tensor
    # runs on autograd's own thread
    backward_how = []
    x.register_hook(lambda g: backward_how.append(xent._lib.last_linear()))
    out = xt.fused_linear_cross_entropy(x, w, t, b, cw, -100, reduction=reduction,
                                        use_token_scaling=ts, return_z_loss=True,
                                        return_token_accuracy=True, return_predicted_tokens=True,
                                        **call, **opts)
    forward_how = xent._lib.last_linear()
    go = (torch.from_numpy(rng.uniform(-2, 2, n).astype(np.float32)).to(device)
          if reduction == "none" else torch.tensor(1.7, device=device))
    (out.loss * go).sum().backward()
    how = backward_how[0] if reduction == "none" else forward_how
    ref = _reference(x.detach(), w.detach(), b.detach(), t, device, go=go.cpu(), ce_weight=cw,
                     token_scaling=ts, reduction=reduction, **opts)
    assert out.loss.dtype == torch.float32
    assert_close(f64(out.loss), ref["loss"], _tol(dt, device, "loss"), "loss")
    # z_loss comes back in the inputs' dtype (as the peer's): one rounding
    assert_close(f64(out.z_loss.float()), ref["z_loss"],
                 Tol(rtol=2**-7, atol_rel=1e-6, atol=2.0**-24), "z_loss")
    pred = out.predicted_tokens.cpu().numpy()
    valid = t.cpu().numpy() != -100
    assert (pred[~valid] == -1).all()
    agree = (pred == ref["predicted"]).mean()
    assert agree > 0.95, f"predicted tokens agree on {agree:.1%} of rows"
    # the pieces the gradients added up over (the call's own account)
    chunks = int(how.split("chunks=")[1]) if how.startswith("rows") else 1
    slabs = int(how.split("slabs=")[1]) if how.startswith("vocab") else 1
    tx, tw = _tol(dt, device, "hidden", slabs=slabs), _tol(dt, device, "weight", chunks)
    if dt == torch.float16 and device != "cpu":
        # the GPU keeps the logits' gradient G in fp16, whose small entries are
        # subnormal: an absolute rounding error of up to half their spacing
        # (2^-25), spread through dX = G W and dW = G^T X. Six standard
        # deviations of such a sum: 6 * 2^-24 / sqrt(12) * |the column|_2.
        k = 6 * 2.0**-24 / np.sqrt(12)
        tx = replace(tx, atol=tx.atol + k * float(np.linalg.norm(f64(w), axis=0).max()))
        tw = replace(tw, atol=tw.atol + k * float(np.linalg.norm(f64(x), axis=0).max()))
    assert_close(f64(x.grad), ref["dx"], tx, "input.grad")
    assert_close(f64(w.grad), ref["dw"], tw, "weight.grad")
    assert_close(f64(b.grad), ref["db"], _tol(dt, device, "bias", chunks), "bias.grad")
    return how


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("feature", list(FEATURES))
def test_against_reference(rng, device, dtype, reduction, feature):
    _blas_or_skip(device)
    # not multiples of 8; chunks of 13 rows cut anywhere
    how = _check_against_reference(rng, device, dtype, reduction, feature, 67, 45, 509,
                                   chunk_rows=13)
    assert how == "rows chunk=13 chunks=6", how


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("feature", ["plain", "smoothing+weights", "zloss+softcap", "everything"])
def test_vocab_schedule_against_reference(rng, device, dtype, reduction, feature):
    """The vocabulary's slabs (schedule="vocab"), as the rows schedule is; the
    default budget of so small a call gives slabs of 256 columns."""
    _blas_or_skip(device)
    how = _check_against_reference(rng, device, dtype, reduction, feature, 67, 45, 1509,
                                   schedule="vocab")
    assert how == "vocab slab=256 slabs=6", how


@pytest.mark.parametrize("device", DEVICES)
def test_schedule_choice(rng, device):
    """"rows" cuts rows, and auto at a small head; "vocab" cuts the vocabulary
    for any call with a gradient (a frozen head too); a forward cuts rows;
    on the GPU auto cuts the vocabulary where its cost model says so."""
    _blas_or_skip(device)
    x, w, _, t = _problem(rng, 512, 64, 4000, torch.bfloat16, device, bias=False)
    for wants_w, schedule, want in ((True, "auto", "rows"), (True, "rows", "rows"),
                                    (True, "vocab", "vocab"), (False, "vocab", "vocab")):
        xa = x.clone().requires_grad_()
        wa = w.clone().requires_grad_(wants_w)
        loss_fn = xt.FusedLinearCrossEntropyLoss(schedule=schedule)
        loss_fn(wa, xa, t).backward()
        how = xent._lib.last_linear()
        assert how.startswith(want), (wants_w, schedule, how)
    with torch.no_grad():
        xt.fused_linear_cross_entropy(x, w, t, schedule="vocab")
    assert xent._lib.last_linear().startswith("rows")
    if device == "cuda":
        # a batch small for its head: W's and dW's traffic over 16 chunks
        # outweighs a fourth product, and auto cuts the vocabulary
        x, w, _, t = _problem(rng, 1024, 1024, 32000, torch.bfloat16, device, bias=False)
        xt.fused_linear_cross_entropy(x.requires_grad_(), w.requires_grad_(), t).backward()
        assert xent._lib.last_linear().startswith("vocab"), xent._lib.last_linear()


@requires_cuda
def test_hidden_gradient_accumulation_modes(rng):
    """Over the vocabulary's slabs dX adds up: in bf16 once per slab, in fp32
    with accum_dtype=float32 (rounded once, as over row chunks); dW is
    written once a slab. Errors against float64, printed for the results."""
    n, h, v = 2048, 256, 4096
    x, w, _, t = _problem(rng, n, h, v, torch.bfloat16, "cuda", bias=False)
    ref = _reference(x, w, None, t, "cuda")
    errs = {}
    for schedule, accum in (("rows", None), ("vocab", None), ("vocab", torch.float32)):
        xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
        xt.fused_linear_cross_entropy(xa, wa, t, accum_dtype=accum, schedule=schedule,
                                      memory_budget=4 << 20).backward()
        how = xent._lib.last_linear()
        assert how.startswith(schedule), how
        errs[schedule, accum] = [float(np.linalg.norm(f64(g) - r) / np.linalg.norm(r))
                                 for g, r in ((xa.grad, ref["dx"]), (wa.grad, ref["dw"]))]
        print(f"{schedule} accum {accum} ({how}): dX error {errs[schedule, accum][0]:.3e}, "
              f"dW {errs[schedule, accum][1]:.3e}")
    rows, vbf, vfp = errs["rows", None], errs["vocab", None], errs["vocab", torch.float32]
    assert vfp[0] <= vbf[0] and vfp[0] < 1.1 * rows[0]  # fp32: as one rounding
    assert vbf[0] < 3 * rows[0]                        # bf16 over the slabs: bounded
    assert vbf[1] <= rows[1] and vbf[1] < 4e-3         # dW written once


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("frozen", ["head", "trunk", "bias-only"])
def test_frozen_parts(rng, device, frozen):
    _blas_or_skip(device)
    x, w, b, t = _problem(rng, 40, 32, 300, torch.float32, device)
    x.requires_grad_(frozen != "trunk" and frozen != "bias-only")
    w.requires_grad_(frozen != "head" and frozen != "bias-only")
    b.requires_grad_()
    loss = xt.fused_linear_cross_entropy(x, w, t, b, chunk_rows=9)
    loss.backward()
    ref = _reference(x.detach(), w.detach(), b.detach(), t, device)
    assert (x.grad is None) == (not x.requires_grad)
    assert (w.grad is None) == (not w.requires_grad)
    if x.grad is not None:
        assert_close(f64(x.grad), ref["dx"], _tol(torch.float32, device, "hidden"), "input.grad")
    if w.grad is not None:
        assert_close(f64(w.grad), ref["dw"], _tol(torch.float32, device, "weight"), "weight.grad")
    assert_close(f64(b.grad), ref["db"], _tol(torch.float32, device, "bias"), "bias.grad")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("accum_dtype", [None, torch.float32])
def test_gradient_accumulation(rng, device, accum_dtype):
    """Two micro-batches into the same .grad: the sum of both."""
    _blas_or_skip(device)
    dt = torch.bfloat16
    loss_fn = xt.FusedLinearCrossEntropyLoss(accum_dtype=accum_dtype, label_smoothing=0.05)
    x1, w, b, t1 = _problem(rng, 50, 40, 257, dt, device)
    x2, _, _, t2 = _problem(rng, 50, 40, 257, dt, device)
    w.requires_grad_(), b.requires_grad_()
    loss_fn(w, x1, t1, b).backward()
    loss_fn(w, x2, t2, b).backward()
    r1 = _reference(x1, w.detach(), b.detach(), t1, device, label_smoothing=0.05)
    r2 = _reference(x2, w.detach(), b.detach(), t2, device, label_smoothing=0.05)
    t = _tol(dt, device, "weight", chunks=2)
    for name, got, a, c in (("weight", w.grad, r1["dw"], r2["dw"]), ("bias", b.grad, r1["db"],
                                                                       r2["db"])):
        # each micro-batch's gradient rounded to bf16, then their sum: the
        # error scales with the addends, not with their (smaller) sum
        err = np.abs(f64(got) - (a + c))
        bound = t.rtol * (np.abs(a) + np.abs(c) + np.abs(a + c)) + 2 * t.atol_rel * (
            np.abs(a).max() + np.abs(c).max())
        assert (err <= bound).all(), f"{name}.grad: worst error {err.max():.3e}"
    # and a wrong sum is caught: one micro-batch alone is far outside
    assert (np.abs(f64(w.grad) - r1["dw"]) > t.rtol * np.abs(r1["dw"]) + 1e-3).any()


@pytest.mark.parametrize("device", DEVICES)
def test_module_and_functional_positional_order(rng, device):
    _blas_or_skip(device)
    x, w, b, t = _problem(rng, 30, 24, 120, torch.float32, device)
    cw = torch.rand(120, device=device) + 0.5
    mod = xt.FusedLinearCrossEntropyLoss(cw, -100, 1e-3, 0.1, "sum", 10.0, True, None, False,
                                         True, True)
    a = mod(w, x, t, b)
    c = xt.fused_linear_cross_entropy(x, w, t, b, cw, -100, 1e-3, 0.1, "sum", 10.0, True, None,
                                      False, True, True)
    for field in ("loss", "z_loss", "token_accuracy", "predicted_tokens"):
        assert torch.equal(getattr(a, field), getattr(c, field)), field
    plain = xt.fused_linear_cross_entropy(x, w, t)
    assert isinstance(plain, torch.Tensor) and plain.dim() == 0
    assert "reduction='sum'" in repr(mod)


@pytest.mark.parametrize("device", DEVICES)
def test_leading_dimensions_and_empty_batch(rng, device):
    _blas_or_skip(device)
    x, w, b, t = _problem(rng, 24, 16, 50, torch.float32, device)
    flat = xt.fused_linear_cross_entropy(x, w, t, b, reduction="none")
    shaped = xt.fused_linear_cross_entropy(x.view(4, 6, 16), w, t.view(4, 6), b, reduction="none")
    assert shaped.shape == (4, 6)
    assert torch.equal(flat.view(4, 6), shaped)
    wg = w.clone().requires_grad_()
    empty = xt.fused_linear_cross_entropy(x[:0], wg, t[:0], b)
    assert float(empty) == 0.0  # a mean over no rows is 0, as in the peer library
    empty.backward()
    assert torch.count_nonzero(wg.grad) == 0


@pytest.mark.parametrize("device", DEVICES)
def test_errors_leave_gradients_alone(rng, device):
    _blas_or_skip(device)
    x, w, b, t = _problem(rng, 20, 16, 64, torch.float32, device)
    x.requires_grad_(), w.requires_grad_()
    f = xt.fused_linear_cross_entropy
    with pytest.raises(xent.XentValueError, match="hidden size"):
        f(x, w[:, :15], t)
    with pytest.raises(ValueError, match="same dtype"):
        f(x, w.detach().double(), t)
    with pytest.raises(ValueError, match="bias"):
        f(x, w, t, b[:10])
    with pytest.raises(ValueError, match="shape"):
        f(x, w, t[:5])
    with pytest.raises(ValueError, match="class indices"):
        f(x, w, t.float())
    with pytest.raises(xent.XentValueError, match="accum_dtype"):
        f(x, w, t, accum_dtype=torch.float64)
    with pytest.raises(xent.XentValueError, match="label_smoothing"):
        xt.FusedLinearCrossEntropyLoss(label_smoothing=2.0)
    with pytest.raises(xent.XentValueError, match="schedule"):
        xt.FusedLinearCrossEntropyLoss(schedule="columns")
    with pytest.raises(xent.XentValueError, match="chunk_rows"):
        f(x, w, t, schedule="vocab", chunk_rows=8)
    bad = t.clone()
    bad[7] = 64
    with pytest.raises(xent.XentValueError, match=r"targets\[7\]"):
        f(x, w, bad).backward()
    assert x.grad is None and w.grad is None


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_training_step(rng, seed, device):
    """A small LM whose head and loss are the fused linear loss, compiled
    with fullgraph=True, against the same model trained eagerly with torch."""
    _blas_or_skip(device)
    torch._dynamo.reset()
    torch.manual_seed(seed)
    V, H = 301, 32
    embed = torch.nn.Embedding(V, H).to(device)
    head = torch.nn.Linear(H, V).to(device)
    ref_embed, ref_head = (torch.nn.Embedding(V, H).to(device), torch.nn.Linear(H, V).to(device))
    ref_embed.load_state_dict(embed.state_dict())
    ref_head.load_state_dict(head.state_dict())
    loss_fn = xt.FusedLinearCrossEntropyLoss(label_smoothing=0.1)

    def step(tokens, targets):
        hid = torch.tanh(embed(tokens))
        return loss_fn(head.weight, hid.view(-1, H), targets.view(-1), head.bias)

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    params = list(embed.parameters()) + list(head.parameters())
    ref_params = list(ref_embed.parameters()) + list(ref_head.parameters())
    opt, ref_opt = torch.optim.SGD(params, lr=0.5), torch.optim.SGD(ref_params, lr=0.5)
    t = Tol(rtol=1e-4, atol_rel=1e-5)
    for s in range(3):
        tokens = torch.from_numpy(rng.integers(0, V, (2, 12))).to(device)
        targets = torch.from_numpy(rng.integers(0, V, (2, 12))).to(device)
        targets[0, :3] = -100
        loss = compiled(tokens, targets)
        loss.backward()
        opt.step(), opt.zero_grad()
        ref = F.cross_entropy(ref_head(torch.tanh(ref_embed(tokens))).view(-1, V),
                              targets.view(-1), label_smoothing=0.1)
        ref.backward()
        ref_opt.step(), ref_opt.zero_grad()
        assert_close(f64(loss), f64(ref), t, f"loss at step {s}")
    for p, q in zip(params, ref_params):
        assert_close(f64(p), f64(q), t, "parameters after 3 steps")
    torch._dynamo.reset()


# ---------------------------------------------------------------------------
# GPU: medium shapes against torch, memory, accumulation dtypes
# ---------------------------------------------------------------------------


def _torch_step(x, w, b, t, **kw):
    """What a plain PyTorch model computes: bf16 matmul, fp32 cross_entropy."""
    x, w = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    b = b.detach().clone().requires_grad_() if b is not None else None
    logits = x @ w.t() + (b if b is not None else 0)
    loss = F.cross_entropy(logits.float(), t, **kw)
    loss.backward()
    return loss, x.grad, w.grad, None if b is None else b.grad


def _rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


@requires_cuda
@pytest.mark.parametrize("compiled", [False, True])
def test_medium_against_torch(rng, compiled):
    torch._dynamo.reset()
    n, h, v = 2048, 1024, 32000
    x, w, b, t = _problem(rng, n, h, v, torch.bfloat16, "cuda")
    loss_fn = xt.FusedLinearCrossEntropyLoss(label_smoothing=0.1)
    fn = torch.compile(loss_fn, fullgraph=True) if compiled else loss_fn
    xa, wa, ba = (x.clone().requires_grad_(), w.clone().requires_grad_(),
                  b.clone().requires_grad_())
    loss = fn(wa, xa, t, ba)
    loss.backward()
    ref_loss, gx, gw, gb = _torch_step(x, w, b, t, label_smoothing=0.1)
    assert abs(float(loss) - float(ref_loss)) <= 2e-3 * abs(float(ref_loss))
    for name, got, ref in (("input", xa.grad, gx), ("weight", wa.grad, gw), ("bias", ba.grad, gb)):
        assert _rel(got, ref) < 2e-2, f"{name}.grad differs from torch by {_rel(got, ref):.2e}"
    torch._dynamo.reset()


@requires_cuda
def test_medium_gradient_accumulation_against_torch(rng):
    n, h, v = 1024, 512, 32000
    x1, w, b, t1 = _problem(rng, n, h, v, torch.bfloat16, "cuda")
    x2, _, _, t2 = _problem(rng, n, h, v, torch.bfloat16, "cuda")
    wa = w.clone().requires_grad_()
    for x, t in ((x1, t1), (x2, t2)):
        xt.fused_linear_cross_entropy(x, wa, t, accum_dtype=torch.float32).backward()
    g1, g2 = _torch_step(x1, w, None, t1)[2], _torch_step(x2, w, None, t2)[2]
    assert _rel(wa.grad, g1.float() + g2.float()) < 2e-2


@requires_cuda
@pytest.mark.parametrize("budget_mib", [0, 64])
def test_memory_within_budget(rng, budget_mib):
    """Peak memory beyond the inputs, dX and dW: at most the workspace, which
    is 1/16 of the logits by default (or the budget asked for)."""
    n, h, v = 4096, 1024, 32000
    x, w, _, t = _problem(rng, n, h, v, torch.bfloat16, "cuda", bias=False)
    x.requires_grad_(), w.requires_grad_()
    xt.fused_linear_cross_entropy(x, w, t).backward()  # warm-up (cuBLASLt, modules)
    x.grad = w.grad = None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss = xt.fused_linear_cross_entropy(x, w, t, memory_budget=budget_mib << 20)
    loss.backward()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base - (x.numel() + w.numel()) * 2
    logits = n * v * 2
    limit = (budget_mib << 20) if budget_mib else logits // 16
    print(f"extra {extra / 2**20:.1f} MiB, limit {limit / 2**20:.1f} MiB "
          f"(logits {logits / 2**20:.0f} MiB)")
    assert extra <= limit + (1 << 20)


@requires_cuda
def test_weight_gradient_accumulation_modes(rng):
    """accum_dtype=float32 rounds the weight gradient once; the default (bf16)
    once per chunk: fp32 accumulation must be at least as close to float64."""
    n, h, v = 2048, 256, 4096
    x, w, _, t = _problem(rng, n, h, v, torch.bfloat16, "cuda", bias=False)
    ref = _reference(x, w, None, t, "cuda")["dw"]
    errs = {}
    for accum in (None, torch.float32):
        wa = w.clone().requires_grad_()
        xt.fused_linear_cross_entropy(x, wa, t, accum_dtype=accum, chunk_rows=128).backward()
        errs[accum] = float(np.linalg.norm(f64(wa.grad) - ref) / np.linalg.norm(ref))
    print(f"weight-gradient relative error: bf16 accumulation {errs[None]:.2e}, "
          f"fp32 {errs[torch.float32]:.2e}")
    assert errs[torch.float32] <= errs[None] and errs[torch.float32] < 4e-3


@requires_cuda
def test_autocast_fp32_parameters(rng):
    """fp32 parameters under bf16 autocast: the products run in bf16 and the
    gradients come back to the fp32 parameters."""
    x, w, b, t = _problem(rng, 256, 128, 1000, torch.float32, "cuda")
    w.requires_grad_(), b.requires_grad_()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = xt.fused_linear_cross_entropy(x, w, t, b)
    loss.backward()
    assert w.grad.dtype == torch.float32 and b.grad.dtype == torch.float32
    ref = _reference(x.bfloat16(), w.detach().bfloat16(), b.detach().bfloat16(), t, "cuda")
    assert abs(float(loss) - ref["loss"]) < 1e-2
    assert np.linalg.norm(f64(w.grad) - ref["dw"]) / np.linalg.norm(ref["dw"]) < 2e-2


# ---------------------------------------------------------------------------
# torch's own fused linear loss (torch.nn.functional.linear_cross_entropy,
# torch >= 2.13): the same function, so the same results within rounding
# ---------------------------------------------------------------------------

_TORCH_LCE = getattr(F, "linear_cross_entropy", None)


@pytest.mark.skipif(_TORCH_LCE is None, reason="torch has no linear_cross_entropy (>= 2.13)")
@pytest.mark.filterwarnings("ignore:linear_cross_entropy:UserWarning")  # its chunked path
# takes no label smoothing and falls back to its reference path, saying so
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("feature", ["plain", "bias+weights+smoothing", "ignore_real_class"])
@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_against_torch_linear_cross_entropy(rng, device, reduction, feature, chunked):
    """xent's fused linear loss against torch's, its reference path and its
    chunked one (LinearCrossEntropyOptions), fp32: the loss and the
    gradients of x, W and b, for a random upstream gradient."""
    _blas_or_skip(device)
    from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions
    n, h, v = 67, 40, 1003
    x = torch.from_numpy(rng.standard_normal((n, h)).astype(np.float32)).to(device)
    w = torch.from_numpy((rng.standard_normal((v, h)) * 0.3).astype(np.float32)).to(device)
    b = torch.from_numpy(rng.standard_normal(v).astype(np.float32)).to(device)
    ii = 7 if feature == "ignore_real_class" else -100
    y = torch.from_numpy(rng.integers(0, v, n)).to(device)
    y[::9] = ii
    kw = dict(reduction=reduction, ignore_index=ii)
    with_b = feature.startswith("bias")
    cw = torch.from_numpy(rng.uniform(0.5, 2.0, v).astype(np.float32)).to(device) if with_b \
        else None
    if with_b:
        kw["label_smoothing"] = 0.1
    ct = torch.from_numpy(rng.uniform(0.5, 2.0, n if reduction == "none" else ()).astype(
        np.float32)).to(device)

    def run(fn):
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
        loss = fn(xs, ws, bs if with_b else None)
        (loss * ct).sum().backward()
        return loss.detach(), xs.grad, ws.grad, bs.grad if with_b else None

    opts = LinearCrossEntropyOptions() if chunked else None
    theirs = run(lambda xs, ws, bs: _TORCH_LCE(xs, ws, y, linear_bias=bs, weight=cw,
                                               options=opts, **kw))
    ours = run(lambda xs, ws, bs: xt.fused_linear_cross_entropy(xs, ws, y, bs, ce_weight=cw,
                                                                **kw))
    for what, a, t in zip(("loss", "dX", "dW", "db"), ours, theirs):
        if t is None:
            continue
        assert_close(f64(a), f64(t), Tol(rtol=3e-5, atol_rel=3e-5), what)
