"""Config loading: YAML + per-variant defaults + --key / --set overrides, and clear errors."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from agents.config import ConfigError, parse_config


@dataclass
class Optim:
    name: Literal["rmsprop", "adam"] = "rmsprop"
    lr: float = 6e-4
    milestones: list[int] = field(default_factory=list)


@dataclass
class Actor:
    num_actors: int = 2
    unroll_length: int = 20


@dataclass
class Schema:
    core: str = "lstm"
    device: str = "cpu"
    seed: int = 0
    optim: Optim = field(default_factory=Optim)
    actor: Actor = field(default_factory=Actor)
    core_options: dict[str, Any] = field(default_factory=dict)
    core_defaults: dict[str, Any] = field(default_factory=dict)


def write(tmp_path, text):
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return str(path)


def parse(argv, path=None):
    return parse_config(Schema, argv, default_path=path, variants=("core", "core_defaults"))


def test_defaults_yaml_and_overrides(tmp_path):
    path = write(tmp_path, "seed: 3\noptim: {lr: 1.0e-3}\ncore_options: {hidden_size: 64}\n")
    cfg = parse(["--lr", "2e-3", "--num_actors", "4", "--set", "core_options.num_layers=2",
                 "--set", "optim.milestones=[10, 20]", "--device=cuda"], path)
    assert cfg.seed == 3 and cfg.device == "cuda"
    assert cfg.optim.lr == 2e-3 and isinstance(cfg.optim.lr, float)
    assert cfg.actor.num_actors == 4 and cfg.actor.unroll_length == 20
    assert cfg.core_options == {"hidden_size": 64, "num_layers": 2}
    assert cfg.optim.milestones == [10, 20]


def test_ints_become_floats():
    assert parse(["--lr", "1"]).optim.lr == 1.0


def test_variant_defaults_sit_between_yaml_and_cli(tmp_path):
    path = write(tmp_path, "optim: {lr: 1.0e-3}\ncore_defaults:\n  delta: {optim: {lr: 5.0e-4}, "
                           "core_options: {num_heads: 2}}\n")
    assert parse([], path).optim.lr == 1e-3
    cfg = parse(["--core", "delta"], path)
    assert cfg.optim.lr == 5e-4 and cfg.core_options == {"num_heads": 2}
    assert parse(["--core", "delta", "--lr", "7e-4"], path).optim.lr == 7e-4
    # the variant table itself set on the command line takes effect too
    assert parse(["--core", "delta", "--set", "core_defaults.delta.optim.lr=2e-4"], path).optim.lr == 2e-4
    assert parse(["--set", "core_defaults.linear.optim.lr=2e-4"], path).optim.lr == 1e-3  # another core's


def test_malformed_yaml_names_the_file(tmp_path):
    path = write(tmp_path, "optim: {lr: [1, 2\n")
    with pytest.raises(ConfigError, match="cfg.yaml: malformed YAML"):
        parse([], path)
    with pytest.raises(ConfigError, match="does not exist"):
        parse([], str(tmp_path / "missing.yaml"))


def test_unknown_keys_list_the_valid_ones(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key 'optim.learning_rate'.*optim.lr"):
        parse([], write(tmp_path, "optim: {learning_rate: 1.0}\n"))
    with pytest.raises(ConfigError, match=r"unknown key 'bogus'.*valid keys: core"):
        parse(["--set", "bogus=1"])
    with pytest.raises(ConfigError, match=r"unknown flag --bogus.*--num_actors"):
        parse(["--bogus", "1"])


def test_ill_typed_values(tmp_path):
    with pytest.raises(ConfigError, match=r"cfg.yaml: actor.num_actors must be int, got str"):
        parse([], write(tmp_path, "actor: {num_actors: two}\n"))
    with pytest.raises(ConfigError, match=r"--num_actors: num_actors must be int, got float"):
        parse(["--num_actors", "2.5"])
    with pytest.raises(ConfigError, match=r"must be one of \['rmsprop', 'adam'\]"):
        parse(["--set", "optim.name=sgd"])
    with pytest.raises(ConfigError, match="is a section"):
        parse(["--set", "optim=3"])


def test_settings_that_would_hang_or_spoil_a_run_are_clear_errors(tmp_path):
    from agents.learner import TrainConfig, train
    cfg = TrainConfig(total_steps=100)
    cfg.actor.num_actors, cfg.optim.grad_clip, cfg.network.reward_clip = 0, -1.0, 0.0
    with pytest.raises(ConfigError) as error:
        train(cfg)  # before any actor starts: 0 actors would wait for batches forever
    assert str(error.value) == ("actor.num_actors must be > 0, got 0; network.reward_clip must be > 0, got 0.0; "
                                "optim.grad_clip must be >= 0, got -1.0")

    from agents.supervised import Config
    from agents.supervised import train as train_supervised
    sup = Config(run_dir=str(tmp_path))
    sup.train.eval_every, sup.optim.clip_norm = 0, -0.5
    with pytest.raises(ConfigError, match="train.eval_every must be > 0, got 0; optim.clip_norm must be >= 0"):
        train_supervised(sup, quiet=True)
    assert not os.listdir(tmp_path)
