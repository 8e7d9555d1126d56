"""Run a grid sweep (env × core × variant × seed) of training runs on Ray Tune, and tabulate the results.

    python launch/sweep.py                                   # defaults: launch/configs/sweep.yaml
    python launch/sweep.py --name maze --envs '[maze]' --cores '[lstm,delta]' --seeds '[0,1,2]' --total_steps 2000000
    python launch/sweep.py --name atari --envs '[Pong,MsPacman]' --cores '[ff,lstm,delta]' --ray_address host:6379
    python launch/sweep.py --name small --cores '[lstm]' -- --actor.num_actors 1 --core.hidden_size 32
    python launch/sweep.py --name lr --cores '[lstm]' --variants '{optim.lr: [1e-3, 2e-3], learner.epochs: [1, 2]}'
    python launch/sweep.py --name mem --envs '[popgym/RepeatPreviousEasy, bsuite/memory_len_30]' --cores '[lstm]'
    python launch/sweep.py --name gym --envs '[gym:CartPole-v1, gym:Acrobot-v1]' --cores '[lstm]'

Each trial is one training run of launch/maze.py (env ``maze``), launch/memory.py's config for
one env of a memory suite (``<suite>/<env>``, e.g. ``popgym/CountRecallEasy``), launch/train.py
(``gym:<id>``, any Gymnasium id) or launch/atari.py
(any other env is an Atari game) in its own run directory,
``<dir>/runs/<env>-<core>[-<variant>]-s<seed>``; the flags after ``--`` (or ``train_flags``) go to
every trial, and each combination of the ``variants`` values adds its own flags. Trials report
their SPS and mean return to Tune after every update. Running the same command again resumes a
killed sweep: Tune restores its experiment (``<dir>/tune``) and reruns only the unfinished
trials, each of which resumes from its own last checkpoint; a finished trial (one with
``summary.json``) is never trained again. At the end the sweep directory holds ``results.csv``
(one row per trial), ``results.md`` (env and variant rows × core columns, mean ± std over the
seeds; Atari games in the layout of the papers' Tables 9 and 10) and ``curves-<env>.png`` per
env; a sweep of memory-suite envs also ``study.csv``/``.md`` and ``study.png``, its cores ranked by
their median normalised return across the envs (the core study of issue 74:
``--config launch/configs/study.yaml``). Ray is optional: ``pip install -e '.[ray]'``.
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import itertools
import json
import math
import multiprocessing
import os
import signal
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Callable, Iterator, Literal, Optional, Union

from jsonargparse.typing import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from agents import tables
from agents.atari_tables import (
    PAPER_SCORES,
    TABLE_COLUMNS,
    TABLE_OF_STEP,
    TABLE_ROWS,
    format_mean_std,
    format_score,
    paper_step,
)
from agents.config import check, load_yaml, parse, save_yaml, to_dict
from agents.errors import ConfigError, RunFailure, UsageError, UserError, exit_on_error
from agents.files import atomic_write_text
from agents.learning.learner import train
from agents.learning.logger import CSV_NAME, read_csv
from agents.run_config import TrainConfig, directory_name
from envs import suites
from envs.suites import SuiteEnv
from fastnet import CORES
from launch.scores import CHECKPOINTS, medians_across_envs, normalised_returns

DEFAULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "sweep.yaml")
CoreName = Literal[tuple(CORES)]
# what a resumed sweep keeps
GRID_KEYS = ("envs", "cores", "seeds", "total_steps", "train_flags", "variants", "env_presets")
REPORTED = ("sps", "mean_return", "episodes", "loss")  # the log columns reported to Tune
REPORT_EVERY_S = 2.0  # at most one report per trial this often: a maze run makes ~50 updates/s
SUMMARY_NAME = "summary.json"  # in a trial's run directory once it has finished
CSV_FIELDS = ("env", "core", "variant", "seed", "steps", "mean_return", "metric", "score", "sps", "run_dir")
STUDY_NAME = "study"  # study.csv, study.md and study.png: the cores ranked across the memory-suite envs


@dataclass
class SweepConfig:
    """A grid sweep on Ray Tune: one training run per env × core × variant × seed."""

    name: str = "sweep"
    """The sweep's name: the {name} in dir."""
    dir: str = "runs/sweeps/{name}"
    """The sweep directory: Tune's state, the trials' run directories, the results tables and plots."""
    envs: list[str] = field(default_factory=lambda: ["maze"])
    """Envs of the grid: maze, <suite>/<env> of a memory suite, gym:<id> (any Gymnasium id), or Atari games (Pong)."""
    cores: list[CoreName] = field(default_factory=lambda: ["lstm", "delta"])
    """Memory cores of the grid (the --core names)."""
    seeds: list[NonNegativeInt] = field(default_factory=lambda: [0, 1, 2])
    """Seeds of the grid (run.seed of each trial)."""
    total_steps: Optional[PositiveInt] = None
    """Environment steps per trial (null: the default of each env's launcher config)."""
    train_flags: list[str] = field(default_factory=list)
    """Flags for every trial's launcher (launch/maze.py, launch/atari.py); on the command line: all after --."""
    variants: dict[str, list[Union[bool, int, float, str]]] = field(default_factory=dict)
    """Launcher settings to vary: every combination of their values is a variant ({optim.lr: [1e-3, 2e-3]})."""
    env_presets: bool = True
    """Apply memory.yaml's per-env presets (presets.env) to memory-suite trials; false: its defaults, core swapped."""
    cpus_per_trial: PositiveFloat = 3.0
    """CPUs Ray reserves for each trial (its learner and actor.num_actors actor processes)."""
    gpus_per_trial: NonNegativeFloat = 0.0
    """GPUs Ray reserves for each trial (for a learner on cuda)."""
    max_concurrent: NonNegativeInt = 0
    """Trials that run at once at most (0: as many as the reserved resources allow)."""
    pin_cpus: list[NonNegativeInt] = field(default_factory=list)
    """CPUs to pin trials to, a free one each for its learner and actors (max_concurrent at most as many); []: none."""
    ray_address: str = "auto"
    """Ray cluster: auto (a running one, else start one here), local (always start one here), or host:port."""


@dataclass(frozen=True)
class Trial:
    """One point of the grid; ``variant`` is its (key, value) settings of ``variants``."""

    env: str
    core: str
    seed: int
    variant: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Trial:
        """The grid point of a Tune trial's config."""
        return cls(config["env"], config["core"], config["seed"], tuple(map(tuple, config.get("variant", ()))))

    @property
    def variant_name(self) -> str:
        """``optim.lr=1e-3,learner.epochs=2`` ("" without variants)."""
        return ",".join(f"{key}={value}" for key, value in self.variant)

    @property
    def name(self) -> str:
        """The trial's name, also its run directory's: ``maze-lstm-s0``, ``maze-lstm-optim.lr=1e-3-s0``;
        a suite env's "/" and a gym id's ":" and "/" become "_"."""
        variant = f"-{self.variant_name}" if self.variant else ""
        return f"{directory_name(self.env)}-{self.core}{variant}-s{self.seed}"

    @property
    def flags(self) -> list[str]:
        return [arg for key, value in self.variant for arg in (f"--{key}", value)]


def load(argv: list[str]) -> SweepConfig:
    """The resolved config of ``argv``; the arguments after ``--`` become ``train_flags``
    (ConfigError for bad input)."""
    if "--" in argv:
        split = argv.index("--")
        argv = [*argv[:split], f"--train_flags={json.dumps(argv[split + 1:])}"]
    cfg = parse(lambda names: SweepConfig, argv, DEFAULTS, prog="launch/sweep.py", description=__doc__.split("\n")[0])
    for key in ("envs", "cores", "seeds"):
        values = getattr(cfg, key)
        check(len(values) > 0, f"--{key}", "the grid needs at least one value")
        check(len(set(values)) == len(values), f"--{key}", f"a value is listed twice: {values}")
    check(len(set(cfg.pin_cpus)) == len(cfg.pin_cpus), "--pin_cpus", f"a CPU is listed twice: {cfg.pin_cpus}")
    check(not cfg.pin_cpus or 0 < cfg.max_concurrent <= len(cfg.pin_cpus), "--max_concurrent",
          f"with --pin_cpus, at most one trial per pinned CPU runs at once: 1 to {len(cfg.pin_cpus)}")
    cfg.envs = [env_name(env) for env in cfg.envs]
    return cfg


def env_name(env: str) -> str:
    """``maze``, a memory suite's ``<suite>/<env>``, ``gym:<id>`` (any Gymnasium id, trained by
    launch/train.py), or the Gymnasium name of an Atari game (``ms_pacman`` -> ``MsPacman``)."""
    if env == "maze" or is_gym(env):
        return env
    if "/" in env:
        suite_env(env)
        return env
    from envs.atari import canonical_name

    try:
        return canonical_name(env)
    except ValueError as e:
        raise ConfigError(f"--envs: {env!r} is neither maze, gym:<id> nor an Atari game ({e})") from None


def is_gym(env: str) -> bool:
    """Whether a sweep env is ``gym:<id>``, a run of launch/train.py."""
    return env.startswith("gym:")


def is_suite_env(env: str) -> bool:
    """Whether a sweep env is a memory suite's ``<suite>/<env>``, a run of launch/memory.py's config."""
    return "/" in env and not is_gym(env)


def suite_env(env: str) -> tuple[str, SuiteEnv]:
    """(suite, its entry) of ``<suite>/<env>`` (:func:`envs.suites.suite_env`); ConfigError if there is none."""
    try:
        return suites.suite_env(env)
    except ValueError as e:
        raise ConfigError(f"--envs: no memory-suite env {env!r}: {e}") from None


def variants(cfg: SweepConfig) -> list[tuple[tuple[str, str], ...]]:
    """Every combination of the ``variants`` values, as (key, flag value) pairs (one empty variant
    without any)."""
    def flag(value: Any) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    return [tuple(zip(cfg.variants, map(flag, values))) for values in itertools.product(*cfg.variants.values())]


def grid(cfg: SweepConfig) -> list[Trial]:
    """The trials of the sweep, envs outermost, then cores and variants, seeds innermost."""
    return [Trial(env, core, seed, variant) for env in cfg.envs for core in cfg.cores for variant in variants(cfg)
            for seed in cfg.seeds]


def trial_config(trial: Trial, total_steps: int | None, train_flags: list[str], run_dir: str, *,
                 env_presets: bool = True) -> TrainConfig:
    """The training config of one trial, from its launcher's defaults and flags (ConfigError for bad
    flags); a memory-suite env's takes memory.yaml's preset for the env only with ``env_presets``."""
    from launch import atari, maze, memory, train

    argv = [*train_flags, *trial.flags, "--core", trial.core, "--seed", str(trial.seed), "--run_dir", run_dir]
    if total_steps is not None:
        argv += ["--total_steps", str(total_steps)]
    if trial.env == "maze":
        return maze.load(argv)
    if is_gym(trial.env):
        return train.load([*argv, "--env.id", trial.env.removeprefix("gym:")])
    if "/" in trial.env:
        suite, entry = suite_env(trial.env)
        return memory.env_config(memory.load(argv, entry.name if env_presets else None), suite, entry)
    return atari.load([*argv, "--game", trial.env])


def trial_score(trial: Trial, run_dir: str) -> tuple[str, float]:
    """(metric, value) of a finished trial: POPGym's MMER for a POPGym env, else the final mean return."""
    from launch import memory

    rows = read_csv(os.path.join(run_dir, CSV_NAME))
    if is_suite_env(trial.env):
        return memory.score(*suite_env(trial.env), rows)
    return "mean return", rows[-1]["mean_return"] if rows else math.nan


def read_summary(run_dir: str) -> dict[str, Any] | None:
    """The summary a finished trial left in its run directory, else None."""
    path = os.path.join(run_dir, SUMMARY_NAME)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def log_sps(run_dir: str) -> float:
    """Environment steps per second from the first to the last row of a run's log: over all the
    run's parts if it was resumed (the log's time leaves out the time it was stopped)."""
    rows = read_csv(os.path.join(run_dir, CSV_NAME))
    if len(rows) < 2 or rows[-1]["time"] <= rows[0]["time"]:
        return math.nan
    return (rows[-1]["step"] - rows[0]["step"]) / (rows[-1]["time"] - rows[0]["time"])


# ---------------------------------------------------------------- one trial (in a Ray worker)

def run_trial(config: dict[str, Any], pin_cpus: list[int]) -> None:
    """Tune's trainable: train the trial ``config`` describes in a child process (on one of
    ``pin_cpus`` if any: :func:`pinned`) and report its log rows, then its summary, to Tune.

    The training runs in a process of its own because train() handles SIGINT/SIGTERM, which only
    a main thread can (Tune calls this in a thread); the process stops (with a checkpoint) when
    the Ray worker that started it dies."""
    from ray import tune

    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=trial_process, args=(config, sender, os.getpid(), pin_cpus),
                              name=Trial.from_config(config).name)
    process.start()
    sender.close()
    summary, error = None, None
    while True:
        try:
            kind, payload = receiver.recv()
        except EOFError:
            break
        if kind == "update":
            tune.report(payload)
        elif kind == "done":
            summary = payload
        else:
            error = payload
    process.join()
    if summary is None:
        raise RuntimeError(error or f"the training process ended with exit code {process.exitcode}")
    tune.report(summary)


def trial_process(config: dict[str, Any], sender: Connection, parent: int, pin_cpus: list[int]) -> None:
    """The training process of a trial, started by the Ray worker ``parent``: train (unless its
    run directory holds a summary already) on one of ``pin_cpus`` if any, write ``summary.json``,
    and send ("update", metrics) at most every ``REPORT_EVERY_S``, then ("done", summary) or
    ("error", message)."""
    if sys.platform == "linux":  # SIGTERM when the Ray worker's thread that started us ends
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the worker died before that
        return
    os.chdir(config["cwd"])  # Tune runs trials in their own directories; flags may hold relative paths
    trial = Trial.from_config(config)
    run_dir = trial_dir(config["sweep_dir"], trial)
    try:
        summary = read_summary(run_dir)
        if summary is None:
            cfg = trial_config(trial, config["total_steps"], config["train_flags"], run_dir,
                               env_presets=config.get("env_presets", True))  # a sweep started before the key: True
            last_report = [-math.inf]

            def report(step: int, metrics: dict[str, float]) -> None:
                if time.monotonic() - last_report[0] >= REPORT_EVERY_S:
                    last_report[0] = time.monotonic()
                    sender.send(("update", {"step": step, **{k: float(metrics[k]) for k in REPORTED if k in metrics}}))

            with pinned(pin_cpus, lock_dir=config["sweep_dir"]):
                result = train(cfg, on_update=report)
            if result["step"] < cfg.run.total_steps:  # stopped by a signal: not finished
                raise RunFailure(f"training stopped at step {result['step']:,} of {cfg.run.total_steps:,}")
            metric, score = trial_score(trial, run_dir)
            summary = {"env": trial.env, "core": trial.core, "variant": trial.variant_name, "seed": trial.seed,
                       "total_steps": cfg.run.total_steps, "steps": result["step"], "episodes": result["episodes"],
                       "mean_return": result["mean_return"], "metric": metric, "score": score,
                       "sps": log_sps(run_dir)}
            atomic_write_text(os.path.join(run_dir, SUMMARY_NAME), json.dumps(summary, indent=1) + "\n")
        sender.send(("done", summary))
    except UserError as e:
        sender.send(("error", f"{e.label}: {e}"))
        raise SystemExit(1) from None
    except Exception:
        sender.send(("error", traceback.format_exc()))
        raise SystemExit(1) from None


@contextlib.contextmanager
def pinned(cpus: list[int], *, lock_dir: str) -> Iterator[None]:
    """Run the block pinned to one of ``cpus`` that no other trial holds, with the processes it starts
    (they inherit the affinity): it holds ``<lock_dir>/cpu-<n>.lock`` (an flock, which ends with
    the block or with the process), waiting for one to free if none is. Without ``cpus``, unpinned."""
    if not cpus:
        yield
        return
    while True:
        for cpu in cpus:
            with open(os.path.join(lock_dir, f"cpu-{cpu}.lock"), "a") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                os.sched_setaffinity(0, {cpu})
                yield
                return
        time.sleep(1.0)


# ---------------------------------------------------------------- the sweep (the driver)

def run(argv: list[str]) -> list[dict[str, Any]]:
    """Run (or resume) the sweep of ``argv``; returns the results rows."""
    cfg = load(argv)
    sweep_dir = os.path.abspath(cfg.dir.format(name=cfg.name))
    trials = grid(cfg)
    for trial in trials:  # bad flags are a config error now, not a failed trial later
        trial_config(trial, cfg.total_steps, cfg.train_flags, trial_dir(sweep_dir, trial), env_presets=cfg.env_presets)
    try:
        import ray
        from ray import tune
    except ImportError:
        raise UsageError("launch/sweep.py needs Ray: pip install -e '.[ray]'") from None
    from agents.acting.ray_backend import init_ray

    check_same_sweep(cfg, sweep_dir)
    started = init_ray(cfg.ray_address)
    try:
        # a Ray started here does not grow: a trial it cannot fit would wait forever
        asked = {"CPU": ("--cpus_per_trial", cfg.cpus_per_trial), "GPU": ("--gpus_per_trial", cfg.gpus_per_trial)}
        for key, (flag, need) in asked.items() if started else ():
            if need > (have := ray.cluster_resources().get(key, 0)):
                raise UsageError(f"{flag} {need:g} is more than the {have:g} {key}s of the Ray started here, so no "
                                 f"trial could start; use {flag} {have:g} or less")
        errors = {Trial.from_config(r.config): str(r.error).strip().splitlines()[-1]
                  for r in make_tuner(cfg, sweep_dir, tune).fit() if r.error is not None}
    finally:
        if started:
            ray.shutdown()
    results = collect(trials, sweep_dir)
    if results:
        write_results(results, sweep_dir, cfg.name)
        plot_curves(results, sweep_dir)
        write_study(results, sweep_dir, cfg.name)
    unfinished = [t for t in trials if read_summary(trial_dir(sweep_dir, t)) is None]
    if unfinished:
        names = ", ".join(t.name + (f" ({errors[t]})" if t in errors else "") for t in unfinished)
        raise RunFailure(f"{len(unfinished)} of {len(trials)} trials did not finish: {names}; Tune's logs are in "
                         f"{os.path.join(sweep_dir, 'tune')}; run the same command again to resume them")
    return results


def trial_dir(sweep_dir: str, trial: Trial) -> str:
    """The run directory of ``trial``: fixed by the trial, so that a restarted trial resumes it."""
    return os.path.join(sweep_dir, "runs", trial.name)


def check_same_sweep(cfg: SweepConfig, sweep_dir: str) -> None:
    """Save the config as ``sweep.yaml`` in a new sweep directory; in an existing one, a
    ConfigError unless the grid is the one it holds (a resumed sweep keeps its grid)."""
    path = os.path.join(sweep_dir, "sweep.yaml")
    if not os.path.exists(path):
        os.makedirs(sweep_dir, exist_ok=True)
        save_yaml(cfg, path)
        return
    saved = {**to_dict(SweepConfig()), **load_yaml(path)}  # a key newer than the file: its default
    current = to_dict(cfg)
    changed = [f"{key} (was {saved.get(key)}, now {current[key]})"
               for key in GRID_KEYS if saved.get(key) != current[key]]
    check(not changed, "--dir", f"{sweep_dir} holds a sweep of another grid: {'; '.join(changed)}; "
          "use another --name or --dir, or the same settings to resume it")


def make_tuner(cfg: SweepConfig, sweep_dir: str, tune: Any) -> Any:
    """The Tune experiment of the sweep in ``<sweep_dir>/tune``: restored if it exists (its
    finished trials stay finished), else a new one."""
    resources = {"cpu": cfg.cpus_per_trial, "gpu": cfg.gpus_per_trial}
    trainable = tune.with_resources(tune.with_parameters(run_trial, pin_cpus=cfg.pin_cpus), resources)
    experiment = os.path.join(sweep_dir, "tune")
    if tune.Tuner.can_restore(experiment):
        print(f"resuming the sweep in {sweep_dir}", flush=True)
        return tune.Tuner.restore(experiment, trainable=trainable, resume_unfinished=True, resume_errored=True)
    param_space = {"env": tune.grid_search(cfg.envs), "core": tune.grid_search(cfg.cores),
                   "variant": tune.grid_search([list(map(list, v)) for v in variants(cfg)]),
                   "seed": tune.grid_search(cfg.seeds), "total_steps": cfg.total_steps,
                   "train_flags": cfg.train_flags, "env_presets": cfg.env_presets, "cwd": os.getcwd(),
                   "sweep_dir": sweep_dir}
    print(f"sweep of {len(grid(cfg))} trials in {sweep_dir}", flush=True)
    return tune.Tuner(trainable, param_space=param_space,
                      tune_config=tune.TuneConfig(max_concurrent_trials=cfg.max_concurrent or None, reuse_actors=True,
                                                  trial_name_creator=trial_name, trial_dirname_creator=trial_name),
                      run_config=tune.RunConfig(name="tune", storage_path=sweep_dir, verbose=0,
                                                callbacks=[trial_printer(tune)]))


def trial_name(trial: Any) -> str:
    """The name of a Tune trial: that of its grid point."""
    return Trial.from_config(trial.config).name


def trial_printer(tune: Any) -> Any:
    """A Tune callback that prints one line per trial that finishes or fails."""

    class TrialPrinter(tune.Callback):
        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            r = trial.last_result
            print(f"finished {trial_name(trial)}: {r.get('steps', math.nan):,} steps, mean return "
                  f"{r.get('mean_return', math.nan):.3f}, {r.get('sps', math.nan):,.0f} SPS", flush=True)

        def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            print(f"failed {trial_name(trial)}: its error log is in {trial.path}", flush=True)

    return TrialPrinter()


def collect(trials: list[Trial], sweep_dir: str) -> list[dict[str, Any]]:
    """The results rows of the finished trials, in grid order."""
    results = []
    for trial in trials:
        summary = read_summary(trial_dir(sweep_dir, trial))
        if summary is not None:
            results.append({**summary, "run_dir": trial_dir(sweep_dir, trial)})
    return results


# ---------------------------------------------------------------- tables and plots

def mean_std(values: list[float]) -> str:
    """"mean ± std" of ``values`` (the sample std; only the mean for one value; "" for none)."""
    if not values:
        return ""
    if any(math.isnan(v) for v in values):
        return "nan"
    mean = statistics.fmean(values)
    if len(values) == 1:
        return format_score(mean)
    return format_mean_std(mean, statistics.stdev(values))


def grid_table(corner: str, rows: dict[str, str], columns: dict[str, str],
               cell: Callable[[str, str], str]) -> list[str]:
    """A Markdown table of ``rows`` × ``columns`` (each maps keys to labels); ``cell(row, column)`` is the text."""
    return tables.markdown_table([corner, *columns.values()],
                                 ([label, *(cell(row, column) for column in columns)] for row, label in rows.items()),
                                 numbers=True)


def results_markdown(results: list[dict[str, Any]], name: str) -> str:
    """``results.md``: per group of envs (the maze and the memory suites; Atari games), a table
    of the final scores and one of the SPS, env (and variant) rows × core columns, mean ± std
    over the seeds. The score is the final mean return (POPGym: the MMER); Atari games are in the
    order and layout of the papers' Tables 9 and 10, followed by the paper's table when the
    budget is one of theirs."""

    def row_of(r: dict[str, Any]) -> str:
        return r["env"] + (f" · {r['variant']}" if r.get("variant") else "")

    def values(row: str, core: str, key: str) -> list[float]:
        return [r.get(key, r["mean_return"]) for r in results if row_of(r) == row and r["core"] == core]

    seeds = sorted({r["seed"] for r in results})
    lines = [f"# Sweep {name}", "",
             f"Mean ± std (sample) over seeds {', '.join(map(str, seeds))} of each run's final score (its mean "
             "return over the last log.return_window episodes; POPGym: the MMER) and of its SPS.", ""]
    cores = list(dict.fromkeys(r["core"] for r in results))
    small = [r for r in results if r["env"] == "maze" or "/" in r["env"] or is_gym(r["env"])]
    if small:
        steps = sorted({r["total_steps"] for r in small})
        metrics = sorted({r.get("metric", "mean return") for r in small})
        lines += [f"## Maze and memory suites, {', '.join(f'{s:,}' for s in steps)} steps", ""]
        rows = {row: row for row in dict.fromkeys(row_of(r) for r in small)}
        for key, what in (("score", f"Score ({', '.join(metrics)})"), ("sps", "SPS")):
            lines += [*grid_table(what, rows, {c: c for c in cores},
                                      lambda row, core, key=key: mean_std(values(row, core, key))), ""]
    atari = [r for r in results if r["env"] != "maze" and "/" not in r["env"] and not is_gym(r["env"])]
    if atari:
        label_of = {game: label for label, game in TABLE_ROWS.items()}
        games = [g for g in TABLE_ROWS.values() if any(row_of(r) == g for r in atari)]
        games += [g for g in dict.fromkeys(row_of(r) for r in atari) if g not in games]
        rows = {g: label_of.get(g, g) for g in games}
        columns = {c: TABLE_COLUMNS[c] for c in TABLE_COLUMNS if c in cores}
        columns.update({c: c for c in cores if c not in columns})
        steps = sorted({r["total_steps"] for r in atari})
        budget = paper_step(steps[0]) if len(steps) == 1 else None
        table = TABLE_OF_STEP.get(budget)
        lines += [f"## Atari, {', '.join(f'{s:,}' for s in steps)} steps "
                  f"({table + ' of' if table else 'the layout of Tables 9 and 10 of'} the recurrent-FWP appendix)", ""]
        for key, what in (("mean_return", "Game"), ("sps", "SPS")):
            lines += [*grid_table(what, rows, columns,
                                      lambda game, core, key=key: mean_std(values(game, core, key))), ""]
        if table:
            paper = PAPER_SCORES[budget]

            def paper_cell(game: str, core: str) -> str:
                if core not in paper.get(game, {}):
                    return ""
                mean, std = paper[game][core]
                return format_mean_std(mean, std)

            lines += [f"The papers' {table} (mean ± std over 5 seeds) for these games and cores:", "",
                      *grid_table("Game", rows, columns, paper_cell), ""]
    return "\n".join(lines)


def write_results(results: list[dict[str, Any]], sweep_dir: str, name: str) -> None:
    """``results.csv`` (one row per finished trial) and ``results.md`` in the sweep directory."""
    tables.write_results(sweep_dir, "results", rows=results, fields=CSV_FIELDS,
                         markdown=results_markdown(results, name))


def plot_curves(results: list[dict[str, Any]], sweep_dir: str) -> None:
    """``curves-<env>.png``: the mean return and SPS against steps, one curve per run of the env."""
    from launch.plot import plot

    for env in dict.fromkeys(r["env"] for r in results):
        runs = [r["run_dir"] for r in results if r["env"] == env]
        plot(runs, ["mean_return", "sps"], os.path.join(sweep_dir, f"curves-{env.replace('/', '_')}.png"), title=env)


def study_rows(results: list[dict[str, Any]]) -> tuple[list[int], list[dict[str, Any]]]:
    """(checkpoints, rows) of the core study over the finished trials on memory-suite envs: per core
    (and variant), best first at the last checkpoint, the median across the envs of its normalised
    return at each checkpoint (:func:`launch.scores.medians_across_envs`: per env the median
    over the seeds, with two seeds their mean, of the mean return each trial logged at or just
    before the step), the median SPS of its trials and, as ``by_env``, its normalised return on each
    env at the last checkpoint. The checkpoints are those of
    :data:`launch.scores.CHECKPOINTS` short of the trials' budget, then the budget. A core is ranked
    once it has a finished trial on every env that has one. No memory-suite trials: ([], [])."""
    suite_results = [r for r in results if is_suite_env(r["env"])]
    if not suite_results:
        return [], []
    budget = min(r["total_steps"] for r in suite_results)
    checkpoints = [step for step in CHECKPOINTS if step < budget] + [budget]
    runs_by_env: dict[str, dict[str, list[dict[str, Any]]]] = {}
    sps_by_label: dict[str, list[float]] = {}
    for r in suite_results:
        label = r["core"] + (f" · {r['variant']}" if r.get("variant") else "")
        log = read_csv(os.path.join(r["run_dir"], CSV_NAME))
        curve = [(row["step"], row["mean_return"]) for row in log if math.isfinite(row.get("mean_return", math.nan))]
        runs_by_env.setdefault(r["env"], {}).setdefault(label, []).append({"curve": curve, "steps": r["steps"]})
        sps_by_label.setdefault(label, []).append(r["sps"])
    by_env = normalised_returns(runs_by_env, checkpoints)
    rows = []
    for label, scores in medians_across_envs(by_env, num_envs=len(runs_by_env)).items():
        sps = [v for v in sps_by_label[label] if math.isfinite(v)]
        rows.append({"core": label, "envs": len(runs_by_env), **dict(zip(map(step_label, checkpoints), scores)),
                     "sps": statistics.median(sps) if sps else math.nan,
                     "by_env": {env: values[-1] for env, values in sorted(by_env[label].items())}})
    last = step_label(checkpoints[-1])
    rows.sort(key=lambda row: -row[last] if math.isfinite(row[last]) else math.inf)
    return checkpoints, [{"rank": rank, **row} for rank, row in enumerate(rows, 1)]


def step_label(step: int) -> str:
    """A checkpoint's column in the study's tables: ``100K``, ``12.5K``."""
    return f"{step / 1000:g}K"


def write_study(results: list[dict[str, Any]], sweep_dir: str, name: str) -> None:
    """``study.csv``, ``study.md`` and ``study.png`` in the sweep directory: :func:`study_rows` as
    tables and as a plot; nothing without finished trials on memory-suite envs."""
    checkpoints, rows = study_rows(results)
    if not rows:
        return
    envs = sorted({r["env"] for r in results if is_suite_env(r["env"])})
    seeds = sorted({r["seed"] for r in results if is_suite_env(r["env"])})
    ranked = {row["core"] for row in rows}
    unranked = sorted({r["core"] for r in results if is_suite_env(r["env"])} - ranked)
    columns = [step_label(step) for step in checkpoints]
    lines = [f"# Study {name}: the cores ranked", "",
             f"Per core, best first at {columns[-1]} steps: the median across the {len(envs)} envs below of its "
             "normalised return (per env, the median over seeds "
             f"{', '.join(map(str, seeds))} of the mean return logged at or just before the step, mapped from the "
             "env's return range in envs/suites.py onto [0, 1]) and the median steps per second of its trials.", "",
             *tables.markdown_table(["rank", "core", "envs", *(f"at {c}" for c in columns), "steps/s"],
                                    ([row["rank"], row["core"], row["envs"],
                                      *(f"{row[c]:.2f}" if math.isfinite(row[c]) else "—" for c in columns),
                                      f"{row['sps']:,.0f}"] for row in rows), numbers=True), "",
             f"Envs: {', '.join(envs)}.", ""]
    if unranked:
        lines += [f"Not on every env yet, so not ranked: {', '.join(unranked)}.", ""]
    lines += [f"## Each env at {columns[-1]}", "",
              f"Each core's normalised return on each env at {columns[-1]} steps (the values the medians above "
              "are taken of); in bold the best on the env.", "",
              *tables.markdown_table(["env", *(row["core"] for row in rows)],
                                     ([env, *per_env_cells([row["by_env"][env] for row in rows])] for env in envs),
                                     numbers=True), ""]
    tables.write_results(sweep_dir, STUDY_NAME, rows=rows, fields=["rank", "core", "envs", *columns, "sps"],
                         markdown="\n".join(lines))
    plot_study(columns, rows, os.path.join(sweep_dir, f"{STUDY_NAME}.png"), title=f"{name}: {len(envs)} envs")


def per_env_cells(values: list[float]) -> list[str]:
    """The cells of one env's row in the study's per-env table: each value to two decimals (``—``
    where it is NaN), the best of them (ties included, as printed) in bold."""
    cells = [f"{v:.2f}" if math.isfinite(v) else "—" for v in values]
    best = max((c for c in cells if c != "—"), key=float, default=None)
    return [f"**{c}**" if c == best else c for c in cells]


def plot_study(columns: list[str], rows: list[dict[str, Any]], path: str, *, title: str) -> None:
    """The cores ranked, best at the top: a bar of each one's median normalised return at the last
    checkpoint, a marker at each earlier one, and its steps per second beside its name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 1.5 + 0.4 * len(rows)))
    positions = range(len(rows))
    ax.barh(positions, [row[columns[-1]] for row in rows], color="C0", alpha=0.7, label=f"at {columns[-1]}")
    for i, column in enumerate(columns[:-1]):
        ax.plot([row[column] for row in rows], positions, "os^v"[i % 4], color=f"C{i + 1}", label=f"at {column}")
    ax.set_yticks(positions, [f"{row['core']} ({row['sps']:,.0f}/s)" for row in rows])
    ax.invert_yaxis()
    ax.set_xlim(right=1.0)  # the top of every env's return range
    ax.set(xlabel="median normalised return across the envs", title=title)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}", flush=True)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    argv = sys.argv[1:] if argv is None else argv
    return exit_on_error(lambda: run(argv), debug="--debug" in argv or None)


if __name__ == "__main__":
    main()
