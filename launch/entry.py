"""The one IMPALA entry point: launch/maze.py, atari.py and train.py are configurations of it
(an env, a defaults file, the selectable sections); launch/memory.py loads its config through
one (with its own schema and the suite env's presets) and trains an env of the suite at a time."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from agents.config import parse
from agents.errors import exit_on_error
from agents.learning.learner import train
from agents.run_config import TrainConfig, rl_schema
from fastnet import CORES

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
SHORT_FLAGS = {"--core": "core.name", "--total_steps": "run.total_steps", "--num_actors": "actor.num_actors",
               "--run_dir": "run.run_dir", "--device": "run.device", "--seed": "run.seed"}
CORE = {"core.name": tuple(CORES)}  # the selector of every RL entry point


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

    def load(self, argv: list[str], *, presets: dict[str, str] | None = None) -> TrainConfig:
        """The resolved config of ``argv``, with ``presets`` applied before the core's
        (``{"env": "CountRecallEasy"}``); ConfigError for bad input."""
        def schema(names: dict[str, str]) -> type:
            if self.schema is not None:
                return self.schema(names["core"])
            return rl_schema(self.env, names["core"], names.get("network"))

        selectors = {**CORE, **({"network.stem": self.stems} if self.stems else {})}
        return parse(schema, argv, os.path.join(CONFIGS, self.defaults), selectors=selectors,
                     short_flags={**SHORT_FLAGS, **self.short_flags}, prog=self.prog,
                     description=self.doc.split("\n")[0], presets=presets)

    def main(self, argv: list[str] | None = None) -> dict[str, Any]:
        """Train with the config of ``argv`` (the command line's by default); bad input exits 2 in one line."""
        argv = sys.argv[1:] if argv is None else argv
        return exit_on_error(lambda: train(self.load(argv)), debug="--debug" in argv or None)

