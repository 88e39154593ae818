"""bench/host_time.py: its errors everywhere, and one small run where there is a GPU."""

import os
import sys

import pytest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

import host_time  # noqa: E402


def _cuda_reason():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device"
    import xent

    if not xent.info()["cuda_built"]:
        return "the library has no CUDA backend"
    return None


def test_quantiles_pick_from_the_sorted_samples():
    xs = [9.0, 1.0, 5.0, 3.0, 7.0, 2.0, 8.0, 4.0, 6.0, 10.0, 0.0]
    assert host_time.quantiles(xs) == (5.0, 2.0, 8.0)
    assert host_time.quantiles([4.0]) == (4.0, 4.0, 4.0)


def test_unknown_provider_is_an_error(capsys):
    assert host_time.main(["--providers", "xent,cudnn"]) == 2
    err = capsys.readouterr().err
    assert "cudnn" in err and "liger_triton" in err


@pytest.mark.skipif(_cuda_reason() is None, reason="a CUDA device is here")
def test_without_a_gpu_it_says_what_is_missing(capsys):
    assert host_time.main(["--providers", "xent"]) == 2
    err = capsys.readouterr().err
    assert "needs PyTorch" in err or "needs a CUDA device" in err


@pytest.mark.skipif(_cuda_reason() is not None, reason=_cuda_reason() or "")
@pytest.mark.parametrize("mode", ["full", "forward_nograd"])
def test_small_run_prints_a_row_per_provider(capsys, mode):
    argv = ["--bt", "64", "--vocab", "1000", "--dtype", "bf16", "--mode", mode, "--iters", "12",
            "--warmup", "3", "--rounds", "3",
            "--providers", "xent,xent_unchecked,xent_general,torch"]
    assert host_time.main(argv) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        parts = line.split()
        if parts and parts[0] in ("xent", "xent_unchecked", "xent_general", "torch"):
            rows[parts[0]] = parts
    assert set(rows) == {"xent", "xent_unchecked", "xent_general", "torch"}
    for name, parts in rows.items():
        host, p20, p80, gpu = (float(v) for v in parts[1:5])
        assert 0.0 < p20 <= host <= p80, (name, parts)
        assert gpu > 0.0, (name, parts)
        assert parts[5] in ("host", "GPU"), (name, parts)


@pytest.mark.skipif(_cuda_reason() is not None, reason=_cuda_reason() or "")
def test_parts_prints_every_piece(capsys):
    argv = ["--bt", "64", "--vocab", "1000", "--iters", "12", "--warmup", "3",
            "--providers", "xent", "--parts"]
    assert host_time.main(argv) == 0
    out = capsys.readouterr().out.split("parts of xent's step")[1]
    lines = [ln for ln in out.splitlines()[1:] if ln.strip()]
    assert len(lines) == 14
    for ln in lines:
        assert float(ln.split()[-1]) > 0.0, ln
