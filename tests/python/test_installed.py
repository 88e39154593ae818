"""The package as a wheel installs it: scripts/wheel.sh runs the whole suite
against the installed wheel with XENT_TEST_INSTALLED=1, from a fresh virtual
environment whose path holds no source tree. These tests check that it is
so; in a source checkout they skip, but for the version's agreement.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import sys

import pytest

import xent

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INSTALLED = os.environ.get("XENT_TEST_INSTALLED") == "1"
installed = pytest.mark.skipif(not INSTALLED, reason="runs on an installed wheel (scripts/wheel.sh)")


def _read(path):
    with open(os.path.join(REPO, path)) as f:
        return f.read()


def test_one_version_everywhere():
    """pyproject.toml, CMake's project, the header, the package and the library agree."""
    v = re.search(r'^version = "([^"]+)"', _read("pyproject.toml"), re.M).group(1)
    assert re.search(r"project\(xent VERSION ([0-9.]+)", _read("CMakeLists.txt")).group(1) == v
    h = _read("include/xent.h")
    parts = [re.search(rf"#define XENT_VERSION_{k} (\d+)", h).group(1)
             for k in ("MAJOR", "MINOR", "PATCH")]
    assert ".".join(parts) == v
    assert xent.__version__ == v
    assert xent.library_version() == v


@installed
def test_the_installed_package_is_imported():
    src = os.path.join(REPO, "python")
    spec = importlib.util.find_spec("xent")
    assert not os.path.abspath(spec.origin).startswith(src + os.sep), spec.origin
    assert not any(os.path.abspath(p or ".") == src for p in sys.path)
    assert "XENT_LIBRARY" not in os.environ
    pkg = os.path.dirname(os.path.abspath(xent.__file__))
    assert os.path.dirname(os.path.abspath(xent.library_path())) == pkg


@installed
def test_metadata_version_and_portable_cpu_kernels():
    assert importlib.metadata.version("xent") == xent.__version__ == xent.library_version()
    level = xent.info()["cpu_level"]  # 0 only in a -march=native build
    cap = int(os.environ.get("XENT_CPU_LEVEL") or 4)
    assert level in (1, 3, 4) and level <= cap
    if cap == 1:
        assert level == 1
