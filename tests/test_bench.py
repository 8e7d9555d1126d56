"""launch/bench.py runs end to end on small settings (its figures are benchmarks, not tested)."""
from __future__ import annotations

import re

from launch import bench


def test_the_inference_bench_times_every_mode_the_zero_cost_server_included(capsys):
    """The zero-cost policy stands in for the network in server mode: it must offer what the
    server asks of a policy (the GPU session's first step runs it)."""
    bench.main(["inference", "--env", "maze", "--core", "lstm", "--num-actors", "1", "--envs-per-actor", "4",
                "--unroll", "4", "--seconds", "0.3", "--reps", "1", "--splits", "1"])
    out = capsys.readouterr().out
    for mode in ("raw envs", "actor mode", "server mode, 1 split", "server, zero-cost, 1 split"):
        row = re.search(rf"^{re.escape(mode)}\s+(\d+)", out, re.M)
        assert row and int(row.group(1)) > 0, mode
