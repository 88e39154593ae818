"""compare.py --quick end to end (bench/test_quick.py): every provider it finds, a
well-formed CSV and summary; on the GPU when there is one, else on the CPU."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="compare.py needs torch")

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench")


def test_compare_quick(tmp_path):
    out = tmp_path / "compare_quick.csv"
    cmd = [sys.executable, os.path.join(BENCH, "test_quick.py"), str(out)]
    lib = os.environ.get("XENT_LIBRARY")
    if lib:
        cmd += ["--xent-lib", lib]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
