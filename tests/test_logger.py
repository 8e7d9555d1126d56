"""The run logger: CSV rows with a growing header, resume truncation, progress line."""
from __future__ import annotations

import io
import math

import pytest

from agents.errors import WriteFailure
from agents.learning.logger import Logger, RecentMean, read_csv


def test_csv_grows_and_resume_drops_later_rows(tmp_path):
    out = io.StringIO()
    log = Logger(str(tmp_path), tensorboard=False, stream=out)
    log.log(10, {"loss": 1.0})
    log.log(20, {"loss": 0.5, "mean_return": 9.0})
    log.log(30, {"loss": 0.25, "mean_return": 12.0})
    log.progress(30, {"SPS": 12345.6, "loss": 0.25}, force=True)
    log.close()
    rows = read_csv(str(tmp_path / "logs.csv"))
    assert [r["step"] for r in rows] == [10, 20, 30] and math.isnan(rows[0]["mean_return"])
    assert "step 30 | SPS 12,346 | loss 0.25" in out.getvalue()
    Logger(str(tmp_path), resume_step=20, tensorboard=False).log(25, {"loss": 0.4})
    assert [r["step"] for r in read_csv(str(tmp_path / "logs.csv"))] == [10, 20, 25]


def test_the_progress_line_shows_a_dash_until_there_is_a_return(tmp_path):
    """A short run's line before any episode ended read ``mean_return nan``; the CSV keeps nan."""
    out = io.StringIO()
    log = Logger(str(tmp_path), tensorboard=False, stream=out)
    log.log(10, {"mean_return": math.nan})
    log.progress(10, {"sps": 1000.0, "mean_return": math.nan, "episodes": 0}, force=True)
    log.close()
    assert out.getvalue() == "step 10 | sps 1000 | mean_return — | episodes 0\n"
    log.progress(20, {"loss": math.nan, "mean_return": 1.5}, force=True)  # a NaN loss stays visible
    assert out.getvalue().endswith("step 20 | loss nan | mean_return 1.5\n")
    assert math.isnan(read_csv(str(tmp_path / "logs.csv"))[0]["mean_return"])


def test_recent_mean():
    m = RecentMean(window=2)
    assert math.isnan(m.mean())
    m.extend([1.0, 2.0, 4.0])
    assert m.mean() == 3.0 and len(m) == 2


def _lines(path):
    with open(path, "rb") as f:
        return f.read().splitlines(keepends=True)


def test_resume_keeps_the_history_byte_identical(tmp_path):
    """Rows up to the resume step keep their text (ints, empty cells), also when the header grows."""
    log = Logger(str(tmp_path), tensorboard=False)
    for step in (2560, 5120, 7680, 10240):
        log.log(step, {"loss": 0.5 / step, **({"mean_return": 3.0} if step in (5120, 10240) else {})})
    log.close()
    before = _lines(tmp_path / "logs.csv")
    assert before[0] == b"step,time,loss,mean_return\r\n"
    assert before[1].startswith(b"2560,") and before[1].count(b",") == 2  # written before mean_return appeared
    assert before[3].startswith(b"7680,") and before[3].endswith(b",\r\n")  # mean_return missing: an empty cell

    log = Logger(str(tmp_path), resume_step=5120, tensorboard=False)
    assert _lines(tmp_path / "logs.csv") == before[:3]  # the rows past 5120 are dropped, the rest untouched
    log.log(7680, {"loss": 1.0, "mean_return": 4.0, "grad_norm": 2.0})  # a new key: the header grows
    after = _lines(tmp_path / "logs.csv")
    assert after[0] == b"step,time,loss,mean_return,grad_norm\r\n" and after[1:3] == before[1:3]
    assert after[3].startswith(b"7680,")
    rows = read_csv(str(tmp_path / "logs.csv"))
    assert [r["step"] for r in rows] == [2560, 5120, 7680] and math.isnan(rows[0]["grad_norm"])
    assert rows[2]["time"] >= rows[1]["time"]


def test_non_finite_values_are_written_as_text_and_a_torn_last_line_is_dropped(tmp_path):
    log = Logger(str(tmp_path), tensorboard=False)
    log.log(1, {"loss": math.nan, "grad_norm": math.inf})
    log.log(2, {"loss": 1.0, "grad_norm": 1.0})
    with open(tmp_path / "logs.csv", "a") as f:
        f.write("3,0.1,2.0")  # a write cut short (disk full, kill -9)
    lines = _lines(tmp_path / "logs.csv")
    assert lines[1].endswith(b",nan,inf\r\n")
    Logger(str(tmp_path), resume_step=3, tensorboard=False).log(3, {"loss": 0.5, "grad_norm": 1.0})
    after = _lines(tmp_path / "logs.csv")
    assert after[:3] == lines[:3] and after[3].startswith(b"3,") and len(after) == 4


def test_a_full_disk_is_one_line_and_leaves_the_log_as_it_was(tiny_tmpfs):
    log = Logger(str(tiny_tmpfs), tensorboard=False)
    metrics = {f"metric_{i}": 0.123456789 for i in range(400)}  # a row of ~6 KB: more than a page
    log.log(1, metrics)
    with open(tiny_tmpfs / "filler", "wb", buffering=0) as f, pytest.raises(OSError, match="No space left"):
        while True:
            f.write(b"x" * 4096)
    before = (tiny_tmpfs / "logs.csv").read_bytes()
    with pytest.raises(WriteFailure, match=r"^cannot write the log to .*tiny: no space left on device "
                                           r"\(the previous log is intact\); free some space"):
        log.log(2, metrics)
    assert (tiny_tmpfs / "logs.csv").read_bytes() == before


def _tensorboard_steps(run_dir, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tb"))
    events.Reload()
    return [e.step for e in events.Scalars(tag)]


def test_tensorboard_gets_a_row_per_interval_and_the_last_one(tmp_path):
    """With ``tensorboard_every_s`` TensorBoard gets the first row, then none until the interval
    has passed, and the last row on close; the CSV gets every row."""
    log = Logger(str(tmp_path), tensorboard=True, tensorboard_every_s=3600.0)
    for step in (10, 20, 30, 40):
        log.log(step, {"loss": 1.0 / step})
    log.close()
    assert _tensorboard_steps(tmp_path, "loss") == [10, 40]
    assert [r["step"] for r in read_csv(str(tmp_path / "logs.csv"))] == [10, 20, 30, 40]
    every = tmp_path / "every"
    log = Logger(str(every), tensorboard=True)  # the default: every row
    for step in (10, 20, 30):
        log.log(step, {"loss": 1.0 / step})
    log.close()
    assert _tensorboard_steps(every, "loss") == [10, 20, 30]
