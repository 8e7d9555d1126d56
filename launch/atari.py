"""Train an IMPALA agent on an Atari game with any memory core (recurrent-FWP appendix C, Tables 9 and 10).

    python launch/atari.py --game Pong --core delta          # the papers' run: launch/configs/atari.yaml
    python launch/atari.py --game MsPacman --core lstm --seed 1 --run_dir runs/mspacman-lstm-seed1
    python launch/atari.py --game Pong --core ff --num_actors 2 --total_steps 100000 --device cpu
    python launch/atari.py --config launch/configs/atari_cpu.yaml   # Pong on a 2-core CPU: Nature stem, PPO

``--device auto`` (the default) puts the learner on cuda when there is one; actors run on the
CPU. Milestone checkpoints ``checkpoint-<step>.pt`` are kept at ``checkpoint.milestones`` (50M
and 200M) for launch/evaluate.py; running the same command again resumes a stopped run.
"""
from __future__ import annotations

import os
import sys
from typing import Any

from agents.config import Selector, exit_on_error, parse
from agents.learning.learner import train
from agents.run_config import IMAGE_NETWORKS, TrainConfig, rl_schema
from fastnet import CORES

DEFAULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "atari.yaml")
SHORT_FLAGS = {"--game": "env.game", "--core": "core.name", "--total_steps": "run.total_steps",
               "--num_actors": "actor.num_actors", "--run_dir": "run.run_dir", "--device": "run.device",
               "--seed": "run.seed"}


def load(argv: list[str]) -> TrainConfig:
    """The resolved config of ``argv`` (ConfigError for bad input)."""
    return parse(lambda names: rl_schema("atari", names["core"], names["network"]), argv, DEFAULTS,
                 (Selector("core.name", tuple(CORES), "core"), Selector("network.stem", tuple(IMAGE_NETWORKS), "stem")),
                 SHORT_FLAGS, prog="launch/atari.py",
                 description=__doc__.split("\n")[0])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    return exit_on_error(lambda: train(load(argv)), debug="--debug" in argv or None)


if __name__ == "__main__":
    main()
