"""Timing for the GPU workbench scripts (cuda/bench.py, cuda/smoke.py, cuda/profile_kernel.py)."""
from __future__ import annotations

from typing import Any, Callable

import torch


def forward_backward(fn: Callable[..., Any], inputs: list[torch.Tensor]) -> None:
    """One timed step: ``fn(*inputs)``, the backward of the sum of its outputs, the gradients dropped."""
    loss = sum(o.float().sum() for o in fn(*inputs) if o is not None)
    loss.backward()
    for x in inputs:
        x.grad = None


def time_forward_backward(fn: Callable[..., Any], inputs: list[torch.Tensor]) -> tuple[float, float]:
    """(median ms, peak MiB) of :func:`forward_backward` on CUDA, with ``triton.testing.do_bench``
    (CUDA events, warm-up first)."""
    from triton.testing import do_bench

    def step() -> None:
        forward_backward(fn, inputs)

    step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    ms = do_bench(step, warmup=25, rep=200, return_mode="median")
    return ms, torch.cuda.max_memory_allocated() / 2**20
