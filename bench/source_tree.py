"""The xent the benchmark scripts import: an importable one (installed, or on
PYTHONPATH) as it is, else python/ of this checkout, put on sys.path. Never
both: a process that has imported an installed xent must not hand the source
tree on to the processes it spawns (they inherit sys.path)."""

from __future__ import annotations

import importlib.util
import os
import sys

PYTHON_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")


def use_xent() -> None:
    if importlib.util.find_spec("xent") is None and PYTHON_DIR not in sys.path:
        sys.path.insert(0, PYTHON_DIR)
