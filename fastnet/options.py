"""Keyword options checked against what a builder accepts: the one check behind ``make_core``,
``agents.network.make_stem`` and ``envs.make``, so every unknown option gets the same line."""
from __future__ import annotations

from typing import Any, Iterable


def check_options(options: dict[str, Any], valid: Iterable[str], *, kind: str, name: str) -> None:
    """ValueError naming the first unknown key of ``options`` and the ``valid`` ones
    ("unknown option 'x' for core 'delta'; valid options: ...")."""
    valid = list(valid)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r} for {kind} {name!r}; valid options: {', '.join(valid)}")
