#!/usr/bin/env python3
"""Smoke test of compare.py: a --quick run, then a check of the CSV and the summary it wrote.

    python3 bench/test_quick.py OUT.csv [--xent-lib path/to/libxent.so]

Exits 77 (CTest's "skipped") when torch is not installed. Otherwise fails unless the run
measured xent and torch eager in every mode and dtype of --quick (on the GPU when there is
one, else on the CPU), with well-formed rows and ordered percentiles.
"""

from __future__ import annotations

import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, HERE)

SKIP = 77


def fail(msg: str) -> int:
    print(f"FAIL: {msg}")
    return 1


def main(argv) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    out = os.path.abspath(argv[0])
    lib = None
    if "--xent-lib" in argv:
        lib = argv[argv.index("--xent-lib") + 1]
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch is not installed: compare.py cannot run here (skipped)")
        return SKIP

    import compare
    import results_csv

    summary = os.path.splitext(out)[0] + ".md"
    for path in (out, summary):
        if os.path.exists(path):
            os.remove(path)
    args = ["--quick", "--out", out, "--no-append", "--summary", summary,
            "--providers", "xent,xent_unchecked,torch,liger_triton"]
    if lib:
        args += ["--xent-lib", lib]
    rc = compare.main(args)
    if rc != 0:
        return fail(f"compare.py exited {rc}")

    with open(out, newline="") as f:
        header = f.readline().strip()
    if header != ",".join(results_csv.FIELDS):
        return fail(f"bad header: {header}")
    rows = results_csv.read_rows([out])
    if not rows:
        return fail("no rows")
    seen = set()
    for i, r in enumerate(rows, 1):
        if r["kernel_name"] != "cross_entropy":
            return fail(f"row {i}: kernel_name {r['kernel_name']!r}")
        if r["kernel_operation_mode"] not in compare.MODES:
            return fail(f"row {i}: mode {r['kernel_operation_mode']!r}")
        ys = [results_csv.to_float(r[k]) for k in ("y_value_20", "y_value_50", "y_value_80")]
        if not all(math.isfinite(y) and y > 0 for y in ys):
            return fail(f"row {i}: values {ys}")
        if not ys[0] <= ys[1] <= ys[2]:
            return fail(f"row {i}: percentiles out of order {ys}")
        if r["x_name"] != "V" or not r["x_value"].isdigit():
            return fail(f"row {i}: x {r['x_name']}={r['x_value']}")
        dtype = results_csv.row_dtype(r)
        seen.add((r["kernel_provider"], r["kernel_operation_mode"], dtype, r["metric_name"],
                  r["x_value"]))
    xs = sorted({x for *_, x in seen}, key=int)
    if len(xs) != 3:
        return fail(f"expected 3 vocabulary sizes, got {xs}")
    for provider in ("xent", "torch"):
        for mode in compare.MODES:
            for dtype in ("bfloat16", "float32"):
                for metric in ("speed", "eff_bandwidth", "copy_bandwidth", "copy_share"):
                    for x in xs:
                        if (provider, mode, dtype, metric, x) not in seen:
                            return fail(f"no {metric} row for {provider} {mode} {dtype} V={x}")
    with open(summary) as f:
        text = f.read()
    if "# cross_entropy" not in text or "| V |" not in text:
        return fail("the Markdown summary has no table")
    print(f"ok: {len(rows)} rows, providers {sorted({s[0] for s in seen})}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
