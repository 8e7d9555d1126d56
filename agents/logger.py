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

from agents.checkpoint import atomic_write_text

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

    Every row has ``step`` (the x axis, e.g. environment steps) and ``time`` (seconds since the
    logger opened, plus the ``time`` of the last kept row when resuming).
    """

    def __init__(self, run_dir: str, resume_step: int = 0, tensorboard: bool = True,
                 print_every_s: float = 5.0, stream: TextIO = sys.stdout):
        os.makedirs(run_dir, exist_ok=True)
        self.path = os.path.join(run_dir, CSV_NAME)
        self.rows = read_csv(self.path) if os.path.exists(self.path) else []
        self.rows = [r for r in self.rows if float(r["step"]) <= resume_step]
        self.fields = list(self.rows[0].keys()) if self.rows else ["step", "time"]
        self.time_offset = float(self.rows[-1]["time"]) if self.rows else 0.0
        self._rewrite()
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter
            # purge the events past resume_step, as the CSV rows (purge_step drops steps >= it)
            purge_step = resume_step + 1 if resume_step else None
            self.writer = SummaryWriter(os.path.join(run_dir, "tb"), purge_step=purge_step)
        self.print_every_s, self.stream = print_every_s, stream
        self.start = self.last_print = time.time()

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record ``metrics`` at ``step`` in the CSV and TensorBoard."""
        row = {"step": step, "time": round(self.time_offset + time.time() - self.start, 3), **metrics}
        new = [k for k in row if k not in self.fields]
        self.fields += new
        self.rows.append(row)
        if new:
            self._rewrite()
        else:
            with open(self.path, "a", newline="") as f:
                csv.DictWriter(f, self.fields).writerow(row)
        if self.writer is not None:
            for key, value in metrics.items():
                self.writer.add_scalar(key, value, step)

    def progress(self, step: int, metrics: dict[str, float], force: bool = False) -> None:
        """Print ``step | k v | ...`` if ``print_every_s`` has passed since the last line (or ``force``)."""
        now = time.time()
        if not force and now - self.last_print < self.print_every_s:
            return
        self.last_print = now
        parts = [f"step {step:,}"] + [f"{k} {_fmt(v)}" for k, v in metrics.items()]
        print(" | ".join(parts), file=self.stream, flush=True)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

    def _rewrite(self) -> None:
        """Write the whole file anew (atomically: a kill mid-write keeps the old history)."""
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, self.fields)
        writer.writeheader()
        writer.writerows(self.rows)
        atomic_write_text(self.path, text.getvalue())


def read_csv(path: str) -> list[dict[str, Any]]:
    """The rows of a log CSV as dicts of floats (empty cells become NaN)."""
    with open(path, newline="") as f:
        return [{k: float(v) if v not in ("", None) else math.nan for k, v in row.items()}
                for row in csv.DictReader(f)]


def _fmt(value: Any) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)
