"""Train an IMPALA agent on any Gymnasium env with any memory core.

    python launch/train.py --env.id CartPole-v1                     # defaults: launch/configs/train.yaml
    python launch/train.py --env.id popgym:popgym-RepeatPreviousEasy-v0 --core delta_product
    python launch/train.py --env.id bsuite/memory_len/10 --total_steps 500000 --seed 1
    python launch/train.py --env.id MiniGrid-MemoryS7-v0 --env.wrappers '[minigrid.wrappers:OneHotPartialObsWrapper]'
    python launch/train.py --env.id ALE/Pong-v5 --network.stem nature   # images (raw frames): a conv stem

``--env.id`` is a Gymnasium id, ``module:Id`` (the module is imported first) or a bsuite id.
Box actions take train.yaml's ``presets.actions.continuous``; otherwise a POPGym env or a bsuite
memory experiment (``envs.suites.MEMORY_FAMILIES``) trains on memory.yaml's defaults, without its
per-env presets (launch/memory.py's speed-ups for the envs it lists).
A time limit is not an end: a cut episode's last step is bootstrapped from its value. Running
the same command again resumes from the run directory's last checkpoint.
"""
from __future__ import annotations

from agents.network import STEM_NETWORKS
from launch.entry import RLEntry

ENTRY = RLEntry(env="gym", defaults="train.yaml", prog="launch/train.py", doc=__doc__, stems=tuple(STEM_NETWORKS),
                action_presets=True, memory_recipe="memory.yaml")
load, main = ENTRY.load, ENTRY.main

if __name__ == "__main__":
    main()
