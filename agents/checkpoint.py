"""Atomic checkpoints: the model, optimiser, scheduler, step counters and config in one file.

A checkpoint is written to a temporary file in the target directory, flushed and fsynced,
then renamed over ``checkpoint.pt`` with ``os.replace`` (atomic on POSIX), and the directory
is fsynced. A process killed at any moment therefore leaves either the previous checkpoint
or the new one, never a torn file. Milestones are extra copies named ``checkpoint-<step>.pt``.
"""
from __future__ import annotations

import dataclasses
import glob
import os
import re
import tempfile
from typing import Any, BinaryIO, Callable, Iterator

import torch
from torch import nn

from agents.errors import ConfigError

LATEST = "checkpoint.pt"
_UMASK = os.umask(0o022)  # read the process umask (the call sets it) ...
os.umask(_UMASK)  # ... and put it back
_MILESTONE = re.compile(r"checkpoint-(\d+)\.pt$")


def atomic_write(path: str, write: Callable[[BinaryIO], Any]) -> None:
    """Call ``write(f)`` on a temporary file beside ``path``, fsync it, rename it over ``path``
    and fsync the directory: ``path`` is never left partly written."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.splitext(path)[1])
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # as open() would create it (mkstemp makes it private)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_save(obj: Any, path: str) -> None:
    """``torch.save(obj, path)`` such that ``path`` is never left partly written."""
    atomic_write(path, lambda f: torch.save(obj, f))


def atomic_write_text(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` such that ``path`` is never left partly written."""
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def save_checkpoint(directory: str, *, model: nn.Module, optimizer: torch.optim.Optimizer | None,
                    scheduler: Any | None, counters: dict[str, int], config: dict[str, Any],
                    milestone: bool = False, **extra: Any) -> str:
    """Write ``directory/checkpoint.pt`` (and ``checkpoint-<step>.pt`` if ``milestone``).

    ``counters`` holds the step counters (at least ``step``); ``config`` the resolved config as
    a dict; ``extra`` anything else picklable. Returns the path of the latest checkpoint.
    """
    payload = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "counters": dict(counters),
        "config": config,
        **extra,
    }
    path = os.path.join(directory, LATEST)
    atomic_save(payload, path)
    if milestone:
        atomic_save(payload, os.path.join(directory, f"checkpoint-{counters['step']}.pt"))
    for stale in glob.glob(os.path.join(directory, ".tmp-*.pt")):  # left by a killed writer
        os.remove(stale)
    return path


def latest_checkpoint(directory: str) -> str | None:
    """The newest checkpoint in ``directory``: ``checkpoint.pt``, else the highest milestone."""
    path = os.path.join(directory, LATEST)
    if os.path.isfile(path):
        return path
    milestones = [(int(m.group(1)), p) for p in glob.glob(os.path.join(directory, "checkpoint-*.pt"))
                  if (m := _MILESTONE.search(p))]
    return max(milestones)[1] if milestones else None


def _settings(current: Any, saved: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(dotted key, value in ``saved``, value in the config dataclass ``current``) for every
    setting both have; config sections recurse, free-form dicts (core_options) are one value."""
    for f in dataclasses.fields(current):
        if f.name not in saved:  # a setting added after the checkpoint was written
            continue
        value = getattr(current, f.name)
        if dataclasses.is_dataclass(value) and isinstance(saved[f.name], dict):
            yield from _settings(value, saved[f.name], f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", saved[f.name], value


def check_same_run(saved: dict[str, Any], current: Any, may_change: tuple[str, ...], path: str) -> None:
    """Raise ConfigError if the checkpoint at ``path`` was written under a config (``saved``, a
    dict) that differs from the config dataclass ``current`` in a setting outside ``may_change``
    (dotted keys or whole sections, e.g. the budget or the logging). Resuming would otherwise
    mix two runs: the model, optimiser state and counters of one with the settings of the other."""
    sections = tuple(f"{k}." for k in may_change)
    differ = [(k, old, new) for k, old, new in _settings(current, saved)
              if old != new and k not in may_change and not k.startswith(sections)]
    if differ:
        changes = "; ".join(f"{k} {old!r} -> {new!r}" for k, old, new in differ)
        raise ConfigError(f"{path} belongs to a run with other settings ({changes}): resume with the checkpoint's "
                          "settings, or start a new run with another --run_dir (or --run.resume false)")


def load_checkpoint(path: str, model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None,
                    scheduler: Any | None = None, map_location: str | torch.device = "cpu",
                    config: Any = None, may_change: tuple[str, ...] = ()) -> dict[str, Any]:
    """Load ``path``, restore the given objects' states in place, and return the payload. With
    ``config`` (a config dataclass), first check that the checkpoint's run had the same settings
    (``check_same_run``)."""
    payload = torch.load(path, map_location=map_location, weights_only=False)
    if config is not None and payload.get("config") is not None:
        check_same_run(payload["config"], config, may_change, path)
    if model is not None:
        model.load_state_dict(payload["model"])
    if optimizer is not None and payload["optimizer"] is not None:
        optimizer.load_state_dict(payload["optimizer"])
    if scheduler is not None and payload["scheduler"] is not None:
        scheduler.load_state_dict(payload["scheduler"])
    return payload
