"""Episode resets for core states (docs/cores.md, "Notation and the common interface").

A core state is a tuple of tensors with the batch on dim 0. Before step t every
state tensor is multiplied by (1 - done_t), so an all-zero state is the start of
an episode.
"""
from __future__ import annotations

import torch
from torch import Tensor

State = tuple[Tensor, ...]


def reset_state(state: State, done_t: Tensor) -> State:
    """Zero the entries of ``state`` whose batch element has ``done_t`` set.

    ``done_t`` is a bool or float tensor of shape [B].
    """
    keep = 1.0 - done_t.to(state[0].dtype) if state else None
    return tuple(s * keep.view(-1, *([1] * (s.dim() - 1))) for s in state)


def reset_steps(done: Tensor) -> list[bool]:
    """For a [T,B] done mask, whether step t resets any batch element (one host sync per
    sequence): step loops skip :func:`reset_state` where nothing resets, which changes no value."""
    return done.any(dim=1).tolist()


def zeros_state(shapes: list[tuple[int, ...]], batch_size: int, device: torch.device | str | None,
                dtype: torch.dtype = torch.float32) -> State:
    """A zero state with one tensor per shape (each shape excludes the batch dim)."""
    return tuple(torch.zeros(batch_size, *shape, device=device, dtype=dtype) for shape in shapes)
