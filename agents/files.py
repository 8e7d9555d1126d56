"""Atomic file writes: a file is written to a temporary file beside it, flushed and fsynced,
then renamed over it (``os.replace``, atomic on POSIX) and the directory fsynced, so a process
killed at any moment leaves the old file or the new one, never a torn one. A write that fails
(disk full, read-only directory, a file where a directory should be) raises a one-line
:class:`WriteFailure` that says whether the previous file is intact.
"""
from __future__ import annotations

import errno
import os
import tempfile
from typing import Any, BinaryIO, Callable

import torch

from agents.errors import WriteFailure

_UMASK = os.umask(0o022)  # read the process umask (the call sets it) ...
os.umask(_UMASK)  # ... and put it back


def _os_error(error: BaseException) -> OSError | None:
    """``error`` if it is an OSError, else the first OSError it was raised from or during
    (torch.save reports a failed write as a RuntimeError raised during the OSError), else None."""
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__ or cause.__context__
    return cause


def write_failure(error: OSError, what: str, path: str) -> WriteFailure:
    """A one-line :class:`WriteFailure` for ``error`` raised while writing ``what`` (e.g. "the
    checkpoint") to ``path``, saying whether the previous file at ``path`` is intact."""
    code, directory = error.errno, os.path.dirname(os.path.abspath(path))
    if code in (errno.EEXIST, errno.ENOTDIR):  # a file where the directory or one of its parents should be
        blocker = directory
        while not os.path.exists(blocker):
            blocker = os.path.dirname(blocker)
        reason = f"{blocker} is not a directory"
    else:
        reason = os.strerror(code).lower() if code else str(error)
    hint = {errno.ENOSPC: "; free some space and run the same command again",
            errno.EDQUOT: "; free some space and run the same command again",
            errno.EROFS: "; make it writable or choose another run_dir",
            errno.EACCES: "; make it writable or choose another run_dir"}.get(code, "")
    noun = what.removeprefix("the ").removeprefix("a ")
    kept = f" (the previous {noun} is intact)" if os.path.isfile(path) else ""
    return WriteFailure(f"cannot write {what} to {directory}: {reason}{kept}{hint}")


def write_temp(path: str, write: Callable[[BinaryIO], Any], what: str) -> str:
    """Call ``write(f)`` on a new temporary file beside ``path``, fsync it and return its path.
    If that fails, remove it and raise a :class:`WriteFailure` about ``what``."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.splitext(path)[1])
        os.fchmod(fd, 0o666 & ~_UMASK)  # as open() would create it (mkstemp makes it private)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        return tmp
    except BaseException as e:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
        cause = _os_error(e) if isinstance(e, (OSError, RuntimeError)) else None
        if cause is None:
            raise
        raise write_failure(cause, what, path) from e


def atomic_write(path: str, write: Callable[[BinaryIO], Any], what: str = "a file") -> None:
    """Call ``write(f)`` on a temporary file beside ``path``, fsync it, rename it over ``path``
    and fsync the directory: ``path`` is never left partly written. An OSError (disk full, a
    read-only directory, ...) becomes a one-line :class:`WriteFailure` about ``what``."""
    tmp = write_temp(path, write, what)
    try:
        os.replace(tmp, path)
        fsync_dir(os.path.dirname(tmp))
    except OSError as e:
        raise write_failure(e, what, path) from e
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def fsync_dir(directory: str) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_save(obj: Any, path: str, what: str = "a file") -> None:
    """``torch.save(obj, path)`` such that ``path`` is never left partly written."""
    atomic_write(path, lambda f: torch.save(obj, f), what)


def atomic_write_text(path: str, text: str, what: str = "a file") -> None:
    """Write ``text`` (UTF-8) to ``path`` such that ``path`` is never left partly written."""
    atomic_write(path, lambda f: f.write(text.encode("utf-8")), what)
