"""Atomic checkpoints: the model, optimiser, scheduler, step counters and config in one file.

A checkpoint is written atomically (:mod:`agents.files`): a process killed at any moment
leaves either the previous checkpoint or the new one, never a torn file. The ``keep - 1``
checkpoints before the latest stay as ``checkpoint.prev1.pt`` (the one before),
``checkpoint.prev2.pt``, ...; milestones are extra copies named ``checkpoint-<step>.pt``. Both
are hard links where the file system has them.

A checkpoint is data, never code: it holds only tensors, numbers, strings, None and dicts,
lists and tuples of them, and is read with ``torch.load(..., weights_only=True)``, whose
unpickler builds nothing else and calls no function. A file that names anything else (a
crafted pickle whose ``__reduce__`` would run a command) is refused without being executed.
Checkpoints of older versions, whose optimiser settings were jsonargparse's number types,
read those back as plain numbers; anything else they hold takes a knowing
``python launch/convert_checkpoint.py FILE``.

A state with NaN or infinite values is never saved (:class:`NonFiniteStateError`), and
:func:`load_latest_good` resumes from the newest checkpoint that is readable and finite. A
write that fails (disk full, read-only directory) raises :class:`WriteFailure` with one line.
"""
from __future__ import annotations

import collections
import dataclasses
import errno
import glob
import os
import re
import shutil
import sys
import warnings
from typing import Any, Callable, Iterator

import torch
from torch import nn

from agents.config import plain, rename_keys
from agents.errors import (
    CheckpointError,
    ConfigMismatchError,
    CorruptCheckpointError,
    NoGoodCheckpointError,
    NonFiniteStateError,
    UnsafeCheckpointError,
    UsageError,
)
from agents.files import atomic_write, fsync_dir, write_failure, write_temp

LATEST = "checkpoint.pt"
_MILESTONE = re.compile(r"checkpoint-(\d+)\.pt$")
_PREVIOUS = re.compile(r"checkpoint\.prev(\d+)\.pt$")
# Older versions saved the optimiser's settings as jsonargparse's restricted numbers, float and int
# subclasses; reading their names as the built-in float and int keeps those checkpoints loadable
# without letting the unpickler build anything but a number.
LEGACY_NUMBERS = [(float, f"jsonargparse.typing.{name}") for name in
                  ("PositiveFloat", "NonNegativeFloat", "ClosedUnitInterval", "OpenUnitInterval")] + \
                 [(int, f"jsonargparse.typing.{name}") for name in ("PositiveInt", "NonNegativeInt")]
CONVERT = "python launch/convert_checkpoint.py"


def _link(source: str, target: str) -> None:
    """Make ``target`` a hard link to ``source`` (replacing it atomically), or an atomic copy
    where the file system has no hard links."""
    tmp = os.path.join(os.path.dirname(target), f".tmp-link-{os.getpid()}.pt")
    try:
        os.link(source, tmp)
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        with open(source, "rb") as src:
            atomic_write(target, lambda f: shutil.copyfileobj(src, f), "the checkpoint")
        return
    os.replace(tmp, target)


def non_finite(state: Any, prefix: str = "") -> list[str]:
    """The dotted names of the floating-point tensors in ``state`` (nested dicts, lists and
    tuples, e.g. a checkpoint payload) that hold NaN or infinite values."""
    if isinstance(state, torch.Tensor):
        finite = not (state.is_floating_point() or state.is_complex()) or bool(torch.isfinite(state).all())
        return [] if finite else [prefix.rstrip(".")]
    if isinstance(state, dict):
        items = state.items()
    elif isinstance(state, (list, tuple)):
        items = enumerate(state)
    else:
        return []
    return [name for key, value in items for name in non_finite(value, f"{prefix}{key}.")]


def _names(names: list[str]) -> str:
    return names[0] + (f" (and {len(names) - 1} more)" if len(names) > 1 else "")


def plain_data(value: Any, where: str = "the checkpoint") -> Any:
    """``value`` (a checkpoint payload) as plain data: tensors, None, the built-in bool, int,
    float and str (subclasses such as jsonargparse's restricted numbers become their base), and
    dicts, lists and tuples of them; TypeError for anything else, which ``torch.load(...,
    weights_only=True)`` could not read back."""
    if value is None or type(value) in (torch.Tensor, nn.Parameter):
        return value
    for scalar in (bool, int, float, str):
        if isinstance(value, scalar):
            return scalar(value)
    if isinstance(value, (dict, list, tuple)):
        kind = type(value)
        if kind not in (dict, collections.OrderedDict, list, tuple):
            raise TypeError(f"{where} is a {kind.__name__}; a checkpoint holds only plain data")
        if isinstance(value, dict):
            out = kind((plain_data(k, where), plain_data(v, f"{where}[{k!r}]")) for k, v in value.items())
            if hasattr(value, "_metadata"):  # a state_dict's module versions
                out._metadata = value._metadata
            return out
        return kind(plain_data(v, f"{where}[{i}]") for i, v in enumerate(value))
    raise TypeError(f"{where} is a {type(value).__name__}; a checkpoint holds only tensors, numbers, strings, "
                    "None, and dicts, lists and tuples of them")


def save_checkpoint(directory: str, *, model: nn.Module, optimizer: torch.optim.Optimizer | None,
                    scheduler: Any | None, counters: dict[str, int], config: dict[str, Any],
                    milestone: bool = False, keep: int = 2, **extra: Any) -> str:
    """Write ``directory/checkpoint.pt`` (and ``checkpoint-<step>.pt`` if ``milestone``), keeping
    the ``keep - 1`` checkpoints before it as ``checkpoint.prev<i>.pt`` (i = 1 the newest).

    ``counters`` holds the step counters (at least ``step``); ``config`` the resolved config as
    a dict; ``extra`` anything else that is plain data (:func:`plain_data`). Returns the path of
    the latest checkpoint.
    Raises :class:`NonFiniteStateError` if a tensor of the state holds NaN or infinite values
    and :class:`WriteFailure` if the file cannot be written; either way ``checkpoint.pt`` stays
    as it was.
    """
    if keep < 1:
        raise UsageError(f"checkpoints to keep must be at least 1 (the latest), got {keep}")
    payload = plain_data({
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "counters": dict(counters),
        "config": config,
        **extra,
    })
    path = os.path.join(directory, LATEST)
    bad = non_finite(payload)
    if bad:
        kept = f"; {path} (the previous checkpoint) is kept" if os.path.exists(path) else ""
        raise NonFiniteStateError(f"not saving the checkpoint at step {counters['step']:,}: {_names(bad)} "
                                  f"holds NaN or infinite values (training diverged){kept}")
    for stale in glob.glob(os.path.join(directory, ".tmp-*.pt")):  # left by a killed writer
        os.remove(stale)
    written = write_temp(path, lambda f: torch.save(payload, f), "the checkpoint")
    try:
        for i, prev in sorted(_previous(directory), reverse=True):  # checkpoint.prev<i>.pt, oldest first
            if i + 1 < keep:
                os.replace(prev, _previous_path(directory, i + 1))
            else:
                os.remove(prev)
        if keep > 1 and os.path.exists(path):
            _link(path, _previous_path(directory, 1))
        os.replace(written, path)
        if milestone:
            _link(path, os.path.join(directory, f"checkpoint-{counters['step']}.pt"))
        fsync_dir(directory)
    except OSError as e:
        raise write_failure(e, "the checkpoint", path) from e
    finally:
        if os.path.exists(written):
            os.remove(written)
    return path


def _previous_path(directory: str, i: int) -> str:
    return os.path.join(directory, f"checkpoint.prev{i}.pt")


def _previous(directory: str) -> list[tuple[int, str]]:
    """(i, path) of every ``checkpoint.prev<i>.pt`` in ``directory``."""
    return [(int(m.group(1)), p) for p in glob.glob(os.path.join(directory, "checkpoint.prev*.pt"))
            if (m := _PREVIOUS.search(p))]


def checkpoints(directory: str) -> list[str]:
    """Every checkpoint in ``directory``, newest first: ``checkpoint.pt``, ``checkpoint.prev1.pt``,
    ``checkpoint.prev2.pt``, ..., then the milestones ``checkpoint-<step>.pt`` by step."""
    latest = [os.path.join(directory, LATEST)] if os.path.exists(os.path.join(directory, LATEST)) else []
    milestones = [(int(m.group(1)), p) for p in glob.glob(os.path.join(directory, "checkpoint-*.pt"))
                  if (m := _MILESTONE.search(p))]
    return latest + [p for _, p in sorted(_previous(directory))] + [p for _, p in sorted(milestones, reverse=True)]


def _settings(current: Any, saved: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(dotted key, value in ``saved``, value in the config dataclass ``current``) for every
    setting both have; config sections recurse, free-form dicts (core_options) are one value."""
    for f in dataclasses.fields(current):
        if f.name not in saved:  # a setting added after the checkpoint was written
            continue
        value = getattr(current, f.name)
        if dataclasses.is_dataclass(value) and isinstance(saved[f.name], dict):
            yield from _settings(value, saved[f.name], f"{prefix}{f.name}.")
        else:  # compared as saved: plain data (a tuple is saved as a list)
            yield f"{prefix}{f.name}", saved[f.name], plain(value)


def check_same_run(saved: dict[str, Any], current: Any, may_change: tuple[str, ...], path: str) -> None:
    """Raise :class:`ConfigMismatchError` (a ValueError) if the checkpoint at ``path`` was written
    under a config (``saved``, a dict) that differs from the config dataclass ``current`` in a
    setting outside ``may_change`` (dotted keys or whole sections, e.g. the budget or the logging).
    Resuming would otherwise mix two runs: the model, optimiser state and counters of one with
    the settings of the other."""
    sections = tuple(f"{k}." for k in may_change)
    saved = rename_keys(saved, getattr(current, "renamed", {}))  # an older version's names, as today's
    differ = [(k, old, new) for k, old, new in _settings(current, saved)
              if old != new and k not in may_change and not k.startswith(sections)]
    if differ:
        changes = "; ".join(f"{k} {old!r} -> {new!r}" for k, old, new in differ)
        raise ConfigMismatchError(f"{path} belongs to a run with other settings ({changes}): resume with the "
                                  "checkpoint's settings, or start a new run with another --run_dir "
                                  "(or --run.resume false)")


def read_checkpoint(path: str, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The payload of the checkpoint at ``path``, read as data only (``weights_only=True``).

    Raises :class:`UnsafeCheckpointError` if the file names anything but plain data (nothing in
    it is run), :class:`CorruptCheckpointError` if it is missing, a directory, empty, truncated,
    corrupt or unreadable (whatever the unpickler raises: OverflowError, MemoryError, ...), and
    :class:`NonFiniteStateError` if a tensor in it holds NaN or infinite values (as written by
    versions that saved diverged states)."""
    try:
        if os.path.isdir(path):
            raise CorruptCheckpointError(f"checkpoint {path} is a directory, not a file; move it away")
        if os.path.getsize(path) == 0:
            raise CorruptCheckpointError(f"checkpoint {path} is empty")
        with warnings.catch_warnings(), torch.serialization.safe_globals(LEGACY_NUMBERS):
            warnings.simplefilter("ignore")  # e.g. the unpickler's note on a pickle protocol it was not given
            payload = torch.load(path, map_location=map_location, weights_only=True)
    except CorruptCheckpointError:
        raise
    except Exception as e:  # a file is input: every way of failing to read it is one line
        unsafe = _unsafe_globals(path)
        if unsafe:
            raise UnsafeCheckpointError(
                f"checkpoint {path} is not plain data: it names {_listing(unsafe)}, which a checkpoint never holds, "
                f"so it was not loaded (nothing in it ran). If an older DeltaBeast wrote it and you trust the file, "
                f"convert it once with `{CONVERT} {path}`") from None
        if isinstance(e, OSError):
            reason = f"cannot be read: {os.strerror(e.errno).lower() if e.errno else e}"
        else:
            reason = f"is truncated or corrupt ({type(e).__name__}: {_first_line(e)})"
        raise CorruptCheckpointError(f"checkpoint {path} {reason}") from None
    if not isinstance(payload, dict) or "model" not in payload or "counters" not in payload:
        raise CorruptCheckpointError(f"checkpoint {path} is not a checkpoint of this toolkit (no model or counters)")
    bad = non_finite(payload)
    if bad:
        raise NonFiniteStateError(f"checkpoint {path} holds NaN or infinite values: {_names(bad)}")
    return payload


def _unsafe_globals(path: str) -> list[str]:
    """The classes and functions that the pickle in the torch file ``path`` names and
    ``weights_only`` does not allow, read without unpickling anything ([] if none, or if the
    file is not a readable torch zip file)."""
    try:
        found = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # not a zip of torch.save: corrupt, which the caller reports
        return []
    legacy = {name for _, name in LEGACY_NUMBERS}
    return [name for name in found if name not in legacy]


def _listing(names: list[str], most: int = 3) -> str:
    """"a, b, c and 2 more": the first ``most`` of ``names`` in sorted order."""
    names = sorted(names)
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _first_line(error: BaseException) -> str:
    """The gist of an error from ``torch.load``: for the weights-only unpickler, its own reason
    (e.g. "Unsupported operand 149") rather than its advice; else the first line."""
    text = str(error)
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1]
    return next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)


def _restore(payload: dict[str, Any], model: nn.Module | None, optimizer: torch.optim.Optimizer | None,
             scheduler: Any | None) -> None:
    """Load the payload's states into the given objects (those not None)."""
    if model is not None:
        model.load_state_dict(payload["model"])
    if optimizer is not None and payload["optimizer"] is not None:
        optimizer.load_state_dict(payload["optimizer"])
    if scheduler is not None and payload["scheduler"] is not None:
        scheduler.load_state_dict(payload["scheduler"])


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def load_latest_good(directory: str, model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None,
                     scheduler: Any | None = None, map_location: str | torch.device = "cpu", config: Any = None,
                     may_change: tuple[str, ...] = (),
                     warn: Callable[[str], None] = _warn) -> tuple[str, dict[str, Any]] | None:
    """Resume from the newest good checkpoint in ``directory``: the first of :func:`checkpoints`
    that :func:`read_checkpoint` finds readable and finite, its states restored into the given
    objects (with ``config``, after checking that its run had the same settings,
    ``check_same_run``). Returns (its path, its payload), or None if ``directory`` holds no
    checkpoint (a new run).

    Each checkpoint skipped is reported by ``warn`` (one line: the file and why) and renamed
    ``<name>.bad``, and the good one becomes ``checkpoint.pt`` again, so that the run's next saves
    keep it as ``checkpoint.prev1.pt``; if none is good, raises :class:`NoGoodCheckpointError` (and
    renames nothing). A checkpoint of a run with other settings raises :class:`ConfigMismatchError`
    at once (older checkpoints of that run would differ too), and a directory where a checkpoint
    should be raises :class:`CorruptCheckpointError` at once.
    """
    found = checkpoints(directory)
    if not found:
        return None
    skipped: list[tuple[str, CheckpointError]] = []
    for path in found:
        try:
            payload = read_checkpoint(path, map_location)
        except (CorruptCheckpointError, UnsafeCheckpointError, NonFiniteStateError) as e:
            if os.path.isdir(path):  # not skipped: the run could not write its next checkpoint there
                raise
            skipped.append((path, e))
            continue
        if config is not None and payload.get("config") is not None:
            check_same_run(payload["config"], config, may_change, path)
        for bad, error in skipped:  # set aside, so that the next saves' rotation cannot drop the good one for it
            try:
                os.replace(bad, bad + ".bad")
                kept = f" (kept as {os.path.basename(bad)}.bad)"
            except OSError:  # a read-only run directory: resume all the same (its next save says why it fails)
                kept = ""
            warn(f"{error}; skipping it{kept}")
        if skipped and not os.path.exists(os.path.join(directory, LATEST)):
            _link(path, os.path.join(directory, LATEST))  # the good one is the latest again
        _restore(payload, model, optimizer, scheduler)
        return path, payload
    reasons = "; ".join(str(e).replace(f"checkpoint {path} ", f"{os.path.basename(path)} ") for path, e in skipped)
    raise NoGoodCheckpointError(f"no usable checkpoint in {directory} ({reasons}); move them away to start the run "
                                "afresh, or choose another run_dir")
