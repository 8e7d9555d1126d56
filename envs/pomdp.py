"""Partially observed locomotion: Gymnasium's MuJoCo envs with only the joint positions or only
the joint velocities observed (``envs.make("gym", id="HalfCheetah-v5", observe="positions")``).

These are the "-P" and "-V" tasks of Ni et al. (2022), "Recurrent Model-Free RL Can Be a Strong
Baseline for Many POMDPs" (after Han et al. 2020 and Meng et al. 2021): a policy that sees only
positions must infer velocities from their history, and one that sees only velocities must
integrate them. Ni et al. ran PyBullet's versions; these are Gymnasium's MuJoCo ones (v4 and v5
share the layout below), with their default ``exclude_current_positions_from_observation``: the
observation is qpos without the root's x (and y for Ant and Humanoid), then qvel, then, for Ant
and Humanoid, further terms (contact forces, inertias) that neither variant keeps.

=================  ===========  ==========  ==============  ==================
env                observation  positions   velocities      dropped
=================  ===========  ==========  ==============  ==================
HalfCheetah        17           0-7 (8)     8-16 (9)        —
Hopper             11           0-4 (5)     5-10 (6)        —
Walker2d           17           0-7 (8)     8-16 (9)        —
Ant (v5)           105          0-12 (13)   13-26 (14)      27-104 (contact)
Swimmer            8            0-2 (3)     3-7 (5)         —
InvertedPendulum   4            0-1 (2)     2-3 (2)         —
Humanoid (v5)      348          0-21 (22)   22-44 (23)      45-347
=================  ===========  ==========  ==============  ==================

``tests/test_pomdp.py`` checks each row against the MuJoCo model (nq less the excluded root
coordinates, and nv) and the simulator's state.
"""
from __future__ import annotations

from typing import Any, Literal

import gymnasium
import numpy as np
from gymnasium import spaces

Observe = Literal["all", "positions", "velocities"]

# env name (the id without its version) -> (positions, velocities): index ranges [start, stop)
PARTS: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    "HalfCheetah": ((0, 8), (8, 17)),
    "Hopper": ((0, 5), (5, 11)),
    "Walker2d": ((0, 8), (8, 17)),
    "Ant": ((0, 13), (13, 27)),
    "Swimmer": ((0, 3), (3, 8)),
    "InvertedPendulum": ((0, 2), (2, 4)),
    "Humanoid": ((0, 22), (22, 45)),
}


def observed_indices(env_id: str, observe: Observe) -> np.ndarray:
    """The observation indices that ``observe`` keeps of MuJoCo env ``env_id`` (``"Hopper-v5"``);
    ValueError for an env not in :data:`PARTS`."""
    name = env_id.split(":")[-1].split("/")[-1].rsplit("-v", 1)[0]
    if name not in PARTS:
        raise ValueError(f"observe={observe!r} needs one of Gymnasium's MuJoCo locomotion envs "
                         f"({', '.join(f'{n}-v5' for n in PARTS)}), got {env_id!r}")
    start, stop = PARTS[name][0 if observe == "positions" else 1]
    return np.arange(start, stop)


class ObserveParts(gymnasium.ObservationWrapper, gymnasium.utils.RecordConstructorArgs):
    """Keep only the positions or only the velocities of a MuJoCo locomotion env's observation."""

    def __init__(self, env: gymnasium.Env, env_id: str, observe: Observe) -> None:
        gymnasium.utils.RecordConstructorArgs.__init__(self, env_id=env_id, observe=observe)
        gymnasium.ObservationWrapper.__init__(self, env)
        self.indices = observed_indices(env_id, observe)
        space = env.observation_space
        if not isinstance(space, spaces.Box) or space.shape[0] < self.indices[-1] + 1:
            raise ValueError(f"env {env_id!r} has observations {space}, not the layout of envs/pomdp.py's table "
                             "(made with exclude_current_positions_from_observation=False?)")
        self.observation_space = spaces.Box(space.low[self.indices], space.high[self.indices],
                                            (len(self.indices),), space.dtype)

    def observation(self, observation: Any) -> np.ndarray:
        return np.asarray(observation)[self.indices]
