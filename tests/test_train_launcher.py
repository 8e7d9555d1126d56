"""launch/train.py, the launcher for any Gymnasium env: a tiny CartPole run checkpoints, resumes
and evaluates; its stems are selectable; the sweep runs it as ``gym:<id>``."""
from __future__ import annotations

import os

import pytest

from agents.errors import ConfigError
from agents.learning.logger import read_csv
from launch import evaluate, sweep, train

TINY = ["--num_actors", "1", "--actor.envs_per_actor", "4", "--learner.batch_size", "4", "--actor.unroll_length",
        "5", "--log.tensorboard", "false", "--core.hidden_size", "16"]


def test_cartpole_trains_checkpoints_resumes_and_evaluates(tmp_path, capsys):
    run_dir = str(tmp_path / "run")
    first = train.main(["--env.id", "CartPole-v1", "--total_steps", "200", "--run_dir", run_dir, *TINY])
    assert first["step"] == 200 and os.path.exists(os.path.join(run_dir, "checkpoint.pt"))
    second = train.main(["--env.id", "CartPole-v1", "--total_steps", "400", "--run_dir", run_dir, *TINY])
    assert second["step"] == 400 and "resuming from" in capsys.readouterr().out
    assert [r["step"] for r in read_csv(os.path.join(run_dir, "logs.csv"))] == [20 * i for i in range(1, 21)]
    results = evaluate.run([os.path.join(run_dir, "checkpoint.pt"), "--runs", "1", "--episodes", "2", "--workers",
                            "1", "--sample", "--out", str(tmp_path / "eval")])
    assert len(results) == 1 and results[0]["mean"] >= 8  # CartPole pays 1 a step; no episode is shorter than 8


def test_the_defaults_name_the_run_after_the_env_and_stems_are_selectable():
    cfg = train.load([])
    assert (cfg.env.name, cfg.env.id, cfg.core.name, cfg.network.stem) == ("gym", "CartPole-v1", "delta_product", "mlp")
    assert cfg.resolved_run_dir() == "runs/CartPole-v1-delta_product" and cfg.loss.discount == 0.99
    bsuite = train.load(["--env.id", "bsuite/memory_len/0"])
    assert bsuite.resolved_run_dir() == "runs/bsuite_memory_len_0-delta_product"
    nature = train.load(["--network.stem", "nature", "--env.id", "ale_py:ALE/Pong-v5"])
    assert (nature.network.stem, nature.network.output_size) == ("nature", 512)
    with pytest.raises(ConfigError,
                       match="--network.stem: unknown stem 'conv'; valid stems: mlp, resnet, nature, shallow"):
        train.load(["--network.stem", "conv"])


def test_the_sweep_runs_any_gym_id_with_train_py(tmp_path):
    cfg = sweep.load(["--envs", "[gym:CartPole-v1, gym:bsuite/memory_len/0]", "--cores", "[lstm]", "--seeds", "[0]"])
    trials = sweep.grid(cfg)
    assert [t.name for t in trials] == ["gym_CartPole-v1-lstm-s0", "gym_bsuite_memory_len_0-lstm-s0"]
    config = sweep.trial_config(trials[0], 1000, [], str(tmp_path))
    assert (config.env.id, config.loss.discount, config.run.total_steps) == ("CartPole-v1", 0.99, 1000)
    assert sweep.trial_config(trials[1], 1000, [], str(tmp_path)).env.id == "bsuite/memory_len/0"
