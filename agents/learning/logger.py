"""Run logs: a CSV file, TensorBoard scalars and a live progress line.

``Logger(run_dir)`` appends one CSV row per :meth:`Logger.log` call to ``run_dir/logs.csv``
(the header grows if new keys appear) and writes the same scalars to TensorBoard under
``run_dir/tb``. When a run resumes from step ``s``, rows and events past ``s`` (written
after the last checkpoint by the killed run) are dropped so the curves stay monotonic.
"""
from __future__ import annotations

import collections
import csv
import io
import math
import os
import sys
import time
from typing import Any, TextIO

from agents.errors import UsageError
from agents.files import atomic_write_text, write_failure

CSV_NAME = "logs.csv"


class RecentMean:
    """The mean of the last ``window`` values added (e.g. episode returns)."""

    def __init__(self, window: int = 100):
        self.values: collections.deque[float] = collections.deque(maxlen=window)

    def extend(self, values: Any) -> None:
        self.values.extend(float(v) for v in values)

    def mean(self) -> float:
        return sum(self.values) / len(self.values) if self.values else math.nan

    def __len__(self) -> int:
        return len(self.values)


class Logger:
    """CSV + TensorBoard + a progress line printed at most every ``print_every_s`` seconds.

    The CSV gets every row; TensorBoard a row at most every ``tensorboard_every_s`` seconds (and
    the last one on :meth:`close`): its ``add_scalar`` costs ~0.1 ms a value, so a row of the
    maze's (11 values, 1.15 ms) added almost half to each of its ~2.5 ms updates.

    Every row has ``step`` (the x axis, e.g. environment steps) and ``time`` (seconds since the
    logger opened, plus the ``time`` of the last kept row when resuming). The CSV text of the
    rows kept on resuming is never rewritten: they stay byte for byte as first written. When a
    new key appears, only the header line grows; older rows keep their fewer cells (CSV readers
    read the missing trailing cells as empty). Non-finite values are written as ``nan``/``inf``.
    """

    def __init__(self, run_dir: str, resume_step: int = 0, tensorboard: bool = True,
                 print_every_s: float = 5.0, tensorboard_every_s: float = 0.0, stream: TextIO = sys.stdout):
        self.path = os.path.join(run_dir, CSV_NAME)
        self.fields, self.lines, self.time_offset, intact = _kept_history(self.path, resume_step)
        if not intact:
            self._rewrite()
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter
            # purge the events past resume_step, as the CSV rows (purge_step drops steps >= it)
            purge_step = resume_step + 1 if resume_step else None
            self.writer = SummaryWriter(os.path.join(run_dir, "tb"), purge_step=purge_step)
        self.print_every_s, self.stream, self.tensorboard_every_s = print_every_s, stream, tensorboard_every_s
        self.start = self.last_print = time.time()
        self.last_tensorboard, self.unwritten = -math.inf, None  # the time of the last row there; a row since

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record ``metrics`` at ``step`` in the CSV and TensorBoard."""
        row = {"step": step, "time": round(self.time_offset + time.time() - self.start, 3), **metrics}
        new = [k for k in row if k not in self.fields]
        self.fields += new
        line = _csv_line([row.get(k, "") for k in self.fields])
        self.lines.append(line)
        if new:
            self._rewrite()
        else:
            self._append(line)
        if self.writer is not None:
            self.unwritten = (step, metrics)
            if time.time() - self.last_tensorboard >= self.tensorboard_every_s:
                self._write_tensorboard()

    def progress(self, step: int, metrics: dict[str, float], force: bool = False) -> None:
        """Print ``step | k v | ...`` if ``print_every_s`` has passed since the last line (or ``force``)."""
        now = time.time()
        if not force and now - self.last_print < self.print_every_s:
            return
        self.last_print = now
        parts = [f"step {step:,}"] + [f"{k} {'—' if k == 'mean_return' and v != v else _fmt(v)}"  # no episode yet
                                      for k, v in metrics.items()]
        print(" | ".join(parts), file=self.stream, flush=True)

    def close(self) -> None:
        if self.writer is not None:
            self._write_tensorboard()
            self.writer.close()

    def _write_tensorboard(self) -> None:
        """Write the last row logged, unless it is there already."""
        if self.unwritten is not None:
            step, metrics = self.unwritten
            for key, value in metrics.items():
                self.writer.add_scalar(key, value, step)
            self.last_tensorboard, self.unwritten = time.time(), None

    def _append(self, line: str) -> None:
        """Append ``line`` to the CSV; if that fails (disk full), cut off what part of it was written."""
        with open(self.path, "ab", buffering=0) as f:
            end = f.tell()
            data = memoryview(line.encode("utf-8"))
            try:
                while data:
                    data = data[f.write(data):]
            except OSError as e:
                f.truncate(end)
                raise write_failure(e, "the log", self.path) from e

    def _rewrite(self) -> None:
        """Write the header and the rows' lines anew (atomically: a kill mid-write keeps the old history)."""
        atomic_write_text(self.path, _csv_line(self.fields) + "".join(self.lines), what="the log")


def _csv_line(cells: list[Any]) -> str:
    """One CSV line as ``csv.writer`` writes it (with its ``\\r\\n`` ending)."""
    text = io.StringIO(newline="")
    csv.writer(text).writerow(cells)
    return text.getvalue()


def _kept_history(path: str, resume_step: int) -> tuple[list[str], list[str], float, bool]:
    """(header fields, lines of the rows at steps <= ``resume_step`` as written, the ``time`` of
    the last of them, whether the file holds exactly these) for the log at ``path``.

    A last line without its line ending (a write cut short by a full disk) is dropped too.
    """
    if not os.path.exists(path):
        return ["step", "time"], [], 0.0, False
    with open(path, newline="") as f:
        text = f.read()
    lines = [line for line in io.StringIO(text, newline="") if line.endswith("\n")]
    if not lines:
        return ["step", "time"], [], 0.0, False
    fields = next(csv.reader(lines[:1]))
    step_at, time_at = fields.index("step"), fields.index("time")
    kept, last_time = [], 0.0
    for line, cells in zip(lines[1:], csv.reader(lines[1:])):
        if float(cells[step_at]) <= resume_step:
            kept.append(line)
            last_time = float(cells[time_at])
    return fields, kept, last_time, "".join([lines[0], *kept]) == text


def read_csv(path: str) -> list[dict[str, Any]]:
    """The rows of a log CSV as dicts of floats (empty cells become NaN)."""
    with open(path, newline="") as f:
        return [{k: float(v) if v not in ("", None) else math.nan for k, v in row.items()}
                for row in csv.DictReader(f)]


def read_run_log(run: str) -> tuple[str, list[dict[str, Any]]]:
    """(label, rows) of a run directory's ``logs.csv`` or of a CSV file; the label is the run
    directory's name (the file's, for a CSV file elsewhere). A path that holds no log is a
    :class:`agents.errors.UsageError`."""
    path = os.path.join(run, CSV_NAME) if os.path.isdir(run) else run
    if not os.path.isfile(path):
        raise UsageError(f"{run}: no such run directory or CSV file" if not os.path.exists(run)
                         else f"{run} holds no {CSV_NAME} (has the run logged anything yet?)")
    label = os.path.basename(os.path.dirname(os.path.abspath(path)) if os.path.basename(path) == CSV_NAME else path)
    return label, read_csv(path)


def check_metrics(metrics: list[str], logs: list[list[dict[str, Any]]]) -> None:
    """:class:`agents.errors.UsageError` if no log (a list of rows) of ``logs`` has a column of
    ``metrics``, naming the columns they have."""
    columns = {k for rows in logs for row in rows for k in row}
    if unknown := [m for m in metrics if m not in columns]:
        raise UsageError(f"--metric: no run logged {', '.join(unknown)}; the logs have "
                         f"{', '.join(sorted(columns - {'step', 'time'}))}")


def _fmt(value: Any) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)
