"""Train an IMPALA agent on the gridworld maze with any memory core.

    python launch/maze.py --core delta                      # defaults: launch/configs/maze.yaml
    python launch/maze.py --core lstm --total_steps 200000 --num_actors 2
    python launch/maze.py --core mnm_p --set core_options.hidden_size=64 --set optim.lr=1e-3
    python launch/maze.py --config my.yaml --run_dir runs/exp1

Flags: ``--config FILE``, ``--set section.key=value`` for any key, and ``--key value`` for any
key whose name is unique (``--core``, ``--device``, ``--total_steps``, ``--num_actors``,
``--envs_per_actor``, ``--unroll_length``, ``--batch_size``, ``--lr``, ``--run_dir``, ...);
``--help`` lists them. Running the same command again resumes from the run directory's
last checkpoint.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from agents.config import ConfigError, parse_config  # noqa: E402
from agents.learner import TrainConfig, train  # noqa: E402

DEFAULT_CONFIG = os.path.join(ROOT, "launch", "configs", "maze.yaml")


def main(argv: list[str] | None = None) -> None:
    try:
        cfg = parse_config(TrainConfig, sys.argv[1:] if argv is None else argv, DEFAULT_CONFIG,
                           variants=("core", "core_defaults"))
    except ConfigError as e:
        raise SystemExit(f"config error: {e}")
    train(cfg)


if __name__ == "__main__":
    main()
