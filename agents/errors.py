"""Errors a user can cause, each with one line of message and an exit code.

The entry points print ``<label>: <message>`` on stderr and exit with ``exit_code`` (2 for bad
input, 1 for a run that failed), with no traceback unless ``--debug`` or ``DELTABEAST_DEBUG=1``
asks for one (:func:`agents.config.exit_on_error`).
"""
from __future__ import annotations


class UserError(Exception):
    """A failure the user can act on; ``str(error)`` is one line that says what to do."""

    exit_code = 1
    label = "error"


class ConfigError(UserError, ValueError):
    """A config file, flag or value that cannot be used; nothing has been written yet."""

    exit_code = 2
    label = "config error"
