"""Slow: the main job's defaults hold at a longer budget (issue 75). A preset chosen on 500K-step
runs once kept its early return and lost two thirds of its return at 2M steps; this trains the
main job for 2M steps and fails when it falls more than 10% below the stored figure.

    python -m pytest -m slow tests/test_maze_budgets.py      # about 2-3 minutes on 2 CPU cores
"""
from __future__ import annotations

import statistics

import pytest

from agents.learning.learner import train
from launch import maze

SEEDS = (10, 11, 12)
# The median over seeds 10-12 of the mean return (last 100 episodes) at the end of 2M-step runs of
# `python launch/maze.py --core lstm --total_steps 2000000` with today's maze.yaml (409, 417, 424):
# docs/results.md, "The maze's defaults at every budget (issue 75)", the 2M table's chosen row.
STORED_2M = 417.0
TOLERANCE = 0.10  # a run of one seed moves by about 10% at 2M (the actors race); the median of 3 by less


@pytest.mark.slow
def test_main_job_at_2m_steps_holds_its_stored_figure(tmp_path):
    returns = []
    for seed in SEEDS:
        cfg = maze.load(["--core", "lstm", "--seed", str(seed), "--run_dir", str(tmp_path / str(seed)),
                         "--total_steps", "2000000", "--log.tensorboard", "false"])
        returns.append(train(cfg)["mean_return"])
    floor = (1 - TOLERANCE) * STORED_2M
    assert statistics.median(returns) >= floor, (
        f"the main job at 2M steps: median {statistics.median(returns):.1f} of {returns}, more than "
        f"{TOLERANCE:.0%} below the stored {STORED_2M} (docs/results.md, issue 75)")
