"""Run a grid sweep (env × core × seed) of IMPALA runs on Ray Tune, and tabulate the results.

    python launch/sweep.py                                   # defaults: launch/configs/sweep.yaml
    python launch/sweep.py --name maze --envs '[maze]' --cores '[lstm,delta]' --seeds '[0,1,2]' --total_steps 2000000
    python launch/sweep.py --name atari --envs '[Pong,MsPacman]' --cores '[ff,lstm,delta]' --ray_address host:6379
    python launch/sweep.py --name small --cores '[lstm]' -- --actor.num_actors 1 --core.hidden_size 32

Each trial is one training run of launch/maze.py (env ``maze``) or launch/atari.py (any other env
is an Atari game) in its own run directory, ``<dir>/runs/<env>-<core>-s<seed>``; the flags after
``--`` (or ``train_flags``) go to every trial. Trials report their SPS and mean return to Tune
after every update. Running the same command again resumes a killed sweep: Tune restores its
experiment (``<dir>/tune``) and reruns only the unfinished trials, each of which resumes from
its own last checkpoint; a finished trial (one with ``summary.json``) is never trained again.
At the end the sweep directory holds ``results.csv`` (one row per trial), ``results.md`` (env
rows × core columns, mean ± std over the seeds; Atari games in the layout of the papers'
Tables 9 and 10) and ``curves-<env>.png`` per env. Ray is optional: ``pip install -e '.[ray]'``.
"""
from __future__ import annotations

import csv
import ctypes
import dataclasses
import io
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
from typing import Any, Callable, Literal, Optional

from jsonargparse.typing import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from agents.atari_tables import (
    PAPER_SCORES,
    TABLE_COLUMNS,
    TABLE_OF_STEP,
    TABLE_ROWS,
    format_mean_std,
    format_score,
    paper_step,
)
from agents.config import check, exit_on_error, load_yaml, parse, save_yaml, to_dict
from agents.errors import ConfigError, RunFailure, UsageError, UserError
from agents.files import atomic_write_text
from agents.learning.learner import train
from agents.learning.logger import CSV_NAME, read_csv
from agents.run_config import TrainConfig
from fastnet import CORES

DEFAULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "sweep.yaml")
CoreName = Literal[tuple(CORES)]
GRID_KEYS = ("envs", "cores", "seeds", "total_steps", "train_flags")  # what a resumed sweep must keep
REPORTED = ("sps", "mean_return", "episodes", "loss")  # the log columns reported to Tune
REPORT_EVERY_S = 2.0  # at most one report per trial this often: a maze run makes ~50 updates/s
SUMMARY_NAME = "summary.json"  # in a trial's run directory once it has finished
CSV_FIELDS = ("env", "core", "seed", "steps", "mean_return", "sps", "run_dir")


@dataclass
class SweepConfig:
    """A grid sweep on Ray Tune: one IMPALA run per env × core × seed."""

    name: str = "sweep"
    """The sweep's name: the {name} in dir."""
    dir: str = "runs/sweeps/{name}"
    """The sweep directory: Tune's state, the trials' run directories, the results tables and plots."""
    envs: list[str] = field(default_factory=lambda: ["maze"])
    """Envs of the grid: maze, or Atari games by their Gymnasium names (Pong, MsPacman, ...)."""
    cores: list[CoreName] = field(default_factory=lambda: ["lstm", "delta"])
    """Memory cores of the grid (the --core names)."""
    seeds: list[NonNegativeInt] = field(default_factory=lambda: [0, 1, 2])
    """Seeds of the grid (run.seed of each trial)."""
    total_steps: Optional[PositiveInt] = None
    """Environment steps per trial (null: the default of each env's launcher config)."""
    train_flags: list[str] = field(default_factory=list)
    """Flags for every trial's launcher (launch/maze.py, launch/atari.py); on the command line: all after --."""
    cpus_per_trial: PositiveFloat = 3.0
    """CPUs Ray reserves for each trial (its learner and actor.num_actors actor processes)."""
    gpus_per_trial: NonNegativeFloat = 0.0
    """GPUs Ray reserves for each trial (for a learner on cuda)."""
    max_concurrent: NonNegativeInt = 0
    """Trials that run at once at most (0: as many as the reserved resources allow)."""
    ray_address: str = "auto"
    """Ray cluster: auto (a running one, else start one here), local (always start one here), or host:port."""


@dataclass(frozen=True)
class Trial:
    """One point of the grid."""

    env: str
    core: str
    seed: int

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Trial:
        """The grid point of a Tune trial's config."""
        return cls(config["env"], config["core"], config["seed"])

    @property
    def name(self) -> str:
        """The trial's name, also its run directory's: ``maze-lstm-s0``."""
        return f"{self.env}-{self.core}-s{self.seed}"


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
    cfg.envs = [env_name(env) for env in cfg.envs]
    return cfg


def env_name(env: str) -> str:
    """``maze``, or the Gymnasium name of an Atari game (``ms_pacman`` -> ``MsPacman``)."""
    if env == "maze":
        return env
    from envs.atari import canonical_name

    try:
        return canonical_name(env)
    except ValueError as e:
        raise ConfigError(f"--envs: {env!r} is neither maze nor an Atari game ({e})") from None


def grid(cfg: SweepConfig) -> list[Trial]:
    """The trials of the sweep, envs outermost, seeds innermost."""
    return [Trial(env, core, seed) for env in cfg.envs for core in cfg.cores for seed in cfg.seeds]


def trial_config(trial: Trial, total_steps: int | None, train_flags: list[str], run_dir: str) -> TrainConfig:
    """The training config of one trial, from its launcher's defaults and flags (ConfigError for bad flags)."""
    from launch import atari, maze

    argv = [*train_flags, "--core", trial.core, "--seed", str(trial.seed), "--run_dir", run_dir]
    if total_steps is not None:
        argv += ["--total_steps", str(total_steps)]
    if trial.env == "maze":
        return maze.load(argv)
    return atari.load([*argv, "--game", trial.env])


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

def run_trial(config: dict[str, Any]) -> None:
    """Tune's trainable: train the trial ``config`` describes in a child process and report its
    log rows, then its summary, to Tune.

    The training runs in a process of its own because train() handles SIGINT/SIGTERM, which only
    a main thread can (Tune calls this in a thread); the process stops (with a checkpoint) when
    the Ray worker that started it dies."""
    from ray import tune

    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=trial_process, args=(config, sender, os.getpid()),
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


def trial_process(config: dict[str, Any], sender: Connection, parent: int) -> None:
    """The training process of a trial, started by the Ray worker ``parent``: train (unless its
    run directory holds a summary already), write ``summary.json``, and send ("update", metrics)
    at most every ``REPORT_EVERY_S``, then ("done", summary) or ("error", message)."""
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
            cfg = trial_config(trial, config["total_steps"], config["train_flags"], run_dir)
            last_report = [-math.inf]

            def report(step: int, metrics: dict[str, float]) -> None:
                if time.monotonic() - last_report[0] >= REPORT_EVERY_S:
                    last_report[0] = time.monotonic()
                    sender.send(("update", {"step": step, **{k: float(metrics[k]) for k in REPORTED if k in metrics}}))

            result = train(cfg, on_update=report)
            if result["step"] < cfg.run.total_steps:  # stopped by a signal: not finished
                raise RunFailure(f"training stopped at step {result['step']:,} of {cfg.run.total_steps:,}")
            summary = {**dataclasses.asdict(trial), "total_steps": cfg.run.total_steps, "steps": result["step"],
                       "episodes": result["episodes"], "mean_return": result["mean_return"], "sps": log_sps(run_dir)}
            atomic_write_text(os.path.join(run_dir, SUMMARY_NAME), json.dumps(summary, indent=1) + "\n")
        sender.send(("done", summary))
    except UserError as e:
        sender.send(("error", f"{e.label}: {e}"))
        raise SystemExit(1) from None
    except Exception:
        sender.send(("error", traceback.format_exc()))
        raise SystemExit(1) from None


# ---------------------------------------------------------------- the sweep (the driver)

def run(argv: list[str]) -> list[dict[str, Any]]:
    """Run (or resume) the sweep of ``argv``; returns the results rows."""
    cfg = load(argv)
    sweep_dir = os.path.abspath(cfg.dir.format(name=cfg.name))
    trials = grid(cfg)
    for trial in trials:  # bad flags are a config error now, not a failed trial later
        trial_config(trial, cfg.total_steps, cfg.train_flags, trial_dir(sweep_dir, trial))
    try:
        import ray
        from ray import tune
    except ImportError:
        raise UsageError("launch/sweep.py needs Ray: pip install -e '.[ray]'") from None
    from agents.acting.ray_backend import init_ray

    check_same_sweep(cfg, sweep_dir)
    started = init_ray(cfg.ray_address)
    try:
        errors = {Trial.from_config(r.config): str(r.error).strip().splitlines()[-1]
                  for r in make_tuner(cfg, sweep_dir, tune).fit() if r.error is not None}
    finally:
        if started:
            ray.shutdown()
    results = collect(trials, sweep_dir)
    if results:
        write_results(results, sweep_dir, cfg.name)
        plot_curves(results, sweep_dir)
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
    saved, current = load_yaml(path), to_dict(cfg)
    changed = [f"{key} (was {saved.get(key)}, now {current[key]})"
               for key in GRID_KEYS if saved.get(key) != current[key]]
    check(not changed, "--dir", f"{sweep_dir} holds a sweep of another grid: {'; '.join(changed)}; "
          "use another --name or --dir, or the same settings to resume it")


def make_tuner(cfg: SweepConfig, sweep_dir: str, tune: Any) -> Any:
    """The Tune experiment of the sweep in ``<sweep_dir>/tune``: restored if it exists (its
    finished trials stay finished), else a new one."""
    resources = {"cpu": cfg.cpus_per_trial, "gpu": cfg.gpus_per_trial}
    trainable = tune.with_resources(run_trial, resources)
    experiment = os.path.join(sweep_dir, "tune")
    if tune.Tuner.can_restore(experiment):
        print(f"resuming the sweep in {sweep_dir}", flush=True)
        return tune.Tuner.restore(experiment, trainable=trainable, resume_unfinished=True, resume_errored=True)
    param_space = {"env": tune.grid_search(cfg.envs), "core": tune.grid_search(cfg.cores),
                   "seed": tune.grid_search(cfg.seeds), "total_steps": cfg.total_steps,
                   "train_flags": cfg.train_flags, "cwd": os.getcwd(), "sweep_dir": sweep_dir}
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


def markdown_table(corner: str, rows: dict[str, str], columns: dict[str, str],
                   cell: Callable[[str, str], str]) -> list[str]:
    """A Markdown table: ``rows`` and ``columns`` map keys to labels; ``cell(row, column)`` is the text."""
    lines = [f"| {corner} | " + " | ".join(columns.values()) + " |", "| --- |" + " ---: |" * len(columns)]
    lines += [f"| {label} | " + " | ".join(cell(row, column) for column in columns) + " |"
              for row, label in rows.items()]
    return lines


def results_markdown(results: list[dict[str, Any]], name: str) -> str:
    """``results.md``: per group of envs (the maze, Atari games), a table of the final mean
    returns and one of the SPS, env rows × core columns, mean ± std over the seeds; Atari games
    in the order and layout of the papers' Tables 9 and 10, followed by the paper's table when
    the budget is one of theirs."""

    def values(env: str, core: str, key: str) -> list[float]:
        return [r[key] for r in results if r["env"] == env and r["core"] == core]

    seeds = sorted({r["seed"] for r in results})
    lines = [f"# Sweep {name}", "",
             f"Mean ± std (sample) over seeds {', '.join(map(str, seeds))} of each run's final mean return "
             "(the mean of its last log.return_window episodes) and of its SPS.", ""]
    cores = list(dict.fromkeys(r["core"] for r in results))
    maze = [r for r in results if r["env"] == "maze"]
    if maze:
        steps = sorted({r["total_steps"] for r in maze})
        lines += [f"## Maze, {', '.join(f'{s:,}' for s in steps)} steps", ""]
        for key, what in (("mean_return", "Mean return"), ("sps", "SPS")):
            lines += [*markdown_table(what, {"maze": "maze"}, {c: c for c in cores},
                                      lambda env, core, key=key: mean_std(values(env, core, key))), ""]
    atari = [r for r in results if r["env"] != "maze"]
    if atari:
        label_of = {game: label for label, game in TABLE_ROWS.items()}
        games = [g for g in TABLE_ROWS.values() if any(r["env"] == g for r in atari)]
        games += [g for g in dict.fromkeys(r["env"] for r in atari) if g not in games]
        rows = {g: label_of.get(g, g) for g in games}
        columns = {c: TABLE_COLUMNS[c] for c in TABLE_COLUMNS if c in cores}
        columns.update({c: c for c in cores if c not in columns})
        steps = sorted({r["total_steps"] for r in atari})
        budget = paper_step(steps[0]) if len(steps) == 1 else None
        table = TABLE_OF_STEP.get(budget)
        lines += [f"## Atari, {', '.join(f'{s:,}' for s in steps)} steps "
                  f"({table + ' of' if table else 'the layout of Tables 9 and 10 of'} the recurrent-FWP appendix)", ""]
        for key, what in (("mean_return", "Game"), ("sps", "SPS")):
            lines += [*markdown_table(what, rows, columns,
                                      lambda game, core, key=key: mean_std(values(game, core, key))), ""]
        if table:
            paper = PAPER_SCORES[budget]

            def paper_cell(game: str, core: str) -> str:
                if core not in paper.get(game, {}):
                    return ""
                mean, std = paper[game][core]
                return format_mean_std(mean, std)

            lines += [f"The papers' {table} (mean ± std over 5 seeds) for these games and cores:", "",
                      *markdown_table("Game", rows, columns, paper_cell), ""]
    return "\n".join(lines)


def write_results(results: list[dict[str, Any]], sweep_dir: str, name: str) -> None:
    """``results.csv`` (one row per finished trial) and ``results.md`` in the sweep directory."""
    text = io.StringIO()
    writer = csv.DictWriter(text, CSV_FIELDS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(results)
    atomic_write_text(os.path.join(sweep_dir, "results.csv"), text.getvalue())
    markdown = results_markdown(results, name)
    atomic_write_text(os.path.join(sweep_dir, "results.md"), markdown)
    print(markdown, flush=True)


def plot_curves(results: list[dict[str, Any]], sweep_dir: str) -> None:
    """``curves-<env>.png``: the mean return and SPS against steps, one curve per run of the env."""
    from launch.plot import plot

    for env in dict.fromkeys(r["env"] for r in results):
        runs = [r["run_dir"] for r in results if r["env"] == env]
        plot(runs, ["mean_return", "sps"], os.path.join(sweep_dir, f"curves-{env}.png"), title=env)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    argv = sys.argv[1:] if argv is None else argv
    return exit_on_error(lambda: run(argv), debug="--debug" in argv or None)


if __name__ == "__main__":
    main()
