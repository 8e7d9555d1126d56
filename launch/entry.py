"""The one IMPALA entry point: launch/maze.py, atari.py and train.py are configurations of it
(an env, a defaults file, the selectable sections); launch/memory.py loads its config through
one (with its own schema and the suite env's presets) and trains an env of the suite at a time."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from agents.config import load_yaml, parse
from agents.errors import ConfigError, exit_on_error
from agents.learning.learner import train
from agents.run_config import TrainConfig, rl_schema
from envs.suites import memory_family
from fastnet import CORES

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
SHORT_FLAGS = {"--core": "core.name", "--total_steps": "run.total_steps", "--num_actors": "actor.num_actors",
               "--run_dir": "run.run_dir", "--device": "run.device", "--seed": "run.seed"}
CORE = {"core.name": tuple(CORES)}  # the selector of every RL entry point
RECIPE_SECTIONS = ("core", "actor", "network", "learner", "loss", "optim", "presets")
"""The sections of a defaults file that say how an agent learns (not where it writes or what it logs)."""


@dataclass(frozen=True)
class RLEntry:
    """A training launcher: its env, defaults file and program name."""

    env: str
    """The env of ``envs.make`` (maze, atari, gym)."""
    defaults: str
    """Its defaults file in launch/configs."""
    prog: str
    """The program name for --help."""
    doc: str
    """The launcher's module docstring (its first line describes it in --help)."""
    stems: tuple[str, ...] = ()
    """The stems ``network.stem`` selects (none: the env's own network)."""
    short_flags: dict[str, str] = field(default_factory=dict)
    """Short flags beyond :data:`SHORT_FLAGS` (``--game``)."""
    schema: Optional[Callable[[str], type]] = None
    """The config schema of a core name (None: ``rl_schema`` of the env, core and stem)."""
    action_presets: bool = False
    """Apply the defaults file's ``presets.actions.continuous`` when the env's actions are a Box space."""
    memory_recipe: Optional[str] = None
    """A defaults file in launch/configs whose learning sections (:data:`RECIPE_SECTIONS`, not its
    per-env presets) train an env of a memory suite's family (``envs.suites.memory_family``) whose
    actions are not a Box space."""

    def load(self, argv: list[str], *, presets: dict[str, str] | None = None) -> TrainConfig:
        """The resolved config of ``argv``, with ``presets`` applied before the core's
        (``{"env": "CountRecallEasy"}``); ConfigError for bad input."""
        def schema(names: dict[str, str]) -> type:
            if self.schema is not None:
                return self.schema(names["core"])
            return rl_schema(self.env, names["core"], names.get("network"))

        selectors = {**CORE, **({"network.stem": self.stems} if self.stems else {})}

        def load_with(argv: list[str], presets: dict[str, str] | None, recipe: dict | None = None) -> TrainConfig:
            return parse(schema, argv, os.path.join(CONFIGS, self.defaults), selectors=selectors,
                         short_flags={**SHORT_FLAGS, **self.short_flags}, prog=self.prog,
                         description=self.doc.split("\n")[0], presets=presets, recipe=recipe)

        recipe = None
        if self.action_presets or self.memory_recipe:  # the env decides: a first reading finds it
            try:
                first = load_with([a for a in argv if a not in ("--help", "-h", "--print_config")], presets)
            except ConfigError:
                first = None  # the reading below reports it
            if first is not None and self.action_presets and continuous_actions(first):  # Box: the continuous recipe
                presets = {"actions": "continuous", **(presets or {})}
            elif first is not None and self.memory_recipe and memory_family(first.env.id):
                recipe = memory_recipe(self.memory_recipe)
        return load_with(argv, presets, recipe)

    def main(self, argv: list[str] | None = None) -> dict[str, Any]:
        """Train with the config of ``argv`` (the command line's by default); bad input exits 2 in one line."""
        argv = sys.argv[1:] if argv is None else argv
        return exit_on_error(lambda: train(self.load(argv)), debug="--debug" in argv or None)


def memory_recipe(path: str) -> dict[str, Any]:
    """The learning sections (:data:`RECIPE_SECTIONS`) of the defaults file ``path`` in launch/configs,
    without its per-env presets (``presets.env``: speed-ups that launch/memory.py applies)."""
    raw = {k: v for k, v in load_yaml(os.path.join(CONFIGS, path)).items() if k in RECIPE_SECTIONS}
    raw["presets"] = {k: v for k, v in (raw.get("presets") or {}).items() if k != "env"}
    return raw


def continuous_actions(cfg: TrainConfig) -> bool:
    """Whether the env of ``cfg`` has a Box action space (False for one that cannot be made: the run reports it)."""
    import envs
    from agents.config import options

    try:
        return envs.spec(cfg.env.name, seed=cfg.run.seed, **options(cfg.env)).action_dim > 0
    except Exception:  # any failure to make the env is the learner's to report, in its words
        return False
