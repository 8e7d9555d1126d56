"""The run logger: CSV rows with a growing header, resume truncation, progress line."""
from __future__ import annotations

import io
import math

from agents.logger import Logger, RecentMean, read_csv


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


def test_recent_mean():
    m = RecentMean(window=2)
    assert math.isnan(m.mean())
    m.extend([1.0, 2.0, 4.0])
    assert m.mean() == 3.0 and len(m) == 2
