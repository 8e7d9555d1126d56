"""Train an IMPALA agent on the gridworld maze with any memory core.

    python launch/maze.py --core delta                      # defaults: launch/configs/maze.yaml
    python launch/maze.py --core lstm --total_steps 200000 --num_actors 2
    python launch/maze.py --core mnm_p --core.memory_size 64 --optim.lr 1e-3
    python launch/maze.py --config my.yaml --run_dir runs/exp1 --print_config

Running the same command again resumes from the run directory's last checkpoint.
"""
from __future__ import annotations

import os
import sys
from typing import Any

from agents.config import Selector, exit_on_error, parse
from agents.learning.learner import train
from agents.run_config import TrainConfig, rl_schema
from fastnet import CORES

DEFAULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "maze.yaml")
SHORT_FLAGS = {"--core": "core.name", "--total_steps": "run.total_steps", "--num_actors": "actor.num_actors",
               "--run_dir": "run.run_dir", "--device": "run.device", "--seed": "run.seed"}


def load(argv: list[str]) -> TrainConfig:
    """The resolved config of ``argv`` (ConfigError for bad input)."""
    return parse(lambda names: rl_schema("maze", names["core"]), argv, DEFAULTS,
                 (Selector("core.name", tuple(CORES), "core"),), SHORT_FLAGS, prog="launch/maze.py",
                 description=__doc__.split("\n")[0])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    return exit_on_error(lambda: train(load(argv)), debug="--debug" in argv or None)


if __name__ == "__main__":
    main()
