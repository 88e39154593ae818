#!/usr/bin/env python3
"""plot_memory.py - the fused linear loss's time against its memory, from bench/linear.py's CSV:
the picture a user picks a method from.

Each provider is a point (its step time as a ratio to the three GEMMs alone in its own
process, against its extra memory); xent is a curve over `memory_budget` (linear.py --chunk-curve), with its
default and all-the-logits runs marked. One picture per shape and GPU in the CSV, written
as PNG beside a table of the same numbers on stdout.

    python3 bench/plot_memory.py linear.csv --out-dir plots/
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import results_csv  # noqa: E402

LABELS = {
    "xent": "xent, default budget", "xent_all": "xent, all the logits",
    "torch_compile": "torch.compile", "liger_sm90": "peer, CuTe SM90 kernel",
    "liger_flce": "peer, Triton chunked", "quack": "QuACK, 4096-row chunks",
    "quack_512": "QuACK, 512-row chunks", "quack_fixed": "QuACK, 4096-row chunks, untuned",
    "quack_512_fixed": "QuACK, 512-row chunks, untuned",
    "quack_fixed_base": "QuACK, 4096-row chunks, untuned, base pipeline",
    "quack_512_fixed_base": "QuACK, 512-row chunks, untuned, base pipeline", "cce": "Cut Cross-Entropy",
    "cce_exact": "Cut Cross-Entropy, no filter", "torch_lce": "torch linear_cross_entropy",
    "torch_lce_chunked": "torch linear_cross_entropy, chunked",
    "torch_fp32ce": "torch, fp32 logits", "xent_own": "xent, own products",
}


def points(rows):
    """{(gpu, shape): {provider: {"ms": .., "mib": .., "floor": ..}}} of the full step's rows.
    "floor": the GEMMs' time in the provider's own process (the gemm_floor row that came
    last before it in the CSV): a provider run in a process of its own (QuACK on its own
    DSL) is compared with the GEMMs of that process, not another's."""
    out = defaultdict(lambda: defaultdict(dict))
    floor = {}
    for r in rows:
        if r.get("kernel_name") != "fused_linear_cross_entropy":
            continue
        cfg = json.loads(r["extra_benchmark_config_str"])
        key = (r["gpu_name"], (cfg["BT"], cfg["H"], cfg["V"]))
        metric, prov = r["metric_name"], r["kernel_provider"]
        if metric == "speed" and prov == "gemm_floor":
            floor[key] = float(r["y_value_50"])
        if metric in ("speed", "memory"):
            d = out[key][prov]
            d["ms" if metric == "speed" else "mib"] = float(r["y_value_50"])
            if metric == "speed" and key in floor:
                d["floor"] = floor[key]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--out-dir", default=".")
    args = ap.parse_args(argv)
    rows = results_csv.read_rows(args.csv)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None
        print("plot_memory.py: no matplotlib; the table alone")
    os.makedirs(args.out_dir, exist_ok=True)
    for (gpu, (bt, h, v)), provs in sorted(points(rows).items()):
        floor = provs.get("gemm_floor", {}).get("ms")
        if not floor:
            print(f"{gpu} {bt}x{h}x{v}: no gemm_floor row; skipped")
            continue
        print(f"\n{gpu}  BT={bt} H={h} V={v}  (ratio to the GEMMs of each provider's process)")
        print(f"  {'provider':<28}{'ms':>9}{'GEMMs ms':>10}{'ratio':>8}{'extra MiB':>11}")
        curve, marks = [], []
        for name, d in sorted(provs.items(), key=lambda kv: kv[1].get("mib", 0.0)):
            if name == "gemm_floor" or "ms" not in d or "mib" not in d:
                continue
            own = d.get("floor", floor)
            ratio = d["ms"] / own
            print(f"  {name:<28}{d['ms']:>9.2f}{own:>10.2f}{ratio:>8.3f}{d['mib']:>11.0f}")
            (curve if name.startswith("xent_budget_") else marks).append(
                (name, max(d["mib"], 1.0), ratio))
        if plt is None:
            continue
        fig, ax = plt.subplots(figsize=(8, 5.5))
        if curve:
            curve.sort(key=lambda c: c[1])
            ax.plot([c[1] for c in curve], [c[2] for c in curve], "-o", color="C0",
                    label="xent over memory_budget")
        for i, (name, mib, ratio) in enumerate(marks):
            xent = name.startswith("xent")
            ax.plot([mib], [ratio], "s" if xent else "o", markersize=9,
                    color="C0" if xent else f"C{1 + i % 9}", label=LABELS.get(name, name))
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_xlabel("extra memory over inputs, dX and dW (MiB, log scale)")
        ax.set_ylabel("step time / the three GEMMs alone")
        ax.set_title(f"fused linear cross-entropy, forward + backward, bf16\n"
                     f"BT={bt} H={h} V={v}, {gpu}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="best")
        name = f"linear_memory_{gpu.replace(' ', '_')}_{bt}x{h}x{v}.png"
        fig.tight_layout()
        fig.savefig(os.path.join(args.out_dir, name), dpi=110)
        plt.close(fig)
        print(f"  -> {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
