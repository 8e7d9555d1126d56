"""Train an IMPALA agent on an Atari game with any memory core (ENVS.md "Atari").

    python launch/atari.py --game Pong --core delta          # the papers' run: launch/configs/atari.yaml
    python launch/atari.py --game MsPacman --core lstm --run_dir runs/mspacman-lstm-seed1 --seed 1
    python launch/atari.py --game Pong --core ff --num_actors 2 --total_steps 100000 --device cpu

Flags are launch/maze.py's (``--config FILE``, ``--set section.key=value``, ``--key value``
for any unique key: ``--core``, ``--device``, ``--total_steps``, ``--num_actors``,
``--unroll_length``, ``--batch_size``, ``--lr``, ``--run_dir``, ...), plus ``--game NAME``
(short for ``--set env.options.game=NAME``). ``--device auto`` (the default) puts the learner
on ``cuda`` when there is one; actors always run on the CPU. ``{game}`` in ``run_dir`` is
replaced by the game's name. Milestone checkpoints ``checkpoint-<step>.pt`` are kept at the
steps in ``checkpoint.milestones`` (50M and 200M); the same command resumes a stopped run.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from agents.config import ConfigError, parse_config  # noqa: E402
from agents.learner import TrainConfig, train  # noqa: E402

DEFAULT_CONFIG = os.path.join(ROOT, "launch", "configs", "atari.yaml")


def expand_game(argv: list[str]) -> list[str]:
    """Rewrite ``--game X`` / ``--game=X`` as ``--set env.options.game=X``."""
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--game":
            if i + 1 >= len(argv):
                raise ConfigError("--game needs a value, e.g. --game Pong")
            out += ["--set", f"env.options.game={argv[i + 1]}"]
            i += 2
            continue
        if arg.startswith("--game="):
            arg = ["--set", f"env.options.game={arg.split('=', 1)[1]}"]
            out += arg
        else:
            out.append(arg)
        i += 1
    return out


def resolve(cfg: TrainConfig) -> TrainConfig:
    """Fill in ``device: auto`` and ``{game}`` in ``run_dir``; check the game name."""
    import torch

    from envs.atari import canonical_name

    if cfg.device == "auto":
        cfg.device = "cuda" if torch.cuda.is_available() else "cpu"
    if cfg.env.name == "atari":
        game = canonical_name(str(cfg.env.options.get("game", "Pong")))  # ValueError lists the games
        cfg.env.options["game"] = game
        cfg.run_dir = cfg.run_dir.replace("{game}", game)
    return cfg


def load(argv: list[str]) -> TrainConfig:
    return resolve(parse_config(TrainConfig, expand_game(argv), DEFAULT_CONFIG, variants=("core", "core_defaults")))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "-h" in argv or "--help" in argv:
        print(__doc__)
    try:
        cfg = load(argv)
    except (ConfigError, ValueError) as e:
        raise SystemExit(f"config error: {e}")
    train(cfg)


if __name__ == "__main__":
    main()
