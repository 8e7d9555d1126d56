"""Train an IMPALA agent on the gridworld maze with any memory core.

    python launch/maze.py --core delta                      # defaults: launch/configs/maze.yaml
    python launch/maze.py --core lstm --total_steps 200000 --num_actors 2
    python launch/maze.py --core mnm_p --core.memory_size 64 --optim.lr 1e-3
    python launch/maze.py --config my.yaml --run_dir runs/exp1 --print_config

Running the same command again resumes from the run directory's last checkpoint.
"""
from __future__ import annotations

from launch.entry import RLEntry

ENTRY = RLEntry(env="maze", defaults="maze.yaml", prog="launch/maze.py", doc=__doc__)
load, main = ENTRY.load, ENTRY.main

if __name__ == "__main__":
    main()
