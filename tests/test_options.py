"""The one check of names and the one check of keyword options (fastnet.options): every registry
gives an unknown name, and every builder an unknown option, the same line."""
from __future__ import annotations

import pytest
import torch

import envs
from agents.network import make_stem
from envs.suites import SUITES, suite
from envs.tasks import TASKS, make_task
from envs.tasks.base import SPLITS
from fastnet import CORES, make_core
from fastnet.feature_maps import FEATURE_MAPS, FeatureMap
from fastnet.options import check_choice, check_options, unknown_choice
from fastnet.rules import RULES, fast_weight_sequence


def test_unknown_choice_is_one_line_naming_the_valid_ones():
    assert unknown_choice("delta", ("lstm", "delta"), kind="core") is None
    assert unknown_choice("x", ("lstm", "delta"), kind="core") == "unknown core 'x'; valid cores: lstm, delta"
    with pytest.raises(ValueError, match=r"^unknown split 'dev'; valid splits: train, test$"):
        check_choice("dev", ["train", "test"], kind="split")
    check_choice("test", ["train", "test"], kind="split")  # a valid one passes


@pytest.mark.parametrize("build,kind,name,valid", [
    (lambda: make_core("transformer", 4), "core", "transformer", CORES),
    (lambda: envs.make("atari2600", num_envs=1), "env", "atari2600", envs.ENVS),
    (lambda: make_task("sorting"), "task", "sorting", TASKS),
    (lambda: make_stem("vgg", (4,)), "stem", "vgg", ("mlp", "resnet", "nature", "shallow")),
    (lambda: suite("atari"), "suite", "atari", SUITES),
    (lambda: FeatureMap("relu", 4), "feature map", "relu", FEATURE_MAPS),
    (lambda: make_core("delta", 4, update_rule="hebb"), "update rule", "hebb", RULES),
    (lambda: fast_weight_sequence("hebb", *[torch.zeros(1, 1, 1, 2)] * 3, torch.zeros(1, 1, 1)), "update rule",
     "hebb", RULES),
    (lambda: make_task("retrieval1").split("dev"), "split", "dev", SPLITS),
])
def test_every_registry_names_an_unknown_choice_in_the_same_line(build, kind, name, valid):
    with pytest.raises(ValueError) as err:
        build()
    assert str(err.value) == f"unknown {kind} {name!r}; valid {kind}s: {', '.join(valid)}"


def test_an_unknown_option_is_named_with_the_valid_ones():
    check_options({"a": 1}, ["a", "b"], kind="core", name="delta")
    with pytest.raises(ValueError, match=r"^unknown option 'c' for core 'delta'; valid options: a, b$"):
        check_options({"a": 1, "c": 2}, ["a", "b"], kind="core", name="delta")
