"""Tests of ``envs.make("gym", ...)`` (envs/gym_adapter.py) on small envs defined here and on
Gymnasium's CartPole: hand-flattened observations, images to [C, H, W], episode totals against
single envs stepped by hand, Gymnasium's env checker, and bad arguments. The suites' third-party
envs are tested in test_suites.py."""
from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

import envs
from envs.gym_adapter import GymEnv, make_single, observation_kind


class ToyEnv(gymnasium.Env):
    """Episodes of 2-4 steps (drawn at reset); the reward of step t is t; the observation
    encodes the step count and the last action in a space of the given ``kind``."""

    def __init__(self, kind: str = "dict", action_start: int = 0, multi_action: bool = False) -> None:
        self.kind = kind
        self.action_space = spaces.MultiDiscrete([2, 2]) if multi_action else spaces.Discrete(3, start=action_start)
        self.observation_space = {
            "dict": spaces.Dict({"b": spaces.Discrete(3), "a": spaces.Box(-1, 1, (2,), np.float32),
                                 "t": spaces.Tuple((spaces.Discrete(2), spaces.MultiDiscrete([2, 3]))),
                                 "m": spaces.Text(5)}),
            "image": spaces.Box(0, 255, (5, 4, 3), np.uint8),
            "grey": spaces.Box(0, 255, (5, 4), np.uint8),
            "box": spaces.Box(-10, 10, (2,), np.float32),
        }[kind]

    def _obs(self) -> Any:
        t, a = self.t, self.last_action
        if self.kind == "dict":
            return {"a": np.array([t / 4, -t / 4], np.float32), "b": t % 3, "m": "hi",
                    "t": (t % 2, np.array([1, t % 3]))}
        if self.kind == "box":
            return np.array([t, a], np.float32)
        return (np.arange(np.prod(self.observation_space.shape)).reshape(self.observation_space.shape) + t
                ).astype(np.uint8)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t, self.last_action, self.length = 0, 0, int(self.np_random.integers(2, 5))
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        self.last_action = int(action[0] * 2 + action[1]) if isinstance(self.action_space, spaces.MultiDiscrete) \
            else int(action)
        return self._obs(), float(self.t), self.t >= self.length, False, {}


for _kind in ("dict", "image", "grey", "box"):
    gymnasium.register(id=f"DeltaBeastTest/{_kind}-v0", entry_point=ToyEnv, kwargs={"kind": _kind})
gymnasium.register(id="DeltaBeastTest/start-v0", entry_point=ToyEnv, kwargs={"kind": "box", "action_start": -1})
gymnasium.register(id="DeltaBeastTest/multi-v0", entry_point=ToyEnv, kwargs={"kind": "box", "multi_action": True})


def _needs_a_package() -> gymnasium.Env:
    raise gymnasium.error.DependencyNotInstalled("Frobnicator is not installed, run `pip install frob`")


gymnasium.register(id="DeltaBeastTest/needs-v0", entry_point=_needs_a_package)


def test_dict_tuple_discrete_multidiscrete_flattened_text_dropped() -> None:
    env = envs.make("gym", num_envs=2, seed=0, id="DeltaBeastTest/dict-v0")
    assert (env.observation_shape, env.observation_dtype, env.stem) == ((12,), np.float32, "mlp")
    obs = env.reset()
    # Keys in sorted order: a (Box), b (Discrete 3 one-hot), t (Discrete 2, MultiDiscrete [2, 3]); m (Text) dropped.
    t0 = [0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 0, 0]
    np.testing.assert_array_equal(obs, [t0, t0])
    obs, reward, done, info = env.step(np.array([0, 1]))
    t1 = [0.25, -0.25, 0, 1, 0, 0, 1, 0, 1, 0, 1, 0]
    np.testing.assert_array_equal(obs, [t1, t1])
    assert reward.tolist() == [1, 1] and info["episode_length"].tolist() == [1, 1]


@pytest.mark.parametrize("kind, shape", [("image", (3, 5, 4)), ("grey", (1, 5, 4))])
def test_images_become_uint8_channels_first(kind: str, shape: tuple[int, ...]) -> None:
    env = envs.make("gym", num_envs=3, seed=1, id=f"DeltaBeastTest/{kind}-v0")
    assert (env.observation_shape, env.observation_dtype, env.kind, env.stem) == (shape, np.uint8, "image", "resnet")
    env.reset()
    obs, *_ = env.step(np.array([0, 0, 0]))
    size = 20 * shape[0]
    frame = np.arange(size).reshape(5, 4, shape[0]) + 1  # the env's frame after one step, [H, W, C]
    assert obs.shape == (3, *shape) and obs.dtype == np.uint8
    for c in range(shape[0]):
        np.testing.assert_array_equal(obs[2, c], frame[:, :, c])
    flat = envs.make("gym", num_envs=1, id=f"DeltaBeastTest/{kind}-v0", observation="flat")
    assert (flat.observation_shape, flat.observation_dtype, flat.stem) == ((size,), np.float32, "mlp")
    np.testing.assert_array_equal(flat.reset()[0], np.arange(size))


def test_observation_kind() -> None:
    assert observation_kind(spaces.Box(0, 255, (84, 84, 3), np.uint8)) == "image"
    assert observation_kind(spaces.Box(0, 255, (84, 84), np.uint8)) == "image"
    assert observation_kind(spaces.Box(0, 255, (7, 7, 9), np.uint8)) == "flat"  # too many channels
    assert observation_kind(spaces.Box(0, 1, (84, 84, 3), np.float32)) == "flat"
    assert observation_kind(spaces.Discrete(4)) == "flat"


@pytest.mark.parametrize("env_id, max_steps", [("DeltaBeastTest/box-v0", 0), ("DeltaBeastTest/box-v0", 3),
                                               ("CartPole-v1", 0), ("CartPole-v1", 12)])
@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_matches_single_envs_stepped_by_hand(env_id: str, max_steps: int, vectorization: str) -> None:
    """Observations, rewards, dones and episode totals equal those of N single envs seeded
    with seed + i and reset by hand after each episode."""
    n, seed = 3, 10
    env = envs.make("gym", num_envs=n, seed=seed, id=env_id, max_episode_steps=max_steps,
                    vectorization=vectorization)
    singles = [gymnasium.make(env_id, max_episode_steps=max_steps or None) for _ in range(n)]
    expected = np.stack([s.reset(seed=seed + i)[0] for i, s in enumerate(singles)])
    np.testing.assert_array_equal(env.reset(), expected)
    totals = np.zeros((n, 2))
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(60):
        actions = rng.integers(0, 2, n)
        obs, reward, done, info = env.step(actions)
        for i, single in enumerate(singles):
            s_obs, s_reward, term, trunc, _ = single.step(int(actions[i]))
            totals[i] += (s_reward, 1)
            assert reward[i] == np.float32(s_reward) and done[i] == (term or trunc)
            assert (info["episode_return"][i], info["episode_length"][i]) == (np.float32(totals[i, 0]), totals[i, 1])
            if term or trunc:
                s_obs, _ = single.reset()
                totals[i] = 0
                ends += 1
                if max_steps:
                    assert info["episode_length"][i] <= max_steps
            np.testing.assert_array_equal(obs[i], s_obs)
    assert ends >= n
    env.close()


def test_action_space_start_is_shifted() -> None:
    env = envs.make("gym", num_envs=3, id="DeltaBeastTest/start-v0")
    env.reset()
    obs, *_ = env.step(np.array([0, 1, 2]))
    assert obs[:, 1].tolist() == [-1, 0, 1]  # the env saw start + action


@pytest.mark.parametrize("env_id", ["DeltaBeastTest/dict-v0", "DeltaBeastTest/image-v0", "DeltaBeastTest/grey-v0",
                                    "CartPole-v1"])
def test_check_env_on_wrapped_envs(env_id: str) -> None:
    check_env(make_single(env_id), skip_render_check=True)


class Doubled(gymnasium.ObservationWrapper):
    """Observations times 2 (a wrapper for ``wrappers``)."""

    def observation(self, observation: Any) -> Any:
        return observation * 2


class PlusOne(gymnasium.ObservationWrapper):
    """Observations plus 1."""

    def observation(self, observation: Any) -> Any:
        return observation + 1


def test_wrappers_apply_in_order() -> None:
    """``wrappers`` wrap each env in the order given: (x * 2) + 1, not (x + 1) * 2."""
    plain = envs.make("gym", num_envs=2, seed=3, id="DeltaBeastTest/box-v0")
    wrapped = envs.make("gym", num_envs=2, seed=3, id="DeltaBeastTest/box-v0",
                        wrappers=(f"{__name__}:Doubled", f"{__name__}:PlusOne"))
    np.testing.assert_array_equal(wrapped.reset(), plain.reset() * 2 + 1)
    actions = np.array([1, 2])
    np.testing.assert_array_equal(wrapped.step(actions)[0], plain.step(actions)[0] * 2 + 1)
    assert make_single("DeltaBeastTest/box-v0", wrappers=[f"{__name__}:PlusOne"]).env.__class__ is PlusOne


def test_minigrid_one_hot_view() -> None:
    """MiniGrid's one-hot view through ``wrappers``: 7x7 cells of 20 one-hot bits, then the direction."""
    pytest.importorskip("minigrid")
    env = envs.make("gym", num_envs=1, id="minigrid:MiniGrid-MemoryS7-v0",
                    wrappers=("minigrid.wrappers:OneHotPartialObsWrapper",))
    obs = env.reset()
    assert env.observation_shape == (4 + 7 * 7 * 20,) and set(np.unique(obs)) <= {0.0, 1.0}
    assert obs[0, :4].sum() == 1 and (obs[0, 4:].reshape(49, 20).sum(-1) == 3).all()  # type, colour, state


def test_a_multidiscrete_action_reaches_the_env_as_its_components() -> None:
    """MultiDiscrete [2, 2]: the agent's action a is the mixed-radix index of (a // 2, a % 2), which
    the toy env records as 2 * a_0 + a_1 in its next observation."""
    env = envs.make("gym", num_envs=4, seed=0, id="DeltaBeastTest/multi-v0")
    assert (env.action_sizes, env.num_actions, envs.action_sizes(env)) == ((2, 2), 4, (2, 2))
    env.reset()
    obs, _, _, _ = env.step(np.array([0, 1, 2, 3]))
    np.testing.assert_array_equal(obs[:, 1], [0, 1, 2, 3])


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="valid options: id, observation"):
        envs.make("gym", num_envs=1, idd="CartPole-v1")
    with pytest.raises(ValueError, match="max_episode_steps must be >= 0"):
        envs.make("gym", num_envs=1, id="CartPole-v1", max_episode_steps=-1)
    with pytest.raises(ValueError, match=r"vectorization must be one of \('sync', 'async'\), got 'threads'"):
        envs.make("gym", num_envs=1, id="CartPole-v1", vectorization="threads")
    with pytest.raises(ValueError, match="is not 'module:Class'"):
        envs.make("gym", num_envs=1, id="CartPole-v1", wrappers=("Doubled",))
    with pytest.raises(ValueError, match="cannot be loaded"):
        envs.make("gym", num_envs=1, id="CartPole-v1", wrappers=(f"{__name__}:Tripled",))
    with pytest.raises(ValueError, match="is not a gymnasium.Wrapper"):
        envs.make("gym", num_envs=1, id="CartPole-v1", wrappers=(f"{__name__}:ToyEnv",))
    env = envs.make("gym", num_envs=2, id="CartPole-v1")
    env.reset()
    with pytest.raises(ValueError, match=r"actions must be in 0\.\.1"):
        env.step(np.array([0, 2]))
    with pytest.raises(ValueError, match="int array"):
        env.step(np.array([0.0, 1.0]))
    assert isinstance(env, GymEnv)


@pytest.mark.parametrize("env_id,why", [
    ("NoSuchEnv-v0", "Environment `NoSuchEnv` doesn't exist"),
    ("CartPole-v9", "Environment version `v9` for environment `CartPole` doesn't exist"),
    ("no_such_module_here:Foo-v0", "No module named 'no_such_module_here'"),
    ("DeltaBeastTest/needs-v0", "Frobnicator is not installed, run `pip install frob`"),
    ("bsuite/memory_len/9999", None)])
def test_an_env_that_cannot_be_made_is_one_line_that_says_why(env_id: str, why: str | None) -> None:
    """Unknown ids and versions, a missing module or package: one ValueError line (the learner's
    ``config error: env: ...``) carrying Gymnasium's reason, not its traceback."""
    with pytest.raises(ValueError) as e:
        envs.make("gym", num_envs=1, id=env_id)
    message = str(e.value)
    assert "\n" not in message
    if why is None:
        assert message.startswith("unknown bsuite id 'memory_len/9999'")
    else:
        assert message.startswith(f"env {env_id!r} cannot be made: ") and why in message
    # an unknown name, typed without the module that would register it, is told how to name one
    assert ("written module:Id" in message) == (env_id == "NoSuchEnv-v0")


def test_a_bsuite_id_whose_settings_hold_a_seed_is_reseeded() -> None:
    """catch/<i>'s settings carry their own seed; the adapter's seed replaces it (it used to be
    passed twice: a TypeError). One seed gives one ball column every time; seeds differ."""
    pytest.importorskip("bsuite")
    from envs.gym_adapter import BsuiteEnv

    env = BsuiteEnv("catch/0")
    first = {seed: env.reset(seed=seed)[0].tobytes() for seed in range(8)}
    assert all(env.reset(seed=seed)[0].tobytes() == first[seed] for seed in range(8))
    assert len(set(first.values())) > 1


@pytest.mark.parametrize("package,call,shape", [
    ("ale_py", "make_single('ALE/Pong-v5')", "(3, 210, 160)"),
    ("minigrid", "make_single('MiniGrid-MemoryS7-v0', wrappers=['minigrid.wrappers:OneHotPartialObsWrapper'])",
     "(984,)")])
def test_ids_that_need_no_module_prefix(package: str, call: str, shape: str) -> None:
    """``ALE/Pong-v5`` is made without ``ale_py:`` in front, and a MiniGrid id without
    ``minigrid:`` when a wrapper of minigrid's is named (its module registers the ids): each in a
    fresh process, where nothing has imported the package yet."""
    pytest.importorskip(package)
    import subprocess
    import sys

    code = (f"import sys; from envs.gym_adapter import make_single; assert {package!r} not in sys.modules; "
            f"print({call}.observation_space.shape)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == shape
