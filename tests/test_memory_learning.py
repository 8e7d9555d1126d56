"""Slow: on POPGym's RepeatPrevious (Easy), a memoryless agent (the ff core) stays at chance while
lstm learns the task within 1M steps (about a minute each on 2 CPU cores).

Chance is -0.5: a memoryless policy is right about the suit 3 steps back a quarter of the
time, and each of the 48 scored steps pays +-1/48 (popgym's repeat_previous.py); a perfect
answer scores 1.

    python -m pytest -m slow tests/test_memory_learning.py
"""
from __future__ import annotations

import pytest

from agents.learning.learner import train
from envs.suites import suite
from launch import memory

pytest.importorskip("popgym")


def run(core: str, run_dir: str) -> float:
    env_id = suite("popgym")[0].options["id"]
    cfg = memory.load(["--core", core, "--total_steps", "1000000", "--run_dir", run_dir, "--env.id", env_id,
                       *(["--core.hidden_size", "64"] if core == "lstm" else [])])  # memory.yaml's settings
    return train(cfg)["mean_return"]


@pytest.mark.slow
def test_memoryless_core_stays_at_chance(tmp_path) -> None:
    assert run("ff", str(tmp_path)) < -0.4  # 200 episodes at chance: -0.5 +- 0.01; measured -0.50


@pytest.mark.slow
def test_lstm_learns_repeat_previous(tmp_path) -> None:
    assert run("lstm", str(tmp_path)) > 0.5  # measured 0.92 at 1M steps
