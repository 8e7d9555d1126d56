"""Validation and device helpers shared by the Triton kernels (no triton import here)."""
from __future__ import annotations

import os

import torch

HEAD_SIZES = (16, 32, 64, 128)
# the SRWM kernel's backward holds a head's matrix and its gradient, two (3d+4)×d fp32 tiles, split over two
# passes; at d = 128 that no longer fits in registers, so d = 128 takes the reference
SRWM_HEAD_SIZES = (16, 32, 64)
DTYPES = (torch.float32, torch.bfloat16)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_head_size(name: str, d: int, allowed: tuple[int, ...] = HEAD_SIZES) -> None:
    if d not in allowed:
        raise ValueError(f"fastnet.kernels: head size {name}={d} is not supported; allowed sizes are {list(allowed)}")


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


def check_sequence_args(q, k, v, beta, done, initial_state, block_v, pick_bv):
    """Validate batch-major fast-weight sequence arguments (q, k [B,T,H,dk], v [B,T,H,dv],
    beta [B,T,H], done [B,T] or None, initial_state [B,H,dv,dk] or None) and choose the value
    block. Returns (done, initial_state made contiguous, block_v)."""
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"expected q, k [B,T,H,dk] and v [B,T,H,dv]; "
                         f"got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, T, H, DK = q.shape
    DV = v.shape[-1]
    check_head_size("dk", DK)
    check_head_size("dv", DV)
    for name, x in (("q", q), ("k", k), ("v", v), ("beta", beta)):
        check_dtype(name, x)
    if beta.shape != (B, T, H):
        raise ValueError(f"beta must be [B,T,H]={[B, T, H]}, got {list(beta.shape)}")
    if done is None:
        done = torch.zeros(B, T, dtype=torch.bool, device=q.device)
    if done.shape != (B, T):
        raise ValueError(f"done must be [B,T]={[B, T]}, got {list(done.shape)}")
    if initial_state is not None:
        check_dtype("initial_state", initial_state)
        if initial_state.shape != (B, H, DV, DK):
            raise ValueError(f"initial_state must be [B,H,dv,dk]={[B, H, DV, DK]}, got {list(initial_state.shape)}")
        initial_state = initial_state.contiguous()
    check_device(q, k, v, beta, done, *([initial_state] if initial_state is not None else []))
    bv = pick_bv() if block_v is None else block_v
    if bv < 16 or DV % bv or bv & (bv - 1):
        raise ValueError(f"block_v={bv} must be a power of two >= 16 dividing dv={DV}")
    return done, initial_state, bv


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
