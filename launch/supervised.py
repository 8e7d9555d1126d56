"""Train a memory core on a supervised benchmark (retrieval, code execution, ListOps, MNM's tasks, LM).

    python launch/supervised.py --task retrieval2 --core delta
    python launch/supervised.py --task listops10 --core rec_delta --train.max_time_s 900
    python launch/supervised.py --task dict --core mnm_p --task.num_pairs 4 --print_config

Defaults: launch/configs/supervised.yaml, with its presets for the task and then for the core.
Running the same command again resumes from the run directory's last checkpoint.
"""
from __future__ import annotations

import os
import sys
from typing import Any

from agents.config import parse
from agents.errors import exit_on_error
from agents.learning.supervised import Config, supervised_schema, train
from envs.tasks import TASKS
from fastnet import CORES

DEFAULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "supervised.yaml")
SHORT_FLAGS = {"--task": "task.name", "--core": "core.name", "--run_dir": "run.run_dir", "--device": "run.device",
               "--seed": "run.seed"}


def load(argv: list[str]) -> Config:
    """The resolved config of ``argv`` (ConfigError for bad input)."""
    return parse(lambda names: supervised_schema(names["task"], names["core"]), argv, DEFAULTS,
                 {"task.name": tuple(TASKS), "core.name": tuple(CORES)},
                 SHORT_FLAGS, prog="launch/supervised.py", description=__doc__.split("\n")[0])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    return exit_on_error(lambda: train(load(argv)), debug="--debug" in argv or None)


if __name__ == "__main__":
    main()
