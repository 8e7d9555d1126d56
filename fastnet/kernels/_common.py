"""Validation and device helpers shared by the Triton kernels (no triton import here)."""
from __future__ import annotations

import os

import torch

HEAD_SIZES = (16, 32, 64, 128)
DTYPES = (torch.float32, torch.bfloat16)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_head_size(name: str, d: int) -> None:
    if d not in HEAD_SIZES:
        raise ValueError(f"fastnet.kernels: head size {name}={d} is not supported; allowed sizes are {list(HEAD_SIZES)}")


def check_dtype(name: str, x: torch.Tensor) -> None:
    if x.dtype not in DTYPES:
        raise TypeError(
            f"fastnet.kernels: {name} has dtype {x.dtype}; supported input dtypes are torch.float32 and torch.bfloat16"
        )


def check_device(*xs: torch.Tensor) -> torch.device:
    """All tensors on one device; that device is CUDA, or the CPU under TRITON_INTERPRET=1."""
    dev = xs[0].device
    for x in xs:
        if x.device != dev:
            raise ValueError(f"fastnet.kernels: tensors on different devices ({dev} and {x.device})")
    if dev.type == "cuda":
        return dev
    if dev.type == "cpu" and interpreting():
        return dev
    raise RuntimeError(
        f"fastnet.kernels run on CUDA tensors (or CPU tensors under TRITON_INTERPRET=1); got {dev.type} tensors, "
        f"and torch.cuda.is_available() is {torch.cuda.is_available()}. Use the PyTorch reference in fastnet.rules / "
        "fastnet.recurrent on the CPU."
    )


def require_cuda() -> torch.device:
    """A CUDA request: returns the CUDA device or raises a clear error when there is none."""
    if not torch.cuda.is_available():
        raise RuntimeError("CUDA requested but torch.cuda.is_available() is False")
    return torch.device("cuda")


def seg_start(done: torch.Tensor) -> torch.Tensor:
    """[B,T] int32: the most recent step s <= t with done[b,s] set (0 if none)."""
    B, T = done.shape
    idx = torch.arange(T, device=done.device).expand(B, T) * done.long()
    return torch.cummax(idx, dim=1).values.to(torch.int32).contiguous()
