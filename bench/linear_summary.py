#!/usr/bin/env python3
"""linear_summary.py - the fused linear benchmark's CSVs (bench/linear.py) as a Markdown
summary and plots: per shape, every provider's step time, its ratio to the three GEMMs
alone measured in the same run, and its extra memory; the memory-budget curve.

    python3 bench/linear_summary.py bench/results/h200-linear-v1.csv ... \\
        --out bench/results/h200-linear-summary.md [--plots DIR]
"""

import argparse
import csv
import json
import os
import sys

ORDER = ["gemm_floor", "xent", "xent_fp32accum", "liger_flce", "cce", "cce_exact",
         "torch_fp32ce", "torch_bf16ce", "torch_compile"]
NAMES = {"gemm_floor": "the three GEMMs alone", "xent": "xent", "xent_fp32accum":
         "xent, accum_dtype=float32", "liger_flce": "the peer's fused linear CE",
         "cce": "Cut Cross-Entropy (filter)", "cce_exact": "Cut Cross-Entropy (no filter)",
         "torch_fp32ce": "torch, fp32 loss", "torch_bf16ce": "torch, bf16 loss",
         "torch_compile": "torch.compile"}


def load(paths):
    tab, meta = {}, {}
    for p in paths:
        with open(p) as f:
            for r in csv.DictReader(line for line in f if not line.startswith("#")):
                if r["kernel_name"] != "fused_linear_cross_entropy":
                    continue
                cfg = json.loads(r["extra_benchmark_config_str"])
                key = (cfg["BT"], cfg["H"], cfg["V"])
                d = tab.setdefault(key, {}).setdefault(r["kernel_provider"], {})
                d[r["metric_name"]] = float(r["y_value_50"])
                meta[key] = (r["gpu_name"], r["timestamp"][:10])
    return tab, meta


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--plots", default=None, help="folder for PNG plots (needs matplotlib)")
    a = ap.parse_args(argv)
    tab, meta = load(a.csv)
    lines = ["# Fused linear cross-entropy: H200 results", "",
             "Forward + backward of the LM head and the loss, bf16, median of 10 steps; "
             "`x floor` is the time over the three GEMMs alone (cuBLAS through torch.matmul) "
             "measured in the same run; `extra` is the peak memory beyond the inputs and the "
             "gradients dX and dW, in MiB. Sources: " + ", ".join(os.path.basename(p) for p in a.csv),
             ""]
    keys = sorted(tab, key=lambda k: (not (k[1] == 4096 and k[2] == 128256), k[2], k[1], k[0]))
    for key in keys:
        bt, h, v = key
        gpu, day = meta[key]
        d = tab[key]
        lines += [f"## BT = {bt}, H = {h}, V = {v} ({gpu}, {day}; logits {bt * v * 2 / 2**20:.0f} "
                  f"MiB, 1/16 of it {bt * v * 2 / 16 / 2**20:.0f} MiB)", "",
                  "| provider | ms | x floor | TFLOP/s | extra MiB |", "|---|---:|---:|---:|---:|"]
        for p in ORDER:
            if p not in d:
                continue
            m = d[p]
            mem = "" if "memory" not in m else f"{m['memory']:.0f}"
            ratio = m.get("floor_ratio", 1.0 if p == "gemm_floor" else float("nan"))
            lines.append(f"| {NAMES[p]} | {m['speed']:.2f} | {ratio:.3f} | "
                         f"{m.get('tflops', float('nan')):.0f} | {mem} |")
        budgets = sorted((int(p.split("_")[2][:-3]), m) for p, m in d.items()
                         if p.startswith("xent_budget_"))
        if budgets:
            floor = d.get("gemm_floor", {}).get("speed")
            lines += ["", "xent by `memory_budget` (what each setting costs):", "",
                      "| budget MiB | ms | x floor | extra MiB |", "|---:|---:|---:|---:|"]
            for mib, m in budgets:
                r = m["speed"] / floor if floor else float("nan")
                lines.append(f"| {mib} | {m['speed']:.2f} | {r:.3f} | {m['memory']:.0f} |")
        lines.append("")
    with open(a.out, "w") as f:
        f.write("\n".join(lines))
    print(f"written: {a.out}")
    if a.plots:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("no matplotlib: no plots", file=sys.stderr)
            return 0
        os.makedirs(a.plots, exist_ok=True)
        sweep = sorted(k for k in tab if k[1] == 4096 and k[2] == 128256)
        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        for p in ORDER:
            xs = [k[0] for k in sweep if p in tab[k]]
            if not xs:
                continue
            # one colour a provider in both panels (the GEMMs alone have no memory line)
            color = f"C{ORDER.index(p)}"
            ax[0].plot(xs, [tab[(x, 4096, 128256)][p]["speed"] for x in xs], marker="o",
                       label=NAMES[p], color=color)
            if p != "gemm_floor":
                ax[1].plot(xs, [max(tab[(x, 4096, 128256)][p].get("memory", 0), 1) for x in xs],
                           marker="o", label=NAMES[p], color=color)
        for axis, title, unit in ((ax[0], "step time", "ms"), (ax[1], "extra memory", "MiB")):
            axis.set_xscale("log", base=2)
            axis.set_yscale("log")
            axis.set_xlabel("BT (H = 4096, V = 128256, bf16)")
            axis.set_ylabel(unit)
            axis.set_title(title)
            axis.grid(True, alpha=0.3)
        ax[0].legend(fontsize=7)
        ax[1].legend(fontsize=7)
        fig.tight_layout()
        out = os.path.join(a.plots, "linear_bt_sweep.png")
        fig.savefig(out, dpi=110)
        print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
