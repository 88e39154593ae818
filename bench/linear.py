#!/usr/bin/env python3
"""linear.py - the fused linear cross-entropy against its peers and its floor, in one run
on one GPU (run through `bench/compare.py --kernel linear`, or directly).

One timed iteration is a training step of the LM head and the loss: loss = f(x, W, y)
with x (BT x H) and W (V x H) leaf tensors that require grad, then loss.backward(); the
.grad of both are reset (None) before each iteration, outside the timed region. bf16.

Providers (each skipped, with a printed reason, when it is missing or cannot run):

    gemm_floor      the three products alone, through torch.matmul (cuBLAS): the logits
                    x W^T, dX = G W and dW = G^T x with G a BT x V bf16 buffer. Not a loss:
                    the floor every method's step is compared with (ratio = time / floor)
    xent            xent.torch.FusedLinearCrossEntropyLoss, default settings
    xent_fp32accum  the same with accum_dtype=torch.float32 (an fp32 accumulator: V x H over
                    row chunks, BT x H over the vocabulary's slabs)
    xent_rows, xent_vocab, xent_fp32accum_rows, xent_fp32accum_vocab, xent_all (one chunk:
    all the logits in memory), xent_own (xent's own Hopper products, where they run),
    xent_own_nostats (the same without the logits' statistics epilogue), xent_own_pingpong
    and xent_own_pingpong_nostats (the same two with the GEMM's consumers on alternate tiles),
    xent_own_all (xent_own with one chunk), xent_own_lc (xent_own with dW's product reading
    the gradient's old tile ahead)
                    (on request) the same with schedule="rows" or "vocab" asked for
    liger_flce      the peer's LigerFusedLinearCrossEntropyLoss (Triton, chunked)
    liger_sm90      the peer's Hopper kernel (CuTe DSL GEMMs, all the logits; liger-kernel 0.8.5
                    with nvidia-cutlass-dsl)
    quack           QuACK's chunked_linear_cross_entropy (quack-kernels; CuTe DSL GEMMs), its
                    default 4096-row chunks; quack_512 (on request): 512-row chunks;
                    quack_fixed, quack_512_fixed (on request): the same with tuned=False
                    (no autotuning: its GEMMs' default configuration); quack_base,
                    quack_512_base, quack_fixed_base, quack_512_fixed_base: those with
                    use_scaled_exp=False (its base pipeline, not the scaled-exp one it
                    picks on Hopper)
    cce             cut_cross_entropy.linear_cross_entropy, its default gradient filter
    cce_exact       the same with filter_eps=None (no filtering: every gradient exact)
    torch_fp32ce    F.cross_entropy((x @ W.T).float(), y): the logits upcast, as Hugging
                    Face's default loss does
    torch_bf16ce    F.cross_entropy(x @ W.T, y) in bf16
    torch_compile   torch.compile of the fp32 one
    torch_lce       torch.nn.functional.linear_cross_entropy (torch >= 2.13), its reference
                    path (the logits whole)
    torch_lce_chunked  the same with LinearCrossEntropyOptions() (its chunked path)

Without a GPU (or with --cpu): a CPU row, fp32 at 2048 x 1024 x 32000 (--shape to change):
xent's CPU backend against torch_lce, torch_lce_chunked and torch_fp32ce, wall time.

Memory: "extra" is the peak of torch.cuda.max_memory_allocated() over one fresh step,
minus the inputs (x, W, y) and minus the gradients dX and dW that every method holds, in
MiB; xent's scratch comes from torch's allocator, so it is counted.

Also, on request:
    --frozen-trunk  the hidden states need no gradient: xent computes no dX, the floor
                    is two GEMMs (the peers' fused losses are left out: the peer's skips
                    dW too without dX, Cut Cross-Entropy computes dX all the same)
    --frozen-head   the weight needs no gradient (a LoRA run's head): no dW, the floor is
                    the logits' and dX's GEMMs
    --chunk-curve   xent at several memory budgets at the first shape: time and extra
                    memory of each (what the budget setting costs)
    --weight-error  the weight gradient's error against a float64 reference (computed on
                    the GPU) for xent (bf16 and fp32 accumulation, by the default schedule
                    and by rows) and the peer (both), at the first shape's H and V with a
                    smaller BT

Output: CSV rows in results_csv.py's schema (kernel_name "fused_linear_cross_entropy",
mode "full"; metrics speed ms, memory MB (extra), floor_ratio, tflops), a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

import results_csv  # noqa: E402

SHAPES = [(8192, 4096, 128256), (8192, 2304, 256000), (4096, 4096, 128256), (8192, 2048, 128256)]
SWEEP_BT = [2048, 4096, 8192, 16384, 32768]
PROVIDERS = ["gemm_floor", "xent", "xent_fp32accum", "liger_flce", "liger_sm90", "quack", "cce",
             "cce_exact", "torch_fp32ce", "torch_bf16ce", "torch_compile", "torch_lce",
             "torch_lce_chunked"]
# QuACK's variants (make_providers reads chunk, tuning and pipeline from the name); quack alone
# runs by default
QUACK_PROVIDERS = ["quack", "quack_512", "quack_base", "quack_512_base", "quack_fixed",
                   "quack_512_fixed", "quack_fixed_base", "quack_512_fixed_base"]
# on request only: xent with its schedule, budget or products fixed, QuACK's other variants
EXTRA_PROVIDERS = ["xent_rows", "xent_vocab", "xent_fp32accum_rows", "xent_fp32accum_vocab",
                   "xent_all", "xent_own", "xent_own_nostats", "xent_own_pingpong",
                   "xent_own_pingpong_nostats", "xent_own_all", "xent_own_lc", "xent_1g",
                   "xent_own_1g", "xent_vocab_blockrows"] + QUACK_PROVIDERS[1:]
# without dX these would time another step than the floor's
FULL_STEP_ONLY = ["liger_flce", "liger_sm90", "cce", "cce_exact"] + QUACK_PROVIDERS
CHUNK_BUDGETS_MIB = [32, 64, 128, 256, 512, 1024, 2048]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sweep", choices=["shapes", "bt", "all"], default="shapes")
    p.add_argument("--shape", default=None, help="one point BT,H,V instead of the sweep")
    p.add_argument("--providers", default=None, help="default: " + ",".join(PROVIDERS))
    p.add_argument("--skip", default="")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5,
                   help="the timed steps in this many interleaved rounds over the providers")
    p.add_argument("--chunk-curve", action="store_true")
    p.add_argument("--weight-error", action="store_true")
    p.add_argument("--frozen-trunk", action="store_true",
                   help="no dX: the hidden states need no gradient (xent and the floor only)")
    p.add_argument("--frozen-head", action="store_true",
                   help="no dW: the weight needs no gradient")
    p.add_argument("--out", default=os.path.join(HERE, "results", "linear.csv"))
    p.add_argument("--no-append", action="store_true")
    p.add_argument("--budget-s", type=float, default=None)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--quick", action="store_true", help="small shapes (a test of the driver)")
    p.add_argument("--cpu", action="store_true", help="the CPU row (the default without a GPU)")
    a = p.parse_args(argv)
    if a.frozen_trunk and a.frozen_head:
        p.error("--frozen-trunk and --frozen-head leave nothing to differentiate")
    skip = set(s for s in a.skip.split(",") if s)
    explicit = a.providers is not None
    names = a.providers.split(",") if explicit else PROVIDERS[:]
    a.provider_names = [n for n in names if n and n not in skip]
    for n in a.provider_names:
        if n not in PROVIDERS + EXTRA_PROVIDERS:
            p.error(f"unknown provider {n!r}")
    if a.frozen_trunk:
        wrong = [n for n in a.provider_names if n in FULL_STEP_ONLY]
        if wrong and explicit:
            p.error(f"--frozen-trunk: {', '.join(wrong)} cannot leave dX out "
                    "(the peer then skips dW too; Cut Cross-Entropy computes dX anyway)")
        a.provider_names = [n for n in a.provider_names if n not in FULL_STEP_ONLY]
    return a


def quantiles(s: List[float]) -> Tuple[float, float, float]:
    s = sorted(s)

    def q(p):
        pos = p * (len(s) - 1)
        lo = int(math.floor(pos))
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    return q(0.5), q(0.2), q(0.8)


# xent_experimental as ints: the launch's 9, programmatic, verdict_copy, backward_waves,
# plan_arch, then products (tests/python/test_lib.py checks both against the header)
def with_settings(call, **settings):
    """call() under xent's experimental settings (xent._lib.experimental) on this thread:
    the fused linear loss computes its gradients in the forward, on the calling thread."""
    from xent import _lib
    with _lib.experimental(**settings):
        return call()


def make_providers(torch, names: List[str]):
    """name -> (fn(x, w, y) -> loss, None) or (None, reason)."""
    F = torch.nn.functional
    out: Dict[str, Tuple[Optional[Callable], Optional[str]]] = {}
    xt = None
    try:
        import source_tree
        source_tree.use_xent()
        import xent.torch as xt  # noqa: F811
    except Exception as e:
        xt_reason = f"import xent.torch failed: {e}"
    for n in names:
        if n == "gemm_floor":
            out[n] = (None, None)  # timed by its own routine
        elif n.startswith("xent"):
            if xt is None:
                out[n] = (None, xt_reason)
                continue
            own = {"xent_own": 2, "xent_own_nostats": 3, "xent_own_pingpong": 4,
                   "xent_own_pingpong_nostats": 5, "xent_own_all": 2, "xent_own_lc": 6,
                   "xent_own_1g": 2}
            if n in own:
                # xent's own Hopper products (xent_experimental.h, products): 2 with the
                # logits' statistics epilogue, 3 without it (the chunk's own statistics pass),
                # 4 and 5 the same with the consumers on alternate tiles; xent_own_all: 2
                # with one chunk (all the logits in memory); xent_own_lc: 6, dW's product
                # reading the gradient's old tile ahead; xent_own_1g: 2 at a 1 GiB budget
                mode = own[n]
                out[n] = ((lambda x, w, y, mode=mode, all_=n == "xent_own_all",
                           budget=(1 << 30) if n == "xent_own_1g" else 0: with_settings(
                    lambda: xt.FusedLinearCrossEntropyLoss(
                        chunk_rows=x.shape[0] if all_ else 0, memory_budget=budget)(w, x, y),
                    products=mode)), None)
                continue
            if n == "xent_vocab_blockrows":  # the vocab schedule's passes a block per row
                fn = xt.FusedLinearCrossEntropyLoss(schedule="vocab")
                out[n] = ((lambda x, w, y, fn=fn: with_settings(lambda: fn(w, x, y),
                                                                 forward_path=1)), None)
                continue
            if n == "xent_1g":  # memory_budget 1 GiB (issue 54's second row)
                out[n] = ((lambda x, w, y: xt.FusedLinearCrossEntropyLoss(
                    memory_budget=1 << 30)(w, x, y)), None)
                continue
            if n == "xent_all":  # one chunk: all the logits in memory, as torch.compile's
                out[n] = ((lambda x, w, y: xt.FusedLinearCrossEntropyLoss(
                    chunk_rows=x.shape[0])(w, x, y)), None)
                continue
            schedule = n.rsplit("_", 1)[1] if n.endswith(("_rows", "_vocab")) else "auto"
            fn = xt.FusedLinearCrossEntropyLoss(
                accum_dtype=torch.float32 if n.startswith("xent_fp32accum") else None,
                schedule=schedule)
            out[n] = ((lambda x, w, y, fn=fn: fn(w, x, y)), None)
        elif n == "liger_flce":
            try:
                from liger_kernel.transformers.fused_linear_cross_entropy import (
                    LigerFusedLinearCrossEntropyLoss)
                fn = LigerFusedLinearCrossEntropyLoss()
                out[n] = ((lambda x, w, y, fn=fn: fn(w, x, y)), None)
            except Exception as e:
                out[n] = (None, f"liger_kernel not importable: {type(e).__name__}: {e}")
        elif n == "liger_sm90":
            try:  # the peer's Hopper kernel: persistent CuTe DSL GEMMs, all the logits in memory
                from liger_kernel.ops.cutedsl.ops.fused_linear_cross_entropy_sm90 import (
                    liger_fused_linear_cross_entropy_sm90)
                out[n] = ((lambda x, w, y: liger_fused_linear_cross_entropy_sm90(x, w, y)), None)
            except Exception as e:
                out[n] = (None, "liger_kernel's SM90 kernel not importable (liger-kernel 0.8.5 "
                          f"and nvidia-cutlass-dsl): {type(e).__name__}: {e}")
        elif n in QUACK_PROVIDERS:
            try:  # QuACK's chunked linear cross-entropy (its own GEMMs, 4096-row chunks, or
                # 512 as xent's default budget has them at 8192 x 4096 x 128256); _fixed:
                # tuned=False, its GEMMs' default configuration without the autotuner,
                # which compiles each of dozens of configurations for each product's shape;
                # _base: use_scaled_exp=False, its base pipeline (the scaled-exp one, which
                # it picks itself on Hopper, raised where the chunk's rows equal H)
                from quack.linear_cross_entropy import chunked_linear_cross_entropy
                cs = 512 if n.startswith("quack_512") else 4096
                kw = {"tuned": "_fixed" not in n}
                if n.endswith("_base"):
                    kw["use_scaled_exp"] = False
                out[n] = ((lambda x, w, y, cs=cs, kw=kw: chunked_linear_cross_entropy(
                    x, w, y, chunk_size=cs, **kw)), None)
            except Exception as e:
                out[n] = (None, f"quack not importable: {type(e).__name__}: {e}")
        elif n in ("cce", "cce_exact"):
            try:
                from cut_cross_entropy import linear_cross_entropy
                kw = {} if n == "cce" else {"filter_eps": None}
                out[n] = ((lambda x, w, y, kw=kw: linear_cross_entropy(x, w, y, **kw)), None)
            except Exception as e:
                out[n] = (None, f"cut_cross_entropy not importable: {type(e).__name__}: {e}")
        elif n == "torch_fp32ce":
            out[n] = ((lambda x, w, y: F.cross_entropy((x @ w.t()).float(), y)), None)
        elif n == "torch_bf16ce":
            out[n] = ((lambda x, w, y: F.cross_entropy(x @ w.t(), y)), None)
        elif n == "torch_compile":
            out[n] = (torch.compile(lambda x, w, y: F.cross_entropy((x @ w.t()).float(), y)),
                      None)
        elif n in ("torch_lce", "torch_lce_chunked"):
            lce = getattr(F, "linear_cross_entropy", None)
            if lce is None:
                out[n] = (None, f"torch {torch.__version__} has no linear_cross_entropy (2.13+)")
                continue
            opts = None
            if n == "torch_lce_chunked":
                from torch.nn.modules.linear_cross_entropy_options import (
                    LinearCrossEntropyOptions)
                opts = LinearCrossEntropyOptions()
            out[n] = ((lambda x, w, y, o=opts: lce(x, w, y, options=o)), None)
    return out


def cpu_rows(torch, args) -> int:
    """xent's CPU backend beside torch's own fused linear loss, fp32, wall time."""
    bt, h, v = (int(s) for s in args.shape.split(",")) if args.shape else (2048, 1024, 32000)
    if args.quick:
        bt, h, v = 256, 64, 4000
    names = ["xent", "torch_lce", "torch_lce_chunked", "torch_fp32ce"]
    provs = make_providers(torch, names)
    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(bt, h, generator=g).requires_grad_()
    w = (torch.randn(v, h, generator=g) * (2.0 / math.sqrt(h))).requires_grad_()
    y = torch.randint(0, v, (bt,), generator=g)
    y[::13] = -100
    print(f"linear.py  CPU ({torch.get_num_threads()} threads)  torch {torch.__version__}  "
          f"fp32 BT={bt} H={h} V={v}; median (p20 / p80) of {args.iters} steps after "
          f"{args.warmup}, wall ms")
    for n in names:
        fn, why = provs[n]
        if why:
            print(f"  {n:<18}skipped: {why}")
            continue
        times = []
        for i in range(args.warmup + args.iters):
            x.grad = w.grad = None
            t0 = time.perf_counter()
            fn(x, w, y).backward()
            if i >= args.warmup:
                times.append((time.perf_counter() - t0) * 1e3)
        q = quantiles(times)
        print(f"  {n:<18}{q[0]:>10.1f}  ({q[1]:>8.1f} / {q[2]:>8.1f})")
    return 0


class Bench:
    def __init__(self, torch, args):
        self.torch, self.args = torch, args

    def inputs(self, bt, h, v):
        torch = self.torch
        g = torch.Generator(device="cuda").manual_seed(self.args.seed)
        x = torch.randn(bt, h, device="cuda", dtype=torch.bfloat16, generator=g)
        w = (torch.randn(v, h, device="cuda", dtype=torch.float32, generator=g)
             * (2.0 / math.sqrt(h))).to(torch.bfloat16)
        y = torch.randint(0, v, (bt,), device="cuda", generator=g)
        y[::13] = -100
        return (x.requires_grad_(not self.args.frozen_trunk),
                w.requires_grad_(not self.args.frozen_head), y)

    def time_step(self, fn, x, w, y, n=None) -> List[float]:
        """n steps (default: the warmup's, untimed, then iters), each from an idle GPU."""
        torch = self.torch
        times = []
        warm = self.args.warmup if n is None else 0
        for i in range(warm + (self.args.iters if n is None else n)):
            x.grad = w.grad = None
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(x, w, y).backward()
            b.record()
            torch.cuda.synchronize()
            if i >= warm:
                times.append(a.elapsed_time(b))
        x.grad = w.grad = None
        return times

    def floor_step(self, bt, h, v):
        """fn(n) -> the times of n steps of the three GEMMs alone (torch.matmul into
        preallocated outputs), its tensors held until fn is dropped."""
        torch = self.torch
        x = torch.randn(bt, h, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(v, h, device="cuda", dtype=torch.bfloat16)
        logits = torch.empty(bt, v, device="cuda", dtype=torch.bfloat16)
        gz = torch.randn(bt, v, device="cuda", dtype=torch.bfloat16) * 1e-3
        dx = torch.empty(bt, h, device="cuda", dtype=torch.bfloat16)
        dw = torch.empty(v, h, device="cuda", dtype=torch.bfloat16)

        def run(n):
            times = []
            for _ in range(n):
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                torch.matmul(x, w.t(), out=logits)
                if not self.args.frozen_trunk:
                    torch.matmul(gz, w, out=dx)
                if not self.args.frozen_head:
                    torch.matmul(gz.t(), x, out=dw)
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b))
            return times
        return run

    def time_floor(self, bt, h, v) -> List[float]:
        run = self.floor_step(bt, h, v)
        run(self.args.warmup)
        return run(self.args.iters)

    def extra_memory(self, fn, x, w, y) -> float:
        """Peak over one step beyond the inputs and dX, dW, in MiB."""
        torch = self.torch
        x.grad = w.grad = None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn(x, w, y).backward()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        grads = (x.numel() * x.element_size() * x.requires_grad
                 + w.numel() * w.element_size() * w.requires_grad)
        x.grad = w.grad = None
        return (peak - base - grads) / 2**20


def weight_error(torch, xt, bt, h, v, seed, chunk_budgets=(None,)):
    """Relative error (Frobenius) of dW against float64, per method."""
    F = torch.nn.functional
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(bt, h, device="cuda", dtype=torch.bfloat16, generator=g)
    w = (torch.randn(v, h, device="cuda", generator=g) * (2.0 / math.sqrt(h))).to(torch.bfloat16)
    y = torch.randint(0, v, (bt,), device="cuda", generator=g)
    x64, w64 = x.double(), w.double().requires_grad_()
    F.cross_entropy(x64 @ w64.t(), y).backward()
    ref = w64.grad
    del w64
    out = {}

    def err(dw):
        return float((dw.double() - ref).norm() / ref.norm())

    # The default (auto) takes vocab at this BT, where each slab of dW is written
    # once; the rows schedule adds dW up over its chunks, one rounding each in
    # bf16: both are measured, with the plan each call took.
    import xent._lib as xl
    f32 = {"accum_dtype": torch.float32}
    for name, kw in (("xent (bf16 accumulation)", {}),
                     ("xent (accum_dtype=float32)", f32),
                     ("xent rows (bf16 accumulation)", {"schedule": "rows"}),
                     ("xent rows (accum_dtype=float32)", {"schedule": "rows", **f32})):
        wa = w.clone().requires_grad_()
        loss = xt.fused_linear_cross_entropy(x, wa, y, **kw)
        how = xl.last_linear().split()  # the forward's plan: it computes the gradients
        loss.backward()
        out[f"{name} [{how[0]}, {how[-1].split('=')[-1]} pieces]"] = err(wa.grad)
    try:
        from liger_kernel.transformers.fused_linear_cross_entropy import (
            LigerFusedLinearCrossEntropyLoss)
        for name, kw in (("liger (default)", {}), ("liger (accum_dtype=float32)",
                                                   {"accum_dtype": torch.float32})):
            # the peer computes dW only when the input requires grad as well
            wa, xa = w.clone().requires_grad_(), x.clone().requires_grad_()
            LigerFusedLinearCrossEntropyLoss(**kw)(wa, xa, y).backward()
            out[name] = err(wa.grad)
    except Exception as e:
        out["liger"] = f"not run: {type(e).__name__}: {e}"
    wa = w.clone().requires_grad_()
    F.cross_entropy((x @ wa.t()).float(), y).backward()
    out["torch (bf16 matmul, fp32 loss)"] = err(wa.grad)
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    if args.cpu or not torch.cuda.is_available():
        return cpu_rows(torch, args)
    dev_name = torch.cuda.get_device_name()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    xent_version = "unknown"
    try:
        import source_tree
        source_tree.use_xent()
        import xent
        xent_version = xent.library_version()
    except Exception:
        pass
    print(f"linear.py  {stamp}  {dev_name}  torch {torch.__version__}  xent {xent_version}")
    for pkg in ("liger-kernel", "cut-cross-entropy", "nvidia-cutlass-dsl", "quack-kernels"):
        try:
            from importlib.metadata import version
            print(f"{pkg} {version(pkg)}")
        except Exception:
            print(f"{pkg}: not installed")
    print(f"timing: median (p20 / p80) of {args.iters} steps after {args.warmup}, in "
          f"{max(1, min(args.rounds, args.iters))} interleaved rounds; bf16; "
          "ratio = time / the three GEMMs alone in this run"
          + ("\nfrozen trunk: no dX; the floor is two GEMMs (logits, dW)" if args.frozen_trunk
             else "")
          + ("\nfrozen head: no dW; the floor is two GEMMs (logits, dX)" if args.frozen_head
             else ""))
    if args.quick:
        points = [("V", 1024, 512, 32000)]
    elif args.shape:
        bt, h, v = (int(s) for s in args.shape.split(","))
        points = [("V", bt, h, v)]
    else:
        points = []
        if args.sweep in ("shapes", "all"):
            points += [("V", bt, h, v) for bt, h, v in SHAPES]
        if args.sweep in ("bt", "all"):
            points += [("BT", bt, 4096, 128256) for bt in SWEEP_BT if bt != 8192]
    provs = make_providers(torch, args.provider_names)
    for n, (fn, why) in provs.items():
        if why:
            print(f"skip {n}: {why}")
    bench = Bench(torch, args)
    out = results_csv.CsvWriter(args.out, append=not args.no_append)

    def emit(prov, metric, unit, x_name, bt, h, v, q):
        out.write({
            "kernel_name": "fused_linear_cross_entropy", "kernel_provider": prov,
            "kernel_operation_mode": "full", "metric_name": metric, "metric_unit": unit,
            "x_name": x_name, "x_label": results_csv.X_LABELS[x_name],
            "x_value": v if x_name == "V" else bt, "y_value_50": q[0], "y_value_20": q[1],
            "y_value_80": q[2],
            "extra_benchmark_config_str": json.dumps({"BT": bt, "H": h, "V": v,
                                                      "dtype": "bfloat16"}),
            "gpu_name": dev_name, "timestamp": stamp, "xent_version": xent_version})

    t0 = time.time()
    table = []
    for x_name, bt, h, v in points:
        if args.budget_s and time.time() - t0 > args.budget_s:
            print(f"budget of {args.budget_s:.0f} s spent: stopped before {bt}x{h}x{v}")
            break
        flops = (4.0 if args.frozen_trunk or args.frozen_head else 6.0) * bt * h * v
        print(f"\nBT={bt} H={h} V={v}   (logits {bt * v * 2 / 2**20:.0f} MiB in bf16; "
              f"1/16: {bt * v * 2 / 16 / 2**20:.0f} MiB)")
        print(f"  {'provider':<16}{'median ms':>10}  {'(p20 / p80)':<21}{'x floor':>8}"
              f"{'TFLOP/s':>9}{'extra MiB':>11}")
        # Every provider warmed up (and its memory taken) first, then timed in
        # interleaved rounds, each round a few steps of each in a rotating order: the
        # card's clock drifts with its power and heat over a run, and rounds spread
        # that drift over all of them alike.
        runs = {}
        plans = {}
        inputs = None
        for n in args.provider_names:
            fn, why = provs[n]
            if why:
                continue
            torch.cuda.empty_cache()
            try:
                if n == "gemm_floor":
                    run = bench.floor_step(bt, h, v)
                    run(args.warmup)
                    runs[n] = (run, None)
                else:
                    if inputs is None:
                        inputs = bench.inputs(bt, h, v)
                    mem = bench.extra_memory(fn, *inputs)
                    bench.time_step(fn, *inputs, n=args.warmup)
                    runs[n] = ((lambda k, fn=fn: bench.time_step(fn, *inputs, n=k)), mem)
                    if n.startswith("xent"):  # the plan it took (auto's choice, the chunks)
                        import xent._lib as xl
                        plans[n] = xl.last_linear()
            except Exception as e:
                msg = f"{type(e).__name__}: {e}".replace("\n", " ")[:200]
                print(f"  {n:<16}skipped: {msg}")
                torch.cuda.empty_cache()
        samples = {n: [] for n in runs}
        rounds = max(1, min(args.rounds, args.iters))
        names = list(runs)
        for r in range(rounds):
            k = args.iters // rounds + (1 if r < args.iters % rounds else 0)
            for n in names[r % len(names):] + names[:r % len(names)] if names else []:
                try:
                    samples[n] += runs[n][0](k)
                except Exception as e:
                    msg = f"{type(e).__name__}: {e}".replace("\n", " ")[:200]
                    print(f"  {n:<16}failed in round {r}: {msg}")
                    names.remove(n)
                    samples.pop(n)
        floor = quantiles(samples["gemm_floor"])[0] if samples.get("gemm_floor") else None
        for n in [m for m in args.provider_names if m in samples]:
            q = quantiles(samples[n])
            mem = runs[n][1]
            ratio = q[0] / floor if floor else float("nan")
            tf = flops / (q[0] * 1e-3) / 1e12
            emit(n, "speed", "ms", x_name, bt, h, v, q)
            emit(n, "tflops", "TFLOP/s", x_name, bt, h, v,
                 (tf, flops / (q[2] * 1e-3) / 1e12, flops / (q[1] * 1e-3) / 1e12))
            if floor:
                emit(n, "floor_ratio", "ratio", x_name, bt, h, v,
                     (ratio, q[1] / floor, q[2] / floor))
            if mem is not None:
                emit(n, "memory", "MB", x_name, bt, h, v, (mem, mem, mem))
            table.append((bt, h, v, n, q[0], ratio, mem))
            print(f"  {n:<16}{q[0]:>10.3f}  ({q[1]:>8.3f} / {q[2]:>8.3f}){ratio:>8.3f}"
                  f"{tf:>9.1f}{'' if mem is None else f'{mem:>11.0f}'}"
                  f"{'  ' + plans[n] if n in plans else ''}")
            sys.stdout.flush()
        del runs, inputs
        torch.cuda.empty_cache()

    if args.chunk_curve and "xent" in provs and not provs["xent"][1]:
        bt, h, v = SHAPES[0] if not args.quick else (1024, 512, 32000)
        if args.shape:
            bt, h, v = (int(s) for s in args.shape.split(","))
        import xent.torch as xt
        print(f"\nxent by memory budget at BT={bt} H={h} V={v}")
        print(f"  {'budget MiB':>10}{'median ms':>11}{'extra MiB':>11}")
        x, w, y = bench.inputs(bt, h, v)
        for mib in CHUNK_BUDGETS_MIB:
            fn = (lambda x_, w_, y_, mib=mib: xt.fused_linear_cross_entropy(
                x_, w_, y_, memory_budget=mib << 20))
            mem = bench.extra_memory(fn, x, w, y)
            q = quantiles(bench.time_step(fn, x, w, y))
            emit(f"xent_budget_{mib}MiB", "speed", "ms", "V", bt, h, v, q)
            emit(f"xent_budget_{mib}MiB", "memory", "MB", "V", bt, h, v, (mem, mem, mem))
            print(f"  {mib:>10}{q[0]:>11.3f}{mem:>11.0f}")
        del x, w, y

    if args.weight_error:
        import xent.torch as xt_mod
        bt, h, v = (2048, 4096, 128256) if not args.quick else (512, 256, 8000)
        print(f"\nweight-gradient error against float64 (relative Frobenius), BT={bt} H={h} "
              f"V={v}, mean reduction, bf16 inputs")
        for name, e in weight_error(torch, xt_mod, bt, h, v, args.seed).items():
            print(f"  {name:<50}{e if isinstance(e, str) else f'{e:.3e}'}")
    out.close()
    print(f"\nrows appended to {args.out}  ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
