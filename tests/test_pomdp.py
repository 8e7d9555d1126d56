"""The -P and -V locomotion POMDPs (envs/pomdp.py): each row of the index table against the MuJoCo
model and the simulator's state, and the gym adapter's ``observe`` option."""
from __future__ import annotations

import gymnasium
import numpy as np
import pytest

import envs
from envs.pomdp import PARTS, observed_indices

pytest.importorskip("mujoco")

EXCLUDED_ROOT = {"Ant": 2, "Humanoid": 2, "Swimmer": 2, "InvertedPendulum": 0}  # root coordinates left out


@pytest.mark.parametrize("name", sorted(PARTS))
def test_the_table_is_the_simulators_positions_and_velocities(name):
    env = gymnasium.make(f"{name}-v5")
    obs, _ = env.reset(seed=3)
    obs, *_ = env.step(env.action_space.sample())  # moving: nonzero velocities
    data, model = env.unwrapped.data, env.unwrapped.model
    skip = EXCLUDED_ROOT.get(name, 1)  # the root's x (and y), as the env leaves them out
    positions, velocities = observed_indices(f"{name}-v5", "positions"), observed_indices(f"{name}-v5", "velocities")
    assert len(positions) == model.nq - skip and len(velocities) == model.nv
    np.testing.assert_allclose(obs[positions], data.qpos[skip:], rtol=1e-6)
    clip = 10 if name in ("Hopper", "Walker2d") else np.inf  # their observations clip qvel to ±10
    np.testing.assert_allclose(obs[velocities], np.clip(data.qvel, -clip, clip), rtol=1e-6)
    env.close()


def test_observe_keeps_one_part_and_refuses_other_envs():
    full = envs.make("gym", num_envs=2, seed=1, id="HalfCheetah-v5")
    part = envs.make("gym", num_envs=2, seed=1, id="HalfCheetah-v5", observe="velocities")
    assert full.observation_shape == (17,) and part.observation_shape == (9,) and part.action_dim == 6
    np.testing.assert_array_equal(part.reset(), full.reset()[:, 8:])
    action = np.full((2, 6), 0.5)
    np.testing.assert_array_equal(part.step(action)[0], full.step(action)[0][:, 8:])
    with pytest.raises(ValueError, match="needs one of Gymnasium's MuJoCo locomotion envs"):
        envs.make("gym", num_envs=1, id="Pendulum-v1", observe="positions")
    with pytest.raises(ValueError, match="observe must be one of"):
        envs.make("gym", num_envs=1, id="Hopper-v5", observe="joints")
