#!/usr/bin/env python3
"""plot.py - draw benchmark CSVs (ours or the peer's) as PNG files.

    python3 bench/plot.py bench/results/*.csv [--out-dir DIR]

The plots go to --out-dir, by default a folder "plots" beside the first CSV:
a run on your own CSV never overwrites the committed plots.
                          [--metrics speed,memory,eff_bandwidth] [--kernel cross_entropy]

One PNG per (metric, sweep, dtype, mode), named <metric>_<sweep>_<dtype>_<mode>.png
(sweep "vocab" when x is V, "bt" when x is BT), with one line per provider: the median
against x, and a band from the 20th to the 80th percentile. Effective-bandwidth plots
also draw the copy bandwidth measured in the same run as a dashed line. Rows of several
files are merged; when a (provider, point) appears more than once the last row wins.
Needs matplotlib; without it the script says so and exits 0 (nothing to draw with).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, HERE)

import results_csv  # noqa: E402

UNITS_LABEL = {"speed": "time (ms)", "memory": "peak memory (MB)",
               "eff_bandwidth": "effective bandwidth (TB/s)",
               "copy_share": "share of the copy bandwidth",
               "copy_bandwidth": "copy bandwidth (TB/s)"}


def group_rows(rows, kernel: str, metrics: List[str]):
    """(metric, sweep, dtype, mode) -> provider -> x -> (y50, y20, y80); plus copy lines."""
    groups: Dict[Tuple[str, str, str, str], Dict[str, Dict[float, Tuple[float, float, float]]]] = {}
    copies: Dict[Tuple[str, str, str], List[float]] = {}
    for r in rows:
        if r.get("kernel_name", kernel) != kernel:
            continue
        metric = r.get("metric_name", "")
        x_name = r.get("x_name", "")
        sweep = {"V": "vocab", "BT": "bt"}.get(x_name, x_name.lower() or "x")
        dtype = results_csv.row_dtype(r)
        mode = r.get("kernel_operation_mode", "") or "any"
        x = results_csv.to_float(r.get("x_value"))
        y = tuple(results_csv.to_float(r.get(k)) for k in ("y_value_50", "y_value_20",
                                                              "y_value_80"))
        if x != x or y[0] != y[0]:
            continue
        provider = r.get("kernel_provider", "?")
        if metric == "copy_bandwidth" and not provider.endswith("_cpu"):
            copies.setdefault((sweep, dtype, mode), []).append(y[0])
        if metric not in metrics:
            continue
        groups.setdefault((metric, sweep, dtype, mode), {}).setdefault(provider, {})[x] = y
    return groups, copies


def out_dir_for(csvs, out_dir=None) -> str:
    """Where the plots of `csvs` go: out_dir, else plots/ beside the first CSV."""
    if out_dir is not None:
        return out_dir
    return os.path.join(os.path.dirname(os.path.abspath(csvs[0])), "plots")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csv", nargs="+", help="benchmark CSV files")
    p.add_argument("--out-dir", default=None,
                   help="where the plots go (default: plots/ beside the first CSV)")
    p.add_argument("--metrics", default="speed,memory,eff_bandwidth",
                   help="comma list of metric_name values to draw")
    p.add_argument("--kernel", default="cross_entropy")
    p.add_argument("--logx", action="store_true", help="logarithmic x axis")
    p.add_argument("--title", default="", help="prefix of every plot title")
    args = p.parse_args(argv)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is not installed; no plots drawn "
              "(pip install matplotlib)")
        return 0

    rows = results_csv.read_rows(args.csv)
    metrics = [m for m in args.metrics.split(",") if m]
    groups, copies = group_rows(rows, args.kernel, metrics)
    if not groups:
        print("plot.py: no rows to draw for metrics " + ", ".join(metrics))
        return 0
    args.out_dir = out_dir_for(args.csv, args.out_dir)
    os.makedirs(args.out_dir, exist_ok=True)
    device = ", ".join(sorted({r.get("gpu_name", "") for r in rows
                               if r.get("gpu_name") and
                               not r.get("kernel_provider", "").endswith("_cpu")}))

    written = 0
    for (metric, sweep, dtype, mode), per_provider in sorted(groups.items()):
        fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
        for provider in sorted(per_provider):
            pts = sorted(per_provider[provider].items())
            xs = [x for x, _ in pts]
            y50 = [y[0] for _, y in pts]
            y20 = [y[1] for _, y in pts]
            y80 = [y[2] for _, y in pts]
            style = "-" if provider.startswith("xent") else "--"
            line, = ax.plot(xs, y50, style, marker="o", markersize=4, label=provider,
                            linewidth=2.0 if provider.startswith("xent") else 1.4)
            if any(a != b for a, b in zip(y20, y80)):
                ax.fill_between(xs, y20, y80, color=line.get_color(), alpha=0.15, linewidth=0)
        top = None
        if metric == "eff_bandwidth" and copies.get((sweep, dtype, mode)):
            bw = statistics.median(copies[(sweep, dtype, mode)])
            ax.axhline(bw, color="gray", linestyle=":", linewidth=1.2,
                       label=f"device copy {bw:.2f} TB/s")
            top = bw * 1.08
        ax.set_xlabel("vocabulary size V" if sweep == "vocab" else
                      "tokens B x T" if sweep == "bt" else sweep)
        ax.set_ylabel(UNITS_LABEL.get(metric, metric))
        if args.logx:
            ax.set_xscale("log", base=2)
        ax.set_ylim(bottom=0)
        if top is not None and ax.get_ylim()[1] < top:
            ax.set_ylim(top=top)
        title = f"{args.title + ' ' if args.title else ''}cross_entropy {mode} {dtype} " \
                f"- {metric}"
        if device:
            title += f"\n{device}"
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        name = f"{metric}_{sweep}_{dtype}_{mode}.png".replace("/", "_")
        fig.savefig(os.path.join(args.out_dir, name))
        plt.close(fig)
        written += 1
    print(f"plot.py: {written} plot(s) in {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
