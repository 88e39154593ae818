"""Where the checked full step's time goes at a small shape (bench/compare.py's
loop: refresh the logits, flush L2, then forward + backward between two CUDA
events), with the deferred target check's host calls timed one by one.

    python3 dev/full_step_probe.py [--bt 8192] [--vocab 32000]
"""

import argparse
import statistics
import time

import torch

import xent.torch as xt
from xent import _lib

try:
    from xent.torch import _verdicts
except ImportError:  # a binding from before the deferred check
    _verdicts = None

ap = argparse.ArgumentParser()
ap.add_argument("--bt", type=int, default=8192)
ap.add_argument("--vocab", type=int, default=32000)
ap.add_argument("--iters", type=int, default=60)
args = ap.parse_args()

calls = {}


def timed(name, fn):
    def wrap(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            c = calls.setdefault(name, [0, 0.0])
            c[0] += 1
            c[1] += time.perf_counter() - t0
    return wrap


if _verdicts is not None:
    _verdicts.take = timed("take", _verdicts.take)
    _verdicts.settle = timed("settle", _verdicts.settle)
    _lib.Verdict.__init__ = timed("Verdict()", _lib.Verdict.__init__)
    _lib.Verdict.ready = timed("ready", _lib.Verdict.ready)
    _lib.Verdict.wait = timed("wait", _lib.Verdict.wait)

g = torch.Generator(device="cuda").manual_seed(1)
pristine = torch.randn(args.bt, args.vocab, device="cuda", generator=g).to(torch.bfloat16)
y = torch.randint(0, args.vocab, (args.bt,), device="cuda", generator=g)
x = pristine.clone().requires_grad_()
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

for check in (True, False, True):
    calls.clear()
    gpu, host_f, host_b = [], [], []
    for i in range(20 + args.iters):
        x.grad = None
        with torch.no_grad():
            x.copy_(pristine)
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        t0 = time.perf_counter()
        loss = xt.cross_entropy(x, y, check_targets=check)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        e.record()
        if i >= 20:
            gpu.append((s, e))
            host_f.append(t1 - t0)
            host_b.append(t2 - t1)
    torch.cuda.synchronize()
    ms = sorted(a.elapsed_time(b) for a, b in gpu)
    q = lambda v, f: v[int(f * (len(v) - 1))]
    print(f"check_targets={check}: GPU ms p20 {q(ms, .2):.4f} p50 {q(ms, .5):.4f} "
          f"p80 {q(ms, .8):.4f} max {ms[-1]:.4f}; host us forward "
          f"{statistics.median(host_f) * 1e6:.0f} (max {max(host_f) * 1e6:.0f}), backward "
          f"{statistics.median(host_b) * 1e6:.0f} (max {max(host_b) * 1e6:.0f})" + (
              f"; pending {len(_verdicts._pending)} free {len(_verdicts._free)}"
              if _verdicts is not None else ""))
    for name, (n, t) in sorted(calls.items()):
        print(f"    {name:<10} {n:4d} calls, {t / max(n, 1) * 1e6:8.1f} us each")
    if _verdicts is not None:
        xt.check_pending()
