"""launch/bench.py runs end to end on small settings (its figures are benchmarks, not tested)."""
from __future__ import annotations

import pathlib
import re
import runpy

import numpy as np
import pytest
import torch

import envs
from agents.acting.inference import InferenceServer
from agents.acting.transport import EnvSetup
from agents.config import options
from agents.errors import UserError
from launch import bench, maze


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


def test_the_serve_cost_workbench_serves_rounds_with_no_workers():
    """cuda/serve_cost.py (a step of cuda/gpu_session.sh) drives the server's loop with no env
    workers: every round must hand out full batches and leave its free groups as it found them."""
    script = pathlib.Path(__file__).parent.parent / "cuda" / "serve_cost.py"
    workbench = runpy.run_path(str(script))
    cfg = maze.load(["--num_actors", "2", "--actor.envs_per_actor", "4", "--learner.batch_size", "4",
                     "--actor.unroll_length", "3"])
    spec = envs.spec("maze", **options(cfg.env))
    setup = EnvSetup("maze", options(cfg.env), [0, 1], spec.observation_shape, torch.float32)
    server = InferenceServer(bench.UniformPolicy(4), envs=setup, actor=cfg.actor, batch_size=4,
                             device=torch.device("cpu"))
    try:
        groups = len(server.free_groups)
        served = []
        for units_per_batch in [0] * 5 + [1] * 4:  # over two unrolls of 3 steps (+1) per unit
            workbench["serve_round"](server, units_per_batch)
            served.append(server.served[0])
            held = sum(g is not None for g in server.group)
            assert len(server.free_groups) + held == groups  # no group lost or doubled
            assert all(handover.empty() for handover in server.acted)  # the actions' handover drained
        assert served == [1, 2, 3, 4, 5, 7, 9, 11, 13]  # one batch per round, then one per unit
    finally:
        server.close()


def _parity_workbench() -> dict:
    return runpy.run_path(str(pathlib.Path(__file__).parent.parent / "cuda" / "policy_parity.py"))


def test_the_policy_parity_workbench_gets_back_what_it_played_when_nothing_differs(tmp_path, capsys):
    """cuda/policy_parity.py (a step of cuda/gpu_session.sh) on the CPU: each replay of the recorded
    inputs, with the core state carried from step to step, gives back the logits that were played
    (an lstm's, so a replay that lost the state would not), and the report says so."""
    from agents.learning.learner import train
    from launch.maze import ENTRY

    run_dir = tmp_path / "maze-lstm"
    train(ENTRY.load(["--core", "lstm", "--total_steps", "3000", "--run_dir", str(run_dir),
                      "--env.episode_length", "30", "--log.tensorboard", "false"]))
    report = _parity_workbench()["main"]([str(run_dir / "checkpoint.pt"), "--device", "cpu", "--envs", "4",
                                          "--games", "2", "--replay-envs", "3", "--bins", "2"])
    assert len(report) == 3 and all(len(rows) == 2 for rows in report.values())
    for rows in report.values():
        for _, kl, gap, agree in rows:
            assert abs(kl) < 1e-6 and gap < 1e-4 and agree == 1.0
    out = capsys.readouterr().out
    assert "8 games on cpu (60 steps of up to 4 games" in out and "the sampler: the most likely action taken at" in out


def test_the_policy_parity_comparison_on_a_hand_worked_pair():
    """Played logits [0, 1] against replayed [1, 0]: KL(p || q) = (p1 - p0) * 1 = tanh(1/2), the largest
    gap 1, and the argmax never agrees."""
    compare = _parity_workbench()["compare"]
    played, replayed = [torch.tensor([[0.0, 1.0]])] * 4, [torch.tensor([[1.0, 0.0]])] * 4
    rows = compare(played, replayed, 2)
    assert [first for first, *_ in rows] == [0, 2]
    for _, kl, gap, agree in rows:
        assert kl == pytest.approx(float(np.tanh(0.5)), rel=1e-6) and gap == pytest.approx(1.0) and agree == 0.0
