"""The errors a command reports to its user as one line, with an exit code.

Every :class:`UserError` carries a one-line message that says what went wrong and what to do,
and an ``exit_code``: 2 for usage errors (the command line or config asks for something that
cannot be done), 1 for runtime failures (the disk, a checkpoint, a process). Entry points catch
``UserError``, print ``<label>: <message>`` (``error``, or ``config error`` for a bad config)
and exit with ``exit_code``; anything else is a bug and keeps its traceback
(:func:`exit_on_error`).
"""
from __future__ import annotations

import os
import sys
from typing import Callable, TypeVar

R = TypeVar("R")


class UserError(Exception):
    """An error reported as one line (``str(error)``) and exit code ``exit_code``, no traceback.

    Line breaks in ``message`` become spaces. ``details`` may hold more (e.g. a crashed actor's
    traceback) for a ``--debug`` printout.
    """

    exit_code = 1
    label = "error"

    def __init__(self, message: str, details: str = ""):
        super().__init__(" ".join(message.splitlines()))
        self.details = details


class UsageError(UserError):
    """The command line or config asks for something that cannot be done (exit code 2)."""

    exit_code = 2


class RunFailure(UserError):
    """The run could not go on: the disk, a checkpoint or a process failed (exit code 1)."""


class ConfigMismatchError(UsageError, ValueError):
    """The run directory's checkpoint was written under other settings than the command's."""


class WriteFailure(RunFailure):
    """A checkpoint or log could not be written (disk full, read-only, not a directory, ...)."""


class CheckpointError(RunFailure):
    """A checkpoint cannot be used (base of the checkpoint errors below)."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint file is empty, truncated, corrupt or unreadable."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint file names something other than plain data (a crafted pickle that would run
    code); it is refused unread."""


class NonFiniteStateError(CheckpointError):
    """A model or optimiser state holds NaN or infinite values (never saved, never resumed)."""


class NoGoodCheckpointError(CheckpointError):
    """A run directory holds checkpoints, but none is readable and finite."""


class NonFinitePolicyError(RunFailure):
    """The policy's logits are NaN or infinite: its weights or its memory diverged."""


class ActorError(RunFailure):
    """An actor process crashed or died; ``details`` holds its traceback if it had one."""


class ConfigError(UsageError, ValueError):
    """A config file, flag or value that cannot be used; nothing has been written yet."""

    label = "config error"


def exit_on_error(run: Callable[[], R], debug: bool | None = None) -> R:
    """``run()``; a :class:`agents.errors.UserError` prints its one line on stderr and exits with its code
    (2 for bad input, 1 for a runtime failure). ``--debug`` on the command line, or the environment
    variable ``DELTABEAST_DEBUG=1``, re-raises it with the traceback."""
    debug = debug if debug is not None else os.environ.get("DELTABEAST_DEBUG", "") not in ("", "0")
    try:
        return run()
    except UserError as e:
        if debug:
            raise
        print(f"{e.label}: {e}", file=sys.stderr)
        raise SystemExit(e.exit_code) from None
