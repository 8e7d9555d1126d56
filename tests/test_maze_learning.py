"""Slow: with the maze defaults, lstm and delta learn clearly above the random policy (~9).

    python -m pytest -m slow tests/test_maze_learning.py
"""
from __future__ import annotations

import pytest

from agents.learning.learner import train
from launch import maze


@pytest.mark.slow
@pytest.mark.parametrize("core", ["lstm", "delta"])
def test_learns_above_random(core, tmp_path):
    cfg = maze.load(["--core", core, "--run_dir", str(tmp_path), "--total_steps", "800000",
                     "--log.tensorboard", "false", "--log.return_window", "200"])
    result = train(cfg)
    assert result["mean_return"] > 30, result  # random ≈ 9; 600K-step tuning runs reached 80-107


@pytest.mark.slow
def test_lstm_reaches_80_at_300k_steps(tmp_path):
    """Issue 25's sample-efficiency bar, with the defaults: the median over 3 seeds of the mean
    return of the last 100 episodes at 300K steps is at least 80 (the issue's benchmark target
    is 95, docs/results.md; RecurrentPPO measured 83 at 250K and 107 at 500K)."""
    import statistics

    returns = []
    for seed in (0, 1, 2):
        cfg = maze.load(["--core", "lstm", "--seed", str(seed), "--run_dir", str(tmp_path / str(seed)),
                         "--total_steps", "300000", "--log.tensorboard", "false", "--log.return_window", "100"])
        returns.append(train(cfg)["mean_return"])
    assert statistics.median(returns) >= 80, returns
