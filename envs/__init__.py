"""Environments behind one factory: ``make(name, num_envs, seed=0, **cfg)``.

Every env it returns is batched and has ``num_envs``, ``observation_shape``,
``num_actions``, ``observation_dtype``, ``reset() -> obs [N, ...]``,
``step(actions [N]) -> (obs, reward [N], done [N], info)`` with torchbeast-style
automatic reset (see ``envs.maze.Maze``), and ``close()``.

Importing ``envs`` registers the Gymnasium ids ``DeltaBeast/Maze-v0`` (``gymnasium.make``
gives one maze, ``gymnasium.make_vec`` the batched vector env); env modules, and Numba
with them, load only when an env is made.
"""
from __future__ import annotations

import importlib
import inspect
import numbers
import typing
from typing import Any

import gymnasium

ENVS: dict[str, str] = {
    "maze": "envs.maze:Maze",
    "atari": "envs.atari:Atari",
    "gym": "envs.gym_adapter:GymEnv",
}

if "DeltaBeast/Maze-v0" not in gymnasium.registry:
    gymnasium.register(
        id="DeltaBeast/Maze-v0",
        entry_point="envs.maze:MazeEnv",
        vector_entry_point="envs.maze:MazeVectorEnv",
    )


def make(name: str, num_envs: int, seed: int = 0, **cfg: Any) -> Any:
    """The batched env ``name`` with ``num_envs`` copies; ``cfg`` are its keyword options.

    An unknown name, or an unknown or ill-typed option, raises ``ValueError`` listing the
    valid names or options.
    """
    if name not in ENVS:
        raise ValueError(f"unknown env {name!r}; valid envs: {', '.join(ENVS)}")
    module, cls_name = ENVS[name].split(":")
    cls = getattr(importlib.import_module(module), cls_name)
    hints = typing.get_type_hints(cls.__init__)
    options = [p for p in inspect.signature(cls).parameters if p not in ("num_envs", "seed")]
    valid = ", ".join(f"{p}: {_type_name(hints[p])}" for p in options)
    for key, value in cfg.items():
        if key not in options:
            raise ValueError(f"unknown option {key!r} for env {name!r}; valid options: {valid}")
        if not _has_type(value, hints[key]):
            raise ValueError(f"option {key}={value!r} for env {name!r} must be {_type_name(hints[key])}; "
                             f"valid options: {valid}")
    return cls(num_envs, seed, **cfg)


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is typing.Literal:
        return " | ".join(repr(v) for v in typing.get_args(tp))
    return tp.__name__


def _has_type(value: Any, tp: Any) -> bool:
    if typing.get_origin(tp) is typing.Literal:
        return any(type(value) is type(v) and value == v for v in typing.get_args(tp))
    if isinstance(value, bool):
        return tp is bool
    if tp is int:
        return isinstance(value, numbers.Integral)
    if tp is float:
        return isinstance(value, numbers.Real)
    return isinstance(value, tp)
