#!/usr/bin/env python3
"""compare.py - xent against its peers, in one run on one GPU.

`--kernel linear` runs the fused linear cross-entropy's benchmark instead
(bench/linear.py: the LM head and the loss against the peers' fused linear
losses and the three GEMMs alone); the default, `--kernel cross_entropy`,
is the loss over materialised logits described here.

Providers (each skipped, with a printed reason, when it is missing or cannot run):

    xent            xent.torch.cross_entropy(logits, target, reduction="mean"), CUDA,
                    default (checked) targets: one small device-to-host read per call
    xent_unchecked  the same with check_targets=False: graph-safe, no host synchronisation
    xent_torch_cpu  xent on CPU tensors (the CPU backend) on a GPU machine; only points of
                    at most --cpu-max-elements logits, since it is orders of magnitude
                    slower (on a machine without a GPU, provider xent is the CPU backend)
    torch           torch.nn.functional.cross_entropy, eager
    torch_compile   torch.compile of the same function
    liger_triton    the peer's Triton kernel: liger_kernel.ops.cross_entropy.
                    LigerCrossEntropyFunction (what LigerCrossEntropyLoss runs by default)
    liger_cutedsl   the peer's CuTe DSL kernel: liger_kernel.ops.cutedsl.ops.cross_entropy.
                    LigerCrossEntropyFunction, the class LIGER_KERNEL_IMPL=cutedsl installs
                    in liger_kernel.ops; imported directly so one process measures both
                    kernels. Needs nvidia-cutlass-dsl and sm_90+; vocabularies that are not
                    a multiple of one 16-byte vector are skipped (liger falls back to
                    Triton there)
    torch_cpu       torch eager on CPU tensors (not in the default list)

Modes (what one timed iteration is; the logits are a leaf tensor):

    forward         loss = f(x, y) with x.requires_grad: xent and liger write the gradient
                    here; torch saves what its backward needs
    backward        loss.backward(g) with g = 0.5 (not 1), after an untimed forward
    full            loss = f(x, y); loss.backward(): the standard last-layer step (g = 1)
    forward_nograd  under torch.no_grad(), x not requiring grad: the loss only

Fewest bytes, one definition for every provider (the effective bandwidth is this
over the median time):

    forward, backward, full   2 * BT * V * sizeof(dtype)   (read X, write dX)
    forward_nograd                BT * V * sizeof(dtype)   (read X)

Method. Logits ~ N(0, 2) (torch.randn * 2 in the benchmark dtype), uniform targets,
made on the device once per (point, dtype) into a pristine buffer. Before every
iteration, outside the timed region: x.grad = None, x.copy_(pristine) (the fused
kernels overwrite x), and a 256 MiB scratch buffer is zeroed so the L2 holds none of
the logits. GPU times: CUDA events around the region, median and 20th/80th
percentiles (linear interpolation) of --iters after --warmup. CPU providers:
time.perf_counter, --cpu-iters after --cpu-warmup. Each provider's loss is checked
once per point against a float32 reference (a mismatch is printed and flagged).

Memory: for mode full, on a device holding nothing else of the benchmark, the peak
of torch.cuda.max_memory_allocated() over one fresh forward + backward, after
reset_peak_memory_stats() with the logits and targets already allocated; the median
of --mem-reps runs, in MiB (the peer's "MB").

Copy bandwidth: device-to-device copy of a 2 GiB buffer (Tensor.copy_), bytes read +
written over the median time, measured once in the same run; for CPU providers, a
copy of the point's logits on the host.

Output: rows appended to --out in the schema of results_csv.py (speed, memory,
eff_bandwidth, copy_bandwidth, copy_share), a progress line on stderr, a table on
stdout, and a Markdown summary (summary.py) of this run's rows in --summary.

--quick: tiny shapes and few iterations on whatever device is there (the CPU when
there is no GPU; then only the providers that run on the CPU), so a test can prove
that the driver and the CSV work.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, HERE)

import results_csv  # noqa: E402

MODES = ["forward", "backward", "full", "forward_nograd"]
ALL_PROVIDERS = ["xent", "xent_unchecked", "liger_triton", "liger_cutedsl", "torch",
                 "torch_compile", "xent_torch_cpu"]
OPTIONAL_PROVIDERS = ["torch_cpu"]
SWEEP_VOCAB = [32000, 50304, 102400, 128256, 152064, 201088, 262144]
SWEEP_BT = [1024, 2048, 4096, 8192, 16384, 32768, 65536]
DEFAULT_POINTS = [(8192, 32000), (8192, 128256), (8192, 262144)]
FLUSH_BYTES = 256 << 20
COPY_BYTES = 2 << 30
GRAD_OUTPUT = 0.5


def fewest_bytes(mode: str, bt: int, v: int, elem: int) -> float:
    x = float(bt) * float(v) * float(elem)
    return x if mode == "forward_nograd" else 2.0 * x


def quantiles(samples: List[float]) -> Tuple[float, float, float]:
    """(median, p20, p80) with linear interpolation between order statistics."""
    s = sorted(samples)
    n = len(s)

    def q(p):
        pos = p * (n - 1)
        lo = int(math.floor(pos))
        hi = min(lo + 1, n - 1)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    return q(0.5), q(0.2), q(0.8)


# ---------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Benchmark xent against torch, torch.compile and the peer's kernels.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Providers: " + ", ".join(ALL_PROVIDERS + OPTIONAL_PROVIDERS))
    p.add_argument("--sweep", choices=["vocab", "bt", "all"],
                   help="V in %s at BT=8192, or BT in %s at V=128256" % (SWEEP_VOCAB, SWEEP_BT))
    p.add_argument("--mode", default=None,
                   help="comma list of %s, or all (default forward,full; all for --quick)"
                   % ",".join(MODES))
    p.add_argument("--dtype", default="all", help="bf16, fp32, fp16, comma list, or all "
                   "(= bf16,fp32)")
    p.add_argument("--bt", type=int, help="a single point's BT (or the vocab sweep's BT)")
    p.add_argument("--vocab", type=int, help="a single point's V (or the BT sweep's V)")
    p.add_argument("--only", default=None,
                   help="comma list of x values: run only these points of --sweep (e.g. "
                   "--sweep bt --only 16384,65536 to redo two points)")
    p.add_argument("--providers", default=None,
                   help="comma list (default: %s)" % ",".join(ALL_PROVIDERS))
    p.add_argument("--skip", default="", help="comma list of providers to leave out")
    p.add_argument("--iters", type=int, default=None, help="timed iterations (default 40)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up iterations (default 20)")
    p.add_argument("--mem-reps", type=int, default=None, help="memory runs (default 5)")
    p.add_argument("--cpu-iters", type=int, default=None, help="CPU providers (default 10)")
    p.add_argument("--cpu-warmup", type=int, default=None, help="CPU providers (default 3)")
    p.add_argument("--cpu-max-elements", type=int, default=1 << 28,
                   help="largest BT*V the CPU providers run (default 2^28)")
    p.add_argument("--out", default=os.path.join(HERE, "results", "compare.csv"),
                   help="CSV to append to (default bench/results/compare.csv)")
    p.add_argument("--no-append", action="store_true", help="overwrite --out")
    p.add_argument("--summary", default=None,
                   help="Markdown summary file (default: --out with .md)")
    p.add_argument("--ours", default="xent",
                   help="provider the summary's speedups are for (default xent: the default, "
                        "checked mode; xent_unchecked for the graph-safe one)")
    p.add_argument("--quick", action="store_true", help="tiny shapes, few iterations")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--budget-s", type=float, default=None,
                   help="start no new point after this many seconds (the run ends cleanly)")
    p.add_argument("--compile-static", action="store_true",
                   help="torch.compile(dynamic=False): static kernels for every shape (one "
                        "compile per shape; the default lets torch go dynamic after the "
                        "second shape, as it does in training)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--xent-lib", default=None, help="path of libxent.so (sets XENT_LIBRARY)")
    args = p.parse_args(argv)

    q = args.quick
    args.iters = args.iters or (5 if q else 40)
    args.warmup = args.warmup if args.warmup is not None else (2 if q else 20)
    args.mem_reps = args.mem_reps or (2 if q else 5)
    args.cpu_iters = args.cpu_iters or (3 if q else 10)
    args.cpu_warmup = args.cpu_warmup if args.cpu_warmup is not None else (1 if q else 3)
    mode_text = args.mode or ("all" if q else "forward,full")
    args.modes = MODES[:] if mode_text == "all" else [m for m in mode_text.split(",") if m]
    for m in args.modes:
        if m not in MODES:
            p.error(f"unknown mode {m!r}")
    dts = []
    for d in (["bf16", "fp32"] if args.dtype == "all" else args.dtype.split(",")):
        name = results_csv.normalize_dtype(d)
        if name not in ("bfloat16", "float32", "float16"):
            p.error(f"unknown dtype {d!r}")
        if name not in dts:
            dts.append(name)
    args.dtypes = dts
    explicit = args.providers is not None
    provs = (args.providers.split(",") if explicit else ALL_PROVIDERS[:])
    skip = set(s for s in args.skip.split(",") if s)
    for name in provs + list(skip):
        if name not in ALL_PROVIDERS + OPTIONAL_PROVIDERS:
            p.error(f"unknown provider {name!r}")
    args.provider_names = [n for n in provs if n not in skip]
    args.providers_explicit = explicit
    return args


def build_points(args, on_gpu: bool) -> List[Tuple[str, int, int]]:
    """(x_name, BT, V) in run order."""
    if args.quick:
        bt = 256 if on_gpu else 64
        return [("V", bt, v) for v in (1000, 4099, 32000 if on_gpu else 8192)]
    pts = []
    if args.sweep in ("vocab", "all"):
        pts += [("V", args.bt or 8192, v) for v in SWEEP_VOCAB]
    if args.sweep in ("bt", "all"):
        pts += [("BT", bt, args.vocab or 128256) for bt in SWEEP_BT]
    if args.only:
        keep = {int(x) for x in args.only.split(",") if x.strip()}
        pts = [pt for pt in pts if (pt[2] if pt[0] == "V" else pt[1]) in keep]
        if not pts:
            raise SystemExit("compare.py: --only %s matches no point of --sweep %s"
                             % (args.only, args.sweep))
    if pts:
        return pts
    if args.bt or args.vocab:
        return [("V", args.bt or 8192, args.vocab or 128256)]
    return [("V", bt, v) for bt, v in DEFAULT_POINTS]


# ---------------------------------------------------------------------------
# Providers
# ---------------------------------------------------------------------------

@dataclass
class Provider:
    name: str
    device: str                      # "cuda" or "cpu"
    fn: Optional[Callable] = None    # (logits, target) -> scalar loss
    reason: Optional[str] = None     # why it cannot run at all
    point_check: Optional[Callable] = None  # (bt, v, torch_dtype) -> reason or None
    checked_loss: Dict[Tuple, bool] = field(default_factory=dict)


def make_providers(args, torch, on_gpu: bool) -> List[Provider]:
    F = torch.nn.functional
    dev = "cuda" if on_gpu else "cpu"
    out: List[Provider] = []

    def add(name, device, fn=None, reason=None, point_check=None):
        out.append(Provider(name, device, fn, reason, point_check))

    # xent through its PyTorch binding (python/ in this checkout unless installed).
    xent_mod, xent_reason = None, None
    try:
        import source_tree
        source_tree.use_xent()
        import xent  # noqa: F401
        import xent.torch as xent_torch
        xent_mod = xent_torch
        if on_gpu and not xent.cuda_available():
            xent_reason = "the loaded libxent has no CUDA backend or sees no device " \
                          f"({xent.library_path()})"
    except Exception as e:  # ImportError, or the library failed to load
        xent_reason = f"import xent.torch failed: {type(e).__name__}: {e}"

    def xent_fn(check):
        def f(x, y):
            return xent_mod.cross_entropy(x, y, reduction="mean", check_targets=check)
        return f

    for name in args.provider_names:
        if name == "xent":
            if xent_mod is None:
                add(name, dev, reason=xent_reason)
            elif on_gpu and xent_reason:
                add(name, dev, reason=xent_reason)
            else:
                add(name, dev, xent_fn(True))
        elif name == "xent_unchecked":
            if not on_gpu:
                add(name, dev, reason="graph-safe (unchecked) mode is a CUDA option; "
                                      "no GPU here")
            elif xent_mod is None or xent_reason:
                add(name, dev, reason=xent_reason)
            else:
                add(name, dev, xent_fn(False))
        elif name == "xent_torch_cpu":
            if not on_gpu:
                add(name, "cpu", reason="no GPU here: provider xent already runs on the CPU")
            elif xent_mod is None:
                add(name, "cpu", reason=xent_reason)
            else:
                lim = args.cpu_max_elements
                add(name, "cpu", xent_fn(True),
                    point_check=lambda bt, v, dt, lim=lim: None if bt * v <= lim else
                    f"BT*V = {bt * v} > --cpu-max-elements {lim} (CPU too slow)")
        elif name == "torch":
            add(name, dev, lambda x, y: F.cross_entropy(x, y, reduction="mean"))
        elif name == "torch_cpu":
            lim = args.cpu_max_elements
            add(name, "cpu", lambda x, y: F.cross_entropy(x, y, reduction="mean"),
                point_check=lambda bt, v, dt, lim=lim: None if bt * v <= lim else
                f"BT*V = {bt * v} > --cpu-max-elements {lim} (CPU too slow)")
        elif name == "torch_compile":
            if not on_gpu and args.quick and not args.providers_explicit:
                add(name, dev, reason="--quick on the CPU leaves out torch.compile (compile "
                                      "time); name it in --providers to include it")
                continue
            try:
                dyn = torch._dynamo.config
                for knob in ("cache_size_limit", "recompile_limit",
                             "accumulated_cache_size_limit", "accumulated_recompile_limit"):
                    if hasattr(dyn, knob):
                        setattr(dyn, knob, max(getattr(dyn, knob), 512))

                def plain(x, y):
                    return F.cross_entropy(x, y, reduction="mean")
                add(name, dev, torch.compile(plain, dynamic=False) if args.compile_static
                    else torch.compile(plain))
            except Exception as e:
                add(name, dev, reason=f"torch.compile unavailable: {e}")
        elif name == "liger_triton":
            if not on_gpu:
                add(name, dev, reason="Triton kernels need a GPU")
                continue
            try:
                from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction as LT
                add(name, dev, lambda x, y, LT=LT: LT.apply(
                    x, y, None, -100, 0.0, 0.0, "mean", None, False, False, False)[0])
            except Exception as e:
                add(name, dev, reason=f"liger_kernel (Triton) not importable: "
                                      f"{type(e).__name__}: {e}")
        elif name == "liger_cutedsl":
            if not on_gpu:
                add(name, dev, reason="CuTe DSL kernels need a GPU")
                continue
            cc = torch.cuda.get_device_capability()
            if cc < (9, 0):
                add(name, dev, reason=f"CuTe DSL kernel needs sm_90+, device is sm_{cc[0]}{cc[1]}")
                continue
            try:
                _expose_cutlass_dsl()
                from liger_kernel.ops.cutedsl.ops.cross_entropy import (
                    LigerCrossEntropyFunction as LC)

                def vec_check(bt, v, dt, torch=torch):
                    per = 16 // torch.empty((), dtype=dt).element_size()
                    if v % per:
                        return f"V={v} is not a multiple of {per} (one 16-byte vector); " \
                               "liger would run its Triton kernel"
                    return None
                add(name, dev, lambda x, y, LC=LC: LC.apply(
                    x, y, None, -100, 0.0, 0.0, "mean", None, False, False, False)[0],
                    point_check=vec_check)
            except Exception as e:
                add(name, dev, reason="liger CuTe DSL cross-entropy not importable "
                                      f"({type(e).__name__}: {e}); it needs nvidia-cutlass-dsl")
    return out


def _expose_cutlass_dsl() -> None:
    """Make `import cutlass` work for nvidia-cutlass-dsl installed with pip --target.

    The package puts its modules under nvidia_cutlass_dsl/dsl_packages and adds that
    folder to sys.path from a .pth file, which Python reads only in site directories,
    not in PYTHONPATH entries. Do what the .pth would do when it was not read.
    """
    try:
        import cutlass  # noqa: F401
        return
    except ImportError:
        pass
    try:
        import nvidia_cutlass_dsl
    except ImportError:
        return
    for base in list(nvidia_cutlass_dsl.__path__):
        extra = os.path.join(base, "dsl_packages")
        if os.path.isdir(extra) and extra not in sys.path:
            sys.path.insert(0, extra)


# ---------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------

class Runner:
    def __init__(self, args, torch, on_gpu: bool):
        self.args = args
        self.torch = torch
        self.on_gpu = on_gpu
        self.flush = None
        self.cpu_copy_cache: Dict[Tuple, Tuple[float, float, float, float]] = {}

    # -- helpers ----------------------------------------------------------
    def sync(self, device):
        if device == "cuda":
            self.torch.cuda.synchronize()

    def cleanup(self):
        gc.collect()
        if self.on_gpu:
            self.torch.cuda.empty_cache()

    def make_logits(self, bt, v, dt, device, seed):
        torch = self.torch
        g = torch.Generator(device=device)
        g.manual_seed(seed)
        x = torch.randn(bt, v, device=device, dtype=dt, generator=g)
        x.mul_(2.0)
        return x

    def make_targets(self, bt, v, device, seed):
        torch = self.torch
        g = torch.Generator(device=device)
        g.manual_seed(seed + 7)
        return torch.randint(0, v, (bt,), device=device, dtype=torch.int64, generator=g)

    def reference_loss(self, pristine, y) -> float:
        torch = self.torch
        total = 0.0
        bt = pristine.shape[0]
        step = max(1, (1 << 26) // max(1, pristine.shape[1]))
        with torch.no_grad():
            for i in range(0, bt, step):
                total += float(torch.nn.functional.cross_entropy(
                    pristine[i:i + step].float(), y[i:i + step], reduction="sum"))
        return total / bt

    # -- copy bandwidth ---------------------------------------------------
    def gpu_copy_bandwidth(self) -> Tuple[float, float, float, float]:
        """(bytes per copy, median ms, p20 ms, p80 ms)."""
        torch = self.torch
        free, _ = torch.cuda.mem_get_info()
        n = COPY_BYTES
        while n > (64 << 20) and 2 * n + (256 << 20) > free:
            n //= 2
        a = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(1)
        b = torch.empty(n, dtype=torch.uint8, device="cuda")
        times = []
        for i in range(25):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            b.copy_(a)
            e.record()
            if i >= 5:
                times.append((s, e))
        torch.cuda.synchronize()
        ms = [s.elapsed_time(e) for s, e in times]
        del a, b
        self.cleanup()
        q = quantiles(ms)
        return (2.0 * n, q[0], q[1], q[2])

    def cpu_copy_bandwidth(self, src) -> Tuple[float, float, float, float]:
        key = (tuple(src.shape), src.dtype)
        if key not in self.cpu_copy_cache:
            dst = self.torch.empty_like(src)
            ms = []
            for i in range(self.args.cpu_warmup + self.args.cpu_iters):
                t0 = time.perf_counter()
                dst.copy_(src)
                t1 = time.perf_counter()
                if i >= self.args.cpu_warmup:
                    ms.append((t1 - t0) * 1e3)
            del dst
            q = quantiles(ms)
            nbytes = src.numel() * src.element_size()
            self.cpu_copy_cache[key] = (2.0 * nbytes, q[0], q[1], q[2])
        return self.cpu_copy_cache[key]

    # -- memory -----------------------------------------------------------
    def measure_memory(self, prov: Provider, bt, v, dt) -> Tuple[float, float, float]:
        torch = self.torch
        peaks = []
        base = torch.cuda.memory_allocated()
        for r in range(self.args.mem_reps):
            x = self.make_logits(bt, v, dt, "cuda", self.args.seed + 100 + r).requires_grad_()
            y = self.make_targets(bt, v, "cuda", self.args.seed + 100 + r)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            loss = prov.fn(x, y)
            loss.backward()
            torch.cuda.synchronize()
            peaks.append(torch.cuda.max_memory_allocated() / float(1 << 20))
            # Freed here. The allocator keeps the blocks cached, which changes no peak of
            # allocated memory and saves allocating the logits anew for every run. A full
            # garbage collection (a few tenths of a second with the peers' packages
            # loaded) runs only when something, such as a compiled graph's reference
            # cycle, still holds device memory: the next run's peak must not include it.
            del loss, x, y
            if torch.cuda.memory_allocated() > base:
                gc.collect()
        return quantiles(peaks)

    # -- speed ------------------------------------------------------------
    def time_mode(self, prov: Provider, mode: str, st: "PointState") -> List[float]:
        torch = self.torch
        on_cuda = prov.device == "cuda"
        x, pristine, y = st.x(prov.device), st.pristine(prov.device), st.y(prov.device)
        iters = self.args.iters if on_cuda else self.args.cpu_iters
        warmup = self.args.warmup if on_cuda else self.args.cpu_warmup
        want_grad = mode != "forward_nograd"
        x.requires_grad_(want_grad)
        grads = {}

        def g_for(loss):
            if loss.dtype not in grads:
                grads[loss.dtype] = torch.full((), GRAD_OUTPUT, dtype=loss.dtype,
                                               device=loss.device)
            return grads[loss.dtype]

        def refresh():
            x.grad = None
            with torch.no_grad():
                x.copy_(pristine)
            if on_cuda:
                self.flush.zero_()

        events = []
        samples = []
        for i in range(warmup + iters):
            refresh()
            loss = None
            if mode == "backward":
                loss = prov.fn(x, y)
                if on_cuda:
                    self.flush.zero_()
                g = g_for(loss)
            timed = i >= warmup
            if on_cuda:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                if timed:
                    s.record()
            else:
                t0 = time.perf_counter()
            if mode == "forward":
                loss = prov.fn(x, y)
            elif mode == "backward":
                loss.backward(g)
            elif mode == "full":
                loss = prov.fn(x, y)
                loss.backward()
            else:
                with torch.no_grad():
                    loss = prov.fn(x, y)
            if on_cuda:
                if timed:
                    e.record()
                    events.append((s, e))
            else:
                t1 = time.perf_counter()
                if timed:
                    samples.append((t1 - t0) * 1e3)
            del loss
        self.sync(prov.device)
        if on_cuda:
            samples = [s.elapsed_time(e) for s, e in events]
        x.grad = None
        x.requires_grad_(False)
        return samples

    def check_loss(self, prov: Provider, st: "PointState") -> Optional[str]:
        torch = self.torch
        x, pristine, y = st.x(prov.device), st.pristine(prov.device), st.y(prov.device)
        x.grad = None
        with torch.no_grad():
            x.copy_(pristine)
        x.requires_grad_(True)
        loss = float(prov.fn(x, y).detach().float())
        x.grad = None
        x.requires_grad_(False)
        ref = st.ref_loss
        tol = 1e-4 if st.dtype_name == "float32" else 1e-2
        if not (abs(loss - ref) <= tol * abs(ref)):
            return f"loss {loss:.6f} differs from the float32 reference {ref:.6f}"
        return None


class PointState:
    """Buffers of one (point, dtype): pristine logits, the working copy, targets."""

    def __init__(self, runner: Runner, bt, v, dt, dtype_name, device):
        self.runner, self.bt, self.v, self.dt, self.dtype_name = runner, bt, v, dt, dtype_name
        seed = runner.args.seed
        self._pristine = {device: runner.make_logits(bt, v, dt, device, seed)}
        self._y = {device: runner.make_targets(bt, v, device, seed)}
        self._x: Dict[str, object] = {}
        self.ref_loss = runner.reference_loss(self._pristine[device], self._y[device])

    def pristine(self, device):
        if device not in self._pristine:
            src = next(iter(self._pristine.values()))
            self._pristine[device] = src.to(device)
        return self._pristine[device]

    def y(self, device):
        if device not in self._y:
            self._y[device] = next(iter(self._y.values())).to(device)
        return self._y[device]

    def x(self, device):
        if device not in self._x:
            self._x[device] = self.runner.torch.empty_like(self.pristine(device))
        return self._x[device]

    def release(self):
        self._pristine.clear()
        self._y.clear()
        self._x.clear()


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--kernel" in argv:  # --kernel linear: the fused linear loss (bench/linear.py)
        i = argv.index("--kernel")
        kernel = argv[i + 1] if i + 1 < len(argv) else ""
        rest = argv[:i] + argv[i + 2:]
        if kernel == "linear":
            import linear
            return linear.main(rest)
        if kernel != "cross_entropy":
            print(f"compare.py: --kernel {kernel!r}: cross_entropy or linear", file=sys.stderr)
            return 2
        argv = rest
    args = parse_args(argv)
    if args.xent_lib:
        os.environ["XENT_LIBRARY"] = os.path.abspath(args.xent_lib)
    # torch.compile in this process, not in a pool of compile workers: the
    # pool's workers start (and compile) in the background, and the host-bound
    # steps timed next ran up to 2.5x slow beside them (bench/HISTORY.md v26).
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    try:
        import torch
    except ImportError:
        print("compare.py needs torch (pip install torch); nothing was measured",
              file=sys.stderr)
        return 2

    on_gpu = torch.cuda.is_available() and args.device != "cpu"
    if args.device == "cuda" and not on_gpu:
        print("compare.py: --device cuda but torch sees no GPU", file=sys.stderr)
        return 2
    dev = "cuda" if on_gpu else "cpu"
    torch_dtypes = {"bfloat16": torch.bfloat16, "float32": torch.float32,
                    "float16": torch.float16}
    runner = Runner(args, torch, on_gpu)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    if on_gpu:
        device_name = torch.cuda.get_device_name()
    else:
        device_name = _cpu_model()
    cpu_name = _cpu_model()

    providers = make_providers(args, torch, on_gpu)
    xent_version = "unknown"
    try:
        import xent
        xent_version = xent.library_version()
    except Exception:
        pass

    print(f"compare.py  {stamp}")
    print(f"device: {device_name}" + (f" (sm_{torch.cuda.get_device_capability()[0]}"
                                       f"{torch.cuda.get_device_capability()[1]})"
                                       if on_gpu else " (no GPU: CPU run)"))
    print(f"torch {torch.__version__}, xent {xent_version}, python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}")
    try:
        import liger_kernel  # noqa: F401
        from importlib.metadata import version as _v
        print(f"liger-kernel {_v('liger-kernel')}")
    except Exception:
        pass
    skipped_notes: List[str] = []
    for p in providers:
        if p.reason:
            line = f"skip {p.name}: {p.reason}"
            print(line)
            skipped_notes.append(line)
    active = [p for p in providers if not p.reason]
    if not active:
        print("no provider can run", file=sys.stderr)
        return 1

    copy_gpu = runner.gpu_copy_bandwidth() if on_gpu else None
    if copy_gpu:
        print(f"device-to-device copy: {copy_gpu[0] / (copy_gpu[1] * 1e-3) / 1e12:.3f} TB/s "
              f"({copy_gpu[0] / 1e9:.2f} GB read + written, median of 20)")
    print(f"timing: median (p20 / p80) of {args.iters} after {args.warmup} warm-up "
          f"(CPU providers: {args.cpu_iters} after {args.cpu_warmup}); inputs refreshed "
          "and L2 flushed before each iteration, untimed; seed " + str(args.seed))
    print("eff = fewest bytes / median: 2*BT*V*size (forward, backward, full), "
          "BT*V*size (forward_nograd); share = eff / copy")

    out = results_csv.CsvWriter(args.out, append=not args.no_append)
    run_rows: List[Dict[str, object]] = []

    def emit(prov: Provider, mode, metric, unit, x_name, bt, v, q, extra):
        row = {
            "kernel_name": "cross_entropy", "kernel_provider": prov.name,
            "kernel_operation_mode": mode, "metric_name": metric, "metric_unit": unit,
            "x_name": x_name, "x_label": results_csv.X_LABELS[x_name],
            "x_value": v if x_name == "V" else bt,
            "y_value_50": q[0], "y_value_20": q[1], "y_value_80": q[2],
            "extra_benchmark_config_str": json.dumps(extra),
            "gpu_name": device_name if prov.device == dev else cpu_name,
            "timestamp": stamp, "xent_version": xent_version,
        }
        out.write(row)
        run_rows.append({k: str(results_csv._fmt(val)) for k, val in row.items()})

    points = build_points(args, on_gpu)
    units = [(pt, d) for pt in points for d in args.dtypes]
    t_start = time.time()
    tty = sys.stderr.isatty()
    hdr = f"  {'provider':<16}{'mode':<16}{'median ms':>11}  {'(p20 / p80)':<23}" \
          f" {'eff TB/s':>8} {'share':>6} {'peak MB':>9}"

    def progress(text):
        line = f"{text}  elapsed {time.time() - t_start:.1f} s"
        sys.stderr.write(("\r\033[K" + line) if tty else (line + "\n"))
        sys.stderr.flush()

    def progress_done():
        if tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()

    stopped = False
    for ui, ((x_name, bt, v), dname) in enumerate(units, 1):
        if args.budget_s is not None and time.time() - t_start > args.budget_s:
            note = f"budget of {args.budget_s:.0f} s spent: stopped before point {ui}/{len(units)}"
            print(note)
            skipped_notes.append(note)
            stopped = True
            break
        dt = torch_dtypes[dname]
        elem = torch.empty((), dtype=dt).element_size()
        xbytes = bt * v * elem
        label = f"BT={bt} V={v} {dname}"
        progress(f"[{ui}/{len(units)}] {label}")
        runner.cleanup()
        if on_gpu:
            free, _ = torch.cuda.mem_get_info()
            need = 2 * xbytes + FLUSH_BYTES + (1 << 30)
            if need > free:
                progress_done()
                note = (f"{label}: skipped, needs {need / 1e9:.1f} GB on the device and "
                        f"{free / 1e9:.1f} GB are free")
                print(note)
                skipped_notes.append(note)
                continue
        elif 2 * xbytes > 0.8 * _host_available():
            progress_done()
            note = f"{label}: skipped, not enough host memory"
            print(note)
            skipped_notes.append(note)
            continue

        runnable = []
        for prov in active:
            why = prov.point_check(bt, v, dt) if prov.point_check else None
            if why:
                note = f"{label} {prov.name}: skipped, {why}"
                skipped_notes.append(note)
            else:
                runnable.append(prov)

        # Memory first, with nothing else of the benchmark on the device.
        peaks: Dict[str, Tuple[float, float, float]] = {}
        if "full" in args.modes and on_gpu:
            mem_base = torch.cuda.memory_allocated()
            for prov in runnable:
                if prov.device != "cuda":
                    continue
                progress(f"[{ui}/{len(units)}] {label} {prov.name} memory")
                try:
                    peaks[prov.name] = runner.measure_memory(prov, bt, v, dt)
                except Exception as e:
                    note = f"{label} {prov.name} memory: skipped, {_short(e)}"
                    skipped_notes.append(note)
                    progress_done()
                    print(note)
                    runner.cleanup()
                if torch.cuda.memory_allocated() > mem_base:
                    runner.cleanup()  # the next provider's peak must not include this one's

        progress(f"[{ui}/{len(units)}] {label} inputs")
        try:
            st = PointState(runner, bt, v, dt, dname, dev)
            if on_gpu:
                runner.flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
        except Exception as e:
            progress_done()
            note = f"{label}: skipped, inputs: {_short(e)}"
            print(note)
            skipped_notes.append(note)
            runner.cleanup()
            continue
        progress_done()
        print(f"\n{label}  (x = {x_name})")
        print(hdr)
        for prov in runnable:
            extra = {"BT": bt, "V": v, "dtype": dname, "reduction": "mean",
                     "device": prov.device}
            if prov.device == "cpu":
                extra["threads"] = torch.get_num_threads() if prov.name == "torch_cpu" \
                    else os.cpu_count()
            try:
                if prov.device == "cpu":
                    copy = runner.cpu_copy_bandwidth(st.pristine("cpu"))
                else:
                    copy = copy_gpu
                bad = runner.check_loss(prov, st)
                if bad:
                    note = f"{label} {prov.name}: LOSS MISMATCH: {bad}"
                    print("  " + note)
                    skipped_notes.append(note)
            except Exception as e:
                note = f"{label} {prov.name}: skipped, {_short(e)}"
                print("  " + note)
                skipped_notes.append(note)
                runner.cleanup()
                continue
            copy_bw = copy[0] / (copy[1] * 1e-3)
            copy_q = (copy_bw / 1e12, copy[0] / (copy[3] * 1e-3) / 1e12,
                      copy[0] / (copy[2] * 1e-3) / 1e12)
            for mode in args.modes:
                progress(f"[{ui}/{len(units)}] {label} {prov.name} {mode}")
                try:
                    samples = runner.time_mode(prov, mode, st)
                except Exception as e:
                    progress_done()
                    note = f"{label} {prov.name} {mode}: skipped, {_short(e)}"
                    print("  " + note)
                    skipped_notes.append(note)
                    runner.cleanup()
                    continue
                progress_done()
                q = quantiles(samples)
                nbytes = fewest_bytes(mode, bt, v, elem)
                eff = (nbytes / (q[0] * 1e-3), nbytes / (q[2] * 1e-3), nbytes / (q[1] * 1e-3))
                emit(prov, mode, "speed", "ms", x_name, bt, v, q, extra)
                emit(prov, mode, "eff_bandwidth", "TB/s", x_name, bt, v,
                     tuple(b / 1e12 for b in eff), extra)
                emit(prov, mode, "copy_bandwidth", "TB/s", x_name, bt, v, copy_q, extra)
                emit(prov, mode, "copy_share", "ratio", x_name, bt, v,
                     tuple(b / copy_bw for b in eff), extra)
                peak = ""
                if mode == "full" and prov.name in peaks:
                    emit(prov, mode, "memory", "MB", x_name, bt, v, peaks[prov.name], extra)
                    peak = f"{peaks[prov.name][0]:.0f}"
                print(f"  {prov.name:<16}{mode:<16}{q[0]:>11.4f}  ({q[1]:>9.4f} / {q[2]:>9.4f})"
                      f" {eff[0] / 1e12:>8.3f} {eff[0] / copy_bw:>6.3f} {peak:>9}")
                sys.stdout.flush()
        st.release()
        runner.flush = None
        runner.cleanup()

    progress_done()
    out.close()
    print(f"\n{len(run_rows)} rows appended to {args.out}  ({time.time() - t_start:.1f} s)")
    if skipped_notes:
        print("skipped / flagged:")
        for n in skipped_notes:
            print("  " + n)

    summary_path = args.summary or os.path.splitext(args.out)[0] + ".md"
    try:
        import summary
        ours = args.ours
        md = summary.make_markdown(run_rows, ours=ours, notes=skipped_notes,
                                   stopped_early=stopped)
        with open(summary_path, "w") as f:
            f.write(md)
        print(f"summary: {summary_path}")
    except Exception as e:
        print(f"summary failed: {_short(e)}", file=sys.stderr)
        traceback.print_exc()
    return 0


def _short(e: Exception) -> str:
    text = f"{type(e).__name__}: {e}".replace("\n", " ")
    return text if len(text) < 300 else text[:297] + "..."


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def _host_available() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024.0
    except OSError:
        pass
    return float("inf")


if __name__ == "__main__":
    sys.exit(main())
