"""A clock for the block cores: the steps since the episode start, as sinusoidal features.

A Transformer knows each token's position from its positional encoding (Vaswani et al., 2017,
§3.5); a fast-weight core run step by step does not. With ``position_features`` > 0 a block core
(or ``lstm``) counts the steps since its last reset in its state and appends the encoding of that
count to its input (:func:`append_clock`), so that its keys and queries can address the fast
weights by time as well as by content. The count is kept in the state's dtype (float32 counts
every step exactly up to 2^24, far past the longest episode: Atari's 108K frames are 27K steps).
"""
from __future__ import annotations

import torch
from torch import Tensor


def check_position_features(size: int) -> None:
    """ValueError unless ``size`` (a core's ``position_features``) is even and >= 0."""
    if size < 0 or size % 2:
        raise ValueError(f"position_features must be even and >= 0, got {size}")


def steps_since_reset(steps_before: Tensor, done: Tensor) -> Tensor:
    """The step count of each element at each step, 0 at an episode's first step.

    Args:
        steps_before: [B], the count the first step would have without a reset (the state).
        done: [T,B] bool; ``done[t, b]`` starts a new episode at step t.
    Returns:
        [T,B] in ``steps_before``'s dtype: t - r for the last reset r <= t, else steps_before + t.
    """
    T = done.shape[0]
    t = torch.arange(T, device=done.device).unsqueeze(1)
    last_reset = torch.where(done, t, torch.full_like(t, -1)).cummax(0).values
    return torch.where(last_reset >= 0, (t - last_reset).to(steps_before.dtype), steps_before + t)


def sinusoidal_features(steps: Tensor, size: int) -> Tensor:
    """The positional encoding of Vaswani et al. (2017, §3.5), [..., size] for steps [...]:
    sin(s ω_i) for i < size/2, then cos(s ω_i), with ω_i = 10000^(-2i/size)."""
    half = size // 2
    omega = 10000.0 ** (-torch.arange(half, device=steps.device, dtype=steps.dtype) * 2 / size)
    angles = steps.unsqueeze(-1) * omega
    return torch.cat([angles.sin(), angles.cos()], -1)


def append_clock(x: Tensor, clock: Tensor, done: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """x [T,B,D] with the encoding of each step's count appended ([T,B,D+size]), and the clock
    after the last step [B,1] (``clock`` [B,1] is the count the first step would have)."""
    steps = steps_since_reset(clock[:, 0], done)
    return torch.cat([x, sinusoidal_features(steps, size).to(x.dtype)], -1), (steps[-1] + 1).unsqueeze(1)
