"""Kernel-by-kernel time of xent's fused linear loss step (torch.profiler) at one
shape (argv[1], "BT,H,V"; default 8192,4096,128256), bf16, default settings: where
the step's time goes. XENT_PRODUCTS (cublaslt or xent) picks the products' engine;
the library reads it once a process, so run one process per engine.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import source_tree  # noqa: E402

source_tree.use_xent()
import torch  # noqa: E402
from xent.torch.linear import fused_linear_cross_entropy  # noqa: E402

BT, H, V = (int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else "8192,4096,128256").split(","))
x = (torch.randn(BT, H, device="cuda") * 0.5).bfloat16().requires_grad_()
w = (torch.randn(V, H, device="cuda") * 0.02).bfloat16().requires_grad_()
y = torch.randint(0, V, (BT,), device="cuda")


def step():
    x.grad = w.grad = None
    fused_linear_cross_entropy(x, w, y).backward()


for _ in range(3):
    step()
torch.cuda.synchronize()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
    for _ in range(3):
        step()
    torch.cuda.synchronize()
tot = {}
for e in p.key_averages():
    if e.device_type == torch.autograd.DeviceType.CUDA:
        tot[e.key] = (e.device_time_total / 3e3, e.count // 3)
print(f"-- XENT_PRODUCTS={os.environ.get('XENT_PRODUCTS', '(unset)')}: ms per step by kernel")
for k, (ms, n) in sorted(tot.items(), key=lambda kv: -kv[1][0])[:8]:
    print(f"  {ms:8.3f} ms  x{n:3d}  {k[:110]}")
print(f"  {sum(v[0] for v in tot.values()):8.3f} ms  total")
