"""launch/bench.py runs end to end on small settings (its figures are benchmarks, not tested)."""
from __future__ import annotations

import re

import pytest

from agents.errors import UserError
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


def test_the_inference_bench_times_only_the_modes_asked_with_the_flags_given(capsys):
    """``--modes zero-cost`` times the raw envs and the zero-cost server only; ``--flags`` reach
    the entry point's config (a bad one is refused as on the command line)."""
    bench.main(["inference", "--env", "maze", "--num-actors", "1", "--envs-per-actor", "4", "--unroll", "4",
                "--seconds", "0.3", "--reps", "1", "--splits", "1", "--modes", "zero-cost",
                "--flags", "--env.size", "7"])
    out = capsys.readouterr().out
    assert re.search(r"^raw envs\s+\d+", out, re.M) and re.search(r"^server, zero-cost, 1 split\s+\d+", out, re.M)
    assert "actor mode" not in out and "server mode" not in out
    assert re.search(r"^server, zero-cost, 1 split\s+\d+\s+[\d.]+\s+nan$", out, re.M)  # no actor mode to compare with
    with pytest.raises((SystemExit, UserError)):
        bench.main(["inference", "--env", "maze", "--modes", "zero-cost", "--flags", "--env.no_such_option", "1"])
