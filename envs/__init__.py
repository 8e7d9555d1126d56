"""Environments behind one factory: ``make(name, num_envs, seed=0, **cfg)``.

Every env class takes ``(num_envs, seed, **options)``, its options the fields of its ``Config``
dataclass (the config's ``env`` section). Every env it returns is batched and has ``num_envs``,
``observation_shape``, ``num_actions``, ``observation_dtype``, ``reset() -> obs [N, ...]``,
``step(actions [N]) -> (obs, reward [N], done [N], info)`` (a Box space's gym env: ``action_dim``,
and actions [N, action_dim] in [−1, 1]) with torchbeast-style automatic reset
(see ``envs.maze.Maze``), and ``close()``.

Importing ``envs`` registers the Gymnasium ids ``DeltaBeast/Maze-v0`` (``gymnasium.make``
gives one maze, ``gymnasium.make_vec`` the batched vector env); env modules, and Numba
with them, load only when an env is made.
"""
from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any

import gymnasium

from fastnet.options import check_choice, check_options

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


def env_class(name: str) -> type:
    """The class registered under ``name``; ValueError lists the valid names."""
    check_choice(name, ENVS, kind="env")
    module, cls_name = ENVS[name].split(":")
    return getattr(importlib.import_module(module), cls_name)


@dataclass(frozen=True)
class EnvSpec:
    """What a network is built for: an env's observations and actions."""

    observation_shape: tuple[int, ...]
    observation_dtype: Any
    """The numpy dtype of its observations (``reset()``'s)."""
    action_sizes: tuple[int, ...]
    """The sizes of the action's components (:func:`action_sizes`); empty for a Box space."""
    action_dim: int = 0
    """A Box space's dimensions (its actions are floats [N, action_dim]); 0 for integer actions."""

    @property
    def images(self) -> bool:
        """uint8 [C, H, W] observations, for a conv stem."""
        return len(self.observation_shape) == 3 and str(self.observation_dtype) == "uint8"


def spec(name: str, seed: int = 0, **cfg: Any) -> EnvSpec:
    """The :class:`EnvSpec` of env ``name`` with options ``cfg``, read off one copy of it (the
    errors of :func:`make`)."""
    env = make(name, num_envs=1, seed=seed, **cfg)
    try:
        return EnvSpec(tuple(env.observation_shape), env.reset().dtype, action_sizes(env),
                       getattr(env, "action_dim", 0))
    finally:
        env.close()


def action_sizes(env: Any) -> tuple[int, ...]:
    """The sizes of an env's action components: ``env.action_sizes`` for a MultiDiscrete space
    (the gym adapter's; empty for a Box space), else ``(env.num_actions,)``."""
    return tuple(getattr(env, "action_sizes", (env.num_actions,)))


def make(name: str, num_envs: int, seed: int = 0, **cfg: Any) -> Any:
    """The batched env ``name`` with ``num_envs`` copies; ``cfg`` are its keyword options
    (their types and ranges are checked by the config parser and by the env itself).

    An unknown name or option raises ``ValueError`` listing the valid names or options.
    """
    cls = env_class(name)
    check_options(cfg, (f.name for f in dataclasses.fields(cls.Config)), kind="env", name=name)
    return cls(num_envs, seed, **cfg)
