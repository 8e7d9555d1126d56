"""The gridworld maze of "Differentiable plasticity" (Miconi et al., ICML 2018, §4.5; code:
uber-research/differentiable-plasticity, ``maze/maze.py`` at commit 66cdef7), batched in Numba.

Layout (``size`` odd, >= 5): the border is wall, interior cells with both row and column
even are pillars, the centre is free; 41 free cells at size 9 (``maze.py`` lines 264-269).

Actions: 0 up, 1 down, 2 left, 3 right. An episode lasts ``episode_length`` steps and
starts with the agent on the centre cell; the goal stays put all episode and is never
shown. Two rule sets (option ``rules``):

``default`` -- a tidier variant, not Miconi's code:
  the goal is a uniformly random free cell other than the centre; a move into a wall
  leaves the agent in place and gives -0.1; a move onto the goal gives +10 and teleports
  the agent to a uniformly random free cell other than the goal; any other move gives 0.
  The agent never stands on the goal, so the rewards are exactly 0, -0.1 and +10.
  Observation (float32 [10]): the 3x3 neighbourhood of the agent, row-major, 1 wall and
  0 free, then t / episode_length, where t is the number of steps taken in the episode
  (0 on the first observation).

``miconi2018`` -- ``maze.py`` at 66cdef7 exactly (lines 296-381), but for the random
  numbers themselves (the streams below, where ``maze.py`` uses numpy's global one):
  the goal is drawn from all free cells, the centre included (lines 296-302); a move is
  checked against the wall first (-0.1, stay; lines 361-367), then the goal test runs on
  the resulting cell (line 371): +10 and a teleport to a uniformly random free cell, the
  goal included (lines 372-378). An agent standing on the goal (at the start, or after
  such a teleport) collects it by bumping a wall (reward 9.9) or by stepping off and back.
  Observation (float32 [12]): the 3x3 neighbourhood, the previous reward (0 on the first
  observation), the raw step number t and a bias 1 (lines 331-338). ``maze.py``'s input
  vector also has five slots that stay 0 (the previous-action one-hot is commented out,
  line 335); they are left out.

Random streams: env ``i`` of a batch seeded with ``seed`` owns a splitmix64 stream with
initial state ``mix(mix(seed) + GOLDEN * (i + 1))``; a draw advances the state by
GOLDEN and returns ``mix(state)``; an integer below ``n`` is ``((z >> 32) * n) >> 32``.
A draw of a free cell takes ``k`` below ``F`` (F free cells in row-major order) and
returns cell ``k``; a draw of a free cell other than cell ``e`` takes ``k`` below
``F - 1`` and skips ``e``'s slot. Draws happen in event order: a teleport on reaching the
goal, then the goal of the next episode at a reset. ``MazeEnv(env_index=i)`` seeded with
``seed`` replays env ``i`` of a batch seeded with ``seed`` exactly.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from numba import njit

NUM_ACTIONS = 4
RULES = ("default", "miconi2018")
OBS_SIZE = {"default": 10, "miconi2018": 12}
WALL_REWARD = -0.1
GOAL_REWARD = 10.0

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
# Index in the 3x3 window of the neighbour each action moves to: up, down, left, right.
_WINDOW_SLOT = (1, 7, 3, 5)


def layout(size: int) -> np.ndarray:
    """Wall map [size, size] bool: border and even-even pillars, centre free (``maze.py`` lines 264-269)."""
    r, c = np.indices((size, size))
    walls = (r == 0) | (c == 0) | (r == size - 1) | (c == size - 1) | ((r % 2 == 0) & (c % 2 == 0))
    walls[size // 2, size // 2] = False
    return walls


def _check_options(size: int, episode_length: int, rules: str) -> None:
    if rules not in RULES:
        raise ValueError(f"rules must be one of {RULES}, got {rules!r}")
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 5 or size % 2 == 0:
        raise ValueError(f"size must be an odd int >= 5, got {size!r}")
    if isinstance(episode_length, bool) or not isinstance(episode_length, (int, np.integer)) or episode_length < 1:
        raise ValueError(f"episode_length must be an int >= 1, got {episode_length!r}")


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
    return int(seed)


# ---------------------------------------------------------------- Numba core


@njit(cache=True)
def _mix(z: np.uint64) -> np.uint64:
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def _seed_streams(seeds: np.ndarray, indices: np.ndarray) -> np.ndarray:
    rng = np.empty(seeds.shape[0], np.uint64)
    for i in range(seeds.shape[0]):
        rng[i] = _mix(_mix(seeds[i]) + _GOLDEN * (indices[i] + np.uint64(1)))
    return rng


@njit(cache=True)
def _free_cell_except(rng: np.ndarray, i: int, excluded: int, free_cells: np.ndarray, free_index: np.ndarray) -> int:
    """A uniformly random free cell other than ``excluded``; any free cell if ``excluded`` < 0."""
    rng[i] += _GOLDEN
    z = _mix(rng[i])
    n = free_cells.shape[0] - (1 if excluded >= 0 else 0)
    k = np.int64(((z >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32))
    if excluded >= 0 and k >= free_index[excluded]:
        k += 1
    return free_cells[k]


@njit(cache=True)
def _write_obs(obs: np.ndarray, i: int, window: np.ndarray, cell: int, t: int, episode_length: int,
               miconi: bool, last_reward: float) -> None:
    for k in range(9):
        obs[i, k] = window[cell, k]
    if miconi:
        obs[i, 9] = last_reward
        obs[i, 10] = t
        obs[i, 11] = 1.0
    else:
        obs[i, 9] = np.float32(t / episode_length)


@njit(cache=True)
def _reset_kernel(agent, goal, t, ret, rng, window, free_cells, free_index, centre, episode_length, miconi, obs_size):
    n = agent.shape[0]
    obs = np.empty((n, obs_size), np.float32)
    goal_excluded = -1 if miconi else centre
    for i in range(n):
        agent[i] = centre
        goal[i] = _free_cell_except(rng, i, goal_excluded, free_cells, free_index)
        t[i] = 0
        ret[i] = 0.0
        _write_obs(obs, i, window, centre, 0, episode_length, miconi, 0.0)
    return obs


@njit(cache=True)
def _step_kernel(actions, agent, goal, t, ret, rng, window, free_cells, free_index, moves,
                 centre, episode_length, autoreset, final_obs, miconi, obs_size):
    n = actions.shape[0]
    for i in range(n):
        if actions[i] < 0 or actions[i] > 3:
            raise ValueError("actions must be in {0, 1, 2, 3}")
    obs = np.empty((n, obs_size), np.float32)
    reward = np.empty(n, np.float32)
    done = np.empty(n, np.bool_)
    ep_return = np.empty(n, np.float32)
    ep_length = np.empty(n, np.int32)
    slots = _WINDOW_SLOT
    goal_excluded = -1 if miconi else centre
    for i in range(n):
        a = actions[i]
        p = agent[i]
        # The wall check first, then the goal test on the resulting cell (maze.py lines 361-378).
        # Under the default rules the agent never stands on the goal, so a bump never finds it.
        if window[p, slots[a]] != 0:
            r = WALL_REWARD
        else:
            r = 0.0
            p = p + moves[a]
        if p == goal[i]:
            r += GOAL_REWARD
            p = _free_cell_except(rng, i, -1 if miconi else goal[i], free_cells, free_index)
        agent[i] = p
        t[i] += 1
        ret[i] += r
        reward[i] = r
        ep_return[i] = ret[i]
        ep_length[i] = t[i]
        done[i] = t[i] >= episode_length
        last = reward[i]
        if done[i]:
            if final_obs.shape[0] > 0:
                _write_obs(final_obs, i, window, agent[i], t[i], episode_length, miconi, last)
            if autoreset:
                agent[i] = centre
                goal[i] = _free_cell_except(rng, i, goal_excluded, free_cells, free_index)
                t[i] = 0
                ret[i] = 0.0
                last = 0.0
        _write_obs(obs, i, window, agent[i], t[i], episode_length, miconi, last)
    return obs, reward, done, ep_return, ep_length


# ---------------------------------------------------------------- batched env


class Maze:
    """N mazes stepped by one Numba call, with torchbeast-style automatic reset.

    This is what ``envs.make("maze", num_envs=N, seed=s, size=9, episode_length=250)``
    returns (Miconi et al. 2018; the rules are in the module docstring). ``step`` returns
    ``(obs [N,D] float32, reward [N] float32, done [N] bool, info)`` with
    ``info = {"episode_return": float32 [N], "episode_length": int32 [N]}``. Where
    ``done[i]``, the episode of env i ended at this step and env i was reset: ``obs[i]``
    is the first observation of the new episode, ``reward[i]`` the last reward of the
    finished one and the info entries its totals; elsewhere they are running totals.
    Every call returns freshly allocated arrays that the caller may keep. Its options are the
    fields of :class:`Maze.Config`.
    """

    @dataclass
    class Config:
        """The gridworld maze (Miconi et al. 2018)."""

        size: int = 9
        """Side of the square maze, walls included (odd, >= 5; 9 in the papers)."""
        episode_length: int = 250
        """Steps per episode (250 in the ICML 2018 runs)."""
        rules: Literal["default", "miconi2018"] = "default"
        """default (observation size 10), or miconi2018: Miconi et al.'s maze.py exactly (12)."""

    num_actions: int = NUM_ACTIONS
    observation_dtype: np.dtype = np.dtype(np.float32)
    render_fps: float = 4.0  # a video's steps per second (evaluate.py --video)

    def __init__(self, num_envs: int, seed: int = 0, **options: Any) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
        cfg = self.Config(**options)
        size, episode_length, rules = cfg.size, cfg.episode_length, cfg.rules
        _check_options(size, episode_length, rules)
        self.num_envs, self.size, self.episode_length = int(num_envs), int(size), int(episode_length)
        self.rules = rules
        self._miconi = rules == "miconi2018"
        self.observation_shape: tuple[int, ...] = (OBS_SIZE[rules],)
        self.walls = layout(self.size)
        padded = np.pad(self.walls, 1, constant_values=True)
        cells = self.size * self.size
        # window[cell] is the observation's 3x3 part with the agent on that cell.
        self._window = np.stack(
            [padded[dr: dr + self.size, dc: dc + self.size].reshape(cells) for dr in range(3) for dc in range(3)],
            axis=1
        ).astype(np.float32)
        self._free_cells = np.flatnonzero(~self.walls.reshape(cells)).astype(np.int64)
        self._free_index = np.full(cells, -1, np.int64)
        self._free_index[self._free_cells] = np.arange(len(self._free_cells))
        self._moves = np.array([-self.size, self.size, -1, 1], np.int64)
        self._centre = (self.size // 2) * self.size + self.size // 2
        self._agent = np.full(self.num_envs, self._centre, np.int64)
        self._goal = np.zeros(self.num_envs, np.int64)
        self._t = np.zeros(self.num_envs, np.int64)
        self._ret = np.zeros(self.num_envs, np.float64)
        self._no_final_obs = np.empty((0, OBS_SIZE[rules]), np.float32)
        self._started = False  # no goal is placed before the first reset()
        self.seed(seed)

    def seed(self, seed: int | Sequence[int]) -> None:
        """Re-seed the streams: env i gets key (seed, i), or (seed[i], i) for a sequence."""
        seeds = [_check_seed(s) for s in seed] if isinstance(seed, Sequence) else [_check_seed(seed)] * self.num_envs
        if len(seeds) != self.num_envs:
            raise ValueError(f"got {len(seeds)} seeds for {self.num_envs} envs")
        self._rng = _seed_streams(np.array(seeds, np.uint64), np.arange(self.num_envs, dtype=np.uint64))

    def reset(self) -> np.ndarray:
        """Start a new episode in every env; returns obs float32 [N, D]."""
        self._started = True
        return _reset_kernel(self._agent, self._goal, self._t, self._ret, self._rng, self._window,
                             self._free_cells, self._free_index, self._centre, self.episode_length,
                             self._miconi, self.observation_shape[0])

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Step every env with ``actions`` (int [N], values in 0..3); see the class docstring."""
        obs, reward, done, ep_return, ep_length = self._step(actions, autoreset=True, final_obs=self._no_final_obs)
        return obs, reward, done, {"episode_return": ep_return, "episode_length": ep_length}

    def _step(self, actions: Any, *, autoreset: bool, final_obs: np.ndarray) -> tuple[np.ndarray, ...]:
        if not self._started:
            raise RuntimeError("call reset() before step()")
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,) or actions.dtype.kind not in "iu":
            raise ValueError(f"actions must be an int array of shape ({self.num_envs},), "
                             f"got {actions.dtype} {actions.shape}")
        return _step_kernel(actions.astype(np.int64, copy=False), self._agent, self._goal, self._t, self._ret,
                            self._rng, self._window, self._free_cells, self._free_index, self._moves,
                            self._centre, self.episode_length, autoreset, final_obs,
                            self._miconi, self.observation_shape[0])

    @property
    def agent(self) -> np.ndarray:
        """Agent positions, int [N, 2] (row, col)."""
        return np.stack(np.divmod(self._agent, self.size), axis=1)

    @property
    def goal(self) -> np.ndarray:
        """Goal positions, int [N, 2] (row, col)."""
        return np.stack(np.divmod(self._goal, self.size), axis=1)

    def render(self, index: int = 0, mode: str = "ansi") -> str | np.ndarray:
        """Env ``index`` as text ('#' wall, '.' free, 'A' agent, 'G' goal) or an RGB image."""
        (ar, ac), (gr, gc) = self.agent[index], self.goal[index]
        if mode == "ansi":
            grid = np.where(self.walls, "#", ".")
            grid[gr, gc], grid[ar, ac] = "G", "A"
            return "\n".join("".join(row) for row in grid) + "\n"
        if mode == "rgb_array":
            image = np.where(self.walls[..., None], np.uint8(64), np.uint8(255)).repeat(3, axis=2)
            image[gr, gc], image[ar, ac] = (0, 200, 0), (30, 60, 230)
            return image.repeat(_PIXELS, axis=0).repeat(_PIXELS, axis=1)
        raise ValueError(f"render mode must be one of {RENDER_MODES}, got {mode!r}")

    def close(self) -> None:
        """Nothing to release; present for the actor interface."""


RENDER_MODES = ["ansi", "rgb_array"]
_PIXELS = 16  # rgb_array pixels per maze cell


# ---------------------------------------------------------------- Gymnasium wrappers


def _observation_space(maze: Maze) -> spaces.Box:
    if not maze._miconi:
        return spaces.Box(0.0, 1.0, (OBS_SIZE["default"],), np.float32)
    # window, previous reward (-0.1 .. 10), raw step number (0 .. episode_length), bias 1
    low = np.array([0.0] * 9 + [WALL_REWARD, 0.0, 1.0], np.float32)
    high = np.array([1.0] * 9 + [GOAL_REWARD, maze.episode_length, 1.0], np.float32)
    return spaces.Box(low, high, dtype=np.float32)


class MazeEnv(gymnasium.Env):
    """One maze as a ``gymnasium.Env`` (id ``DeltaBeast/Maze-v0``; Miconi et al. 2018).

    Options as for :class:`Maze`. The episode ends with ``terminated=True`` after
    ``episode_length`` steps (the time is part of the observation, so it is a terminal
    state, not a truncation); the last observation has time feature 1 (``default``) or
    step number ``episode_length`` (``miconi2018``). ``info`` holds the running ``episode_return`` and
    ``episode_length``. ``env_index=i`` makes ``reset(seed=s)`` replay env i of a batch
    seeded with s.
    """

    metadata = {"render_modes": RENDER_MODES, "render_fps": 4}

    def __init__(self, size: int = 9, episode_length: int = 250, render_mode: str | None = None,
                 env_index: int = 0, rules: Literal["default", "miconi2018"] = "default") -> None:
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode must be None or one of {RENDER_MODES}, got {render_mode!r}")
        if isinstance(env_index, bool) or not isinstance(env_index, (int, np.integer)) or env_index < 0:
            raise ValueError(f"env_index must be an int >= 0, got {env_index!r}")
        self.render_mode, self.env_index = render_mode, int(env_index)
        self._maze = Maze(1, 0, size=size, episode_length=episode_length, rules=rules)
        self._seeded, self._terminated = False, False
        self.observation_space = _observation_space(self._maze)
        self.action_space = spaces.Discrete(NUM_ACTIONS)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is None and not self._seeded:
            seed = int(self.np_random.integers(2**63))
        if seed is not None:
            self._reseed(_check_seed(seed))
        obs = self._maze.reset()
        self._terminated = False
        return obs[0], {"episode_return": np.float32(0.0), "episode_length": np.int32(0)}

    def _reseed(self, seed: int) -> None:
        m = self._maze
        m._rng = _seed_streams(np.array([seed], np.uint64), np.array([self.env_index], np.uint64))
        self._seeded = True

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self._seeded or self._terminated:
            raise gymnasium.error.ResetNeeded("call reset() before step() (and after an episode ends)")
        obs, reward, done, ep_return, ep_length = self._maze._step(
            np.asarray([action]), autoreset=False, final_obs=self._maze._no_final_obs)
        self._terminated = bool(done[0])
        info = {"episode_return": ep_return[0], "episode_length": ep_length[0]}
        return obs[0], float(reward[0]), bool(done[0]), False, info

    def render(self) -> str | np.ndarray | None:
        return None if self.render_mode is None else self._maze.render(0, self.render_mode)


class MazeVectorEnv(VectorEnv):
    """N mazes as a ``gymnasium.vector.VectorEnv`` over the batched core (``gymnasium.make_vec``).

    Autoreset mode is SAME_STEP: where an episode ends, ``terminations[i]`` is True, the
    returned observation starts the next episode, and ``infos["final_obs"][i]`` is the
    finished episode's last observation. ``reset(seed=s)`` keys env i with (s, i), like
    ``envs.make``; ``reset(seed=[s0, s1, ...])`` keys it with (s_i, i).
    """

    metadata = {"render_modes": RENDER_MODES, "render_fps": 4, "autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int, size: int = 9, episode_length: int = 250,
                 render_mode: str | None = None, rules: Literal["default", "miconi2018"] = "default") -> None:
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode must be None or one of {RENDER_MODES}, got {render_mode!r}")
        self._maze = Maze(num_envs, 0, size=size, episode_length=episode_length, rules=rules)
        self.num_envs, self.render_mode = self._maze.num_envs, render_mode
        self._seeded = False
        self.single_observation_space = _observation_space(self._maze)
        self.single_action_space = spaces.Discrete(NUM_ACTIONS)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is None and not self._seeded:
            seed = int(np.random.default_rng().integers(2**63))
        if seed is not None:
            self._maze.seed(seed)
            self._seeded = True
        return self._maze.reset(), {}

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if not self._seeded:
            raise gymnasium.error.ResetNeeded("call reset() before step()")
        final_obs = np.empty((self.num_envs, *self._maze.observation_shape), np.float32)
        obs, reward, done, ep_return, ep_length = self._maze._step(actions, autoreset=True, final_obs=final_obs)
        infos: dict[str, Any] = {"episode_return": ep_return, "episode_length": ep_length}
        if done.any():
            infos["final_obs"] = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(done):
                infos["final_obs"][i] = final_obs[i]
            infos["_final_obs"] = done.copy()
        return obs, reward, done, np.zeros(self.num_envs, bool), infos

    def render(self) -> tuple[str | np.ndarray, ...] | None:
        if self.render_mode is None:
            return None
        return tuple(self._maze.render(i, self.render_mode) for i in range(self.num_envs))
