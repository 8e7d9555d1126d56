"""Scores of learning curves: a curve's value at a step, and issue 42's score of a recipe over a set
of memory-suite envs (the median across the envs of its normalised return). Shared by
``launch/bench.py peers`` (launch/peers.py) and the core study of launch/sweep.py.

A run here is a dict with ``curve``, its (step, mean return) points, and ``steps``, how far it ran.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from envs.suites import suite_env

CHECKPOINTS = (100_000, 250_000, 500_000, 1_000_000)


def at_step(curve: list[tuple[int, float]], step: int) -> float:
    """The curve's value at ``step``: its last point at or before it (NaN before the first)."""
    values = [v for s, v in curve if s <= step]
    return values[-1] if values else math.nan


def seed_values(runs: list[dict[str, Any]], step: int) -> list[float]:
    """Each run's return at ``step``, for the runs that reached it."""
    return [at_step([tuple(p) for p in r["curve"]], step) for r in runs if r["steps"] >= step]


def normalised_returns(runs_by_env: dict[str, dict[str, list[dict[str, Any]]]],
                       steps: Sequence[int]) -> dict[str, dict[str, list[float]]]:
    """Each label's normalised return on each env of ``runs_by_env`` (env -> label -> the label's
    runs on it), as label -> env -> one value per step of ``steps``: the median over its seeds of the
    return at the step (:func:`seed_values`) mapped from the env's return range (:mod:`envs.suites`)
    onto [0, 1]; NaN where no seed has reached the step."""
    by_label: dict[str, dict[str, list[float]]] = {}
    for env, runs_by_label in runs_by_env.items():
        low, high = suite_env(env)[1].return_range
        for label, runs in runs_by_label.items():
            medians = [statistics.median(v) if (v := seed_values(runs, step)) else math.nan for step in steps]
            by_label.setdefault(label, {})[env] = [(m - low) / (high - low) for m in medians]
    return by_label


def median_normalised_returns(runs_by_env: dict[str, dict[str, list[dict[str, Any]]]],
                              steps: Sequence[int]) -> dict[str, list[float]]:
    """Issue 42's score of each label (an algorithm, a core) over the memory-suite envs of
    ``runs_by_env`` (env -> label -> the label's runs on it): :func:`medians_across_envs` of its
    :func:`normalised_returns`."""
    return medians_across_envs(normalised_returns(runs_by_env, steps), num_envs=len(runs_by_env))


def medians_across_envs(by_label: dict[str, dict[str, list[float]]], *, num_envs: int) -> dict[str, list[float]]:
    """At each step, the median across the envs of each label's normalised return (``by_label`` as
    :func:`normalised_returns` gives it); NaN where no env has a value yet. Only the labels on all
    ``num_envs`` envs are scored."""
    return {label: [statistics.median(finite) if (finite := [v for v in column if math.isfinite(v)])
                    else math.nan for column in zip(*by_env.values())]
            for label, by_env in by_label.items() if len(by_env) == num_envs}
