"""Batched Atari 2600 games from ale-py's threaded C++ ``AtariVectorEnv`` (recurrent-FWP appendix C).

Preprocessing (inside ale-py's vector env): sticky actions with p = 0.25, frame skip 4
with max-pooling over the last two frames, up to 30 no-ops at reset, 84x84 grey, a stack of 4
frames, the minimal (game-specific) action set, and the emulator's own episode limit of
108,000 frames (30 minutes of play) as the only time limit. ale-py pads the stack of a new
game with blank frames; here the first frame of the game fills them instead, as torchbeast's
``FrameStack`` (the papers' code) and Gymnasium's ``FrameStackObservation`` do. The frames,
rewards and game ends equal, bit for bit, those of Gymnasium's ``AtariPreprocessing`` and
``FrameStackObservation`` over ale-py's single env (tests/test_atari.py).

What the agent sees and what is reported:

* Rewards are the raw game score changes (ale-py's reward clipping is off); the learner clips
  them (config ``network.reward_clip``).
* An episode is a whole game, over all lives: ale-py's ``episodic_life`` is off, so ``done``
  is set only at game over (or at the frame limit), and ``info["episode_return"]`` is the game
  score of the whole game, never that of one life.
* No FIRE press at reset, as in Gymnasium's v5 envs; ``fire_reset=True`` turns ale-py's on.
  (The papers' code, torchbeast's ``wrap_deepmind`` over ``NoFrameskip-v4``, presses FIRE and
  ends an episode at each life lost, without sticky actions; the protocol here is v5's.)

``envs.make("atari", num_envs=N, seed=s, game="Pong")`` returns :class:`Atari`; ``game``
takes the Gymnasium names ("MsPacman", "SpaceInvaders"), ale-py's ROM ids ("ms_pacman") or
"ALE/MsPacman-v5", case-insensitively, and any of the ROMs that ale-py ships.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from envs.batch import EpisodeTotals, check_actions

# The 20 games of Tables 9 and 10 of the recurrent-FWP appendix, in the tables' order, with their ROM ids.
PAPER_GAMES: dict[str, str] = {
    "Alien": "alien", "Amidar": "amidar", "Assault": "assault", "BattleZone": "battle_zone",
    "Berzerk": "berzerk", "BankHeist": "bank_heist", "BeamRider": "beam_rider",
    "DemonAttack": "demon_attack", "Gopher": "gopher", "Jamesbond": "jamesbond",
    "KungFuMaster": "kung_fu_master", "MsPacman": "ms_pacman", "Pong": "pong", "Qbert": "qbert",
    "Robotank": "robotank", "Seaquest": "seaquest", "SpaceInvaders": "space_invaders",
    "StarGunner": "star_gunner", "UpNDown": "up_n_down", "Zaxxon": "zaxxon",
}


def _camel(rom_id: str) -> str:
    return "".join(part.capitalize() for part in rom_id.split("_"))


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def available_games() -> list[str]:
    """Every game ale-py ships, by its Gymnasium name (``Pong``, ``MsPacman``, ...), sorted."""
    from ale_py import roms

    return sorted(_camel(r) for r in roms.get_all_rom_ids())


def rom_id(game: str) -> str:
    """ale-py's ROM id for ``game``; ``ValueError`` listing the valid games if there is none."""
    from ale_py import roms

    name = game
    m = re.fullmatch(r"(?:ALE/)?(.+?)(?:NoFrameskip)?(?:-v\d+)?", game)
    if m:
        name = m.group(1)
    table = {_key(r): r for r in roms.get_all_rom_ids()}
    if isinstance(game, str) and _key(name) in table:
        return table[_key(name)]
    raise ValueError(f"unknown Atari game {game!r}; valid games (the papers' 20: {', '.join(PAPER_GAMES)}); "
                     f"all of ale-py's: {', '.join(available_games())}")


def canonical_name(game: str) -> str:
    """The Gymnasium-style name of ``game`` (``"ms_pacman"`` -> ``"MsPacman"``)."""
    return _camel(rom_id(game))


GAMES = tuple(available_games())
"""The games this ale-py ships (the ``game`` option's choices)."""


class Atari:
    """N Atari games stepped by ale-py's ``AtariVectorEnv``, with torchbeast-style automatic reset.

    ``step`` returns ``(obs [N,4,84,84] uint8, reward [N] float32 (raw score), done [N] bool,
    info)`` with ``info = {"episode_return": float32 [N], "episode_length": int32 [N],
    "lives": int32 [N], "truncated": bool [N]}``. Where ``done[i]`` the game of env i ended at
    this step (game over, or the frame limit) and env i was reset: ``obs[i]`` is the first
    observation of the new game, ``reward[i]`` the last reward of the finished one, and the info
    entries its totals (whole-game score and length in agent steps); elsewhere they are running
    totals. ``truncated[i]``: the frame limit cut the game (not game over); then
    ``info["final_obs"][i]`` is its last observation, for the learner's bootstrap.
    Actions are indices into the game's minimal action set, ``0 .. num_actions-1``.
    """

    observation_shape: tuple[int, ...] = (4, 84, 84)
    observation_dtype: np.dtype = np.dtype(np.uint8)

    @dataclass
    class Config:
        """Atari 2600 games (ale-py), preprocessed as in the papers."""

        game: Literal[GAMES] = "Pong"
        """The game, a Gymnasium name such as Pong or MsPacman (the papers' 20 are in PAPER_GAMES)."""
        sticky_action_prob: float = 0.25
        """Probability of repeating the previous action (v5's 0.25 is the only randomness)."""
        frame_skip: int = 4
        """Emulator frames per agent step, max-pooled over the last two."""
        noop_max: int = 30
        """Up to this many no-op frames at the start of a game (0 to this, uniformly; 0: none)."""
        frame_stack: int = 4
        """Frames stacked into one observation."""
        max_episode_frames: int = 108_000
        """Emulator frames after which a game is cut (108,000 = 30 minutes)."""
        fire_reset: bool = False
        """Press FIRE after each reset (games that need it to start)."""
        full_action_space: bool = False
        """Use all 18 actions instead of the game's minimal set."""
        num_threads: int = 0
        """C++ threads of the vector env (0: one per env, up to the cores)."""
        rgb_frames: bool = False
        """Keep the screen in colour for :meth:`render` (evaluate.py --video): a second emulator per
        game, seeded and stepped as the first, whose 210x160 RGB frames nothing preprocesses."""

    def __init__(self, num_envs: int, seed: int = 0, **options: Any) -> None:
        """``options``: the fields of :class:`Atari.Config`."""
        cfg = self.Config(**options)
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
        if not 0.0 <= cfg.sticky_action_prob <= 1.0:
            raise ValueError(f"sticky_action_prob must be in [0, 1], got {cfg.sticky_action_prob!r}")
        for name, low in (("frame_skip", 1), ("noop_max", 0), ("frame_stack", 1), ("max_episode_frames", 1),
                          ("num_threads", 0)):
            if getattr(cfg, name) < low:
                raise ValueError(f"{name} must be >= {low}, got {getattr(cfg, name)!r}")
        from ale_py.vector_env import AtariVectorEnv

        self.game = canonical_name(cfg.game)
        self.num_envs = int(num_envs)
        self.seed_value = int(seed)
        threads = cfg.num_threads or min(self.num_envs, os.cpu_count() or 1)
        emulator = dict(  # the game's dynamics; both emulators of rgb_frames take the same
            num_threads=threads, repeat_action_probability=float(cfg.sticky_action_prob), frameskip=int(cfg.frame_skip),
            noop_max=int(cfg.noop_max) + 1 if cfg.noop_max else 0,  # ale-py draws 0..noop_max-1 no-ops; this 0..30
            max_num_frames_per_episode=int(cfg.max_episode_frames), full_action_space=bool(cfg.full_action_space),
            episodic_life=False, life_loss_info=False, reward_clipping=False, use_fire_reset=bool(cfg.fire_reset),
            autoreset_mode="SameStep")
        self._env = AtariVectorEnv(rom_id(cfg.game), self.num_envs, maxpool=True, stack_num=int(cfg.frame_stack),
                                   img_height=84, img_width=84, grayscale=True, **emulator)
        # The screen's emulator: its random draws (no-ops, sticky actions) come from the same seeds
        # in the same order, so it plays the same game (tests/test_atari.py checks it)
        self._screen_env = AtariVectorEnv(rom_id(cfg.game), self.num_envs, maxpool=False, stack_num=1, img_height=210,
                                          img_width=160, grayscale=False, **emulator) if cfg.rgb_frames else None
        self._screen: np.ndarray | None = None
        self.render_fps = 60 / int(cfg.frame_skip)  # the emulator's 60 frames/s
        self.observation_shape = (int(cfg.frame_stack), 84, 84)
        self.num_actions = int(self._env.single_action_space.n)
        self._ids = np.arange(self.num_envs)
        self._totals = EpisodeTotals(self.num_envs)
        self._since_reset = np.zeros(self.num_envs, np.int64)  # agent steps since each game began

    def reset(self) -> np.ndarray:
        """Start a new game in every env (env i seeded with ``(seed + i) mod 2**31``); returns obs uint8 [N,4,84,84]."""
        seeds = (self.seed_value + np.arange(self.num_envs, dtype=np.int64)) % (2**31)
        obs, info = self._env.reset(seed=seeds)
        if self._screen_env is not None:
            self._screen = self._screen_env.reset(seed=seeds)[0][:, -1]
        self._totals.reset()
        self._check_order(info)
        self._since_reset[:] = 0
        return self._pad_with_first_frame(obs)

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Step every env with ``actions`` (int [N], values in 0..num_actions-1); see the class docstring."""
        self.send(actions)
        return self.recv()

    def send(self, actions: Any) -> None:
        """The first half of :meth:`step`: hand ``actions`` to the emulator threads, which play
        the step until :meth:`recv` collects it. Sending to several envs before receiving from any
        plays their games at once (evaluate.py's games of one env each)."""
        actions = check_actions(actions, self.num_envs, self.num_actions)
        self._env.send(actions)
        if self._screen_env is not None:
            self._screen_env.send(actions)

    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """The second half of :meth:`step`: wait for the step :meth:`send` started; returns what
        :meth:`step` returns."""
        obs, reward, terminated, truncated, info = self._env.recv()
        self._check_order(info)
        if self._screen_env is not None:  # a game's last screen, not the next one's first
            screen, screen_reward, over, cut, screen_info = self._screen_env.recv()
            if not (np.array_equal(screen_reward, reward) and np.array_equal(over, terminated)):
                raise RuntimeError("the screen's emulator (rgb_frames) no longer plays the same game")
            last = screen_info.get("final_obs", screen)
            self._screen = np.where((over | cut)[:, None, None, None], last, screen)[:, -1]
        reward = np.asarray(reward, np.float32)
        done = np.logical_or(terminated, truncated)
        totals = self._totals.step(reward, done)
        truncated = np.logical_and(truncated, np.logical_not(terminated))
        cut = {"truncated": truncated, "final_obs": info["final_obs"]} if truncated.any() else {"truncated": truncated}
        self._since_reset = np.where(done, 0, self._since_reset + 1)
        return self._pad_with_first_frame(obs), reward, done, {**totals, "lives": np.asarray(info["lives"], np.int32),
                                                               **cut}

    def render(self, index: int = 0, mode: str = "rgb_array") -> np.ndarray:
        """Env ``index``'s screen after the last reset or step, uint8 [210, 160, 3] (the env option
        ``rgb_frames``); where a game ended at that step, its last screen."""
        if mode != "rgb_array":
            raise ValueError(f"Atari renders only rgb_array, got {mode!r}")
        if self._screen is None:
            raise ValueError("render() needs the env option rgb_frames: true (and a reset first)")
        return self._screen[index]

    def _pad_with_first_frame(self, obs: np.ndarray) -> np.ndarray:
        """``obs`` with the blank frames that ale-py stacks before a game's first frame replaced
        by that frame (in a copy: ale-py may keep the array)."""
        young = np.flatnonzero(self._since_reset < obs.shape[1] - 1)
        if young.size == 0:
            return obs
        obs = obs.copy()
        for i in young:
            first = obs.shape[1] - 1 - self._since_reset[i]  # where the game's first frame sits in the stack
            obs[i, :first] = obs[i, first]
        return obs

    def _check_order(self, info: dict[str, np.ndarray]) -> None:
        """ale-py applies the i-th action to the i-th env of its last result, so results must come
        in env order for action i to reach env i (they do with batch_size = num_envs)."""
        ids = info.get("env_id")
        if ids is not None and not np.array_equal(ids, self._ids):
            raise RuntimeError(f"ale-py returned the envs in the order {ids.tolist()}, not 0..{self.num_envs - 1}")

    def close(self) -> None:
        self._env.close()
        if self._screen_env is not None:
            self._screen_env.close()

    def __enter__(self) -> Atari:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
