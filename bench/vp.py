#!/usr/bin/env python3
"""vp.py - the vocabulary-parallel shard calls on one GPU, against xent's single-GPU loss
over the same columns.

For P in 2, 4, 8 and 18 (the fused linear loss's vocab schedule cuts 128256 columns into 18
slabs) and V = 128256 at BT = 8192 (bf16), one rank's work: xent_vp_stats
over its V/P columns, then xent_vp_forward (outputs and the shard's gradient) from P
gathered records (the other ranks' records made up: the collective itself is not
timed here), against xent_forward_grad over a BT x V/P matrix alone (what the same
columns cost without sharding). Also the bytes per row per rank the all-gather moves, and
each pass's bytes (stats: one read of the shard; forward: a read and a write) as a fraction
of a device copy of the same bytes timed alongside ("of copy").
Median of --iters after --warmup, CUDA events around --reps calls back to back (the
logits restored before each group, untimed): the passes' device time, not the host's
time to make one call (a narrow shard's pass is a few tens of microseconds, as long as the
call's host side: with one call between events, the GPU waited on the host; 2026-12-06, H100).
A forward after the first of a group reads the gradient the one before wrote: other values,
the same work.
Each P's passes run in one process with the launch table's kernels ("table") and with each
kernel forced, side by side: a block per row ("block", the experimental forward path
TWO_READ), a warp per row ("warp", WARP_ROW) and, for the statistics of shards of at most 32
KB a row, a block per row issuing every load at once ("segN", SEGMENT with N threads of 8
vectors; the forward then runs the table's kernel). "nograd": xent_forward without a
gradient (reduction none) over the same BT x V/P matrix, the single-GPU pass that reads what
the statistics read (the same arithmetic, the row's loss in place of its record).
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import source_tree  # noqa: E402

source_tree.use_xent()

# (label, xent_experimental_path, threads): TABLE, TWO_READ, WARP_ROW, SEGMENT
PATHS = (("table", 0, 0), ("block", 1, 0), ("warp", 3, 0), ("seg64", 4, 64), ("seg128", 4, 128),
         ("seg256", 4, 256))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bt", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10, help="calls between two events")
    args = ap.parse_args(argv)
    import torch

    import xent.torch as xt
    from xent import _lib

    if not torch.cuda.is_available():
        print("vp.py: no GPU; nothing measured")
        return 0
    print(f"vp.py  {time.strftime('%Y-%m-%d %H:%M:%S')}  {torch.cuda.get_device_name()}  "
          f"BT={args.bt} V={args.vocab} bf16, median of {args.iters}")
    print(f"{'P':>3}{'kernels':>8}{'columns':>9}{'stats ms':>10}{'forward ms':>12}{'shard total':>13}"
          f"{'single-GPU ms':>15}{'ratio':>7}{'bytes/row/rank':>16}{'stats of copy':>15}"
          f"{'fwd of copy':>13}{'nograd ms':>11}{'nograd of copy':>16}")
    bt, v = args.bt, args.vocab

    def timed(fn, restore):
        ts = []
        for i in range(args.warmup + args.iters):
            restore()
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(args.reps):
                fn()
            b.record()
            torch.cuda.synchronize()
            if i >= args.warmup:
                ts.append(a.elapsed_time(b) / args.reps)
        ts.sort()
        return ts[len(ts) // 2]

    for p in (2, 4, 8, 18):
        w = v // p
        x0 = torch.randn(bt, w, device="cuda", dtype=torch.bfloat16) * 2
        x = torch.empty_like(x0)
        t = torch.randint(0, v, (bt,), device="cuda")
        loss = torch.empty((), device="cuda")
        opt = _lib.make_options(check_targets=False)
        out = _lib.XentOutput(loss.data_ptr(), None, None, None, None)
        R = _lib.vp_record_floats(opt, None, out)
        rec = torch.empty(bt, R, device="cuda")
        gathered = torch.empty(p, bt, R, device="cuda")
        inp = _lib.XentInput(x.data_ptr(), _lib.XENT_BFLOAT16, bt, w, 0, t.data_ptr(),
                             _lib.XENT_INT64, None)
        ex = xt._exec_for(x)

        def stats():
            _lib.vp_stats(inp, v, 0, opt, out, rec.data_ptr(), ex)

        def forward():
            _lib.vp_forward(inp, v, 0, opt, gathered.data_ptr(), p, out, True, ex)

        restore = lambda: x.copy_(x0)  # noqa: E731
        stats()
        gathered.copy_(rec.unsqueeze(0).expand(p, -1, -1))  # the others' records, made up
        # a copy of the shard (one read and one write of its bytes): what the forward moves,
        # twice what the stats read
        tc = timed(lambda: x.copy_(x0), lambda: None)
        tl = t.clamp(max=w - 1)
        inp1 = _lib.XentInput(x.data_ptr(), _lib.XENT_BFLOAT16, bt, w, 0, tl.data_ptr(),
                              _lib.XENT_INT64, None)
        single = timed(lambda: _lib.forward(inp1, opt, out, ex, True), restore)
        # reduction none: the per-row losses alone, no finalize kernel after the pass
        row_loss = torch.empty(bt, device="cuda")
        opt_none = _lib.make_options(reduction="none", check_targets=False)
        out_none = _lib.XentOutput(row_loss.data_ptr(), None, None, None, None)
        nograd = timed(lambda: _lib.forward(inp1, opt_none, out_none, ex, False), restore)
        for label, path, threads in PATHS:
            if path == 4 and w * 2 > threads * 8 * 16:
                continue  # a row past the segment's loads
            with _lib.experimental(forward_path=path, threads=threads, vecs=8 if path == 4 else 0):
                ts = timed(stats, restore)
            fpath = 0 if path == 4 else path  # no segment kernel for the forward: the table's
            with _lib.experimental(forward_path=fpath, threads=threads if fpath else 0):
                tf = timed(forward, restore)
            print(f"{p:>3}{label:>8}{w:>9}{ts:>10.3f}{tf:>12.3f}{ts + tf:>13.3f}{single:>15.3f}"
                  f"{(ts + tf) / single:>7.2f}{R * 4:>16}{tc / 2 / ts:>15.2f}{tc / tf:>13.2f}"
                  f"{nograd:>11.3f}{tc / 2 / nograd:>16.2f}")
        x0 = x = None
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
