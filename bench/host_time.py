#!/usr/bin/env python3
"""Host time of one training step's loss, per provider: what the CPU spends to
enqueue the forward and backward, apart from the GPU's time.

At small shapes (BT = 1024, say) a step's GPU work takes about 0.1 ms, and the
time between two CUDA events around it is the host's time to issue it whenever
the host is the slower side. This script measures that host time directly:
steps are issued back to back with no flush, no copy and no synchronisation
between them, and the wall time of each step's Python call is recorded
(perf_counter). The GPU time of the same steps, measured with events on a
queue kept full, is printed beside it, so the table says which side bounds the
step.

    python3 bench/host_time.py --bt 1024 --vocab 128256 --dtype bf16
    python3 bench/host_time.py --profile 25     # cProfile of xent's step
    python3 bench/host_time.py --parts          # what each piece of it costs

Needs PyTorch and a CUDA device; the peer (liger_triton) is timed when the
liger-kernel package imports.
"""
import argparse
import cProfile
import functools
import io
import pstats
import sys
import time


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bt", type=int, default=1024, help="rows (default 1024)")
    ap.add_argument("--vocab", type=int, default=128256, help="vocabulary (default 128256)")
    ap.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    ap.add_argument("--mode", choices=("full", "forward", "forward_nograd"), default="full")
    ap.add_argument("--iters", type=int, default=200, help="timed steps (default 200)")
    ap.add_argument("--warmup", type=int, default=30, help="untimed steps first (default 30)")
    ap.add_argument("--providers", default="xent,xent_unchecked,xent_general,liger_triton,torch",
                    help="comma-separated: xent, xent_unchecked, xent_general (the binding's "
                         "general path: the same call on (1, BT, V) logits), liger_triton, "
                         "torch")
    ap.add_argument("--rounds", type=int, default=4,
                    help="the timed steps are split into this many rounds, every provider "
                         "once a round, so that a drift of the host's pace reaches every "
                         "provider alike (default 4)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="also print the N functions with most own time in xent's step")
    ap.add_argument("--parts", action="store_true",
                    help="also time the pieces of xent's step alone (allocations, casts, "
                         "the C calls, an empty autograd.Function)")
    return ap.parse_args(argv)


def quantiles(xs):
    s = sorted(xs)

    def q(p):
        return s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))]
    return q(0.5), q(0.2), q(0.8)


PROVIDERS = ("xent", "xent_unchecked", "xent_general", "liger_triton", "torch")


def parts(torch, x, y, dt, iters):
    """Host time of each piece of xent's step, alone, back to back: what
    there is to win. The C calls run on the step's own shape."""
    import xent.torch as xt
    from xent import _lib
    from xent.torch import _common, _verdicts
    from xent.torch import _run_forward
    dev = x.device
    loss16 = torch.ones((), dtype=dt, device=dev)
    g = x.detach()

    class Empty(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a.detach())
            return torch.empty((), dtype=dt, device=dev)

        @staticmethod
        def backward(ctx, go):
            return ctx.saved_tensors[0]

    def empty_step():
        x.grad = None
        Empty.apply(x).backward()

    base = (y, None, _lib.XENT_REDUCTION_MEAN, -100, 0.0, 0.0, None)
    flags = (True, False, False, False)

    def fwd(check):
        return lambda: _run_forward(g, *base, check, *flags, grad=True)

    def fwd_deferred():
        v = _verdicts.take((y, None))
        _run_forward(g, *base, _lib.XENT_TARGETS_DEFERRED, *flags, grad=True, verdict=v)

    # The C calls alone, from structures built once (what ctypes and the C
    # library's host side cost, launches included).
    import ctypes
    n, v = g.shape
    loss32 = torch.empty((), dtype=torch.float32, device=dev)
    inp = _lib.XentInput(g.data_ptr(), _common._DTYPES[g.dtype], n, v, v, y.data_ptr(),
                         _common._TARGET_TYPES[y.dtype], None)
    opt = _common._options_for((_lib.XENT_REDUCTION_MEAN, -100, 0.0, 0.0, None,
                                _lib.XENT_TARGETS_UNCHECKED, True))
    out = _lib.XentOutput(loss32.data_ptr(), None, None, None, None)
    ex = _lib.XentExec()
    ex.backend, ex.device = _lib.XENT_BACKEND_CUDA, dev.index or 0
    ex.stream = torch.cuda.current_stream(dev).cuda_stream
    C = _lib.lib()
    refs = [ctypes.byref(a) for a in (inp, opt, out, ex)]
    one = torch.ones((), dtype=torch.float32, device=dev)
    leaf = torch.ones((), dtype=torch.float32, device=dev, requires_grad=True)

    def engine_floor():
        leaf.grad = None
        (leaf * 1.0).backward()

    pieces = [
        ("C xent_forward_grad alone", lambda: C.xent_forward_grad(*refs)),
        ("C xent_backward alone", lambda: C.xent_backward(g.data_ptr(), inp.dtype, n, v, v,
                                                         one.data_ptr(), 1, refs[3])),
        ("bf16 0-d .float()", lambda: loss16.float()),
        ("(leaf * 1).backward()", engine_floor),
        ("torch.empty((), f32)", lambda: torch.empty((), dtype=torch.float32, device=dev)),
        ("torch.ones(1, f32)", lambda: torch.ones(1, dtype=torch.float32, device=dev)),
        ("loss.to(logits dtype)", lambda: loss16.to(torch.float32)),
        ("ones_like(loss)", lambda: torch.ones_like(loss16)),
        ("C forward_grad, unchecked", fwd(_lib.XENT_TARGETS_UNCHECKED)),
        ("C forward_grad, deferred", fwd_deferred),
        ("C forward_grad, checked", fwd(_lib.XENT_TARGETS_CHECKED)),
        ("backward, factor None", lambda: _common._run_backward(g, loss16, None)),
        ("empty Function fwd+bwd", empty_step),
        ("xent full step, unchecked",
         lambda: (setattr(x, "grad", None),
                  xt.cross_entropy(x, y, check_targets=False).backward())),
    ]
    print(f"\nparts of xent's step, host us (median of {iters}, after 20):")
    for name, fn in pieces:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
        _verdicts.check_pending()
        print(f"  {name:<28}{quantiles(ts)[0]:>8.1f}")


def main(argv=None) -> int:
    args = parse_args(argv)
    names = [n.strip() for n in args.providers.split(",") if n.strip()]
    unknown = [n for n in names if n not in PROVIDERS]
    if unknown or not names:
        print(f"host_time: unknown provider(s) {unknown}; choose from {', '.join(PROVIDERS)}",
              file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("host_time: needs PyTorch", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("host_time: needs a CUDA device (the host time of CPU steps is their time)",
              file=sys.stderr)
        return 2
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(1234)
    x = torch.randn(args.bt, args.vocab, device=dev, dtype=torch.float32,
                    generator=gen).to(dt)
    y = torch.randint(0, args.vocab, (args.bt,), device=dev, generator=gen)

    fns = {}
    for name in names:
        if name in ("xent", "xent_unchecked"):
            import xent.torch as xt
            fns[name] = functools.partial(xt.cross_entropy, check_targets=name == "xent")
        elif name == "xent_general":
            import xent.torch as xt

            def general(a, b, xt=xt):
                return xt.cross_entropy(a.view(1, *a.shape), b.view(1, -1))
            fns[name] = general
        elif name == "liger_triton":
            try:
                from liger_kernel.transformers.functional import liger_cross_entropy
            except Exception as e:  # not installed, or it failed to import
                print(f"{name}: skipped ({type(e).__name__}: {e})")
                continue
            fns[name] = liger_cross_entropy
        else:  # torch
            fns[name] = torch.nn.functional.cross_entropy

    def step(fn):
        if args.mode == "forward_nograd":
            with torch.no_grad():
                return fn(x, y)
        x.grad = None
        loss = fn(x, y)
        if args.mode == "full":
            loss.backward()
        return loss

    print(f"host time per step, {args.mode}, BT={args.bt} V={args.vocab} {args.dtype}, "
          f"{args.iters} steps after {args.warmup}, in {max(1, min(args.rounds, args.iters))} "
          f"rounds; {torch.cuda.get_device_name(dev)}")
    print(f"{'provider':<16}{'host us':>10}{'p20':>9}{'p80':>9}{'GPU us':>10}  bound")
    x.requires_grad_(args.mode != "forward_nograd")
    rounds = max(1, min(args.rounds, args.iters))
    host = {name: [] for name in fns}
    for r in range(rounds):
        per_round = args.iters // rounds + (r < args.iters % rounds)
        for name, fn in fns.items():
            for _ in range(args.warmup if r == 0 else 5):
                step(fn)
            torch.cuda.synchronize()
            for _ in range(per_round):
                t0 = time.perf_counter()
                step(fn)
                host[name].append((time.perf_counter() - t0) * 1e6)
            torch.cuda.synchronize()
    for name, fn in fns.items():
        # GPU time: the same steps queued behind a long sleep, so that the host
        # is ahead and the events time the GPU alone. A provider that waits for
        # the device inside its step (xent's checked mode, the peer's host
        # reads) cannot run ahead: its figure is the step's own pace.
        n = max(20, args.iters // 4)
        torch.cuda._sleep(int(n * 2e6))  # cycles: about 1 ms a step at 2 GHz
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(n):
            step(fn)
        e.record()
        torch.cuda.synchronize()
        gpu = s.elapsed_time(e) * 1e3 / n
        med, p20, p80 = quantiles(host[name])
        bound = "host" if med > gpu else "GPU"
        print(f"{name:<16}{med:>10.1f}{p20:>9.1f}{p80:>9.1f}{gpu:>10.1f}  {bound}")
    if args.parts:
        parts(torch, x, y, dt, args.iters)
    if args.profile and ("xent" in fns or "xent_unchecked" in fns):
        name = "xent" if "xent" in fns else "xent_unchecked"
        prof = cProfile.Profile()
        torch.cuda.synchronize()
        prof.enable()
        for _ in range(args.iters):
            step(fns[name])
        prof.disable()
        torch.cuda.synchronize()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(args.profile)
        print(f"\ncProfile of {name}, {args.iters} steps (own time first):")
        print(buf.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
