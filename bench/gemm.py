#!/usr/bin/env python3
"""gemm.py - the fused linear loss's three products alone: xent's own Hopper GEMM
against cuBLASLt (both through xent_experimental_gemm_run) and torch.mm.

For a head (BT, H, V) and a chunk of c rows, in row-major terms (X_c: c x H,
W: V x H, G: c x V, the logits' row stride V rounded up to 8 as the library
keeps it):
  logits  Z = X_c W^T      (m, n, k) = (c, V, H)
  dX      dX = G W         (c, H, V)
  dW      dW += G^T X_c    (V, H, c), D read and written (beta 1)
at c = the default chunk and c = BT. Engines: xent (its tile rule, register epilogue),
xent_n128 / xent_n256 (a tile's columns forced), xent_tma (the TMA epilogue), xent_lc (dW only:
D's old tile read into shared memory while the product runs, the sum stored whole), xent_c2 (pairs
of blocks sharing B by multicast, TMA epilogue), xent_pp (the consumers on alternate 64-row
tiles, one writing while the other multiplies; TMA epilogue), xent_pp_c2 (the two together: the
tile cuBLASLt runs dW's chunk product with), cublaslt (its heuristic), cublaslt_loss (as the
fused linear loss runs it: dW's chunk product in lt.cu's measured configuration), torch (torch.mm). Each engine: the median of --iters CUDA-event
timings after --warmup, ms and TFLOP/s, and its ratio to cuBLASLt; the largest
difference from cuBLASLt's output relative to its largest value (a check, not a
result: the tests compare with float64). bf16.
"""

import argparse
import ctypes
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import source_tree  # noqa: E402

source_tree.use_xent()


class Gemm(ctypes.Structure):
    """xent_experimental_gemm (include/xent_experimental.h)."""

    _fields_ = [
        ("engine", ctypes.c_int),
        ("m", ctypes.c_int64), ("n", ctypes.c_int64), ("k", ctypes.c_int64),
        ("a", ctypes.c_void_p), ("lda", ctypes.c_int64), ("a_m_major", ctypes.c_int),
        ("b", ctypes.c_void_p), ("ldb", ctypes.c_int64), ("b_n_major", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("d", ctypes.c_void_p), ("ldd", ctypes.c_int64), ("d_dtype", ctypes.c_int),
        ("bias", ctypes.c_void_p),
        ("accumulate", ctypes.c_int), ("tile_n", ctypes.c_int), ("tma_epilogue", ctypes.c_int),
        ("cluster_m", ctypes.c_int), ("stats", ctypes.c_void_p), ("pingpong", ctypes.c_int),
        ("device", ctypes.c_int), ("stream", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t),
    ]


ENGINES = ["xent", "xent_n128", "xent_n256", "xent_tma", "xent_lc", "xent_pp", "xent_c2",
           "xent_pp_c2", "cublaslt", "cublaslt_loss", "torch"]
PRODUCTS = ["logits", "dX", "dW"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bt", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--chunk", type=int, default=488)
    ap.add_argument("--iters", type=int, default=9)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--csv", default=None)
    ap.add_argument("--describe", action="store_true",
                    help="under each product, what each engine launched (grid, tile, configuration)")
    ap.add_argument("--only", default=None,
                    help="products to run, e.g. dW@chunk,logits@batch (default: all six)")
    a = ap.parse_args(argv)
    import torch
    from xent import _lib

    if not torch.cuda.is_available():
        print("gemm.py: no GPU; nothing to time")
        return 0
    lib = _lib.lib()
    lib.xent_experimental_gemm_run.argtypes = [ctypes.POINTER(Gemm)]
    lib.xent_experimental_gemm_run.restype = ctypes.c_int
    lib.xent_experimental_last_product.restype = ctypes.c_char_p
    dev = torch.device("cuda")
    bf = torch.bfloat16
    BT, H, V = a.bt, a.hidden, a.vocab
    Vs = (V + 7) // 8 * 8
    gen = torch.Generator(device=dev).manual_seed(1)
    X = (torch.rand(BT, H, device=dev, generator=gen) * 2 - 1).to(bf)
    W = ((torch.rand(V, H, device=dev, generator=gen) * 2 - 1) * 0.03).to(bf)
    Gbuf = ((torch.rand(BT, Vs, device=dev, generator=gen) * 2 - 1) * 1e-4).to(bf)
    ws = torch.empty(32 << 20, dtype=torch.uint8, device=dev)
    stream = torch.cuda.current_stream().cuda_stream
    name = torch.cuda.get_device_name()
    print(f"the fused linear loss's products, bf16, {name}: BT {BT}, H {H}, V {V}, chunk {a.chunk}")
    engines = a.engines.split(",")
    rows_out = []

    def product(kind, c):
        """(m, n, k, call(engine, out)) for one product at chunk rows c."""
        Xc, Gc = X[:c], Gbuf[:c]
        if kind == "logits":
            m, n, k = c, V, H
            shape, ldd = (c, Vs), Vs
            spec = dict(a=Xc, lda=H, amn=0, b=W, ldb=H, bnn=0, acc=0)
            mm = lambda out: torch.mm(Xc, W.t(), out=out[:, :V])  # noqa: E731
        elif kind == "dX":
            m, n, k = c, H, V
            shape, ldd = (c, H), H
            spec = dict(a=Gc, lda=Vs, amn=0, b=W, ldb=H, bnn=1, acc=0)
            mm = lambda out: torch.mm(Gc[:, :V], W, out=out)  # noqa: E731
        else:
            m, n, k = V, H, c
            shape, ldd = (V, H), H
            spec = dict(a=Gc, lda=Vs, amn=1, b=Xc, ldb=H, bnn=1, acc=1)
            mm = lambda out: out.addmm_(Gc[:, :V].t(), Xc)  # noqa: E731
        return m, n, k, shape, ldd, spec, mm

    def engine_args(e):
        """(engine, tile_n, tma_epilogue, cluster_m, pingpong) of one of ENGINES but torch."""
        if e in ("cublaslt", "cublaslt_loss"):
            return (1 if e == "cublaslt" else 2), 0, 0, 0, 0
        return (0, {"xent_n128": 128, "xent_n256": 256}.get(e, 0),
                2 if e == "xent_lc" else
                1 if e in ("xent_tma", "xent_c2", "xent_pp", "xent_pp_c2") else 0,
                2 if e in ("xent_c2", "xent_pp_c2") else 0, 1 if e in ("xent_pp", "xent_pp_c2") else 0)

    def xent_call(engine, tile_n, tma, cluster, pingpong, m, n, k, ldd, spec, out):
        g = Gemm(engine=engine, m=m, n=n, k=k, a=spec["a"].data_ptr(), lda=spec["lda"],
                 a_m_major=spec["amn"], b=spec["b"].data_ptr(), ldb=spec["ldb"],
                 b_n_major=spec["bnn"], dtype=_lib.XENT_BFLOAT16, d=out.data_ptr(), ldd=ldd,
                 d_dtype=_lib.XENT_BFLOAT16, bias=None, accumulate=spec["acc"], tile_n=tile_n,
                 tma_epilogue=tma, cluster_m=cluster, pingpong=pingpong, device=dev.index or 0,
                 stream=stream,
                 workspace=ws.data_ptr(), workspace_bytes=ws.numel())
        st = lib.xent_experimental_gemm_run(ctypes.byref(g))
        if st != 0:
            raise RuntimeError(lib.xent_last_error().decode() if lib.xent_last_error() else str(st))

    def timed(fn):
        for _ in range(a.warmup):
            fn()
        t = []
        for _ in range(a.iters):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            t.append(e0.elapsed_time(e1))
        t.sort()
        return t[len(t) // 2]

    hdr = f"{'product':7} {'m x n x k':>22}  " + "  ".join(f"{e:>17}" for e in engines)
    print("ms, TF/s and the ratio to cuBLASLt of each engine; diff: largest |D - D_cuBLASLt| / max|D|")
    print(hdr)
    only = set(a.only.split(",")) if a.only else None
    for c, where in ((a.chunk, "chunk"), (BT, "batch")):
        for kind in PRODUCTS:
            if only is not None and f"{kind}@{where}" not in only:
                continue
            m, n, k, shape, ldd, spec, mm = product(kind, c)
            flop = 2.0 * m * n * k
            start = (torch.rand(shape, device=dev, generator=gen) * 2e-2 - 1e-2).to(bf)
            ref = start.clone()
            xent_call(*engine_args("cublaslt"), m, n, k, ldd, spec, ref)
            res = {}
            launches = []  # what each engine ran: grid, tile, configuration
            for e in engines:
                out = start.clone()
                if e == "torch":
                    fn = lambda: mm(out)  # noqa: E731
                else:
                    fn = lambda: xent_call(*engine_args(e), m, n, k, ldd, spec, out)  # noqa: E731
                try:
                    fn()
                except RuntimeError as err:
                    res[e] = (None, str(err))
                    continue
                torch.cuda.synchronize()
                if e != "torch":
                    launches.append(f"    {e}: {(lib.xent_experimental_last_product() or b'').decode()}")
                diff = 0.0
                if not spec["acc"]:  # an accumulating product's output moved on; checked once
                    diff = ((out[:, :n].float() - ref[:, :n].float()).abs().max()
                            / ref[:, :n].float().abs().max().clamp_min(1e-30)).item()
                else:
                    again = start.clone()
                    (mm(again) if e == "torch" else
                     xent_call(*engine_args(e), m, n, k, ldd, spec, again))
                    diff = ((again.float() - ref.float()).abs().max()
                            / ref.float().abs().max().clamp_min(1e-30)).item()
                ms = timed(fn)
                res[e] = (ms, diff)
            base = res.get("cublaslt", (None,))[0]
            cells = []
            for e in engines:
                ms, d = res[e]
                if ms is None:
                    cells.append(f"{'refused':>17}")
                    continue
                ratio = ms / base if base else float("nan")
                cells.append(f"{ms:7.3f} {flop / ms / 1e9:4.0f} {ratio:4.2f}")
                rows_out.append((name, kind, m, n, k, e, ms, flop / ms / 1e9, ratio, d))
            print(f"{kind:7} {m:6d} x {n:6d} x {k:6d}  " + "  ".join(cells))
            if a.describe:
                print("\n".join(launches))
            worst = max((r[1] for r in res.values() if r[0] is not None), default=0.0)
            if worst > 2e-2:
                print(f"  {kind}: an engine differs from cuBLASLt by {worst:.2e} of the largest value")
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("gpu,product,m,n,k,engine,ms,tflops,ratio_cublaslt,diff\n")
            for r in rows_out:
                f.write(",".join(str(x) for x in r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
