"""GPU workbench: where the time of one kernel's forward+backward goes, from torch.profiler: each CUDA
kernel's own time beside the wall time of the whole step, so host-bound (launches, Python, autograd)
and device-bound steps can be told apart.

    python cuda/profile_kernel.py [--op fused_recurrent] [--variant delta] [--shape 32,64,4,32] [--dtype bf16]

Needs CUDA.
"""
from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from fastnet.kernels.benchmark import forward_backward
from fastnet.kernels.cases import CASES


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", default="fused_recurrent", choices=list(CASES))
    ap.add_argument("--variant", default="delta")
    ap.add_argument("--shape", default="32,64,4,32", help="B,T,H,d")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--steps", type=int, default=10, help="profiled forward+backward steps")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("cuda/profile_kernel.py: needs CUDA, and torch.cuda.is_available() is False")
    B, T, H, d = (int(x) for x in a.shape.split(","))
    case = CASES[a.op][a.variant]
    dtype = dict(bf16=torch.bfloat16, fp32=torch.float32)[a.dtype]
    gen = torch.Generator().manual_seed(0)
    leaves = [x.to("cuda", dtype).requires_grad_(True) for x in case.inputs(B, T, H, d, gen)]
    done = (torch.rand(B, T, generator=gen) < 0.01).to("cuda")

    def step() -> None:
        forward_backward(lambda *xs: case.kernel(*xs, done), leaves)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - start) * 1e3 / a.steps
    events = prof.key_averages()
    kernels = [e for e in events if e.self_cpu_time_total == 0]  # device-only rows (the ops above them repeat it)
    device_ms = sum(e.self_device_time_total for e in kernels) / 1e3 / a.steps
    print(f"{a.op}/{a.variant} B,T,H,d={a.shape} {a.dtype}: wall {wall_ms:.3f} ms per step (profiled), "
          f"GPU busy {device_ms:.3f} ms per step")
    print(events.table(sort_by="self_device_time_total", row_limit=12, max_name_column_width=48))


if __name__ == "__main__":
    main()
