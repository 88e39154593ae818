"""torch.compile: the loss compiles into a training step with fullgraph=True.

The main test trains a small language model (embedding, hidden layer, LM
head, xent loss with label smoothing and z-loss) for a few SGD steps with a
compiled forward+loss, and compares every loss and the final parameters with
the same model trained eagerly with torch's own cross_entropy (+ z-loss
written in torch). One graph, no graph breaks (fullgraph=True and a frame
counter), gradients through torch's compiled backward.
"""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
import torch.nn.functional as F  # noqa: E402
from torch._dynamo.testing import CompileCounterWithBackend  # noqa: E402

import xent.torch as xt  # noqa: E402
from helpers import make_logits, make_targets  # noqa: E402
from reference import cross_entropy_ref  # noqa: E402
from tolerances import assert_close, tol  # noqa: E402
from torch_helpers import DEVICES, f64, tensor  # noqa: E402

V, H, B, T = 301, 32, 2, 12
SMOOTH, ZSCALE = 0.1, 1e-3


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(V, H)
        self.hidden = torch.nn.Linear(H, H)
        self.head = torch.nn.Linear(H, V, bias=False)

    def forward(self, tokens):
        return self.head(torch.tanh(self.hidden(self.embed(tokens))))


def torch_loss(logits, targets):
    """torch's cross_entropy plus the z-loss, as xent defines it."""
    flat, y = logits.reshape(-1, V), targets.reshape(-1)
    valid = y != -100
    lse = torch.logsumexp(flat, dim=-1)
    return F.cross_entropy(flat, y, label_smoothing=SMOOTH) + ZSCALE * (lse[valid] ** 2).mean()


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_training_step(rng, seed, device):
    torch.manual_seed(seed)
    model = TinyLM().to(device)
    ref_model = copy.deepcopy(model)
    loss_fn = xt.CrossEntropyLoss(label_smoothing=SMOOTH, lse_square_scale=ZSCALE)

    def forward_loss(tokens, targets):
        return loss_fn(model(tokens), targets)  # (B, T, V) logits, (B, T) targets

    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(forward_loss, backend=counter, fullgraph=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ref_opt = torch.optim.SGD(ref_model.parameters(), lr=0.5)
    t = tol("float32", "training")
    for step in range(3):
        tokens = torch.from_numpy(rng.integers(0, V, (B, T))).to(device)
        targets = torch.from_numpy(rng.integers(0, V, (B, T))).to(device)
        targets[0, :3] = -100
        loss = compiled(tokens, targets)
        loss.backward()
        opt.step()
        opt.zero_grad()
        ref_loss = torch_loss(ref_model(tokens), targets)
        ref_loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
        assert_close(f64(loss), f64(ref_loss), t, f"loss at step {step}")
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        assert_close(f64(p), f64(q), t, f"parameter {name} after 3 steps")
    assert counter.frame_count == 1  # one graph, reused for every step


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_structured_outputs_and_new_shapes(rng, device):
    def fn(logits, targets):
        return xt.cross_entropy(logits, targets, reduction="none", lse_square_scale=ZSCALE,
                                softcap=5.0, return_z_loss=True, return_token_accuracy=True,
                                return_predicted_tokens=True)

    compiled = torch.compile(fn, backend="aot_eager", fullgraph=True)
    for n in (24, 40, 56):  # new row counts: recompiled (dynamic) without breaking
        x32 = make_logits(rng, n, V)
        y = torch.from_numpy(make_targets(rng, x32)).to(device)
        a = tensor(x32, torch.bfloat16, device).requires_grad_()
        b = tensor(x32, torch.bfloat16, device).requires_grad_()
        got, want = compiled(a, y), fn(b, y)
        assert isinstance(got, xt.CrossEntropyOutput)
        for field in ("loss", "z_loss", "token_accuracy", "predicted_tokens"):
            assert torch.equal(getattr(got, field), getattr(want, field)), field
        got.loss.sum().backward()
        want.loss.sum().backward()
        assert torch.equal(a.grad, b.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_evaluation_leaves_logits_unchanged(rng, device):
    x32 = make_logits(rng, 30, V)
    y = make_targets(rng, x32)
    x = tensor(x32, torch.float32, device).requires_grad_()
    before = x.detach().clone()
    compiled = torch.compile(lambda a, b: xt.cross_entropy(a, b, label_smoothing=SMOOTH),
                             backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        loss = compiled(x, torch.from_numpy(y).to(device))
    assert torch.equal(x.detach(), before)
    ref = cross_entropy_ref(x32.astype(np.float64), y, label_smoothing=SMOOTH)
    assert_close(f64(loss), ref["loss"], tol("float32", "loss"), "loss")


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_backward_twice_with_retain_graph(rng, device):
    n = 20
    hid = tensor(rng.standard_normal((n, H)).astype(np.float32), torch.float32, device)
    w = tensor((rng.standard_normal((V, H)) * 0.3).astype(np.float32), torch.float32,
               device).requires_grad_()
    y = torch.from_numpy(make_targets(rng, make_logits(rng, n, V))).to(device)
    compiled = torch.compile(lambda h, w_, t: xt.cross_entropy(h @ w_.t(), t, reduction="none"),
                             backend="inductor", fullgraph=True)
    loss = compiled(hid, w, y)
    x64 = f64(hid @ w.detach().t())
    ref = cross_entropy_ref(x64, y.cpu().numpy(), reduction="none")["grad"]
    ups = [torch.full((n,), 3.0), torch.from_numpy(rng.uniform(-1, 1, n).astype(np.float32))]
    t = tol("float32", "grad_scaled")
    for g in ups:
        w.grad = None
        loss.backward(g.to(device), retain_graph=True)
        want = (ref * f64(g)[:, None]).T @ f64(hid)
        assert_close(f64(w.grad), want, type(t)(rtol=4 * t.rtol, atol_rel=4 * t.atol_rel),
                     "weight gradient")


def test_compiled_graph_updates_the_logits_buffer_in_place(rng):
    """Inductor runs the custom operators on the matmul's own output buffer:
    the forward graph allocates one N x V buffer, not a copy for the gradient."""
    from torch._inductor.utils import run_and_get_code

    n = 24
    hid = torch.randn(n, H, requires_grad=True)
    w = torch.randn(V, H, requires_grad=True)
    y = torch.from_numpy(make_targets(rng, make_logits(rng, n, V)))
    compiled = torch.compile(lambda h, w_, t: xt.cross_entropy(h @ w_.t(), t) * 2.0,
                             backend="inductor", fullgraph=True)

    def run():
        loss = compiled(hid, w, y)
        loss.backward()
        return loss

    _, codes = run_and_get_code(run)
    code = "\n".join(codes)
    assert "torch.ops.xent.forward_grad.default(" in code
    assert "torch.ops.xent.backward_.default(" in code
    allocs = re.findall(rf"empty_strided_\w+\(\({n}, {V}\)", code)
    assert len(allocs) == 1, allocs
