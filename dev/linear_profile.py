"""Kernel-by-kernel time of one fused linear loss step (torch.profiler) at one shape
(argv[1], "BT,H,V"; default 8192,4096,128256), bf16: where the step's time goes.

argv[2] picks the step: xent (default settings), xent_all (one chunk: all the logits in
memory), xent_all_unchecked (the same without the targets' check), xent_1g (memory_budget
1 GiB), torch_compile (torch.compile of matmul and an fp32 cross_entropy) or liger_sm90 (the
peer's Hopper kernel, its persistent CuTe DSL GEMMs).
XENT_PRODUCTS (cublaslt, xent, xent_pingpong, xent_lc) picks the products' engine of
xent's steps; the library reads it once a process, so run one process per engine. Printed:
ms per step by kernel, the GPU's idle time inside the profiled steps, the host's CUDA calls,
and the step's time in a loop and alone (from an idle GPU, as bench/linear.py times it).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import source_tree  # noqa: E402

source_tree.use_xent()
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from xent.torch.linear import fused_linear_cross_entropy  # noqa: E402

BT, H, V = (int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else "8192,4096,128256").split(","))
WHAT = sys.argv[2] if len(sys.argv) > 2 else "xent"
x = (torch.randn(BT, H, device="cuda") * 0.5).bfloat16().requires_grad_()
w = (torch.randn(V, H, device="cuda") * 0.02).bfloat16().requires_grad_()
y = torch.randint(0, V, (BT,), device="cuda")

if WHAT == "torch_compile":
    loss_fn = torch.compile(lambda x, w, y: F.cross_entropy((x @ w.t()).float(), y))
elif WHAT == "xent_all":
    loss_fn = lambda x, w, y: fused_linear_cross_entropy(x, w, y, chunk_rows=BT)  # noqa: E731
elif WHAT == "xent_all_unchecked":  # no host wait for the targets' verdict
    loss_fn = lambda x, w, y: fused_linear_cross_entropy(  # noqa: E731
        x, w, y, chunk_rows=BT, check_targets=False)
elif WHAT == "xent_1g":
    loss_fn = lambda x, w, y: fused_linear_cross_entropy(  # noqa: E731
        x, w, y, memory_budget=1 << 30)
elif WHAT == "liger_sm90":  # the peer's Hopper kernel (its wheels carried: device.sh)
    from liger_kernel.ops.cutedsl.ops.fused_linear_cross_entropy_sm90 import (
        liger_fused_linear_cross_entropy_sm90)
    loss_fn = liger_fused_linear_cross_entropy_sm90
elif WHAT == "xent":
    loss_fn = fused_linear_cross_entropy
else:
    sys.exit(f"unknown step {WHAT!r}: xent, xent_all, xent_all_unchecked, xent_1g, "
             "torch_compile or liger_sm90")


def step():
    x.grad = w.grad = None
    loss_fn(x, w, y).backward()


for _ in range(3):
    step()
torch.cuda.synchronize()
acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
with torch.profiler.profile(activities=acts) as p:
    for _ in range(3):
        step()
    torch.cuda.synchronize()
tot, api, spans = {}, {}, []
for e in p.events():
    if e.device_type == torch.autograd.DeviceType.CUDA:
        k = tot.setdefault(e.name, [0.0, 0])
        k[0] += e.time_range.elapsed_us() / 3e3
        k[1] += 1
        spans.append((e.time_range.start, e.time_range.end))
    elif e.name.startswith("cuda") or e.name.startswith("cu"):
        k = api.setdefault(e.name, [0.0, 0])
        k[0] += e.time_range.elapsed_us() / 3e3
        k[1] += 1
# the GPU's idle time inside the profiled steps: their span less the union of the kernels
spans.sort()
busy, end = 0.0, None
for a, b in spans:
    if end is None or a > end:
        busy += b - a
        end = b
    elif b > end:
        busy += b - end
        end = b
span = (spans[-1][1] - spans[0][0]) / 3e3 if spans else 0.0
# wall time of the step, CUDA events over 10 steps
ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
ev[0].record()
for _ in range(10):
    step()
ev[1].record()
torch.cuda.synchronize()
loop_ms = ev[0].elapsed_time(ev[1]) / 10
# as bench/linear.py times it: each step alone, from an idle GPU
synced = []
for _ in range(10):
    x.grad = w.grad = None
    torch.cuda.synchronize()
    ev[0].record()
    step()
    ev[1].record()
    torch.cuda.synchronize()
    synced.append(ev[0].elapsed_time(ev[1]))
synced.sort()
print(f"-- {WHAT}, XENT_PRODUCTS={os.environ.get('XENT_PRODUCTS', '(unset)')}, "
      f"{BT}x{H}x{V}: ms per step by kernel (step {loop_ms:.3f} ms in a loop, "
      f"{synced[5]:.3f} alone; "
      f"profiled: {span:.3f} ms from the first kernel to the last, GPU idle "
      f"{span - busy / 3e3:.3f})")
for k, (ms, n) in sorted(tot.items(), key=lambda kv: -kv[1][0])[:9]:
    print(f"  {ms:8.3f} ms  x{n // 3:3d}  {k[:110]}")
print(f"  {sum(v[0] for v in tot.values()):8.3f} ms  total")
print("  host API calls, ms per step:", ", ".join(
    f"{k} {ms:.3f} (x{n // 3})" for k, (ms, n) in sorted(api.items(), key=lambda kv: -kv[1][0])[:6]))
