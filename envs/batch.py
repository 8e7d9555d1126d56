"""Pieces shared by the batched envs that wrap a vector env (``envs.atari``, ``envs.gym_adapter``)."""
from __future__ import annotations

from typing import Any

import numpy as np


def check_actions(actions: Any, num_envs: int, num_actions: int) -> np.ndarray:
    """``actions`` as an int64 array [num_envs]; ``ValueError`` unless it is an int array of
    that shape with values in 0..num_actions-1."""
    actions = np.asarray(actions)
    if actions.shape != (num_envs,) or actions.dtype.kind not in "iu":
        raise ValueError(f"actions must be an int array of shape ({num_envs},), got {actions.dtype} {actions.shape}")
    if actions.size and (actions.min() < 0 or actions.max() >= num_actions):
        raise ValueError(f"actions must be in 0..{num_actions - 1}, got {actions}")
    return actions.astype(np.int64, copy=False)


def check_box_actions(actions: Any, num_envs: int, action_dim: int) -> np.ndarray:
    """``actions`` as a float64 array [num_envs, action_dim] clipped to [−1, 1]; ``ValueError``
    unless it is a finite float array of that shape."""
    actions = np.asarray(actions)
    if actions.shape != (num_envs, action_dim) or actions.dtype.kind != "f":
        raise ValueError(f"actions must be a float array of shape ({num_envs}, {action_dim}), got "
                         f"{actions.dtype} {actions.shape}")
    if not np.isfinite(actions).all():
        raise ValueError(f"actions must be finite, got {actions}")
    return np.clip(actions.astype(np.float64), -1.0, 1.0)


class EpisodeTotals:
    """The running return and length of N episodes, reported torchbeast-style (as ``envs.maze.Maze``)."""

    def __init__(self, num_envs: int) -> None:
        self._return = np.zeros(num_envs, np.float64)
        self._length = np.zeros(num_envs, np.int64)

    def reset(self) -> None:
        self._return[:] = 0.0
        self._length[:] = 0

    def step(self, reward: np.ndarray, done: np.ndarray) -> dict[str, np.ndarray]:
        """Add one step; returns ``{"episode_return": float32 [N], "episode_length": int32 [N]}``,
        the totals including this step (the finished episode's where ``done``), then starts
        the episodes that ended afresh."""
        self._return += reward
        self._length += 1
        totals = {"episode_return": self._return.astype(np.float32), "episode_length": self._length.astype(np.int32)}
        self._return[done] = 0.0
        self._length[done] = 0
        return totals
