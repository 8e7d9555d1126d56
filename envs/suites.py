"""Memory benchmark suites over ``envs.make("gym", ...)`` and POPGym's MMER metric.

``SUITES[name]`` is a tuple of :class:`SuiteEnv`; each one is made with
``envs.make(entry.env, num_envs=N, seed=s, **entry.options)``. The suites:

* ``popgym`` -- POPGym (Morad et al., "POPGym: Benchmarking Partially Observable Reinforcement
  Learning", ICLR 2023), Easy level: RepeatPrevious, Autoencode, CountRecall and Stateless
  CartPole (the package's ``PositionOnlyCartPole``: cart position and pole angle, no
  velocities).
* ``bsuite`` -- bsuite's ``memory_len`` (Osband et al., "Behaviour Suite for Reinforcement
  Learning", ICLR 2020, §A "memory_len") at memory lengths 3, 10, 30, 60 and 100 (the last two
  span more than 50 steps: issue 25's test of the fast-weight cores against lstm).
* ``minigrid`` -- MiniGrid's ``MiniGrid-MemoryS7-v0`` (Chevalier-Boisvert et al., "Minigrid &
  Miniworld", NeurIPS 2023 Datasets and Benchmarks): remember the object seen at the start,
  then pick the matching one at the end of a corridor.
* ``memorygym`` -- Memory Gym's ``MortarMayhem-Grid-v0`` (Pleines et al., "Memory Gym:
  Partially Observable Challenges to Memory-Based Agents", ICLR 2023): 84x84 RGB frames and
  4 grid moves; the agent must replay a sequence of commands shown at the start.

``SuiteEnv.return_range`` is the range an episode's return can take, read from each env's
code; :func:`mmer` normalises by it. ``SuiteEnv.reference`` would hold published figures;
it is empty, because no paper table could be consulted here (see ``reference``).
"""
from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fastnet.options import check_choice


@dataclass(frozen=True)
class SuiteEnv:
    """One env of a suite.

    name: a short label for tables and run directories.
    env: the ``envs.make`` name ("gym").
    options: the env's keyword options (``id`` and any others of ``envs.gym_adapter.GymEnv``).
    package: the PyPI distribution it needs (the ``memory`` extra), for ``available``.
    module: the module that package provides.
    return_range: (lowest, highest) return of one episode, from the env's code.
    reference: published figures, model -> (value, source with table number); empty where
        none could be consulted.
    """

    name: str
    env: str
    options: dict[str, Any]
    package: str
    module: str
    return_range: tuple[float, float]
    reference: dict[str, tuple[float, str]] = field(default_factory=dict)

    def available(self) -> bool:
        """Whether the package this env needs is installed."""
        return importlib.util.find_spec(self.module) is not None


def _popgym(name: str, env_id: str, return_range: tuple[float, float]) -> SuiteEnv:
    return SuiteEnv(name, "gym", {"id": f"popgym:{env_id}"}, "popgym", "popgym", return_range)


def _memory_len(length: int, index: int) -> SuiteEnv:
    # bsuite/experiments/memory_len/sweep.py: SETTINGS[index] has memory_length = length.
    # One reward per episode, +1 for the right bit and -1 otherwise (environments/memory_chain.py).
    return SuiteEnv(f"memory_len_{length}", "gym", {"id": f"bsuite/memory_len/{index}"}, "bsuite", "bsuite",
                    (-1.0, 1.0))


SUITES: dict[str, tuple[SuiteEnv, ...]] = {
    # Returns from popgym 1.0.7: RepeatPrevious scores +-1/(52 - k) per step after the first k,
    # Autoencode +-1/52 per recalled card, CountRecall +-1/51 per step (envs/*.py), so each
    # lies in [-1, 1]; Stateless CartPole pays 1/200 per step survived, in [0, 1].
    "popgym": (
        _popgym("RepeatPreviousEasy", "popgym-RepeatPreviousEasy-v0", (-1.0, 1.0)),
        _popgym("AutoencodeEasy", "popgym-AutoencodeEasy-v0", (-1.0, 1.0)),
        _popgym("CountRecallEasy", "popgym-CountRecallEasy-v0", (-1.0, 1.0)),
        _popgym("StatelessCartPoleEasy", "popgym-PositionOnlyCartPoleEasy-v0", (0.0, 1.0)),
    ),
    # The other Easy envs with discrete actions (Pendulum's are continuous), each normalised to
    # [-1, 1] by POPGym (MultiarmedBandit +-1/length per pull, Battleship and MineSweeper +1 for a
    # whole game won) or to [0, 1] (the CartPoles, 1/200 per step survived). For Battleship [-1, 1]
    # is POPGym's nominal range: a game of misses only scores -64/52 = -1.23, which no run comes
    # near (random play: -0.42).
    "popgym_more": tuple(_popgym(name, f"popgym-{name}-v0", (0.0, 1.0) if "Cart" in name else (-1.0, 1.0))
                         for name in ("RepeatFirstEasy", "MultiarmedBanditEasy", "HigherLowerEasy", "ConcentrationEasy",
                                      "BattleshipEasy", "MineSweeperEasy", "VelocityOnlyCartpoleEasy",
                                      "NoisyPositionOnlyCartPoleEasy")),
    # Medium variants: longer decks and counts than the Easy ones of the same env.
    "popgym_medium": tuple(_popgym(name, f"popgym-{name}-v0", (-1.0, 1.0))
                           for name in ("RepeatPreviousMedium", "CountRecallMedium", "RepeatFirstMedium",
                                        "AutoencodeMedium")),
    "bsuite": (_memory_len(3, 2), _memory_len(10, 9), _memory_len(30, 15), _memory_len(60, 18), _memory_len(100, 22)),
    # MiniGrid pays 1 - 0.9 * steps / max_steps on success and 0 otherwise (minigrid_env.py, _reward).
    # Its view is one-hot (MiniGrid's own wrapper): the answer is an XOR of two cells, key or ball, which
    # no agent learned from the raw codes 5 and 6 (docs/memory_benchmarks.md, MemoryS7).
    "minigrid": (SuiteEnv("MemoryS7", "gym", {"id": "minigrid:MiniGrid-MemoryS7-v0",
                                              "wrappers": ("minigrid.wrappers:OneHotPartialObsWrapper",)},
                          "minigrid", "minigrid", (0.0, 1.0)),),
    # Mortar Mayhem Grid pays 0.1 per command carried out, 10 commands by default (mortar_mayhem_grid.py).
    "memorygym": (SuiteEnv("MortarMayhemGrid", "gym", {"id": "memory_gym:MortarMayhem-Grid-v0"}, "memory-gym",
                           "memory_gym", (0.0, 1.0)),),
}


# The defaults of memory.yaml and train.yaml are chosen on TRAINING_ENVS and reported on
# HELD_OUT_ENVS, which played no part in choosing them (issue 42; docs/memory_benchmarks.md).
TRAINING_ENVS = ("popgym/RepeatPreviousEasy", "popgym/AutoencodeEasy", "popgym/CountRecallEasy",
                 "popgym/StatelessCartPoleEasy", "popgym_more/RepeatFirstEasy", "popgym_more/MultiarmedBanditEasy",
                 "bsuite/memory_len_10", "bsuite/memory_len_30")
HELD_OUT_ENVS = ("popgym_more/HigherLowerEasy", "popgym_more/ConcentrationEasy", "popgym_more/BattleshipEasy",
                 "popgym_more/MineSweeperEasy", "popgym_more/NoisyPositionOnlyCartPoleEasy",
                 "popgym_more/VelocityOnlyCartpoleEasy", "popgym_medium/RepeatPreviousMedium",
                 "popgym_medium/CountRecallMedium")


# The families of the envs that chose memory.yaml's defaults (TRAINING_ENVS) and report them
# (HELD_OUT_ENVS): POPGym's envs and bsuite's memory experiments, listed by a suite or not.
# launch/train.py trains one without Box actions on memory.yaml's recipe (issue 74). MiniGrid's and
# Memory Gym's are not among them: MemoryS7 learns only with its own preset (memory.yaml).
MEMORY_FAMILIES = ("popgym:", "bsuite/memory_len/", "bsuite/memory_size/")


def memory_family(env_id: str | None) -> bool:
    """Whether the Gymnasium id ``env_id`` is of a family of :data:`MEMORY_FAMILIES`."""
    return env_id is not None and env_id.startswith(MEMORY_FAMILIES)


def suite(name: str) -> tuple[SuiteEnv, ...]:
    """The envs of suite ``name``; ``ValueError`` listing the suites for an unknown one."""
    check_choice(name, SUITES, kind="suite")
    return SUITES[name]


def suite_env(key: str) -> tuple[str, SuiteEnv]:
    """(suite, its entry) of ``<suite>/<env>``; ``ValueError`` naming the suite's envs (or the
    suites) if there is no such env."""
    suite, _, name = key.partition("/")
    if suite not in SUITES:
        raise ValueError(f"no suite {suite!r}; valid suites: {', '.join(SUITES)}")
    entries = {e.name: e for e in SUITES[suite]}
    if name not in entries:
        raise ValueError(f"{suite} has no env {name!r}; its envs: {', '.join(entries)}")
    return suite, entries[name]


def mmer(curves: Sequence[Sequence[float]], return_range: tuple[float, float]) -> float:
    """POPGym's max-mean episodic return (Morad et al. 2023, §5), normalised to [0, 1].

    ``curves[r]`` is run r's learning curve: its mean episodic return at each evaluation
    point (each training epoch, or each window of recent episodes). MMER takes each run's
    maximum over its curve, averages the maxima over runs, and maps ``return_range``
    (lowest, highest) linearly onto [0, 1].
    """
    low, high = return_range
    if not high > low:
        raise ValueError(f"return_range must be (low, high) with high > low, got {return_range}")
    if len(curves) == 0 or any(len(c) == 0 for c in curves):
        raise ValueError("mmer needs at least one run, each with at least one point")
    best = np.array([np.max(np.asarray(c, np.float64)) for c in curves])
    if not np.isfinite(best).all() or (best < low).any() or (best > high).any():
        raise ValueError(f"run maxima {best.tolist()} lie outside the return range {return_range}")
    return float((best.mean() - low) / (high - low))
