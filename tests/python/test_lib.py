"""The ctypes layer: structure layouts against the C header, loading, errors."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import xent
from xent import _lib

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
HEADER_DIR = os.path.join(REPO, "include")

STRUCTS = {
    "xent_input": _lib.XentInput,
    "xent_options": _lib.XentOptions,
    "xent_output": _lib.XentOutput,
    "xent_exec": _lib.XentExec,
    "xent_info": _lib.XentInfo,
    "xent_device_info": _lib.XentDeviceInfo,
    "xent_linear_input": _lib.XentLinearInput,
    "xent_linear_options": _lib.XentLinearOptions,
    "xent_linear_grads": _lib.XentLinearGrads,
    "xent_experimental_launch": _lib.XentExperimentalLaunch,
    "xent_experimental": _lib.XentExperimental,
}
# the benchmarks' copies of xent_experimental.h's structures
sys.path.insert(0, os.path.join(REPO, "bench"))
import gemm as bench_gemm  # noqa: E402

STRUCTS["xent_experimental_gemm"] = bench_gemm.Gemm


def _c_layout(tmp_path):
    """sizeof and offsetof of every field, as the C compiler sees xent.h."""
    if not os.path.isfile(os.path.join(HEADER_DIR, "xent.h")):
        pytest.skip("include/xent.h is not beside the tests")
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to read the header's layout")
    lines = []
    for cname, cls in STRUCTS.items():
        lines.append(f'printf("{cname} sizeof %zu\\n", sizeof({cname}));')
        for field, _ in cls._fields_:
            lines.append(f'printf("{cname} {field} %zu\\n", offsetof({cname}, {field}));')
    src = tmp_path / "layout.c"
    src.write_text(textwrap.dedent("""
        #include <stddef.h>
        #include <stdio.h>
        #include "xent.h"
        #include "xent_experimental.h"
        int main(void) {
        %s
          return 0;
        }
    """) % "\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-I", HEADER_DIR, str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    layout = {}
    for line in out.splitlines():
        cname, field, value = line.split()
        layout[(cname, field)] = int(value)
    return layout


def test_structures_match_the_header(tmp_path):
    layout = _c_layout(tmp_path)
    for cname, cls in STRUCTS.items():
        assert ctypes.sizeof(cls) == layout[(cname, "sizeof")], cname
        for field, _ in cls._fields_:
            assert getattr(cls, field).offset == layout[(cname, field)], f"{cname}.{field}"


def test_experimental_settings_apply_inside_the_block_only():
    """The benchmarks' settings (bench/linear.py, bench/vp.py): this thread's inside the
    block, the defaults after it, and a value out of range refused with its name."""
    get = _lib.lib().xent_experimental_get
    with _lib.experimental(products=6, forward_path=1):
        inside = get()
        assert (inside.products, inside.forward.path, inside.forward.threads) == (6, 1, 256)
    after = get()
    assert (after.products, after.forward.path, after.forward.threads) == (0, 0, 0)
    with pytest.raises(xent.XentValueError, match="products"):
        with _lib.experimental(products=7):
            pass
    assert get().products == 0
    with _lib.experimental(forward_path=4, threads=128, vecs=8):  # SEGMENT
        inside = get()
        assert (inside.forward.path, inside.forward.threads, inside.forward.vecs) == (4, 128, 8)
    with pytest.raises(xent.XentValueError, match="vecs"):
        with _lib.experimental(forward_path=4, threads=128, vecs=3):
            pass


def test_defaults_match_the_header():
    opt = _lib.options_default()
    assert (opt.reduction, opt.ignore_index, opt.label_smoothing, opt.lse_square_scale,
            opt.use_softcap, opt.softcap, opt.target_check) == (
        _lib.XENT_REDUCTION_MEAN, -100, 0.0, 0.0, 0, 0.0, _lib.XENT_TARGETS_CHECKED)
    ex = _lib.exec_default()
    assert (ex.backend, ex.device, ex.stream, ex.workspace, ex.workspace_bytes,
            ex.num_threads) == (_lib.XENT_BACKEND_AUTO, 0, None, None, 0, 0)
    made = _lib.make_options()
    for field, _ in _lib.XentOptions._fields_:
        assert getattr(made, field) == getattr(opt, field), field


def test_version_and_info():
    assert xent.library_version() == xent.__version__ == "0.1.0"
    info = xent.info()
    assert (info["version_major"], info["version_minor"], info["version_patch"]) == (0, 1, 0)
    assert info["cpu_backend"] == 1 and info["cpu_threads"] >= 1
    if not info["cuda_built"]:
        assert info["cuda_devices"] == 0 and info["cuda_runtime_version"] == 0
        with pytest.raises(xent.XentRuntimeError) as e:
            xent.device_info(0)
        assert e.value.status_name == "XENT_ERROR_UNSUPPORTED"


def test_workspace_size_grows_with_rows():
    assert _lib.workspace_size(0) > 0
    assert _lib.workspace_size(1 << 20) >= (1 << 20) * 4


def test_status_strings_and_error_classes():
    for status, name in _lib.STATUS_NAMES.items():
        assert _lib.status_string(status)
        if status == 0:
            continue
        err = _lib.error_for(status, "m")
        assert err.status == status and err.status_name == name and err.message == "m"
        assert isinstance(err, xent.XentError)
        assert isinstance(err, ValueError) != isinstance(err, RuntimeError)
    assert isinstance(_lib.error_for(4, ""), ValueError)
    assert isinstance(_lib.error_for(11, ""), RuntimeError)


def test_error_carries_the_last_error_message():
    inp, opt, out, ex = _lib.XentInput(), _lib.XentOptions(), _lib.XentOutput(), _lib.XentExec()
    inp.rows, inp.vocab = 4, 0  # bad shape
    with pytest.raises(xent.XentValueError) as e:
        _lib.forward(inp, opt, out, ex, grad=False)
    assert e.value.status_name == "XENT_ERROR_BAD_SHAPE"
    assert "vocab is 0" in e.value.message
    with pytest.raises(ValueError, match="int64"):
        _lib.make_options(ignore_index=2**63)


def _run_python(code, env_updates):
    env = dict(os.environ)
    env.update(env_updates)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def test_library_search_honours_xent_library():
    here = _lib.library_path()
    r = _run_python("import xent; print(xent.library_path())", {"XENT_LIBRARY": here})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == here
    r = _run_python("import xent; xent.info()", {"XENT_LIBRARY": "/nonexistent/libxent.so"})
    assert r.returncode != 0 and "XENT_LIBRARY" in r.stderr
