#!/usr/bin/env python3
"""jax_step.py - xent's JAX calls against what JAX users write, one jitted training step each.

Two kernels, bf16, each step a jax.jit of jax.value_and_grad (the loss and the gradient of
its float inputs), timed as the median of --iters runs after --warmup, on the default
device (a GPU when JAX has one):

    logits  8192 x 128256: the loss over materialised logits (the gradient over them)
        xent            xent.jax.cross_entropy (the gradient written over the logits' buffer,
                        donated to the step)
        optax           optax.softmax_cross_entropy_with_integer_labels(...).mean(), in bf16
        optax_fp32      the same on the logits upcast to fp32
        jax_nn          -take_along_axis(jax.nn.log_softmax(x.astype(f32)), y).mean()
    linear  8192 x 4096 x 128256: the LM head and the loss (the gradients of x and W)
        xent            xent.jax.fused_linear_cross_entropy (default budget: 1/16 of the logits)
        jit_matmul      the logits x W^T in bf16, then the fp32 cross-entropy above: XLA's own
        lax_map_chunks  the same a chunk of rows at a time under jax.lax.map with checkpointed
                        chunks (what JAX users write by hand to save memory), --chunk rows

Each provider runs in a process of its own, so that the device's peak memory
(device.memory_stats()["peak_bytes_in_use"]) is its own; "extra" is that peak minus the
inputs and the gradients every provider holds, plus what was taken outside XLA's allocator
(the high-water mark of the CUDA device's default stream-ordered pool, where xent takes its
workspace when XLA's scratch gives none), in MiB; "outside" is that second part alone. On
the CPU (no GPU), --quick shrinks the shapes for a smoke run.

    python3 bench/jax_step.py [--kernel logits,linear] [--providers ...] [--quick] [--csv F]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import source_tree  # noqa: E402
from cuda_pool import default_pool_high_water  # noqa: E402

source_tree.use_xent()
KERNELS = {"logits": ["xent", "optax", "optax_fp32", "jax_nn"],
           "linear": ["xent", "jit_matmul", "lax_map_chunks"]}


def _one(kernel: str, provider: str, bt: int, h: int, v: int, iters: int, warmup: int,
         chunk: int) -> dict:
    """One provider's step, timed in this process (the child)."""
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np

    dev = jax.devices()[0]
    rng = np.random.default_rng(0)

    def normal(shape, scale):
        """bf16 inputs drawn on the host and copied over: drawn on the device, their fp32
        draws (and the generator's temporaries, 2x the fp32 size) set the process's peak
        memory before any provider runs (2026-12-06, H100: 2004 MiB of xent's 'extra'
        over logits was the draw's)."""
        a = rng.standard_normal(shape, dtype=np.float32)
        a *= scale
        return jax.device_put(a.astype(jnp.bfloat16), dev)

    y = jax.device_put(rng.integers(0, v, (bt,), dtype=np.int32), dev)

    def ce32(z, y):
        lp = jax.nn.log_softmax(z.astype(jnp.float32), axis=-1)
        return -jnp.take_along_axis(lp, y[:, None], axis=-1).mean()

    if kernel == "logits":
        x = normal((bt, v), 2.0)
        inputs = x.size * 2 + y.size * 4
        held = x.size * 2  # the gradient
        if provider == "xent":
            import xent.jax as xj
            f = jax.jit(jax.value_and_grad(lambda x: xj.cross_entropy(x, y)), donate_argnums=0)
        elif provider in ("optax", "optax_fp32"):
            import optax
            up = provider == "optax_fp32"
            f = jax.jit(jax.value_and_grad(lambda x: optax.softmax_cross_entropy_with_integer_labels(
                x.astype(jnp.float32) if up else x, y).mean()))
        else:
            f = jax.jit(jax.value_and_grad(lambda x: ce32(x, y)))
        args = lambda: (jnp.array(x, copy=True),)  # noqa: E731  (a fresh buffer to donate)
        flops = 0.0
    else:
        x = normal((bt, h), 1.0)
        w = normal((v, h), (2.0 / h) ** 0.5)
        inputs = (x.size + w.size) * 2 + y.size * 4
        held = (x.size + w.size) * 2  # dX and dW
        if provider == "xent":
            import xent.jax as xj
            loss = lambda x, w: xj.fused_linear_cross_entropy(x, w, y)  # noqa: E731
        elif provider == "jit_matmul":
            loss = lambda x, w: ce32(x @ w.T, y)  # noqa: E731
        else:
            n = (bt + chunk - 1) // chunk
            pad = n * chunk - bt

            def loss(x, w):
                xc = jnp.pad(x, ((0, pad), (0, 0))).reshape(n, chunk, h)
                yc = jnp.pad(y, (0, pad), constant_values=-1).reshape(n, chunk)

                @jax.checkpoint
                def piece(a):
                    xi, yi = a
                    lp = jax.nn.log_softmax((xi @ w.T).astype(jnp.float32), axis=-1)
                    nll = -jnp.take_along_axis(lp, jnp.maximum(yi, 0)[:, None], axis=-1)[:, 0]
                    return jnp.where(yi >= 0, nll, 0.0).sum()
                return jax.lax.map(piece, (xc, yc)).sum() / bt
        f = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
        args = lambda: (x, w)  # noqa: E731
        flops = 6.0 * bt * h * v
    for _ in range(warmup):
        jax.block_until_ready(f(*args()))
    times = []
    for _ in range(iters):
        a = args()
        jax.block_until_ready(a)
        t0 = time.perf_counter()
        jax.block_until_ready(f(*a))
        times.append((time.perf_counter() - t0) * 1e3)
    ms = float(np.median(times))
    stats = dev.memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    outside = float((default_pool_high_water() or 0) if dev.platform == "gpu" else 0)
    extra = (peak - inputs - held + outside) / 2**20 if peak else float("nan")
    return dict(kernel=kernel, provider=provider, bt=bt, h=h, v=v, ms=ms, extra_mib=extra,
                outside_mib=outside / 2**20,
                tflops=flops / ms / 1e9 if flops else 0.0, device=dev.device_kind)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kernel", default="logits,linear")
    p.add_argument("--providers", default="")
    p.add_argument("--bt", type=int, default=8192)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--chunk", type=int, default=1024, help="rows a lax.map chunk")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="small shapes (a CPU smoke run)")
    p.add_argument("--csv", default="")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.quick:
        a.bt, a.hidden, a.vocab, a.iters, a.warmup, a.chunk = 256, 64, 2048, 3, 1, 64
    if a.child:
        kernel, provider = a.child.split(":")
        print(json.dumps(_one(kernel, provider, a.bt, a.hidden, a.vocab, a.iters, a.warmup,
                              a.chunk)))
        return 0
    rows = []
    want = set(filter(None, a.providers.split(",")))
    for kernel in filter(None, a.kernel.split(",")):
        for prov in KERNELS[kernel]:
            if want and prov not in want:
                continue
            cmd = [sys.executable, os.path.abspath(__file__), "--child", f"{kernel}:{prov}",
                   "--bt", str(a.bt), "--hidden", str(a.hidden), "--vocab", str(a.vocab),
                   "--chunk", str(a.chunk), "--iters", str(a.iters), "--warmup", str(a.warmup)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                last = (r.stderr.strip().splitlines() or ["?"])[-1]
                print(f"  {kernel:7s} {prov:15s} skipped: {last[:150]}")
                continue
            row = json.loads(r.stdout.strip().splitlines()[-1])
            rows.append(row)
            shape = f"{row['bt']} x {row['v']}" if kernel == "logits" else \
                f"{row['bt']} x {row['h']} x {row['v']}"
            tf = f" {row['tflops']:6.1f} TFLOP/s" if row["tflops"] else ""
            print(f"  {kernel:7s} {prov:15s} {shape:22s} {row['ms']:9.3f} ms "
                  f"extra {row['extra_mib']:9.1f} MiB (outside XLA {row['outside_mib']:6.1f})"
                  f"{tf}  ({row['device']})", flush=True)
    if a.csv and rows:
        import csv
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
