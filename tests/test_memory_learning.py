"""Slow: on POPGym's RepeatPrevious (Easy), a memoryless agent (the ff core) stays at chance while
lstm learns the task within 1M steps (about a minute each on 2 CPU cores).

Chance is -0.5: a memoryless policy is right about the suit 3 steps back a quarter of the
time, and each of the 48 scored steps pays +-1/48 (popgym's repeat_previous.py); a perfect
answer scores 1.

    python -m pytest -m slow tests/test_memory_learning.py
"""
from __future__ import annotations

import pytest

from agents.learner import ActorConfig, EnvConfig, LearnerConfig, LogConfig, OptimConfig, TrainConfig, train
from envs.suites import suite

pytest.importorskip("popgym")


def run(core: str, run_dir: str) -> float:
    cfg = TrainConfig(core=core, total_steps=1_000_000, run_dir=run_dir, seed=0,
                      core_options={"hidden_size": 64} if core == "lstm" else {},
                      env=EnvConfig("gym", dict(suite("popgym")[0].options)),
                      actor=ActorConfig(num_actors=2, envs_per_actor=16, unroll_length=20),
                      learner=LearnerConfig(batch_size=32, discount=0.9),
                      optim=OptimConfig(lr=2e-3),
                      log=LogConfig(return_window=200, print_every_s=60, tensorboard=False))
    return train(cfg)["mean_return"]


@pytest.mark.slow
def test_memoryless_core_stays_at_chance(tmp_path) -> None:
    assert run("ff", str(tmp_path)) < -0.4  # 200 episodes at chance: -0.5 +- 0.01; measured -0.50


@pytest.mark.slow
def test_lstm_learns_repeat_previous(tmp_path) -> None:
    assert run("lstm", str(tmp_path)) > 0.5  # measured 0.92 at 1M steps
