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

from agents.run_config import IMAGE_NETWORKS
from launch.entry import RLEntry

ENTRY = RLEntry(env="atari", defaults="atari.yaml", prog="launch/atari.py", doc=__doc__,
                stems=tuple(IMAGE_NETWORKS), short_flags={"--game": "env.game"})
load, main = ENTRY.load, ENTRY.main

if __name__ == "__main__":
    main()
