"""xent.jax against the float64 reference (reference.py): the loss over logits
and the fused linear loss through XLA's FFI, under jit, grad and vmap, every
option and dtype, odd shapes; the vocabulary-parallel loss in shard_map over
meshes of 1 to 4 (CPU devices of a subprocess); bad arguments. On the CPU
always, and on a CUDA GPU where JAX has one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

try:
    import xent.jax as xj  # noqa: E402
    from xent.jax import _ffi  # noqa: E402
    _ffi.library_path()
except (ImportError, OSError) as e:  # a build without libxent_jax
    pytest.skip(f"xent.jax is not available: {e}", allow_module_level=True)

from helpers import make_logits, make_targets, make_weight  # noqa: E402
from reference import cross_entropy_ref  # noqa: E402
from tolerances import assert_close, tol, with_cancellation  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench"))
from cuda_pool import default_pool_high_water  # noqa: E402  (the benchmark's reading of it)

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def _platforms():
    out = ["cpu"]
    try:
        if jax.devices("gpu"):
            out.append("gpu")
    except RuntimeError:
        pass
    return out


@pytest.fixture(params=_platforms())
def device(request):
    dev = jax.devices(request.param)[0]
    with jax.default_device(dev):
        yield dev


def _f64(a) -> np.ndarray:
    return np.asarray(jnp.asarray(a).astype(jnp.float32), dtype=np.float64)


FEATURES = {
    "plain": {},
    "weights+smoothing": {"weights": True, "label_smoothing": 0.1},
    "zloss+softcap": {"lse_square_scale": 1e-3, "softcap": 15.0},
    "real-ignore-index": {"ignore_index": 3, "label_smoothing": 0.05},
}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("feature", list(FEATURES))
def test_cross_entropy_matches_reference(device, rng, dtype, reduction, feature):
    f = dict(FEATURES[feature])
    shape = (3, 7, 129) if feature == "plain" else (37, 509)
    x32 = make_logits(rng, int(np.prod(shape[:-1])), shape[-1]).reshape(shape)
    x = jnp.asarray(x32).astype(DTYPES[dtype])
    xs = _f64(x).reshape(-1, shape[-1])
    ii = f.pop("ignore_index", -100)
    y = make_targets(rng, xs, ignore_index=ii).reshape(shape[:-1]).astype(np.int32)
    w = make_weight(rng, shape[-1]) if f.pop("weights", False) else None
    kw = dict(f, ignore_index=ii, reduction=reduction)
    ref = cross_entropy_ref(xs, y.reshape(-1), weight=w, **kw)
    # a random cotangent: the backward's scaling is checked too
    ct = rng.uniform(0.5, 2.0, shape[:-1] if reduction == "none" else ()).astype(np.float32)

    def loss(x):
        out = xj.cross_entropy(x, jnp.asarray(y), None if w is None else jnp.asarray(w),
                               return_z_loss=True, return_token_accuracy=True,
                               return_predicted_tokens=True, return_lse=True, **kw)
        return jnp.sum(out.loss * ct), out

    (_, out), g = jax.jit(jax.value_and_grad(loss, has_aux=True))(x)
    big = float(np.max(np.abs(xs))) + 1.0
    lt = with_cancellation(tol("float32", "loss"), big)
    per = shape[:-1] if reduction == "none" else ()
    assert_close(np.asarray(out.loss), np.asarray(ref["loss"]).reshape(per), lt, "loss")
    assert_close(np.asarray(out.z_loss), np.asarray(ref["z_loss"]).reshape(per), lt, "z_loss")
    assert_close(np.asarray(out.lse), ref["lse"].reshape(shape[:-1]), lt, "lse")
    pred = np.asarray(out.predicted_tokens).reshape(-1)
    valid = y.reshape(-1) != ii
    assert np.all(pred[~valid] == -1)
    xp = np.tanh(xs / f["softcap"]) * f["softcap"] if "softcap" in f else xs
    picked = xp[np.arange(len(pred)), np.where(valid, pred, 0)]
    assert np.all(picked[valid] >= xp[valid].max(axis=1) - 1e-2 * big * 2.0**-7)
    if reduction != "none":
        assert abs(float(out.token_accuracy) - float(ref["token_accuracy"])) <= 2.5 / valid.sum()
    gref = ref["grad"] * (ct.reshape(-1, 1) if reduction == "none" else ct)
    gt = with_cancellation(tol(dtype, "grad_scaled"), float(np.max(np.abs(gref))))
    assert g.dtype == x.dtype
    assert_close(_f64(g).reshape(-1, shape[-1]), gref, gt, "grad")


def test_cross_entropy_donated_logits_and_vmap(device, rng):
    x = jnp.asarray(make_logits(rng, 64, 1000)).astype(jnp.bfloat16)
    y = jnp.asarray(make_targets(rng, _f64(x)).astype(np.int32))
    f = jax.value_and_grad(lambda x: xj.cross_entropy(x, y))
    l1, g1 = jax.jit(f)(x)
    l2, g2 = jax.jit(f, donate_argnums=0)(jnp.array(x, copy=True))  # in place, same bits
    assert float(l1) == float(l2) and bool(jnp.all(g1 == g2))
    xb = jnp.stack([x, x * 2, x[::-1]])
    yb = jnp.stack([y, y, y[::-1]])
    lb = jax.jit(jax.vmap(lambda x, y: xj.cross_entropy(x, y)))(xb, yb)
    for i in range(3):
        assert float(lb[i]) == float(xj.cross_entropy(xb[i], yb[i]))


def test_cross_entropy_against_optax(device, rng):
    optax = pytest.importorskip("optax")
    x = jnp.asarray(make_logits(rng, 50, 333))
    y = jnp.asarray(rng.integers(0, 333, 50).astype(np.int32))
    want = optax.softmax_cross_entropy_with_integer_labels(x, y)
    got = xj.cross_entropy(x, y, reduction="none")
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-6, atol=2e-6)
    g1 = jax.grad(lambda x: xj.cross_entropy(x, y))(x)
    g2 = jax.grad(lambda x: optax.softmax_cross_entropy_with_integer_labels(x, y).mean())(x)
    np.testing.assert_allclose(np.asarray(g1), np.asarray(g2), rtol=1e-5, atol=1e-7)


def test_int64_targets(device, rng):
    with jax.enable_x64(True):
        x = jnp.asarray(make_logits(rng, 9, 70))
        y64 = jnp.asarray(make_targets(rng, _f64(x)), dtype=jnp.int64)
        assert y64.dtype == jnp.int64
        a = xj.cross_entropy(x, y64, return_predicted_tokens=True)
        b = xj.cross_entropy(x, y64.astype(jnp.int32), return_predicted_tokens=True)
        assert float(a.loss) == float(b.loss)
        assert bool(jnp.all(a.predicted_tokens == b.predicted_tokens))


def test_bad_arguments_raise_before_running(device, rng):
    x = jnp.asarray(make_logits(rng, 4, 10))
    y = jnp.asarray([1, 2, 3, 4], dtype=jnp.int32)
    cases = [
        (dict(logits=x.astype(jnp.int32)), TypeError, "logits"),
        (dict(targets=y[:3]), ValueError, "targets"),
        (dict(targets=y.astype(jnp.float32)), TypeError, "targets"),
        (dict(weights=jnp.ones(9)), ValueError, "weights"),
        (dict(reduction="avg"), ValueError, "reduction"),
        (dict(label_smoothing=1.5), ValueError, "label_smoothing"),
        (dict(lse_square_scale=-1.0), ValueError, "lse_square_scale"),
        (dict(softcap=0.0), ValueError, "softcap"),
        (dict(empty_mean="one"), ValueError, "empty_mean"),
        (dict(ignore_index=2**70), ValueError, "ignore_index"),
    ]
    for kw, exc, word in cases:
        args = dict(logits=x, targets=y)
        args.update({k: v for k, v in kw.items() if k in args})
        rest = {k: v for k, v in kw.items() if k not in args}
        with pytest.raises(exc, match=word):
            xj.cross_entropy(args["logits"], args["targets"], **rest)


def test_bad_target_checked_and_graph_safe(device, rng):
    x = jnp.asarray(make_logits(rng, 5, 37))
    bad = jnp.asarray([1, 2, 3, 37, 0], dtype=jnp.int32)
    with pytest.raises(Exception, match=r"targets\[3\] = 37"):
        jax.block_until_ready(jax.jit(lambda x: xj.cross_entropy(x, bad))(x))
    f = jax.value_and_grad(lambda x: xj.cross_entropy(x, bad, check_targets=False,
                                                       reduction="sum"))
    if device.platform == "cpu":  # the CPU reads the targets anyway: checked in every mode
        with pytest.raises(Exception, match=r"targets\[3\] = 37"):
            jax.block_until_ready(f(x))
        return
    loss, g = f(x)
    assert np.isnan(float(loss))
    assert bool(jnp.all(g[3] == 0)) and bool(jnp.all(jnp.isfinite(g)))


def _linear_ref(x, w, b, y, cw, kw):
    """The fused linear loss in float64: the logits, the reference, dX, dW, db."""
    z = x @ w.T + (0.0 if b is None else b)
    r = cross_entropy_ref(z, y, weight=cw, **kw)
    g = r["grad"]
    return r, g @ w, g.T @ x, g.sum(axis=0)


def _rel(got, ref) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - ref) / (np.linalg.norm(ref) + 1e-30))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("extras", [False, True])
def test_fused_linear_matches_reference(device, rng, dtype, reduction, extras):
    n, h, v = 45, 24, 301
    dt = DTYPES[dtype]
    x = jnp.asarray(rng.standard_normal((3, n // 3, h)).astype(np.float32)).astype(dt)
    w = jnp.asarray((rng.standard_normal((v, h)) * 0.3).astype(np.float32)).astype(dt)
    b = jnp.asarray(rng.standard_normal(v).astype(np.float32)).astype(dt) if extras else None
    xs, ws = _f64(x).reshape(n, h), _f64(w)
    bs = _f64(b) if extras else None
    y = make_targets(rng, xs @ ws.T).astype(np.int32)
    cw = make_weight(rng, v) if extras else None
    kw = dict(reduction=reduction, label_smoothing=0.1 if extras else 0.0,
              lse_square_scale=1e-3 if extras else 0.0)
    r, dx, dw, db = _linear_ref(xs, ws, bs, y, cw, kw)
    ct = rng.uniform(0.5, 2.0, (3, n // 3) if reduction == "none" else ()).astype(np.float32)
    cts = ct.reshape(-1, 1) if reduction == "none" else ct
    if reduction == "none":  # each row's cotangent scales its gradient
        g = r["grad"] * cts
        dx, dw, db = g @ ws, g.T @ xs, g.sum(axis=0)
    else:
        dx, dw, db = dx * ct, dw * ct, db * ct

    def loss(x, w, b):
        out = xj.fused_linear_cross_entropy(
            x, w, jnp.asarray(y.reshape(3, -1)), b,
            class_weights=None if cw is None else jnp.asarray(cw), chunk_rows=16, **kw)
        return jnp.sum(out * ct)

    args = (x, w, b) if extras else (x, w)
    argnums = (0, 1, 2) if extras else (0, 1)
    f = jax.jit(jax.value_and_grad(lambda *a: loss(*a) if extras else loss(*a, None),
                                   argnums=argnums))
    val, grads = f(*args)
    want = float(np.sum(np.asarray(r["loss"]).reshape(ct.shape) * ct))
    lim = 1e-5 if dtype == "float32" else 1e-2
    assert abs(float(val) - want) <= lim * (abs(want) + 1.0)
    assert _rel(_f64(grads[0]).reshape(n, h), dx) <= lim
    assert _rel(_f64(grads[1]), dw) <= lim
    if extras:
        assert _rel(_f64(grads[2]), db) <= lim
    # a frozen head: dW is not asked for, and dX is the same
    gx = jax.grad(lambda x: loss(x, w, b))(x)
    assert bool(jnp.all(gx == grads[0]))


def test_fused_linear_bad_arguments(device):
    x = jnp.ones((4, 8))
    w = jnp.ones((10, 8))
    y = jnp.zeros(4, jnp.int32)
    with pytest.raises(ValueError, match="w must be"):
        xj.fused_linear_cross_entropy(x, jnp.ones((10, 7)), y)
    with pytest.raises(TypeError, match="share a dtype"):
        xj.fused_linear_cross_entropy(x, w.astype(jnp.bfloat16), y)
    with pytest.raises(ValueError, match="bias"):
        xj.fused_linear_cross_entropy(x, w, y, jnp.ones(9))
    with pytest.raises(ValueError, match="schedule"):
        xj.fused_linear_cross_entropy(x, w, y, schedule="cols")


_VP_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np, jax, jax.numpy as jnp
    from jax.sharding import Mesh, PartitionSpec as P
    import xent.jax as xj
    from xent.jax.parallel import vocab_parallel_cross_entropy as vp
    sys.path.insert(0, {here!r})
    from helpers import make_logits, make_targets, make_weight
    rng = np.random.default_rng({seed})
    assert jax.devices()[0].platform == {platform!r}, jax.devices()
    for dt in (jnp.float32, jnp.bfloat16):
        x = jnp.asarray(make_logits(rng, 33, 96)).astype(dt)
        y = jnp.asarray(make_targets(rng, np.asarray(x.astype(jnp.float32))).astype(np.int32))
        w = jnp.asarray(make_weight(rng, 96))
        for n in {sizes!r}:
            mesh = Mesh(np.array(jax.devices()[:n]), ("tp",))
            for kw in (dict(), dict(label_smoothing=0.1, return_token_accuracy=True),
                       dict(reduction="none", lse_square_scale=1e-3)):
                kw = dict(kw, return_lse=True)
                f = jax.shard_map(lambda x, y, w: vp(x, y, "tp", w, **kw), mesh=mesh,
                                  in_specs=(P(None, "tp"), P(), P()), out_specs=P())
                got = jax.jit(f)(x, y, w)
                want = xj.cross_entropy(x, y, w, **kw)
                # the records merge in another order than one row's reduction: a few
                # fp32 ulps apart, and one rounding of the dtype for the gradient
                for a, b in zip(got, want):
                    if b is not None:
                        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5,
                                                   atol=1e-6)
                ct = jnp.arange(33.0) if kw.get("reduction") == "none" else 1.5
                g = jax.jit(jax.grad(lambda x: jnp.sum(jax.shard_map(
                    lambda x, y, w: vp(x, y, "tp", w, **kw).loss, mesh=mesh,
                    in_specs=(P(None, "tp"), P(), P()), out_specs=P())(x, y, w) * ct)))(x)
                gw = jax.grad(lambda x: jnp.sum(xj.cross_entropy(x, y, w, **kw).loss * ct))(x)
                assert g.dtype == x.dtype
                ga, gb = np.asarray(g.astype(jnp.float32)), np.asarray(gw.astype(jnp.float32))
                rt = 1e-5 if dt == jnp.float32 else 2.0**-7
                np.testing.assert_allclose(ga, gb, rtol=rt, atol=1e-6 * np.abs(gb).max())
    print("vp ok")
""")


def test_vocab_parallel_in_shard_map(seed):
    """shard_map over meshes of 1, 2 and 4 CPU devices (a subprocess: the
    device count is fixed when JAX starts) against the one-device loss."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu")
    script = _VP_SCRIPT.format(here=HERE, seed=seed, platform="cpu", sizes=(1, 2, 4))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and "vp ok" in r.stdout, r.stdout[-2000:] + r.stderr[-4000:]


def test_vocab_parallel_in_shard_map_gpu(seed):
    """The same over the GPUs there are (one: a mesh of 1 still runs the
    collective's code, XLA's all-gather and the FFI calls on the GPU)."""
    if "gpu" not in _platforms():
        pytest.skip("no GPU for jax")
    n = len(jax.devices("gpu"))
    sizes = tuple(k for k in (1, 2, 4) if k <= n)
    env = dict(os.environ, JAX_PLATFORMS="cuda")
    script = _VP_SCRIPT.format(here=HERE, seed=seed, platform="gpu", sizes=sizes)
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and "vp ok" in r.stdout, r.stdout[-2000:] + r.stderr[-4000:]


def _gpu_linear_inputs(rng, n, h, v):
    """bf16 hidden states (n x h), a bf16 weight (v x h) and int32 targets, on the default
    device."""
    x = jnp.asarray(rng.standard_normal((n, h)).astype(np.float32)).astype(jnp.bfloat16)
    w = jnp.asarray((rng.standard_normal((v, h)) * 0.05).astype(np.float32)).astype(jnp.bfloat16)
    return x, w, jnp.asarray(rng.integers(0, v, n).astype(np.int32))


def test_fused_linear_gpu_medium_shape(rng):
    """On the GPU at a medium shape (several chunks, both schedules), bf16:
    against jnp's matmul and log_softmax in fp32 and their gradients
    (jax.grad of the unfused loss), within bf16's rounding of the logits."""
    if "gpu" not in _platforms():
        pytest.skip("no GPU for jax")
    n, h, v = 2048, 512, 32000
    with jax.default_device(jax.devices("gpu")[0]):
        x, w, y = _gpu_linear_inputs(rng, n, h, v)

        def unfused(x, w):
            z = jnp.matmul(x, w.T, preferred_element_type=jnp.float32)
            lp = jax.nn.log_softmax(z, axis=-1)
            return -jnp.mean(jnp.take_along_axis(lp, y[:, None], axis=1))

        want, (gx0, gw0) = jax.jit(jax.value_and_grad(unfused, argnums=(0, 1)))(x, w)
        for schedule in ("rows", "vocab"):
            f = jax.jit(jax.value_and_grad(lambda x, w: xj.fused_linear_cross_entropy(
                x, w, y, schedule=schedule), argnums=(0, 1)))
            got, (gx, gw) = f(x, w)
            assert abs(float(got) - float(want)) <= 2e-3 * abs(float(want)), schedule
            assert _rel(_f64(gx), _f64(gx0)) <= 2e-2, schedule
            assert _rel(_f64(gw), _f64(gw0)) <= 2e-2, schedule


def test_workspace_from_xla_scratch_gpu(rng):
    """On the GPU the fused linear loss's workspace (and the cross-entropy's) comes from
    XLA's scratch, which XLA counts and reuses, not from memory xent takes beside XLA's
    allocator: the default pool's high-water mark stays 0 over both calls. (XLA refused
    the 64-byte alignment once asked, gave nothing, and 124 MiB went unseen by XLA:
    H100, 2026-12-06.)"""
    if "gpu" not in _platforms():
        pytest.skip("no GPU for jax")
    n, h, v = 2048, 256, 32000
    with jax.default_device(jax.devices("gpu")[0]):
        x, w, y = _gpu_linear_inputs(rng, n, h, v)
        lin = jax.jit(jax.value_and_grad(lambda x, w: xj.fused_linear_cross_entropy(x, w, y),
                                         argnums=(0, 1)))
        ce = jax.jit(jax.value_and_grad(lambda z: xj.cross_entropy(z, y)))
        jax.block_until_ready(lin(x, w))  # compiled, then measured
        jax.block_until_ready(ce(x @ w.T))
        assert default_pool_high_water(reset=True) == 0
        jax.block_until_ready(lin(x, w))
        jax.block_until_ready(ce(x @ w.T))
        assert default_pool_high_water() == 0


def test_jax_step_benchmark_runs():
    """bench/jax_step.py's smoke run: xent and one peer, a line each."""
    bench = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "jax_step.py")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, bench, "--quick", "--kernel", "logits,linear",
                        "--providers", "xent,jax_nn,jit_matmul"], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [ln.split() for ln in r.stdout.splitlines() if " ms " in ln]
    assert [(ln[0], ln[1]) for ln in lines] == [("logits", "xent"), ("logits", "jax_nn"),
                                               ("linear", "xent"), ("linear", "jit_matmul")]
