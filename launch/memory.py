"""Run a memory benchmark suite (POPGym, bsuite memory_len, MiniGrid Memory, Memory Gym) with one core.

    python launch/memory.py --suite popgym --core delta                 # defaults: launch/configs/memory.yaml
    python launch/memory.py --suite all --core lstm --total_steps 2000000
    python launch/memory.py --suite bsuite --core mnm_p --core.memory_size 32 --print_config
    python launch/memory.py --suite popgym/CountRecallEasy --core lstm    # one env of a suite

Each env of the suite is one IMPALA run of ``run.total_steps`` steps in its own run directory
(``run.run_dir``, with {suite}, {env} and {core} filled in); running the command again resumes
the unfinished runs and skips the finished ones. At the end the launcher writes, beside the run
directories, ``results-<core>.csv`` and ``.md`` (per env: POPGym's MMER for the POPGym envs,
Morad et al. 2023 §5; the mean return at the budget for the others) and one learning-curve
plot per env, and prints where it wrote them. The tables give the steps each run actually
took (a whole number of batches, so at or just past the budget). Envs whose package is
missing are skipped with a note (``pip install -e '.[memory]'``).
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import math
import os
import sys
from typing import Any

from agents import tables
from agents.config import section, to_yaml
from agents.errors import ConfigError, exit_on_error
from agents.learning.learner import train
from agents.learning.logger import CSV_NAME, read_csv
from agents.network import ResNetNetworkConfig
from agents.run_config import TrainConfig, rl_schema
from envs.suites import SUITES, SuiteEnv, mmer, suite_env
from launch.entry import RLEntry


@functools.cache
def memory_schema(core: str) -> type:
    """The config of this entry point: the RL config on the gym adapter, plus the ``suite``."""
    return dataclasses.make_dataclass(
        "MemoryConfig", [("suite", str, dataclasses.field(default="popgym"))],
        bases=(rl_schema("gym", core),),
        namespace={"__doc__": "IMPALA training of a memory core on each env of a benchmark suite.\n\nAttributes:\n"
                              "    suite: The suite to run: popgym, bsuite, minigrid, memorygym, or all of them; "
                              "or one env of one (popgym/CountRecallEasy)."})


def selected_envs(suite: str) -> list[tuple[str, SuiteEnv]]:
    """(suite, env) pairs that ``--suite`` names: a suite, ``all``, or ``SUITE/ENV``; ConfigError otherwise."""
    name, _, env = suite.partition("/")
    if name not in (*SUITES, "all") or (env and name == "all"):
        raise ConfigError(f"--suite: expected one of {', '.join(map(repr, [*SUITES, 'all']))} or SUITE/ENV; "
                          f"got {suite!r}")
    if env:
        try:
            return [suite_env(suite)]
        except ValueError as e:
            raise ConfigError(f"--suite: {e}") from None
    return [(s, e) for s in (SUITES if name == "all" else [name]) for e in SUITES[s]]


ENTRY = RLEntry(env="gym", defaults="memory.yaml", prog="launch/memory.py", doc=__doc__, schema=memory_schema)


def load(argv: list[str], env: str | None = None) -> Any:
    """The resolved config of ``argv``, with the presets of the suite env named ``env`` if given
    (``presets.env.<name>`` of memory.yaml: its unroll, batch, discount); ConfigError for bad input."""
    return ENTRY.load(argv, presets={"env": env} if env else None)


def env_config(cfg: Any, suite: str, entry: SuiteEnv) -> TrainConfig:
    """``cfg`` for one env of a suite: its gym options, its run directory, an image stem if it
    needs one. It is a plain training config, without ``suite``, so that what the checkpoint
    saves reads back as one (``agents.run_config.config_from_dict``: launch/evaluate.py, a Ray host)."""
    import envs

    schema = rl_schema("gym", cfg.core.name)
    cfg = schema(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(schema)})
    env = section("env", "gym")(**entry.options)
    images = envs.spec("gym", seed=cfg.run.seed, **entry.options).images
    network = cfg.network
    if images and network.stem != "resnet":
        network = ResNetNetworkConfig(reward_clip=network.reward_clip, prev_action=network.prev_action,
                                      head_sizes=network.head_sizes)
    run_dir = cfg.run.run_dir.format(suite=suite, env=entry.name, core=cfg.core.name)
    return dataclasses.replace(cfg, env=env, network=network, run=dataclasses.replace(cfg.run, run_dir=run_dir))


def score(suite: str, entry: SuiteEnv, rows: list[dict[str, Any]]) -> tuple[str, float]:
    """(metric, value) of one run's log: MMER for POPGym, else the mean return at the budget."""
    curve = [r["mean_return"] for r in rows if math.isfinite(r.get("mean_return", math.nan))]
    if not curve:
        return "mean return", math.nan
    if suite.startswith("popgym"):
        return "MMER", mmer([curve], entry.return_range)
    return "mean return", curve[-1]


def not_installed(suite: str, entry: Any) -> str | None:
    """The note for an env whose package is not installed (it is skipped), else None."""
    if entry.available():
        return None
    return f"skipping {suite}/{entry.name}: {entry.package} is not installed (pip install -e '.[memory]')"


def run(argv: list[str]) -> list[dict[str, Any]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    printing = "--print_config" in argv
    argv = [arg for arg in argv if arg != "--print_config"]
    cfg = load(argv)
    if printing:  # what each env trains with: its presets applied, its env section filled in
        for suite, entry in selected_envs(cfg.suite):
            if note := not_installed(suite, entry):
                print(f"# {note}")
                continue
            print(f"# {suite}/{entry.name}\n{to_yaml(env_config(load(argv, entry.name), suite, entry))}", end="")
        return []
    results = []
    for suite, entry in selected_envs(cfg.suite):
        if note := not_installed(suite, entry):
            print(note, flush=True)
            continue
        env_cfg = env_config(load(argv, entry.name), suite, entry)
        print(f"== {suite}/{entry.name} with {cfg.core.name}: {env_cfg.run.run_dir}", flush=True)
        summary = train(env_cfg)
        rows = read_csv(os.path.join(env_cfg.run.run_dir, CSV_NAME))
        metric, value = score(suite, entry, rows)
        results.append({"suite": suite, "env": entry.name, "core": cfg.core.name, "steps": int(summary["step"]),
                        "metric": metric, "value": value, "run_dir": env_cfg.run.run_dir})
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot([r["step"] for r in rows], [r["mean_return"] for r in rows], label=cfg.core.name)
        ax.set(xlabel="environment steps", ylabel="mean return", title=f"{suite}: {entry.name}")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        plot = os.path.join(os.path.dirname(env_cfg.run.run_dir), f"{entry.name}-{cfg.core.name}.png")
        fig.savefig(plot)
        plt.close(fig)
        print(f"wrote {plot}", flush=True)
    write_results(results, cfg)
    return results


def write_results(results: list[dict[str, Any]], cfg: Any) -> None:
    """``results-<core>.csv`` and ``.md`` beside each suite's run directories: the envs this run
    trained, and the rows an earlier run wrote there for the others (a one-env run adds its row)."""
    by_dir: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by_dir.setdefault(os.path.dirname(r["run_dir"]), []).append(r)
    fields = ("suite", "env", "core", "steps", "metric", "value")
    for directory, rows in by_dir.items():
        rows = [*earlier_rows(os.path.join(directory, f"results-{cfg.core.name}.csv"), {r["env"] for r in rows}),
                *rows]
        table = tables.markdown_table(fields, ([r["suite"], r["env"], r["core"], f"{r['steps']:,}", r["metric"],
                                                f"{r['value']:.3f}"] for r in rows))
        tables.write_results(directory, f"results-{cfg.core.name}", rows=rows, fields=fields,
                             markdown="\n".join(table))


def earlier_rows(path: str, skip: set[str]) -> list[dict[str, Any]]:
    """The rows of the results CSV ``path`` (if there is one) for the envs not in ``skip``."""
    if not os.path.isfile(path):
        return []
    with open(path, newline="") as f:
        return [{**r, "steps": int(r["steps"]), "value": float(r["value"])}
                for r in csv.DictReader(f) if r["env"] not in skip]


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    argv = sys.argv[1:] if argv is None else argv
    return exit_on_error(lambda: run(argv), debug="--debug" in argv or None)


if __name__ == "__main__":
    main()
