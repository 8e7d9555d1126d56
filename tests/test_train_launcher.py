"""launch/train.py, the launcher for any Gymnasium env: a tiny CartPole run checkpoints, resumes
and evaluates; its stems are selectable; the sweep runs it as ``gym:<id>``."""
from __future__ import annotations

import os

import pytest

from agents.errors import ConfigError
from agents.learning.logger import read_csv
from envs import suites
from launch import evaluate, memory, sweep, train

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


LEARNING = ("core", "actor", "network", "learner", "loss", "optim", "env")


def learning_sections(cfg) -> dict:
    from agents.config import to_dict

    sections = {k: v for k, v in to_dict(cfg).items() if k in LEARNING}
    sections["network"].pop("stem", None)  # train.py's selector names the MLP stem; memory.py's network is the MLP
    return sections


@pytest.mark.parametrize("key", [f"{s}/{e.name}" for s, entries in suites.SUITES.items()
                                 if s.startswith(("popgym", "bsuite")) for e in entries])
def test_train_py_trains_a_popgym_or_bsuite_env_on_memory_yamls_recipe(key):
    """Issue 74 item 4: a POPGym or bsuite memory env given to launch/train.py trains with
    memory.yaml's defaults (the recipe of the held-out table in docs/memory_benchmarks.md), not its
    per-env presets: core, unroll, passes, loss and optimiser as launch/memory.py's config for the
    env without its preset; where it writes and logs stays train.yaml's."""
    suite, entry = suites.suite_env(key)
    pytest.importorskip(entry.module)
    by_train = train.load(["--env.id", entry.options["id"]])
    by_memory = memory.env_config(memory.load([]), suite, entry)
    assert by_train.network.stem == "mlp" and type(by_memory.network).__name__ == "MLPNetworkConfig"
    assert learning_sections(by_train) == learning_sections(by_memory)
    run_name = entry.options["id"].replace("/", "_").replace(":", "_")
    assert by_train.resolved_run_dir() == f"runs/{run_name}-{by_memory.core.name}"
    assert (by_train.log.tensorboard, by_memory.log.tensorboard) == (True, False)


def test_the_memory_recipe_takes_the_family_not_the_list_and_box_actions_keep_theirs():
    """An unlisted POPGym id or bsuite memory experiment takes memory.yaml's defaults; a listed one
    not its preset; other bsuite experiments, MiniGrid and CartPole keep train.yaml's; a Box POPGym
    env keeps the continuous preset; flags and a core's preset still apply on top."""
    pytest.importorskip("popgym")
    pytest.importorskip("bsuite")
    memory_defaults = memory.load([])
    unlisted = train.load(["--env.id", "popgym:popgym-HigherLowerHard-v0"])
    assert (unlisted.loss.discount, unlisted.learner.epochs, unlisted.loss.clip, unlisted.loss.entropy_cost,
            unlisted.loss.popart_zero_init) == (memory_defaults.loss.discount, 2, 0.2, 0.003, True)
    listed = train.load(["--env.id", "popgym:popgym-CountRecallEasy-v0"])
    assert (listed.actor.unroll_length, listed.learner.minibatches, listed.loss.discount) == (20, 4, 0.9)
    assert train.load(["--env.id", "bsuite/memory_size/3"]).learner.epochs == 2
    for plain in ("CartPole-v1", "bsuite/catch/0", "MiniGrid-MemoryS7-v0"):
        cfg = train.load(["--env.id", plain])
        assert (cfg.loss.discount, cfg.learner.epochs, cfg.loss.clip) == (0.99, 1, None)
    pendulum = train.load(["--env.id", "popgym:popgym-PositionOnlyPendulumEasy-v0"])
    assert (pendulum.core.name, pendulum.loss.discount, pendulum.learner.epochs) == ("lstm", 0.99, 10)
    flagged = train.load(["--env.id", "popgym:popgym-HigherLowerHard-v0", "--core", "lstm", "--loss.discount", "0.95"])
    assert (flagged.core.hidden_size, flagged.loss.discount, flagged.learner.epochs) == (128, 0.95, 2)
