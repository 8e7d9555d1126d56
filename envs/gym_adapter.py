"""Any Gymnasium env, batched for the actors: ``envs.make("gym", ...)``.

``envs.make("gym", num_envs=N, seed=s, id="popgym-RepeatPreviousEasy-v0")`` returns
:class:`GymEnv`. ``id`` is

* a Gymnasium id. ``"module:Id"`` imports ``module`` first, which is how the packages that
  register their ids on import come in: ``"popgym:popgym-RepeatPreviousEasy-v0"``,
  ``"minigrid:MiniGrid-MemoryS7-v0"``, ``"memory_gym:MysteryPath-Grid-v0"``
  (Gymnasium's ``make``, "module:id" syntax). ale-py's ``"ALE/Pong-v5"`` needs no module: it
  is imported for them (raw frames; ``launch/atari.py`` has the papers' preprocessing);
* or ``"bsuite/<experiment>/<index>"`` (``"bsuite/memory_len/0"``) for bsuite's dm_env
  environments (Osband et al. 2020), through :class:`BsuiteEnv`. bsuite's own gym wrapper
  (``bsuite.utils.gym_wrapper``) imports the retired ``gym`` package, so this small adapter
  takes its place.

Observations (:func:`observation_kind`):

* ``"image"``: a uint8 ``Box`` of shape [H, W, C] (C <= 4) or [H, W], such as Memory Gym's
  84x84 RGB frames. It is transposed to [C, H, W] and stays uint8, as Atari frames do, for a
  conv torso (stem ``"resnet"``; uint8 is scaled by 1/255 there).
* ``"flat"``: everything else -- ``Box`` (raveled), ``Discrete`` and ``MultiDiscrete``
  (one-hot), ``Dict`` and ``Tuple`` (their parts flattened and concatenated, Gymnasium's
  ``spaces.flatten``) -- as a float32 vector, for stem ``"mlp"``. Parts of a ``Dict`` or
  ``Tuple`` that are not numeric (``Text``; MiniGrid's ``mission`` string space) are
  dropped; they cannot be flattened into numbers. Option ``observation="flat"`` flattens
  images too.

``GymEnv.stem`` names the stem that fits (``"resnet"`` or ``"mlp"``).

Actions: a ``Discrete`` or one-dimensional ``MultiDiscrete`` space takes integers (a
MultiDiscrete action is the mixed-radix index of its components, :mod:`agents.actions`); a
one-dimensional ``Box`` space with finite bounds takes floats [N, D] in [−1, 1], clipped there and
mapped linearly onto [low, high] (what the Gaussian policy's ``to_env`` gives). Other spaces
(``Tuple``, ``Dict``, ``MultiBinary``, a Box with an infinite bound) are refused in one line.

Option ``observe`` ("positions" or "velocities") keeps one part of a MuJoCo locomotion env's
observation, the "-P" and "-V" POMDPs of Ni et al. (2022) (:mod:`envs.pomdp`).
"""
from __future__ import annotations

import copy
import functools
import importlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Optional

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from envs.batch import EpisodeTotals, check_actions, check_box_actions
from envs.pomdp import Observe, ObserveParts

BSUITE_PREFIX = "bsuite/"
ALE_NAMESPACE = "ALE/"  # ale-py's ids, which it registers on import


class BsuiteEnv(gymnasium.Env):
    """A bsuite dm_env environment (``bsuite_id`` such as ``"memory_len/0"``) as a ``gymnasium.Env``.

    The sweep's settings (``bsuite.sweep.SETTINGS``) build the environment; ``reset(seed=s)``
    rebuilds it with seed ``s`` (over the setting's own, as in catch's twenty ids) where its
    loader takes a seed. A last time step with discount 0 is a termination, one with another
    discount a truncation (dm_env's convention).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, bsuite_id: str) -> None:
        from bsuite import bsuite, sweep

        if bsuite_id not in sweep.SETTINGS:
            raise ValueError(f"unknown bsuite id {bsuite_id!r}; e.g. {', '.join(sweep.MEMORY_LEN[:3])}, ...")
        self.bsuite_id = bsuite_id
        self._loader = bsuite.EXPERIMENT_NAME_TO_ENVIRONMENT[bsuite_id.split("/")[0]]
        self._settings = dict(sweep.SETTINGS[bsuite_id])
        self._seeded = "seed" in inspect.signature(self._loader).parameters
        self._env = self._loader(**self._settings)
        obs_spec, action_spec = self._env.observation_spec(), self._env.action_spec()
        low = getattr(obs_spec, "minimum", -np.inf)
        high = getattr(obs_spec, "maximum", np.inf)
        self.observation_space = spaces.Box(
            np.broadcast_to(low, obs_spec.shape).astype(obs_spec.dtype),
            np.broadcast_to(high, obs_spec.shape).astype(obs_spec.dtype), obs_spec.shape, obs_spec.dtype)
        self.action_space = spaces.Discrete(action_spec.num_values)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None and self._seeded:
            self._env = self._loader(**{**self._settings, "seed": seed})
        return np.asarray(self._env.reset().observation, self.observation_space.dtype), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        step = self._env.step(int(action))
        last = step.last()
        terminated = bool(last and step.discount == 0)
        obs = np.asarray(step.observation, self.observation_space.dtype)
        return obs, float(step.reward or 0.0), terminated, bool(last and not terminated), {}


_NUMERIC = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def _numeric(space: spaces.Space) -> spaces.Space | None:
    """``space`` without its non-numeric parts (None if nothing is left)."""
    if isinstance(space, spaces.Dict):
        kept = {k: s for k, s in ((k, _numeric(s)) for k, s in space.spaces.items()) if s is not None}
        return spaces.Dict(kept) if kept else None
    if isinstance(space, spaces.Tuple):
        kept = [s for s in (_numeric(s) for s in space.spaces) if s is not None]
        return spaces.Tuple(kept) if kept else None
    return space if isinstance(space, _NUMERIC) else None


def _numeric_part(space: spaces.Space, x: Any) -> Any:
    """The value ``x`` of ``space`` restricted to ``_numeric(space)``."""
    if isinstance(space, spaces.Dict):
        return {k: _numeric_part(s, x[k]) for k, s in space.spaces.items() if _numeric(s) is not None}
    if isinstance(space, spaces.Tuple):
        return tuple(_numeric_part(s, v) for s, v in zip(space.spaces, x) if _numeric(s) is not None)
    return x


def observation_kind(space: spaces.Space) -> Literal["image", "flat"]:
    """``"image"`` for a uint8 Box [H, W, C<=4] or [H, W], else ``"flat"`` (module docstring)."""
    if isinstance(space, spaces.Box) and space.dtype == np.uint8:
        if len(space.shape) == 2 or (len(space.shape) == 3 and space.shape[2] <= 4):
            return "image"
    return "flat"


class ObservationAdapter(gymnasium.ObservationWrapper, gymnasium.utils.RecordConstructorArgs):
    """Images to uint8 [C, H, W]; anything else flattened to float32 (module docstring).

    ``info`` dicts are passed on as deep copies: some envs (popgym's CountRecall) put the
    same array in every call's info, which Gymnasium's env checker rejects.
    """

    def __init__(self, env: gymnasium.Env, observation: Literal["auto", "flat"] = "auto") -> None:
        gymnasium.utils.RecordConstructorArgs.__init__(self, observation=observation)
        gymnasium.ObservationWrapper.__init__(self, env)
        space = env.observation_space
        self.kind = observation_kind(space) if observation == "auto" else "flat"
        if self.kind == "image":
            h, w, c = space.shape if len(space.shape) == 3 else (*space.shape, 1)
            low = np.broadcast_to(space.low.reshape(h, w, c).transpose(2, 0, 1), (c, h, w))
            high = np.broadcast_to(space.high.reshape(h, w, c).transpose(2, 0, 1), (c, h, w))
            self.observation_space = spaces.Box(low, high, (c, h, w), np.uint8)
        else:
            self._inner = _numeric(space)
            if self._inner is None:
                raise ValueError(f"observation space {space} has no numeric part")
            flat = spaces.flatten_space(self._inner)
            self.observation_space = spaces.Box(flat.low.astype(np.float32), flat.high.astype(np.float32),
                                                flat.shape, np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        return obs, copy.deepcopy(info)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, copy.deepcopy(info)

    def observation(self, observation: Any) -> np.ndarray:
        if self.kind == "image":
            x = np.asarray(observation, np.uint8)
            return np.ascontiguousarray((x[..., None] if x.ndim == 2 else x).transpose(2, 0, 1))
        flat = spaces.flatten(self._inner, _numeric_part(self.env.observation_space, observation))
        return np.asarray(flat, np.float32)


def wrapper_class(name: str) -> type:
    """The Gymnasium wrapper ``"module:Class"``; ValueError naming what is wrong."""
    module, _, cls_name = name.partition(":")
    if not module or not cls_name:
        raise ValueError(f"wrapper {name!r} is not 'module:Class' (e.g. minigrid.wrappers:OneHotPartialObsWrapper)")
    try:
        cls = getattr(importlib.import_module(module), cls_name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"wrapper {name!r} cannot be loaded: {e}") from None
    if not (isinstance(cls, type) and issubclass(cls, gymnasium.Wrapper)):
        raise ValueError(f"wrapper {name!r} is not a gymnasium.Wrapper")
    return cls


def make_single(id: str, observation: Literal["auto", "flat"] = "auto", max_episode_steps: int = 0,
                wrappers: Sequence[str] = (), observe: Observe = "all") -> ObservationAdapter:
    """One env ``id`` (module docstring), wrapped by each of ``wrappers`` in turn, its observations
    cut to the part ``observe`` keeps (:mod:`envs.pomdp`) and adapted; ``max_episode_steps`` > 0
    adds a time limit (Gymnasium's ``TimeLimit``; 0 keeps the env's own). The wrappers' modules
    are imported first: ``minigrid.wrappers`` registers MiniGrid's ids."""
    wrapper_classes = [wrapper_class(name) for name in wrappers]
    try:
        if id.startswith(BSUITE_PREFIX):
            env: gymnasium.Env = BsuiteEnv(id[len(BSUITE_PREFIX):])
            if max_episode_steps > 0:
                env = gymnasium.wrappers.TimeLimit(env, max_episode_steps)
        else:  # ale-py's ids through Gymnasium's own "module:Id", which imports the module that registers them
            module = "ale_py:" if id.startswith(ALE_NAMESPACE) else ""
            env = gymnasium.make(module + id, max_episode_steps=max_episode_steps or None)
    except (gymnasium.error.Error, ImportError, OSError) as e:  # an unknown id, a missing package or file
        why = " ".join(str(e).split())
        if isinstance(e, (gymnasium.error.NameNotFound, gymnasium.error.NamespaceNotFound)) and ":" not in id:
            why += (" An id that a package registers when it is imported is written module:Id"
                    " (minigrid:MiniGrid-Empty-5x5-v0, popgym:popgym-RepeatPreviousEasy-v0).")
        raise ValueError(f"env {id!r} cannot be made: {why}") from None
    for cls in wrapper_classes:
        env = cls(env)
    check_action_space(id, env.action_space)
    if observe != "all":
        env = ObserveParts(env, id, observe)
    return ObservationAdapter(env, observation)


def check_action_space(id: str, space: spaces.Space) -> None:
    """ValueError, in one line, unless the agents have a policy for ``space`` (module docstring)."""
    if isinstance(space, spaces.Box):
        if len(space.shape) != 1:
            raise ValueError(f"env {id!r} has Box actions of shape {space.shape}; the Gaussian policy takes a "
                             "one-dimensional Box (flatten it with a wrapper, --env.wrappers)")
        if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
            raise ValueError(f"env {id!r} has Box actions with an infinite bound ({space}); the policy's actions in "
                             "[-1, 1] are mapped onto finite bounds: give the space finite ones with a wrapper "
                             "(gymnasium.wrappers:ClipAction does not change the space)")
        return
    if not isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)) or (
            isinstance(space, spaces.MultiDiscrete) and space.nvec.ndim != 1):
        raise ValueError(f"env {id!r} has action space {space}; the agents need a Discrete, a one-dimensional "
                         "MultiDiscrete or a one-dimensional Box with finite bounds (mixed Tuple and Dict actions "
                         "have no policy here)")


class GymEnv:
    """N copies of a Gymnasium env, vectorised by Gymnasium's vector API, with torchbeast-style
    automatic reset.

    ``step`` returns ``(obs [N, *observation_shape], reward [N] float32, done [N] bool, info)``
    with ``info = {"episode_return": float32 [N], "episode_length": int32 [N], "truncated":
    bool [N]}``. Where ``done[i]`` (terminated or truncated) the episode of env i ended at this
    step and env i was reset (the vector env's same-step autoreset): ``obs[i]`` is the first
    observation of the new episode, ``reward[i]`` the last reward of the finished one and the
    info entries its totals; elsewhere they are running totals, as for ``envs.maze.Maze``.
    ``truncated[i]``: a time limit cut the episode (it did not terminate); then
    ``info["final_obs"][i]`` is its last observation, for the learner's bootstrap. Actions are
    ``0 .. num_actions-1`` (shifted by the space's ``start``); a MultiDiscrete space's action is
    the mixed-radix index of its components (sizes ``action_sizes``; :mod:`agents.actions`); a Box
    space's (``action_dim`` > 0, ``action_sizes`` empty) are floats [N, action_dim] in [−1, 1],
    mapped onto the bounds.
    Env i is seeded with ``(seed + i) mod 2**31`` at ``reset``. Its options are the fields of
    :class:`GymEnv.Config`.
    """

    @dataclass
    class Config:
        """Any Gymnasium env, batched."""

        id: Optional[str] = None
        """A Gymnasium id ("module:Id" imports the module first), or bsuite/<experiment>/<index>."""
        observation: Literal["auto", "flat"] = "auto"
        """auto (uint8 images kept as [C, H, W] for a conv stem, all else flattened) or flat."""
        max_episode_steps: int = 0
        """Cut episodes after this many steps (0: the env's own limit)."""
        wrappers: tuple[str, ...] = ()
        """Gymnasium wrappers applied in order, as module:Class (minigrid.wrappers:OneHotPartialObsWrapper)."""
        vectorization: Literal["sync", "async"] = "sync"
        """Gymnasium's sync (one process) or async (one process per env; not in training's actors) vector env."""
        observe: Observe = "all"
        """MuJoCo locomotion: observe all, or only the joint positions or velocities (Ni et al.'s -P/-V POMDPs)."""

    def __init__(self, num_envs: int, seed: int = 0, **options: Any) -> None:
        cfg = self.Config(**options)
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
        if not cfg.id:
            raise ValueError("id is required: a Gymnasium id such as CartPole-v1 or "
                             "popgym:popgym-RepeatPreviousEasy-v0")
        if cfg.max_episode_steps < 0:
            raise ValueError(f"max_episode_steps must be >= 0, got {cfg.max_episode_steps!r}")
        for option, value, valid in (("observation", cfg.observation, ("auto", "flat")),
                                     ("vectorization", cfg.vectorization, ("sync", "async")),
                                     ("observe", cfg.observe, ("all", "positions", "velocities"))):
            if value not in valid:
                raise ValueError(f"{option} must be one of {valid}, got {value!r}")
        probe = make_single(cfg.id, cfg.observation, cfg.max_episode_steps, cfg.wrappers, cfg.observe)
        self.id, self.num_envs, self.seed_value = cfg.id, int(num_envs), int(seed)
        self.kind = probe.kind
        self.stem = "resnet" if self.kind == "image" else "mlp"
        self.observation_shape: tuple[int, ...] = tuple(probe.observation_space.shape)
        self.observation_dtype = np.dtype(probe.observation_space.dtype)
        space = probe.action_space
        self._box = isinstance(space, spaces.Box)
        self._multi = isinstance(space, spaces.MultiDiscrete)
        if self._box:  # floats in [-1, 1], mapped onto [low, high]; no integer actions
            self.action_dim, self.action_sizes, self.num_actions = int(space.shape[0]), (), 0
            self._low, self._half_range = space.low.astype(np.float64), (space.high - space.low).astype(np.float64) / 2
            self._action_dtype = space.dtype
        else:
            self.action_dim = 0
            self.action_sizes: tuple[int, ...] = tuple(int(n) for n in space.nvec) if self._multi else (int(space.n),)
            self.num_actions = int(np.prod(self.action_sizes))  # a MultiDiscrete action: the index of its components
            self._action_start = np.asarray(space.start, np.int64)
        probe.close()
        make_one = functools.partial(make_single, cfg.id, cfg.observation, cfg.max_episode_steps, cfg.wrappers,
                                     cfg.observe)
        fns = [make_one] * self.num_envs
        vector = SyncVectorEnv if cfg.vectorization == "sync" else AsyncVectorEnv
        self._env = vector(fns, autoreset_mode=AutoresetMode.SAME_STEP)
        self._totals = EpisodeTotals(self.num_envs)

    def reset(self) -> np.ndarray:
        """Start a new episode in every env; returns obs [N, *observation_shape]."""
        seeds = [int((self.seed_value + i) % 2**31) for i in range(self.num_envs)]
        obs, _ = self._env.reset(seed=seeds)
        self._totals.reset()
        return np.array(obs, self.observation_dtype)

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Step every env with ``actions`` (int [N], values in 0..num_actions-1; a Box space's floats
        [N, action_dim] in [−1, 1]); see the class docstring."""
        if self._box:
            unit = check_box_actions(actions, self.num_envs, self.action_dim)
            env_actions = (self._low + (unit + 1.0) * self._half_range).astype(self._action_dtype)
        else:
            actions = check_actions(actions, self.num_envs, self.num_actions)
            if self._multi:  # agents.actions: the integer encodes the components in mixed radix
                actions = np.stack(np.unravel_index(actions, self.action_sizes), axis=-1)
            env_actions = actions + self._action_start
        obs, reward, terminated, truncated, info = self._env.step(env_actions)
        reward = np.asarray(reward, np.float32)
        done = np.logical_or(terminated, truncated)
        obs = np.array(obs, self.observation_dtype)
        truncated = np.logical_and(truncated, np.logical_not(terminated))
        cut = {"truncated": truncated}
        if truncated.any():
            final_obs = np.zeros_like(obs)
            for i in np.flatnonzero(truncated):
                final_obs[i] = info["final_obs"][i]
            cut["final_obs"] = final_obs
        return obs, reward, done, {**self._totals.step(reward, done), **cut}

    def close(self) -> None:
        self._env.close()
