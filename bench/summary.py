#!/usr/bin/env python3
"""summary.py - a Markdown summary of benchmark CSVs: xent's speedup over each peer.

    python3 bench/summary.py bench/results/compare.csv [more.csv ...] [--ours xent_unchecked]
                             [--out summary.md]

One table per (mode, dtype, sweep): for each point the median time of every provider,
and for each provider other than `--ours` the ratio of medians (provider / ours:
above 1 means ours is faster). The provider named by --ours also gets its effective
bandwidth (fewest bytes / median time) and its share of the copy bandwidth. Mode full
also gets a peak-memory table. The header gives the device, the copy bandwidth
measured in the same run, and the date. When a CSV holds the same (provider, mode,
dtype, point, metric) more than once, the last row wins.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Dict, Iterable, List, Optional, Tuple

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import results_csv  # noqa: E402

MODE_ORDER = ["forward", "backward", "full", "forward_nograd"]
PROVIDER_ORDER = ["xent_unchecked", "xent", "xent_cuda", "xent_cpu", "xent_torch_cpu",
                  "liger_triton",
                  "liger_cutedsl", "liger", "torch", "torch_compile", "huggingface",
                  "torch_cpu"]


def _fixed_value(cfg: Dict[str, object], x_name: str) -> Optional[int]:
    """The dimension a sweep holds fixed: BT for a V sweep, V for a BT sweep."""
    try:
        if x_name == "V":
            if "BT" in cfg:
                return int(cfg["BT"])
            if "B" in cfg and "T" in cfg:
                return int(cfg["B"]) * int(cfg["T"])
        elif "V" in cfg:
            return int(cfg["V"])
    except (TypeError, ValueError):
        pass
    return None


def _provider_key(name: str) -> Tuple[int, str]:
    return (PROVIDER_ORDER.index(name) if name in PROVIDER_ORDER else len(PROVIDER_ORDER), name)


def _num(x: float, digits: int = 4) -> str:
    if x != x:  # NaN
        return "-"
    return f"{x:.{digits}f}"


def make_markdown(rows: Iterable[Dict[str, str]], ours: str = "xent",
                  notes: Optional[List[str]] = None, stopped_early: bool = False) -> str:
    rows = [r for r in rows if r.get("kernel_name", "cross_entropy") == "cross_entropy"]
    # (mode, dtype, x_name, fixed) -> x -> provider -> metric -> (y50, y20, y80)
    table: Dict[Tuple, Dict[int, Dict[str, Dict[str, Tuple[float, float, float]]]]] = {}
    devices, copies, cpu_copies, stamps, versions = set(), [], [], [], set()
    for r in rows:
        cfg = results_csv.parse_config(r.get("extra_benchmark_config_str", ""))
        dtype = results_csv.normalize_dtype(cfg.get("dtype", "unknown"))
        x_name = r.get("x_name", "")
        try:
            x = int(float(r.get("x_value", "nan")))
        except ValueError:
            continue
        key = (r.get("kernel_operation_mode", ""), dtype, x_name, _fixed_value(cfg, x_name))
        vals = tuple(results_csv.to_float(r.get(k)) for k in
                     ("y_value_50", "y_value_20", "y_value_80"))
        table.setdefault(key, {}).setdefault(x, {}).setdefault(
            r.get("kernel_provider", "?"), {})[r.get("metric_name", "")] = vals
        on_cpu = cfg.get("device") == "cpu" or r.get("kernel_provider", "").endswith("_cpu")
        if not on_cpu and r.get("gpu_name"):
            devices.add(r["gpu_name"])
        if r.get("metric_name") == "copy_bandwidth":
            (cpu_copies if on_cpu else copies).append(vals[0])
        if r.get("timestamp"):
            stamps.append(r["timestamp"])
        if r.get("xent_version"):
            versions.add(r["xent_version"])

    lines = ["# cross_entropy: xent against its peers", ""]
    dev = ", ".join(sorted(devices)) or "CPU only"
    if copies:
        copy = f"{statistics.median(copies):.3f} TB/s"
    elif cpu_copies:  # the CPU's own baseline: a memcpy of each point's bytes
        copy = (f"{statistics.median(cpu_copies) * 1e3:.1f} GB/s (host memcpy of each point's "
                "bytes, the median over points)")
    else:
        copy = "not measured"
    when = (min(stamps) if stamps else "?") + (
        f" to {max(stamps)}" if stamps and max(stamps) != min(stamps) else "")
    kind = "device-to-device copy" if copies else "copy"
    lines.append(f"- device: **{dev}**; {kind} bandwidth (same run): "
                 f"**{copy}**; date: {when}; xent {', '.join(sorted(versions)) or '?'}")
    lines.append(f"- speedup `x` = provider median / **{ours}** median (above 1: {ours} is "
                 "faster); medians (CUDA events on the GPU, perf_counter or CLOCK_MONOTONIC on the "
                 "CPU), with the 20th/80th percentiles "
                 "in the CSV")
    lines.append("- eff = fewest bytes / median time (2·BT·V·size for forward, backward and "
                 "full; BT·V·size for forward_nograd); share = eff / copy bandwidth")
    if stopped_early:
        lines.append("- the run stopped early (time budget): some points are missing")
    lines.append("")

    def sort_key(k):
        mode, dtype, x_name, fixed = k
        return (MODE_ORDER.index(mode) if mode in MODE_ORDER else 9, dtype,
                0 if x_name == "V" else 1, fixed or 0)

    for key in sorted(table, key=sort_key):
        mode, dtype, x_name, fixed = key
        points = table[key]
        providers = sorted({p for per in points.values() for p, m in per.items()
                            if "speed" in m}, key=_provider_key)
        if not providers:
            continue
        fixed_txt = ""
        if fixed is not None:
            fixed_txt = f" (BT={fixed})" if x_name == "V" else f" (V={fixed})"
        lines.append(f"## {mode} · {dtype} · {x_name} sweep{fixed_txt}")
        lines.append("")
        head = [x_name]
        if ours in providers:
            head += [f"{ours} ms", "eff TB/s", "share"]
        others = [p for p in providers if p != ours]
        for p in others:
            head += [f"{p} ms"] + (["x"] if ours in providers else [])
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join(["---:"] * len(head)) + "|")
        for x in sorted(points):
            per = points[x]
            cells = [str(x)]
            base = per.get(ours, {}).get("speed", (float("nan"),) * 3)[0]
            if ours in providers:
                eff = per.get(ours, {}).get("eff_bandwidth", (float("nan"),) * 3)[0]
                share = per.get(ours, {}).get("copy_share", (float("nan"),) * 3)[0]
                cells += [_num(base), _num(eff, 3), _num(share, 3)]
            for p in others:
                ms = per.get(p, {}).get("speed", (float("nan"),) * 3)[0]
                cells.append(_num(ms))
                if ours in providers:
                    cells.append(f"**{ms / base:.2f}**" if ms == ms and base == base and base > 0
                                 else "-")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")

        mem_providers = sorted({p for per in points.values() for p, m in per.items()
                                if "memory" in m}, key=_provider_key)
        if mode == "full" and mem_providers:
            lines.append(f"Peak memory, MB (full step){fixed_txt}:")
            lines.append("")
            lines.append("| " + " | ".join([x_name] + mem_providers) + " |")
            lines.append("|" + "|".join(["---:"] * (1 + len(mem_providers))) + "|")
            for x in sorted(points):
                per = points[x]
                cells = [str(x)] + [_num(per.get(p, {}).get("memory", (float("nan"),) * 3)[0], 0)
                                    for p in mem_providers]
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")

    if notes:
        lines.append("## Skipped or flagged")
        lines.append("")
        for n in notes:
            lines.append(f"- {n}")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csv", nargs="+", help="benchmark CSV files")
    p.add_argument("--ours", default=None,
                   help="the provider speedups are for (default: xent, xent_cuda or "
                        "xent_cpu, the first present)")
    p.add_argument("--out", default=None, help="write here instead of stdout")
    args = p.parse_args(argv)
    rows = results_csv.read_rows(args.csv)
    ours = args.ours
    if not ours:
        present = {r.get("kernel_provider") for r in rows}
        ours = next((c for c in ("xent", "xent_unchecked", "xent_cuda", "xent_cpu")
                     if c in present), "xent")
    md = make_markdown(rows, ours=ours)
    if args.out:
        with open(args.out, "w") as f:
            f.write(md)
    else:
        sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
