"""Tests of the memory suites (envs/suites.py): every suite env steps through ``envs.make`` with
the shapes worked out by hand from its package's spaces, passes Gymnasium's env checker once
adapted, and keeps its returns in the declared range; bsuite's memory lengths and POPGym's
RepeatPrevious are checked against their rules; MMER on hand-worked curves.

A test that needs an optional package (the ``memory`` extra) skips without it.
"""
from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs
from envs.gym_adapter import make_single
from envs.suites import HELD_OUT_ENVS, SUITES, TRAINING_ENVS, SuiteEnv, mmer, suite, suite_env

ENTRIES = [e for entries in SUITES.values() for e in entries]

# (observation_shape, dtype, num_actions) from each package's spaces, flattened by hand:
# one-hot Discrete(4) suit; Tuple(Discrete(2) mode, Discrete(4) suit); MultiDiscrete([2, 2]) (dealt
# colour, queried colour) with counts 0..26 as actions; Box(2); bsuite's (1, 3) array; MiniGrid's
# Dict(direction Discrete(4), image 7x7 cells of 20 one-hot bits through OneHotPartialObsWrapper, mission
# text dropped); Memory Gym's 84x84 RGB frames.
SHAPES = {
    "RepeatPreviousEasy": ((4,), np.float32, 4),
    "AutoencodeEasy": ((6,), np.float32, 4),
    "CountRecallEasy": ((4,), np.float32, 27),
    "StatelessCartPoleEasy": ((2,), np.float32, 2),
    "memory_len_3": ((3,), np.float32, 2),
    "memory_len_10": ((3,), np.float32, 2),
    "memory_len_30": ((3,), np.float32, 2),
    "memory_len_60": ((3,), np.float32, 2),
    "memory_len_100": ((3,), np.float32, 2),
    "RepeatFirstEasy": ((4,), np.float32, 4),
    "MultiarmedBanditEasy": ((2,), np.float32, 10),
    "HigherLowerEasy": ((13,), np.float32, 2),
    "ConcentrationEasy": ((156,), np.float32, 52),
    "BattleshipEasy": ((2,), np.float32, 64),
    "MineSweeperEasy": ((3,), np.float32, 16),
    "VelocityOnlyCartpoleEasy": ((2,), np.float32, 2),
    "NoisyPositionOnlyCartPoleEasy": ((2,), np.float32, 2),
    "RepeatPreviousMedium": ((4,), np.float32, 4),
    "CountRecallMedium": ((8,), np.float32, 27),
    "RepeatFirstMedium": ((4,), np.float32, 4),
    "AutoencodeMedium": ((6,), np.float32, 4),
    "MemoryS7": ((4 + 7 * 7 * 20,), np.float32, 7),
    "MortarMayhemGrid": ((3, 84, 84), np.uint8, 4),
}


def test_suites_hold_the_issue_envs() -> None:
    assert [e.name for e in suite("popgym")] == ["RepeatPreviousEasy", "AutoencodeEasy", "CountRecallEasy",
                                                 "StatelessCartPoleEasy"]
    assert [e.name for e in suite("bsuite")] == ["memory_len_3", "memory_len_10", "memory_len_30",
                                                 "memory_len_60", "memory_len_100"]
    assert sorted(SHAPES) == sorted(e.name for e in ENTRIES)
    with pytest.raises(ValueError, match="valid suites: popgym, popgym_more, popgym_medium, bsuite, minigrid"):
        suite("atari")


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_steps_through_envs_make(entry: SuiteEnv) -> None:
    pytest.importorskip(entry.module)
    assert entry.available()
    shape, dtype, num_actions = SHAPES[entry.name]
    env = envs.make(entry.env, num_envs=3, seed=0, **entry.options)
    assert (env.observation_shape, env.observation_dtype, env.num_actions) == (shape, dtype, num_actions)
    obs = env.reset()
    assert obs.shape == (3, *shape) and obs.dtype == dtype
    rng = np.random.default_rng(0)
    low, high = entry.return_range
    for _ in range(120):
        obs, reward, done, info = env.step(rng.integers(0, num_actions, 3))
        assert obs.shape == (3, *shape) and obs.dtype == dtype
        assert reward.shape == done.shape == (3,) and reward.dtype == np.float32
        finished = info["episode_return"][done]
        assert ((finished >= low - 1e-6) & (finished <= high + 1e-6)).all(), finished
    env.close()


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_check_env_on_adapted_suite_env(entry: SuiteEnv) -> None:
    pytest.importorskip(entry.module)
    env = make_single(entry.options["id"], wrappers=entry.options.get("wrappers", ()))
    if entry.options.get("wrappers"):
        env.unwrapped.spec = None  # the checker remakes an env from its spec; MiniGrid's wrapper records no arguments
    check_env(env, skip_render_check=True)


@pytest.mark.parametrize("entry", SUITES["bsuite"], ids=lambda e: e.name)
def test_bsuite_memory_lengths(entry: SuiteEnv) -> None:
    """memory_len with memory length L: L + 1 steps, one reward of +-1 at the end, and the
    context bit shown only on the first step (bsuite's memory_chain.py)."""
    pytest.importorskip("bsuite")
    length = int(entry.name.rsplit("_", 1)[1])
    env = envs.make("gym", num_envs=4, seed=1, **entry.options)
    obs = env.reset()
    assert (np.abs(obs[:, 2]) == 1).all() and (obs[:, 0] == 1).all()  # context +-1, time to live 1
    rewards, lengths = [], []
    for _ in range(3 * (length + 1)):
        obs, reward, done, info = env.step(np.zeros(4, np.int64))
        assert (reward[~done] == 0).all()
        rewards += info["episode_return"][done].tolist()
        lengths += info["episode_length"][done].tolist()
    assert lengths == [length + 1] * 12 and set(rewards) <= {-1.0, 1.0}


def test_repeat_previous_rules_through_the_adapter() -> None:
    """An agent answering the suit observed three steps back (popgym's repeat_previous.py: the
    k = 4th most recent card of the hand, the current one included) scores exactly 1: 48
    rewarded steps of 1/48. Answering at random scores 1/48 * (1/4 - 3/4) * 48 = -0.5 on average."""
    pytest.importorskip("popgym")
    n = 8
    env = envs.make("gym", num_envs=n, seed=2, **suite("popgym")[0].options)
    history = [env.reset().argmax(1)]
    returns = []
    for _ in range(3 * 51):
        answer = history[-4] if len(history) >= 4 else np.zeros(n, np.int64)
        obs, _, done, info = env.step(answer)
        returns += info["episode_return"][done].tolist()
        history = [obs.argmax(1)] if done.all() else history + [obs.argmax(1)]
    assert len(returns) == 3 * n and np.allclose(returns, 1.0, atol=1e-5)
    rng = np.random.default_rng(0)
    env.reset()
    chance = []
    for _ in range(20 * 51):
        _, _, done, info = env.step(rng.integers(0, 4, n))
        chance += info["episode_return"][done].tolist()
    se = np.std(chance) / np.sqrt(len(chance))
    assert abs(np.mean(chance) + 0.5) < 4 * se


def test_mmer_hand_worked() -> None:
    # Run maxima 0.5 and 1.0 -> mean 0.75 -> (0.75 + 1) / 2 on [-1, 1].
    assert mmer([[-1.0, 0.0, 0.5], [0.0, 1.0, -1.0]], (-1.0, 1.0)) == 0.875
    assert mmer([[0.2, 0.1], [0.4]], (0.0, 1.0)) == pytest.approx(0.3)  # runs of different lengths
    assert mmer([[-0.5]], (-1.0, 1.0)) == 0.25  # chance on RepeatPrevious
    assert mmer(np.array([[1.0, 1.0]]), (-1.0, 1.0)) == 1.0


@pytest.mark.parametrize("curves, return_range, match", [
    ([], (-1.0, 1.0), "at least one run"),
    ([[0.1], []], (-1.0, 1.0), "at least one point"),
    ([[0.1]], (1.0, 1.0), "high > low"),
    ([[1.5]], (-1.0, 1.0), "outside the return range"),
    ([[float("nan")]], (-1.0, 1.0), "outside the return range"),
])
def test_mmer_bad_arguments(curves: list, return_range: tuple[float, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        mmer(curves, return_range)


def test_training_and_held_out_envs_are_disjoint_suite_envs() -> None:
    """The defaults are chosen on one set and reported on another (issue 42): no env in both."""
    training = {suite_env(key)[1].options["id"] for key in TRAINING_ENVS}
    held_out = {suite_env(key)[1].options["id"] for key in HELD_OUT_ENVS}
    assert len(training) == len(TRAINING_ENVS) and len(held_out) == len(HELD_OUT_ENVS)
    assert not training & held_out
