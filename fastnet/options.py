"""Names and keyword options checked against what a builder accepts: the one check of each kind
behind the registries (cores, envs, tasks and their splits, stems, suites, update rules, feature
maps), so every unknown name or option gets the same line."""
from __future__ import annotations

from collections.abc import Collection
from typing import Any, Iterable


def unknown_choice(name: Any, valid: Collection[str], *, kind: str) -> str | None:
    """None if ``name`` is one of ``valid``; else the line naming it and the valid ones
    ("unknown core 'x'; valid cores: lstm, delta, ..."). Cheap when it is: sequence ops call it
    on every forward."""
    return None if name in valid else f"unknown {kind} {name!r}; valid {kind}s: {', '.join(valid)}"


def check_choice(name: Any, valid: Collection[str], *, kind: str) -> None:
    """ValueError with :func:`unknown_choice`'s line unless ``name`` is one of ``valid``."""
    if problem := unknown_choice(name, valid, kind=kind):
        raise ValueError(problem)


def check_options(options: dict[str, Any], valid: Iterable[str], *, kind: str, name: str) -> None:
    """ValueError naming the first unknown key of ``options`` and the ``valid`` ones
    ("unknown option 'x' for core 'delta'; valid options: ...")."""
    valid = list(valid)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r} for {kind} {name!r}; valid options: {', '.join(valid)}")
