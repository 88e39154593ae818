"""The benchmark's plotting and summary tools: where plots go by default, and what the
summary says of a CPU run's copy baseline. Neither torch nor a GPU is needed."""

import os
import sys

import pytest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

import plot  # noqa: E402
import plot_memory  # noqa: E402
import summary  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
COMMITTED = os.path.normpath(os.path.join(HERE, "..", "..", "bench", "results", "plots"))


def test_plots_go_beside_the_csv_not_into_the_committed_folder(tmp_path):
    csv = tmp_path / "mine.csv"
    assert plot.out_dir_for([str(csv)]) == str(tmp_path / "plots")
    assert os.path.normpath(plot.out_dir_for([str(csv)])) != COMMITTED
    assert plot.out_dir_for([str(csv)], "/elsewhere") == "/elsewhere"


def _row(provider, metric, y, mode="forward"):
    return {"kernel_name": "cross_entropy", "kernel_provider": provider,
            "kernel_operation_mode": mode, "metric_name": metric, "metric_unit": "x",
            "x_name": "V", "x_label": "vocab size", "x_value": "32000", "y_value_50": str(y),
            "y_value_20": str(y), "y_value_80": str(y),
            "extra_benchmark_config_str": '{"BT": 4096, "V": 32000, "dtype": "float32", '
                                          '"device": "cpu"}',
            "gpu_name": "", "timestamp": "2026-12-01 00:00:00", "xent_version": "0.1.0"}


def _linear_row(provider, metric, y):
    r = _row(provider, metric, y, mode="full")
    r["kernel_name"] = "fused_linear_cross_entropy"
    r["extra_benchmark_config_str"] = '{"BT": 8192, "H": 2048, "V": 128256, "dtype": "bfloat16"}'
    r["gpu_name"] = "GPU"
    return r


def test_memory_points_take_the_gemms_of_their_own_process():
    """bench/linear.py runs QuACK in a process of its own (its own DSL), whose GEMMs took
    another time than the first process's: each provider's ratio is to its own."""
    rows = [_linear_row("gemm_floor", "speed", 18.0), _linear_row("xent_all", "speed", 20.0),
            _linear_row("xent_all", "memory", 2008),
            _linear_row("gemm_floor", "speed", 16.0), _linear_row("quack_fixed", "speed", 19.0),
            _linear_row("quack_fixed", "memory", 1556)]
    pts = plot_memory.points(rows)[("GPU", (8192, 2048, 128256))]
    assert pts["xent_all"]["floor"] == 18.0 and pts["quack_fixed"]["floor"] == 16.0
    assert pts["quack_fixed"]["mib"] == 1556


def test_summary_of_a_cpu_run_names_its_copy_baseline():
    rows = [_row("xent_cpu", "speed", 10.0), _row("xent_cpu", "copy_bandwidth", 0.012),
            _row("xent_cpu", "copy_share", 0.8), _row("torch_cpu", "speed", 40.0)]
    md = summary.make_markdown(rows, ours="xent_cpu")
    assert "not measured" not in md
    assert "12.0 GB/s" in md


def test_linear_summary_of_the_committed_runs(tmp_path):
    import linear_summary

    results = os.path.normpath(os.path.join(HERE, "..", "..", "bench", "results"))
    out = tmp_path / "summary.md"
    assert linear_summary.main([os.path.join(results, "h200-linear-v1.csv"),
                                os.path.join(results, "h200-linear-v2-bt.csv"),
                                "--out", str(out)]) == 0
    text = out.read_text()
    # every shape of the runs, the floor and xent in each, the budget curve
    for shape in ("BT = 8192, H = 4096, V = 128256", "BT = 8192, H = 2304, V = 256000",
                  "BT = 32768, H = 4096, V = 128256"):
        assert shape in text
    assert text.count("| the three GEMMs alone |") >= 7
    assert "xent by `memory_budget`" in text and "| 1024 |" in text


def test_compare_kernel_linear_without_a_gpu(capsys):
    import compare

    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        return  # the GPU run is the benchmark itself
    assert compare.main(["--kernel", "linear", "--quick"]) == 0
    out = capsys.readouterr().out  # the CPU row: xent's CPU backend beside torch's own
    assert "linear.py  CPU" in out
    rows = [ln.split()[0] for ln in out.splitlines() if ln.startswith("  ")]
    assert rows[0] == "xent" and "torch_lce_chunked" in rows


def test_linear_frozen_trunk_leaves_out_the_full_step_peers():
    import linear

    assert "liger_flce" in linear.parse_args([]).provider_names
    names = linear.parse_args(["--frozen-trunk"]).provider_names
    assert "xent" in names and "gemm_floor" in names and "torch_compile" in names
    assert not set(names) & set(linear.FULL_STEP_ONLY)
    for peer in linear.FULL_STEP_ONLY:
        with pytest.raises(SystemExit):
            linear.parse_args(["--frozen-trunk", "--providers", f"xent,{peer}"])
    with pytest.raises(SystemExit):
        linear.parse_args(["--frozen-trunk", "--frozen-head"])
