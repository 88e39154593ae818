"""The fused linear loss's step by the rows schedule's chunk size, beside the three
products alone, in rounds (each round times every setting once, in turn), so that
the card's power-capped clock drifts alike for all of them.

The question: at the default budget a chunk holds BT/16 rows less what the
scratch's other parts take (488 at 8192 x 4096 x 128256); how much would a chunk
of whole 128-row tiles (512) or a chunk more or less buy?

    python3 dev/chunk_rows_probe.py [--shape 8192,4096,128256] [--rows 0,480,488,...]
"""

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bench"))
import linear as bench_linear  # noqa: E402

import xent.torch as xt  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--shape", default="8192,4096,128256")
ap.add_argument("--rows", default="0,448,480,488,496,504,512,528,576,640,768,1024",
                help="chunk_rows settings; 0 is the default budget")
ap.add_argument("--rounds", type=int, default=6)
ap.add_argument("--iters", type=int, default=8)
args = ap.parse_args()
bt, h, v = (int(s) for s in args.shape.split(","))
settings = [int(s) for s in args.rows.split(",")]

bargs = bench_linear.parse_args(["--iters", str(args.iters), "--warmup", "2"])
b = bench_linear.Bench(torch, bargs)
x, w, y = b.inputs(bt, h, v)


def step(rows):
    if rows == 0:
        return lambda x_, w_, y_: xt.fused_linear_cross_entropy(x_, w_, y_)
    return lambda x_, w_, y_: xt.fused_linear_cross_entropy(x_, w_, y_, schedule="rows",
                                                            chunk_rows=rows)


extra = {r: b.extra_memory(step(r), x, w, y) for r in settings}
times = {r: [] for r in settings}
floor = []
for k in range(args.rounds):
    floor += b.time_floor(bt, h, v)
    order = settings if k % 2 == 0 else settings[::-1]
    for r in order:
        times[r] += b.time_step(step(r), x, w, y)
    print(f"round {k + 1}/{args.rounds}: floor {bench_linear.quantiles(floor)[0]:.2f} ms",
          flush=True)

f = bench_linear.quantiles(floor)[0]
print(f"\n{bt} x {h} x {v} bf16, forward + backward; the three products alone {f:.2f} ms "
      f"(median of {len(floor)})")
print(f"{'chunk_rows':>10} {'chunks':>6} {'ms':>8} {'p20':>8} {'p80':>8} {'x GEMMs':>8} "
      f"{'extra MiB':>9}")
for r in settings:
    m, p20, p80 = bench_linear.quantiles(times[r])
    chunks = "auto" if r == 0 else str(-(-bt // r))
    print(f"{r if r else 'default':>10} {chunks:>6} {m:8.2f} {p20:8.2f} {p80:8.2f} "
          f"{m / f:8.3f} {extra[r]:9.0f}")
