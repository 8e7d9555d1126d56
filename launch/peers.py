"""``launch/bench.py peers``: DeltaBeast beside sb3-contrib's RecurrentPPO (and, on Box-action
envs and Atari, Stable-Baselines3's PPO) on the same envs, at equal environment steps (the
optional ``peers`` extra: ``pip install -e '.[peers]'``).

    python launch/bench.py peers --env maze --steps 1000000 --seeds 0 1 2
    python launch/bench.py peers --env popgym/RepeatPreviousEasy --steps 1000000 --docs
    python launch/bench.py peers --env gym:Acrobot-v1 --steps 300000
    python launch/bench.py peers --env gym:HalfCheetah-v5 --steps 1000000          # + SB3 PPO (Box actions)
    python launch/bench.py peers --env gym:Hopper-v5 --observe velocities          # Ni et al.'s Hopper-V
    python launch/bench.py peers --env atari:Pong --steps 2500000                  # DeltaBeast and SB3 PPO

On a Box-action env the peers run at their documented defaults (the classes' own settings: PPO's
``MlpPolicy`` with n_steps 2048, batch 64, 10 epochs, lr 3e-4, γ 0.99, GAE λ 0.95, clip 0.2;
RecurrentPPO's ``MlpLstmPolicy`` with n_steps 128, batch 128, 10 epochs, an LSTM of 256), on one
env each, as RL Zoo runs MuJoCo; they see the env's raw observations and rewards, as their
defaults have them (no ``VecNormalize``). ``--observe positions|velocities`` gives all three the
same -P or -V observations (:mod:`envs.pomdp`), and the env's label gains ``-P`` or ``-V``.

Each seed runs DeltaBeast (the env's launcher config: launch/maze.py, launch/memory.py's for a
``<suite>/<env>``, or launch/train.py's for a ``gym:<id>``, plus any ``--flags``) and then
RecurrentPPO, one after the other, on the same env. RecurrentPPO takes sb3-contrib's documented
``MlpLstmPolicy`` with the settings of the issue that asked for this comparison (16 envs,
n_steps 128, batch 128, 4 epochs, lr 3e-4, GAE λ 0.95, clip 0.2), an LSTM as wide as
DeltaBeast's lstm (128), and the same discount as the DeltaBeast config. Both see the same
observations (the env's, flattened); DeltaBeast also feeds its core the previous reward and
action, as it always does.

On ``atari:<Game>`` DeltaBeast runs launch/atari.py with launch/configs/atari_cpu.yaml (the CPU
recipe: Nature stem, ff core, CleanRL's PPO update) and the peer is SB3's PPO with ``CnnPolicy``
at RL Zoo's Atari settings (:data:`ATARI_PPO`: 8 envs, n_steps 128, 4 epochs, batch 256, entropy
0.01, frame stack 4, lr 2.5e-4 and clip 0.1 both decayed linearly to 0 over the run's ``--steps``;
RL Zoo's run is 10M, and atari_cpu.yaml keeps its lr). It plays Gymnasium's own ALE v5 game
through ``AtariPreprocessing`` (:func:`make_atari_env`) with our env's sticky actions, no-ops,
frame skip and frame limit, no life-loss ends and no FIRE at reset (as ours; RL Zoo's
``AtariWrapper`` has both), and learns from sign-clipped rewards (``AtariWrapper``'s
``ClipRewardEnv``). Its frames equal ours bit for bit; only the first 3 frame stacks of a game
differ, where SB3's ``VecFrameStack`` pads with black frames and ours repeats the game's first
(tests/test_peers_atari.py). Both curves are of raw whole-game scores. Atari's table
(:func:`atari_table`) gives the return at equal steps (0.5M to 2.5M) and at equal wall time (15 to
135 minutes), and ``--plot`` draws it against both.

The score at a step S is the mean return of the last 100 episodes finished by S, for both
(RecurrentPPO's ``ep_rew_mean`` window; DeltaBeast's ``log.return_window`` is set to 100). Each
run's curve goes to ``<out>/<env>/<algo>-s<seed>.json`` (``deltabeast-<core>-s<seed>.json`` for
DeltaBeast's, so that several cores can sit beside each other); the table (median over seeds of the
return at 100K, 250K, 500K and 1M steps, POPGym's MMER over that curve, wall time) is printed,
and with ``--docs`` written between the ``peers`` markers of docs/memory_benchmarks.md (memory
and ``gym:<id>`` envs) or docs/results.md (the maze), from every result under ``<out>`` but
Atari's. For memory envs a second table gives each row's median across the envs of its
normalised return (issue 42's score of a recipe over a set of envs), and ``--plot FILE`` draws
every run's curve, a panel per env.

The same command again goes on where it stopped: a run whose result file exists is kept (remove
it to run again), a peer's run goes on from its save of the last 10 minutes (:func:`learn_curve`;
RecurrentPPO takes ~4.5 CPU-hours per 1M steps on MuJoCo), and a DeltaBeast run starts again.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from typing import Any

import numpy as np

from agents.files import atomic_write, atomic_write_text
from agents.run_config import TrainConfig
from agents.tables import markdown_table
from launch.scores import CHECKPOINTS, at_step, median_normalised_returns, seed_values
from launch.sweep import Trial, is_gym, trial_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WINDOW = 100  # episodes in a mean return, for both
PPO_SETTINGS = {"n_steps": 128, "batch_size": 128, "n_epochs": 4, "learning_rate": 3e-4, "gae_lambda": 0.95,
                "clip_range": 0.2, "ent_coef": 0.0, "vf_coef": 0.5}
PPO_ENVS = 16
PPO_LSTM = 128
ALGOS = ("deltabeast", "recurrent_ppo", "ppo")
ATARI_ALGOS = ("deltabeast", "ppo")
ATARI_STEPS = (500_000, 1_000_000, 1_500_000, 2_000_000, 2_500_000)  # issue 73's equal-step milestones (10M frames)
ATARI_MINUTES = (15, 30, 45, 90, 135)  # equal wall time: atari_cpu.yaml's Pong run is ~45 min, 135 is 3x it
# Sample Factory's APPO (issue 73's speed anchor, "if it installs") does not install beside us: its last
# release (2.1.1) pins gymnasium<1.0 and numpy<2 (ours: gymnasium>=1.0 for MuJoCo v5 and ale-py 0.12),
# and its Atari envs are NoFrameskip-v4 (no sticky actions), off the protocol the table compares on.
SAVE_EVERY_S = 600.0  # a peer's run saves itself this often (learn_curve), to go on after a kill
BOX_ENVS = 1  # the peers' envs on a Box-action env: their documented single-env defaults
ATARI_CONFIG = os.path.join(ROOT, "launch", "configs", "atari_cpu.yaml")  # DeltaBeast's Atari recipe on a CPU
# SB3's PPO on Atari as RL Zoo runs it: the ``atari`` entry of rl-baselines3-zoo's hyperparams/ppo.yml
# (policy, n_envs, frame_stack and its PPO arguments, "lin_<x>" as RL Zoo writes a linear decay from x
# to 0 over the run), with SB3's defaults that the entry leaves to them (gamma, gae_lambda,
# max_grad_norm) written out. It is CleanRL's ppo_atari recipe.
ATARI_PPO = {"policy": "CnnPolicy", "n_envs": 8, "frame_stack": 4, "n_steps": 128, "n_epochs": 4,
             "batch_size": 256, "learning_rate": "lin_2.5e-4", "clip_range": "lin_0.1", "ent_coef": 0.01,
             "vf_coef": 0.5, "gamma": 0.99, "gae_lambda": 0.95, "max_grad_norm": 0.5}


def windowed_curve(finished: list[tuple[int, float]], window: int = WINDOW) -> list[tuple[int, float]]:
    """(step, mean of the last ``window`` returns) after each finished episode (step, return)."""
    curve, recent = [], []
    for step, ret in finished:
        recent.append(ret)
        recent = recent[-window:]
        curve.append((step, sum(recent) / len(recent)))
    return curve


def is_atari(env: str) -> bool:
    """Whether a peers env is ``atari:<Game>``."""
    return env.startswith("atari:")


def deltabeast_config(env: str, *, core: str, seed: int, steps: int | None, flags: list[str],
                      run_dir: str) -> TrainConfig:
    """DeltaBeast's config for ``env``: launch/sweep.py's trial of it, and for ``atari:<Game>`` the
    game's trial on :data:`ATARI_CONFIG`."""
    if is_atari(env):
        env, flags = env.removeprefix("atari:"), ["--config", ATARI_CONFIG, *flags]
    return trial_config(Trial(env, core, seed), steps, flags, run_dir)


def default_core(env: str) -> str:
    """The core of ``env``'s launcher config: maze.yaml's, train.yaml's (its continuous preset's on
    Box actions), memory.yaml's or atari_cpu.yaml's."""
    from launch import atari, maze, memory, train

    if is_atari(env):
        return atari.load(["--config", ATARI_CONFIG]).core.name
    if is_gym(env):
        return train.load(["--env.id", env.removeprefix("gym:")]).core.name
    return (maze if env == "maze" else memory).load([]).core.name


def run_deltabeast(env: str, core: str, seed: int, steps: int, flags: list[str], run_dir: str) -> dict[str, Any]:
    """Train DeltaBeast on ``env``; its curve is its log's windowed mean return, and ``curve_wall_s``
    the run's seconds at each of its points (the log's ``time``)."""
    from agents.learning.learner import train
    from agents.learning.logger import CSV_NAME, read_csv

    cfg = deltabeast_config(env, core=core, seed=seed, steps=steps, run_dir=run_dir,
                            flags=[*flags, "--log.return_window", str(WINDOW), "--run.resume", "false",
                                   "--log.tensorboard", "false"])
    start = time.time()
    train(cfg)
    wall = time.time() - start
    rows = [r for r in read_csv(os.path.join(run_dir, CSV_NAME)) if math.isfinite(r.get("mean_return", math.nan))]
    return {"curve": [(int(r["step"]), float(r["mean_return"])) for r in rows],
            "curve_wall_s": [float(r["time"]) for r in rows], "wall_s": wall}


def make_single_env(env: str, seed: int, index: int, observe: str = "all") -> Any:
    """One copy of ``env`` as a Gymnasium env with flat observations (what the peers' MLPs take),
    cut to the part ``observe`` keeps (:mod:`envs.pomdp`)."""
    from envs.suites import suite_env

    if env == "maze":
        from envs.maze import MazeEnv

        single: Any = MazeEnv(env_index=index)
    else:
        from envs.gym_adapter import make_single

        if is_gym(env):
            single = make_single(env.removeprefix("gym:"), observation="flat", observe=observe)
        else:
            _, entry = suite_env(env)
            single = make_single(entry.options["id"], observation="flat", wrappers=entry.options.get("wrappers", ()))
    single.reset(seed=seed * 1000 + index)
    return single


def env_label(env: str, observe: str) -> str:
    """The env's name in results: Ni et al.'s ``-P`` or ``-V`` after the id of a partly observed one."""
    return env if observe == "all" else f"{env}-{observe[0].upper()}"


def run_sb3(algo: str, env: str, seed: int, steps: int, discount: float, observe: str = "all", *,
            save_to: str | None = None) -> dict[str, Any]:
    """Train Stable-Baselines3's PPO (``algo`` "ppo") or sb3-contrib's RecurrentPPO on ``env``; the
    curve is the windowed mean over its episodes; ``save_to`` as :func:`learn_curve`'s. Box actions:
    the class defaults on one env; otherwise the settings of the module docstring (16 envs,
    DeltaBeast's discount)."""
    try:
        from sb3_contrib import RecurrentPPO
        from stable_baselines3 import PPO
        from stable_baselines3.common.monitor import Monitor
        from stable_baselines3.common.vec_env import DummyVecEnv
    except ImportError:
        raise missing_peers() from None
    from gymnasium import spaces

    probe = make_single_env(env, seed, 0, observe)
    box = isinstance(probe.action_space, spaces.Box)
    probe.close()
    n = BOX_ENVS if box else PPO_ENVS
    vec = DummyVecEnv([lambda i=i: Monitor(make_single_env(env, seed, i, observe)) for i in range(n)])
    policy, cls = ("MlpPolicy", PPO) if algo == "ppo" else ("MlpLstmPolicy", RecurrentPPO)
    if box:
        settings: dict[str, Any] = {}
    else:
        settings = {"gamma": discount, **PPO_SETTINGS}
        if algo == "recurrent_ppo":
            settings["policy_kwargs"] = {"lstm_hidden_size": PPO_LSTM}
    return learn_curve(cls(policy, vec, seed=seed, verbose=0, **settings), steps, save_to=save_to)


def missing_peers() -> Exception:
    """The error for a run of a peer without the ``peers`` extra."""
    from agents.errors import UsageError

    return UsageError("bench peers needs sb3-contrib: pip install -e '.[peers]'")


def learn_curve(model: Any, steps: int, *, save_to: str | None = None,
                save_every_s: float = SAVE_EVERY_S) -> dict[str, Any]:
    """Train the SB3 ``model`` for ``steps`` env steps and close its envs; the curve is the windowed
    mean of the returns that its envs' ``Monitor`` reports, and ``curve_wall_s`` the run's seconds
    (across resumes) when each of its episodes ended.

    With ``save_to`` (a path without its extension), the model (``<save_to>.zip``: weights,
    optimiser, step count) and the episodes and wall time so far (``<save_to>.json``) are saved,
    each atomically, at the end of the first rollout past every ``save_every_s`` seconds; a run that
    finds them goes on from there, and removes them when it ends. A resumed run's envs start new
    episodes (the ones in progress at the save are lost) and its random streams are new, so its
    numbers differ from an unbroken run's as another seed's would; its result lists the steps it
    resumed at (``resumed_at``)."""
    from stable_baselines3.common.callbacks import BaseCallback

    finished: list[tuple[int, float, float]] = []  # (step, return, wall seconds) of each episode
    wall_before, resumed_at = 0.0, []
    if save_to is not None and os.path.exists(save_to + ".json"):
        with open(save_to + ".json") as f:
            saved = json.load(f)
        model = type(model).load(save_to + ".zip", env=model.get_env(), device=model.device)  # learn() resets the envs
        finished = [(int(step), float(ret), float(wall)) for step, ret, wall in saved["finished"]
                    if step <= model.num_timesteps]
        wall_before, resumed_at = saved["wall_s"], [*saved["resumed_at"], model.num_timesteps]
    start = last_save = time.time()

    def save() -> None:
        atomic_write(save_to + ".zip", model.save, "a peer's save")
        so_far = {"finished": finished, "resumed_at": resumed_at, "wall_s": wall_before + time.time() - start}
        atomic_write_text(save_to + ".json", json.dumps(so_far), "a peer's save")

    class Episodes(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    finished.append((self.num_timesteps, float(info["episode"]["r"]),
                                     wall_before + time.time() - start))
            return True

        def _on_rollout_end(self) -> None:
            nonlocal last_save
            if save_to is not None and time.time() - last_save >= save_every_s:
                save()
                last_save = time.time()

    model.learn(total_timesteps=steps - model.num_timesteps, callback=Episodes(), reset_num_timesteps=not resumed_at)
    wall = wall_before + time.time() - start
    model.get_env().close()
    for leftover in ([save_to + ".zip", save_to + ".json"] if save_to is not None else []):
        if os.path.exists(leftover):
            os.remove(leftover)
    return {"curve": windowed_curve([(step, ret) for step, ret, _ in finished]),
            "curve_wall_s": [wall for *_, wall in finished], "wall_s": wall, "resumed_at": resumed_at}


def rl_zoo_value(value: Any) -> Any:
    """An RL Zoo setting as SB3 takes it: ``"lin_<x>"`` becomes a schedule from x down to 0 over the
    run (SB3 calls it with the fraction of the run left, 1 to 0), anything else stays."""
    if isinstance(value, str) and value.startswith("lin_"):
        start = float(value.removeprefix("lin_"))
        return lambda remaining: remaining * start
    return value


def make_atari_env(env_config: Any) -> Any:
    """Gymnasium's own ALE v5 game of ``env_config`` (our env's config: :class:`envs.atari.Atari.Config`
    or a run's ``env`` section) as SB3's PPO plays it, with our env's sticky actions, frame skip (a
    max-pool over the last two frames), no-ops, action set and frame limit, 84x84 grey frames of
    shape (84, 84, 1), whole games and raw rewards (the clipping and frame stack are
    :func:`atari_vec_env`'s).

    Against ``envs.make("atari")`` with sticky actions and no-ops off (tests/test_peers_atari.py,
    200 steps of Pong through :func:`atari_vec_env`): every new frame and every reward equals ours
    bit for bit. The frame stacks differ in the first 3 observations of a game only: SB3's
    ``VecFrameStack`` pads them with black frames (pixel 0), where ours repeats the game's first
    frame; so 3, 2 and 1 of the 4 frames differ (up to 179 grey levels on Pong's first frame), and
    none from the 4th observation on. The no-ops at reset are 1 to ``noop_max`` here (Gymnasium's,
    as SB3's ``NoopResetEnv``) against 0 to ``noop_max`` in ours."""
    import ale_py
    import gymnasium as gym

    from envs.atari import canonical_name

    gym.register_envs(ale_py)
    env = gym.make(f"ALE/{canonical_name(env_config.game)}-v5", frameskip=1,
                   repeat_action_probability=env_config.sticky_action_prob,
                   full_action_space=env_config.full_action_space,
                   max_num_frames_per_episode=env_config.max_episode_frames)
    return gym.wrappers.AtariPreprocessing(env, noop_max=env_config.noop_max, frame_skip=env_config.frame_skip,
                                           screen_size=84, grayscale_obs=True, grayscale_newaxis=True,
                                           terminal_on_life_loss=False, scale_obs=False)


def atari_vec_env(env_config: Any, *, num_envs: int) -> Any:
    """``num_envs`` of :func:`make_atari_env` as RL Zoo's PPO learns from them: each behind a
    ``Monitor`` (which records the raw whole-game score) and then ``ClipRewardEnv`` (the sign of
    each reward, as RL Zoo's ``AtariWrapper``), in a ``DummyVecEnv`` behind a ``VecFrameStack`` of
    :data:`ATARI_PPO`'s ``frame_stack`` frames (observations (num_envs, 84, 84, 4), newest last)."""
    from stable_baselines3.common.atari_wrappers import ClipRewardEnv
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

    vec = DummyVecEnv([lambda: ClipRewardEnv(Monitor(make_atari_env(env_config))) for _ in range(num_envs)])
    return VecFrameStack(vec, n_stack=ATARI_PPO["frame_stack"])


def run_atari_ppo(env_config: Any, *, seed: int, steps: int, save_to: str | None = None) -> dict[str, Any]:
    """Train SB3's PPO at :data:`ATARI_PPO` on :func:`atari_vec_env` of ``env_config`` (DeltaBeast's
    env config); the curve is the windowed mean of raw whole-game scores; ``save_to`` as :func:`learn_curve`'s."""
    try:
        from stable_baselines3 import PPO
    except ImportError:
        raise missing_peers() from None
    settings = {key: rl_zoo_value(value) for key, value in ATARI_PPO.items()}
    policy, num_envs = settings.pop("policy"), settings.pop("n_envs")
    del settings["frame_stack"]  # atari_vec_env's
    model = PPO(policy, atari_vec_env(env_config, num_envs=num_envs), seed=seed, verbose=0, **settings)
    return learn_curve(model, steps, save_to=save_to)


def result_path(out: str, env: str, algo: str, seed: int, core: str | None = None) -> str:
    """Where one run's result goes: ``<out>/<env>/<algo>[-<core>]-s<seed>.json``."""
    return os.path.join(out, env.replace("/", "_"), f"{algo}{'-' + core if core else ''}-s{seed}.json")


def load_results(out: str) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """env -> algo -> the seeds' results, from every result file under ``out``."""
    found: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for directory, _, files in os.walk(out):
        for name in sorted(files):
            if name.endswith(".json") and not name.endswith(".partial.json"):  # a peer's save (learn_curve)
                with open(os.path.join(directory, name)) as f:
                    r = json.load(f)
                found.setdefault(r["env"], {}).setdefault(r["algo"], []).append(r)
    return found


def score_table(results: dict[str, dict[str, list[dict[str, Any]]]]) -> str:
    """The Markdown table: per env and algorithm (a row per core for DeltaBeast), the median over
    seeds (and each seed's value) of the return at each of CHECKPOINTS (up to the runs' length),
    the MMER for POPGym envs, and the median wall time."""
    from envs.suites import mmer, suite_env

    header = ["env", "algorithm", "seeds", *(f"return at {s // 1000}K" for s in CHECKPOINTS), "MMER", "wall time"]
    table = []
    for env in sorted(results):
        for name, runs in labelled_runs(results[env]):
            cells = []
            for step in CHECKPOINTS:
                cells.append(_median_of(seed_values(runs, step)))
            if "/" in env and env.startswith("popgym"):
                entry = suite_env(env)[1]
                cells.append(_median_of([mmer([[v for _, v in r["curve"]]], entry.return_range) for r in runs],
                                        digits=3))
            else:
                cells.append("—")
            cells.append(f"{statistics.median(r['wall_s'] for r in runs) / 60:.1f} min")
            seeds = ",".join(str(r["seed"]) for r in runs)
            table.append([env, name, seeds, *cells])
    return "\n".join(markdown_table(header, table))


def wall_curve(run: dict[str, Any]) -> list[tuple[float, float]]:
    """The run's curve against its wall seconds, (seconds, mean return); empty for a result from
    before ``curve_wall_s`` was recorded."""
    return list(zip(run.get("curve_wall_s", []), (value for _, value in run["curve"])))


def atari_table(results: dict[str, dict[str, list[dict[str, Any]]]]) -> str:
    """The Markdown table of the ``atari:<Game>`` envs in ``results``: per env and algorithm, the
    median over seeds (and each seed's value) of the return at each of :data:`ATARI_STEPS` (equal
    steps) and at each of :data:`ATARI_MINUTES` (equal wall time; for the runs that ran that long),
    the median steps per second over the run, and the median wall time."""
    header = ["env", "algorithm", "seeds", *(f"at {s / 1e6:g}M steps" for s in ATARI_STEPS),
              *(f"at {m} min" for m in ATARI_MINUTES), "steps/s", "wall time"]
    table = []
    for env in sorted(e for e in results if is_atari(e)):
        for name, runs in labelled_runs(results[env]):
            by_step = [_median_of(seed_values(runs, step), digits=1) for step in ATARI_STEPS]
            by_wall = [_median_of([at_step(wall_curve(r), 60 * m) for r in runs if r["wall_s"] >= 60 * m], digits=1)
                       for m in ATARI_MINUTES]
            sps = statistics.median(r["steps"] / r["wall_s"] for r in runs)
            wall = statistics.median(r["wall_s"] for r in runs) / 60
            table.append([env, name, ",".join(str(r["seed"]) for r in runs), *by_step, *by_wall, f"{sps:,.0f}",
                          f"{wall:.0f} min"])
    return "\n".join(markdown_table(header, table))


def labelled_runs(by_algo: dict[str, list[dict[str, Any]]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """One env's runs as (row label, runs): ``deltabeast (<core>)`` per core, then each peer."""
    cores = sorted({r["core"] for r in by_algo.get("deltabeast", [])})
    return ([(f"deltabeast ({core})", [r for r in by_algo["deltabeast"] if r["core"] == core]) for core in cores]
            + [(algo, by_algo[algo]) for algo in ALGOS[1:] if by_algo.get(algo)])


def across_envs_table(results: dict[str, dict[str, list[dict[str, Any]]]]) -> str:
    """Issue 42's score of an algorithm over a set of memory-suite envs: at each of CHECKPOINTS,
    the median across the envs of its normalised return (the median over seeds, mapped from the
    env's return range onto [0, 1]), for the rows that every env has. Envs with no declared
    return range (the maze, ``gym:<id>``, ``atari:<Game>``) are left out."""
    results = {env: r for env, r in results.items() if in_memory_suite(env)}
    scores = median_normalised_returns({env: dict(labelled_runs(by_algo)) for env, by_algo in results.items()},
                                       CHECKPOINTS)
    header = ["algorithm", "envs", *(f"at {s // 1000}K" for s in CHECKPOINTS)]
    rows = [[name, str(len(results)), *(f"{v:.2f}" if math.isfinite(v) else "—" for v in values)]
            for name, values in scores.items()]
    return "\n".join(markdown_table(header, rows))


def plot_curves(results: dict[str, dict[str, list[dict[str, Any]]]], path: str) -> None:
    """One panel per env: each run's windowed return against env steps, a colour per row label; for
    an ``atari:<Game>`` env a second panel against wall minutes (equal wall time)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(env, by) for env in sorted(results) for by in (("steps", "minutes") if is_atari(env) else ("steps",))]
    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False)
    for ax, (env, by) in zip(axes.flat, panels):
        for i, (name, runs) in enumerate(labelled_runs(results[env])):
            for j, r in enumerate(runs):
                points = r["curve"] if by == "steps" else [(wall / 60, v) for wall, v in wall_curve(r)]
                xs, values = zip(*points) if points else ((), ())
                ax.plot(xs, values, color=f"C{i}", lw=1, alpha=0.8, label=name if j == 0 else None)
        ax.set_title(env, fontsize=9)
        ax.set_xlabel("environment steps" if by == "steps" else "wall minutes")
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    axes.flat[0].set_ylabel(f"mean return (last {WINDOW} episodes)")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _median_of(values: list[float], digits: int = 2) -> str:
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return "—"
    each = ", ".join(f"{v:.{digits}f}" for v in values)
    return f"**{statistics.median(values):.{digits}f}** ({each})" if len(values) > 1 else f"{values[0]:.{digits}f}"


def write_docs(table_by_doc: dict[str, str]) -> None:
    """Replace the text between ``<!-- peers:begin -->`` and ``<!-- peers:end -->`` in each doc."""
    from agents.files import atomic_write_text

    for doc, table in table_by_doc.items():
        path = os.path.join(ROOT, doc)
        with open(path) as f:
            text = f.read()
        begin, end = "<!-- peers:begin -->", "<!-- peers:end -->"
        if begin not in text or end not in text:
            raise SystemExit(f"{doc} has no {begin} ... {end} markers")
        head, rest = text.split(begin, 1)
        atomic_write_text(path, f"{head}{begin}\n{table}\n{end}{rest.split(end, 1)[1]}")
        print(f"wrote the peers table into {doc}", flush=True)


def in_memory_suite(env: str) -> bool:
    """Whether ``env`` is a memory suite's ``<suite>/<env>`` (not the maze, ``gym:<id>`` or ``atari:<Game>``)."""
    return env != "maze" and not is_gym(env) and not is_atari(env)


def box_actions(env: str, observe: str) -> bool:
    """Whether ``env`` (not the maze) has a Box action space."""
    from gymnasium import spaces

    if env == "maze":
        return False
    single = make_single_env(env, 0, 0, observe)
    try:
        return isinstance(single.action_space, spaces.Box)
    finally:
        single.close()


def default_algos(env: str, observe: str) -> tuple[str, ...]:
    """DeltaBeast and RecurrentPPO, with SB3's PPO on a Box-action env; DeltaBeast and SB3's PPO on Atari."""
    if is_atari(env):
        return ATARI_ALGOS
    return ALGOS if box_actions(env, observe) else ALGOS[:2]


def bench_peers(args: argparse.Namespace) -> None:
    """Run DeltaBeast and its peers on ``args.env`` for each seed (or only tabulate with --table)."""
    import torch

    from agents.errors import UsageError

    args.core = args.core or default_core(args.env)
    # peers' --core comes last on the launcher's command line, so a core among the flags would be ignored
    tokens = [part for flag in args.flags for part in flag.split("=", 1)]
    if any(flag in ("--core", "--core.name") and core != args.core for flag, core in zip(tokens, tokens[1:])):
        raise UsageError(f"--flags names a core other than {args.core}, which would be ignored: name it with "
                         "bench.py peers' own --core")
    flags = [*args.flags, *(["--env.observe", args.observe] if args.observe != "all" else [])]
    config = deltabeast_config(args.env, core=args.core, seed=0, steps=None, flags=flags, run_dir=args.out)
    label = env_label(args.env, args.observe)
    algos = args.algos or default_algos(args.env, args.observe)
    if is_atari(args.env) and not set(algos) <= set(ATARI_ALGOS):
        raise UsageError(f"--algos: Atari's peer is SB3's PPO; choose from {', '.join(ATARI_ALGOS)}")
    for seed in args.seeds if not args.table else []:
        run_dir = os.path.join(args.out, label.replace("/", "_"), f"run-{args.core}-s{seed}")
        for algo in algos:
            path = result_path(args.out, label, algo, seed, args.core if algo == "deltabeast" else None)
            if os.path.exists(path):
                print(f"{label} {algo} seed {seed}: kept ({path}; remove it to run again)", flush=True)
                continue
            os.makedirs(os.path.dirname(path), exist_ok=True)
            save_to = path.removesuffix(".json") + ".partial"
            torch.manual_seed(seed)
            np.random.seed(seed)
            if algo == "deltabeast":
                result = run_deltabeast(args.env, args.core, seed, args.steps, flags, run_dir)
            elif is_atari(args.env):
                result = run_atari_ppo(config.env, seed=seed, steps=args.steps, save_to=save_to)
            else:
                result = run_sb3(algo, args.env, seed, args.steps, config.loss.discount, args.observe, save_to=save_to)
            result.update(env=label, algo=algo, seed=seed, steps=args.steps, core=args.core, flags=flags)
            atomic_write_text(path, json.dumps(result), "a bench result")
            last = result["curve"][-1][1] if result["curve"] else math.nan
            print(f"{label} {algo} seed {seed}: final mean return {last:.3f}, {result['wall_s'] / 60:.1f} min",
                  flush=True)
    results = load_results(args.out)
    others = {env: r for env, r in results.items() if not is_atari(env)}
    if others:
        print(score_table(others))
    if len(others) < len(results):
        print(atari_table(results))
    if any(in_memory_suite(env) for env in results):
        print(across_envs_table(results))
    if args.plot:
        plot_curves(results, args.plot)
        print(f"wrote {args.plot}", flush=True)
    if args.docs:
        memory = {env: r for env, r in results.items() if env != "maze" and not is_atari(env)}
        maze = {env: r for env, r in results.items() if env == "maze"}
        write_docs({doc: score_table(part) for doc, part in (("docs/memory_benchmarks.md", memory),
                                                               ("docs/results.md", maze)) if part})


def add_parser(sub: Any) -> None:
    peers = sub.add_parser("peers", help="DeltaBeast vs sb3-contrib's RecurrentPPO (and SB3's PPO) at equal env steps")
    peers.add_argument("--env", default="maze",
                       help="maze, <suite>/<env> of a memory suite, gym:<Gymnasium id>, or atari:<Game> (e.g. "
                            "atari:Pong: DeltaBeast on launch/configs/atari_cpu.yaml, SB3's PPO at RL Zoo's Atari "
                            "settings)")
    peers.add_argument("--core", default=None, help="DeltaBeast's core (default: its launcher config's)")
    peers.add_argument("--steps", type=int, default=1_000_000, help="env steps per run")
    peers.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    peers.add_argument("--algos", nargs="+", choices=ALGOS, default=None,
                       help="default: deltabeast and recurrent_ppo, and ppo on a Box-action env; "
                            "deltabeast and ppo on Atari")
    peers.add_argument("--observe", choices=("all", "positions", "velocities"), default="all",
                       help="a MuJoCo env's -P or -V POMDP, for every algorithm (envs/pomdp.py)")
    peers.add_argument("--out", default="runs/peers", help="where the runs and their curves go")
    peers.add_argument("--table", action="store_true", help="only tabulate the results under --out")
    peers.add_argument("--docs", action="store_true",
                       help="write the table into the docs' peers sections (maze, memory and gym envs)")
    peers.add_argument("--plot", default=None, metavar="FILE", help="also plot every run's curve, a panel per env")
    peers.add_argument("--flags", nargs=argparse.REMAINDER, default=[],
                       help="more flags for DeltaBeast's launcher, e.g. --flags --optim.lr 1e-3 (last)")
    peers.set_defaults(run=bench_peers)
