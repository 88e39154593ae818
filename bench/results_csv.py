"""The benchmark CSV schema shared by xent-bench, compare.py, summary.py and plot.py.

One row per (provider, mode, metric, point). The columns are the peer library's
benchmark schema plus a version column:

    kernel_name                  "cross_entropy"
    kernel_provider              "xent_cuda", "xent_cpu" (the C driver); "xent", "xent_unchecked",
                                 "xent_torch_cpu", "torch", "torch_compile", "liger_triton",
                                 "liger_cutedsl", "torch_cpu" (compare.py)
    kernel_operation_mode        "forward", "backward", "full", "forward_nograd"
    metric_name, metric_unit     "speed" ms, "memory" MB (MiB, as torch reports it),
                                 "eff_bandwidth" TB/s, "copy_bandwidth" TB/s, "copy_share" ratio
    x_name, x_label, x_value     "V" ("vocab size") or "BT" ("B x T") and its value
    y_value_50, _20, _80         median and the 20th / 80th percentiles (for bandwidths the
                                 percentiles of the bandwidth, i.e. from the 80th / 20th
                                 percentile times)
    extra_benchmark_config_str   JSON: {"BT": ..., "V": ..., "dtype": "bfloat16", ...}
    gpu_name                     the device name, or the CPU model for CPU runs
    timestamp                    "YYYY-MM-DD HH:MM:SS", local time of the run
    xent_version                 the library version ("liger_version" in the peer's files)

Reading is tolerant of the peer's files: a different last column name, and dtype
strings such as "torch.bfloat16".
"""

from __future__ import annotations

import ast
import csv
import json
import os
import re
from typing import Dict, Iterable, List

FIELDS = [
    "kernel_name",
    "kernel_provider",
    "kernel_operation_mode",
    "metric_name",
    "metric_unit",
    "x_name",
    "x_label",
    "x_value",
    "y_value_50",
    "y_value_20",
    "y_value_80",
    "extra_benchmark_config_str",
    "gpu_name",
    "timestamp",
    "xent_version",
]

X_LABELS = {"V": "vocab size", "BT": "B x T"}


def normalize_dtype(value) -> str:
    """'torch.bfloat16', 'bf16', 'bfloat16' -> 'bfloat16' (and so on)."""
    s = str(value).strip().lower()
    if s.startswith("torch."):
        s = s[len("torch."):]
    return {"bf16": "bfloat16", "fp32": "float32", "f32": "float32", "float": "float32",
            "fp16": "float16", "f16": "float16", "half": "float16"}.get(s, s)


def parse_config(text: str) -> Dict[str, object]:
    """The extra_benchmark_config_str as a dict ({} when it cannot be read)."""
    if not text:
        return {}
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(text)
            if isinstance(value, dict):
                return value
        except (ValueError, SyntaxError, TypeError):
            pass
    # Last resort: "key": value pairs.
    out = {}
    for key, val in re.findall(r"[\"']?(\w+)[\"']?\s*:\s*[\"']?([\w.\-]+)", text):
        out[key] = val
    return out


def row_dtype(row: Dict[str, str]) -> str:
    cfg = parse_config(row.get("extra_benchmark_config_str", ""))
    return normalize_dtype(cfg.get("dtype", "unknown"))


def read_rows(paths: Iterable[str]) -> List[Dict[str, str]]:
    """All rows of the given CSV files, as dicts keyed by FIELDS."""
    rows: List[Dict[str, str]] = []
    for path in paths:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            for raw in reader:
                row = {k: (v if v is not None else "") for k, v in raw.items() if k is not None}
                if "xent_version" not in row:
                    for alt in ("liger_version", "version"):
                        if alt in row:
                            row["xent_version"] = row[alt]
                            break
                row.setdefault("xent_version", "")
                row["_source"] = os.path.basename(path)
                rows.append(row)
    return rows


def to_float(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")


class CsvWriter:
    """Appends rows to a CSV file, writing the header when the file is new or empty."""

    def __init__(self, path: str, append: bool = True):
        self.path = path
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        fresh = not append or not os.path.exists(path) or os.path.getsize(path) == 0
        if not fresh:
            with open(path, newline="") as f:
                header = next(csv.reader(f), [])
            if header != FIELDS:
                raise SystemExit(f"{path} has another header ({header[:3]}...); "
                                 "pass a new --out file")
        self._file = open(path, "w" if fresh else "a", newline="")
        self._writer = csv.writer(self._file)
        if fresh:
            self._writer.writerow(FIELDS)
            self._file.flush()

    def write(self, row: Dict[str, object]) -> None:
        self._writer.writerow([_fmt(row.get(k, "")) for k in FIELDS])
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
