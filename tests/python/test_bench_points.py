"""The compare driver's choice of points: the seed's sweeps, --only, and single points.

Needs neither torch nor a GPU: it only parses arguments.
"""

import os
import sys

import pytest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

import compare  # noqa: E402


def points(*argv):
    return compare.build_points(compare.parse_args(list(argv)), True)


def test_sweeps_are_the_seeds():
    vocab = points("--sweep", "vocab")
    assert [v for _, _, v in vocab] == [32000, 50304, 102400, 128256, 152064, 201088, 262144]
    assert {(x, bt) for x, bt, _ in vocab} == {("V", 8192)}
    bt = points("--sweep", "bt")
    assert [b for _, b, _ in bt] == [1024, 2048, 4096, 8192, 16384, 32768, 65536]
    assert {(x, v) for x, _, v in bt} == {("BT", 128256)}


def test_only_keeps_the_sweeps_labels():
    assert points("--sweep", "bt", "--only", "16384,65536") == [
        ("BT", 16384, 128256),
        ("BT", 65536, 128256),
    ]
    assert points("--sweep", "all", "--only", "32000,8192") == [
        ("V", 8192, 32000),
        ("BT", 8192, 128256),
    ]


def test_only_with_no_match_is_an_error():
    with pytest.raises(SystemExit, match="matches no point"):
        points("--sweep", "vocab", "--only", "12345")


def test_single_point():
    assert points("--bt", "4096", "--vocab", "50304") == [("V", 4096, 50304)]
