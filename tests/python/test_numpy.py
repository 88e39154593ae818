"""The NumPy entry point (xent.numpy) against the float64 reference. NumPy only."""

from __future__ import annotations

import numpy as np
import pytest

import xent
import xent.numpy as xn
from helpers import (FEATURES, REDUCTIONS, bf16_bits_to_f64, f32_to_bf16_bits, make_logits,
                     make_targets, make_weight)
from reference import cross_entropy_ref
from tolerances import assert_close, tol

DTYPES = ["float32", "float16", "bfloat16"]


def to_dtype(x32, dtype):
    """(array for the library, its float64 values, extra kwargs)."""
    if dtype == "float32":
        a = x32.copy()
        return a, a.astype(np.float64), {}
    if dtype == "float16":
        a = x32.astype(np.float16)
        return a, a.astype(np.float64), {}
    a = f32_to_bf16_bits(x32)
    return a, bf16_bits_to_f64(a), {"dtype": "bfloat16"}


def values(a, dtype):
    return bf16_bits_to_f64(a) if dtype == "bfloat16" else np.asarray(a, dtype=np.float64)


def build_kwargs(rng, v, feature):
    kw = dict(FEATURES[feature])
    if kw.pop("weight", False):
        kw["weight"] = make_weight(rng, v)
    return kw


@pytest.mark.parametrize("feature", list(FEATURES))
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_grad_matches_reference(rng, dtype, reduction, feature):
    n, v = 37, 1003  # V not a multiple of 8
    kw = build_kwargs(rng, v, feature)
    x32 = make_logits(rng, n, v)
    y = make_targets(rng, x32, ignore_index=kw.get("ignore_index", -100))
    a, x64, dkw = to_dtype(x32, dtype)
    ref = cross_entropy_ref(x64, y, reduction=reduction, **kw)

    out = xn.cross_entropy(a, y, reduction=reduction, grad=True, return_z_loss=True,
                           return_token_accuracy=True, return_predicted_tokens=True,
                           return_lse=True, **kw, **dkw)
    f32 = tol("float32", "loss")
    assert_close(out.loss, ref["loss"], f32, "loss")
    assert_close(out.z_loss, ref["z_loss"], f32, "z_loss")
    assert_close(out.lse, ref["lse"], f32, "lse")
    np.testing.assert_array_equal(out.token_accuracy, np.float32(ref["token_accuracy"]))
    np.testing.assert_array_equal(out.predicted_tokens, ref["predicted"])
    assert_close(values(a, dtype), ref["grad"], tol(dtype, "grad"), "gradient")
    if reduction == "none":
        assert out.loss.shape == (n,) and out.loss.dtype == np.float32
    else:
        assert np.ndim(out.loss) == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_only_leaves_logits_unchanged(rng, dtype):
    x32 = make_logits(rng, 16, 301)
    y = make_targets(rng, x32)
    a, x64, dkw = to_dtype(x32, dtype)
    before = a.copy()
    loss = xn.cross_entropy(a, y, **dkw)
    np.testing.assert_array_equal(a, before)
    assert_close(loss, cross_entropy_ref(x64, y)["loss"], tol("float32", "loss"), "loss")


def test_loss_alone_without_return_flags(rng):
    x = make_logits(rng, 8, 50)
    y = make_targets(rng, x)
    loss = xn.cross_entropy(x, y)
    assert isinstance(loss, np.float32)
    assert not isinstance(xn.cross_entropy(x, y, reduction="none"), xn.CrossEntropyResult)


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_rows_gradient_in_place(rng, dtype):
    n, v, pad = 12, 257, 11
    big32 = make_logits(rng, n, v + pad)
    big, big64, dkw = to_dtype(big32, dtype)
    view = big[:, :v]
    assert not view.flags.c_contiguous
    y = make_targets(rng, big32[:, :v])
    pad_before = big[:, v:].copy()
    loss = xn.cross_entropy(view, y, grad=True, label_smoothing=0.05, **dkw)
    ref = cross_entropy_ref(big64[:, :v], y, label_smoothing=0.05)
    assert_close(loss, ref["loss"], tol("float32", "loss"), "loss")
    assert_close(values(big[:, :v], dtype), ref["grad"], tol(dtype, "grad"), "gradient")
    np.testing.assert_array_equal(big[:, v:], pad_before)  # padding untouched


def test_three_dimensional_input_and_int32_targets(rng):
    b, t, v = 3, 5, 129
    x = (rng.standard_normal((b, t, v)) * 2).astype(np.float32)
    y = make_targets(rng, x.reshape(-1, v)).reshape(b, t).astype(np.int32)
    ref = cross_entropy_ref(x.reshape(-1, v).astype(np.float64), y.reshape(-1), reduction="none")
    a = x.copy()
    out = xn.cross_entropy(a, y, reduction="none", grad=True, return_predicted_tokens=True)
    assert out.loss.shape == (b, t) and out.predicted_tokens.shape == (b, t)
    assert_close(out.loss.reshape(-1), ref["loss"], tol("float32", "loss"), "loss")
    assert_close(a.reshape(-1, v), ref["grad"], tol("float32", "grad"), "gradient")


def test_noncontiguous_layout_copies_without_grad_and_refuses_with_grad(rng):
    x = np.asfortranarray(make_logits(rng, 9, 33))
    y = make_targets(rng, np.ascontiguousarray(x))
    ref = cross_entropy_ref(x.astype(np.float64), y)
    assert_close(xn.cross_entropy(x, y), ref["loss"], tol("float32", "loss"), "loss")
    with pytest.raises(ValueError, match="contiguous last dimension"):
        xn.cross_entropy(x, y, grad=True)


def test_backward_scales_in_place(rng):
    x = make_logits(rng, 10, 77)
    y = make_targets(rng, x)
    g_rows = rng.uniform(-2, 2, 10).astype(np.float32)
    a = x.copy()
    xn.cross_entropy(a, y, reduction="none", grad=True)
    xn.backward(a, g_rows)
    ref = cross_entropy_ref(x.astype(np.float64), y, reduction="none")["grad"] * g_rows[:, None]
    assert_close(a, ref, tol("float32", "grad_scaled"), "scaled gradient")
    b = x.copy()
    xn.cross_entropy(b, y, reduction="sum", grad=True)
    xn.backward(b, 0.375)
    ref = cross_entropy_ref(x.astype(np.float64), y, reduction="sum")["grad"] * 0.375
    assert_close(b, ref, tol("float32", "grad_scaled"), "scaled gradient")


@pytest.mark.parametrize("bad", [-1, 1003, 10**12])
def test_out_of_range_target_raises_and_leaves_logits(rng, bad):
    x = make_logits(rng, 20, 1003)
    y = make_targets(rng, x)
    y[7] = bad
    a = x.copy()
    with pytest.raises(xent.XentError) as info:
        xn.cross_entropy(a, y, grad=True)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.status_name == "XENT_ERROR_BAD_TARGET"
    assert f"targets[7] = {bad}" in str(err)
    np.testing.assert_array_equal(a, x)


@pytest.mark.parametrize(
    "kwargs, status, text",
    [
        ({"label_smoothing": 1.5}, "XENT_ERROR_BAD_LABEL_SMOOTHING", "label_smoothing"),
        ({"softcap": 0.0}, "XENT_ERROR_BAD_SOFTCAP", "softcap"),
        ({"softcap": -3.0}, "XENT_ERROR_BAD_SOFTCAP", "softcap"),
        ({"lse_square_scale": -1.0}, "XENT_ERROR_BAD_ARGUMENT", "lse_square_scale"),
    ],
)
def test_bad_options_raise_with_the_c_message(rng, kwargs, status, text):
    x = make_logits(rng, 6, 40)
    y = make_targets(rng, x)
    a = x.copy()
    with pytest.raises(xent.XentError, match=text) as info:
        xn.cross_entropy(a, y, grad=True, **kwargs)
    assert info.value.status_name == status
    np.testing.assert_array_equal(a, x)


def test_bad_weight_raises(rng):
    x = make_logits(rng, 6, 40)
    y = make_targets(rng, x)
    w = make_weight(rng, 40)
    w[13] = np.nan
    with pytest.raises(xent.XentValueError, match=r"weights\[13\]"):
        xn.cross_entropy(x.copy(), y, weight=w, grad=True)


def test_python_side_argument_errors(rng):
    x = make_logits(rng, 6, 40)
    y = make_targets(rng, x)
    with pytest.raises(ValueError, match="reduction"):
        xn.cross_entropy(x, y, reduction="avg")
    with pytest.raises(ValueError, match="elements"):
        xn.cross_entropy(x, y[:-1])
    with pytest.raises(ValueError, match="integers"):
        xn.cross_entropy(x, y.astype(np.float32))
    with pytest.raises(ValueError, match="float32"):
        xn.cross_entropy(x.astype(np.float64), y)
    with pytest.raises(ValueError, match="bfloat16"):
        xn.cross_entropy(f32_to_bf16_bits(x), y)  # uint16 without dtype="bfloat16"
    with pytest.raises(ValueError, match="writeable"):
        ro = x.copy()
        ro.flags.writeable = False
        xn.cross_entropy(ro, y, grad=True)


def test_mean_over_no_rows_is_nan_and_sum_is_zero(rng):
    x = make_logits(rng, 5, 17)
    y = np.full(5, -100)
    a = x.copy()
    out = xn.cross_entropy(a, y, grad=True, return_token_accuracy=True)
    assert np.isnan(out.loss) and np.isnan(out.token_accuracy)
    np.testing.assert_array_equal(a, np.zeros_like(a))
    assert xn.cross_entropy(x, y, reduction="sum") == 0.0
    empty = np.zeros((0, 17), dtype=np.float32)
    assert np.isnan(xn.cross_entropy(empty, np.zeros(0, dtype=np.int64)))
    assert xn.cross_entropy(empty, np.zeros(0, dtype=np.int64), reduction="none").shape == (0,)


def test_threads_do_not_change_results(rng):
    x = make_logits(rng, 64, 700)
    y = make_targets(rng, x)
    a, b = x.copy(), x.copy()
    la = xn.cross_entropy(a, y, grad=True, num_threads=1, lse_square_scale=1e-3)
    lb = xn.cross_entropy(b, y, grad=True, num_threads=0, lse_square_scale=1e-3)
    assert la == lb
    np.testing.assert_array_equal(a, b)


def test_large_vocabulary_stays_accurate(rng):
    # Large vocabularies have caused silent convergence bugs elsewhere.
    n, v = 3, 262147
    x = make_logits(rng, n, v, scale=4.0)
    y = make_targets(rng, x, ignore_frac=0.0)
    a = x.copy()
    loss = xn.cross_entropy(a, y, grad=True, label_smoothing=0.1, reduction="sum")
    ref = cross_entropy_ref(x.astype(np.float64), y, label_smoothing=0.1, reduction="sum")
    assert_close(loss, ref["loss"], tol("float32", "loss"), "loss")
    assert_close(a, ref["grad"], tol("float32", "grad"), "gradient")


def test_ml_dtypes_bfloat16_arrays(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")
    x32 = make_logits(rng, 8, 99)
    y = make_targets(rng, x32)
    a = x32.astype(ml_dtypes.bfloat16)
    x64 = a.astype(np.float64)
    loss = xn.cross_entropy(a, y, grad=True)
    ref = cross_entropy_ref(x64, y)
    assert_close(loss, ref["loss"], tol("float32", "loss"), "loss")
    assert_close(a.astype(np.float64), ref["grad"], tol("bfloat16", "grad"), "gradient")


@pytest.mark.parametrize("dtype", [np.uint64, np.uint32, np.uint8, np.int16])
def test_other_integer_targets_convert_exactly_or_raise(rng, dtype):
    """Targets of any integer type are used at their value: an unsigned
    2**64 - 100 is a bad target, not the ignore_index -100 that int64 would
    wrap it to; values that fit are converted exactly."""
    x = make_logits(rng, 6, 40)
    y = make_targets(rng, x, ignore_frac=0.0).astype(dtype)
    ref = cross_entropy_ref(x.astype(np.float64), y.astype(np.int64))
    assert_close(xn.cross_entropy(x, y), ref["loss"], tol("float32", "loss"), "loss")
    if dtype == np.uint64:
        before = x.copy()
        y[2] = np.uint64(2**64 - 100)
        with pytest.raises(xent.XentValueError, match=r"targets\[2\] = 18446744073709551516"):
            xn.cross_entropy(x, y, grad=True)
        np.testing.assert_array_equal(x, before)


def test_no_classes_give_xents_own_message():
    for shape in ((0,), (4, 0), (2, 3, 0)):
        x = np.zeros(shape, dtype=np.float32)
        y = np.zeros(shape[:-1], dtype=np.int64)
        with pytest.raises(xent.XentValueError, match="no classes"):
            xn.cross_entropy(x, y)
