"""End to end on the maze: every core trains with 2 actors, logs, checkpoints and resumes;
SIGINT or SIGTERM stops a run with a checkpoint and no processes left behind; a crashing actor
stops the run with its traceback."""
from __future__ import annotations

import dataclasses
import itertools
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import fastnet
from agents.acting.transport import Transport
from agents.errors import ActorError, ConfigMismatchError
from agents.learning.checkpoint import checkpoints, read_checkpoint
from agents.learning.learner import train
from agents.learning.logger import read_csv
from agents.run_config import TrainConfig
from fastnet.registry import core_class
from launch import maze

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAZE = os.path.join(ROOT, "launch", "maze.py")
SMALL = ["--num_actors", "2", "--actor.envs_per_actor", "8", "--actor.unroll_length", "10",
         "--learner.batch_size", "16", "--env.episode_length", "20", "--log.tensorboard", "false"]
TINY = {"hidden_size": 16, "num_layers": 1, "num_heads": 2, "head_dim": 8, "ff_size": 32,
        "controller_size": 16, "memory_size": 16, "memory_layers": 2, "output_size": 16, "num_states": 8}


def tiny_flags(core: str) -> list[str]:
    """``--core.<option> <value>`` for the TINY sizes that ``core`` has."""
    fields = {f.name for f in dataclasses.fields(core_class(core).Config)}
    return [a for k, v in TINY.items() if k in fields for a in (f"--core.{k}", str(v))]


def config(core: str, run_dir: str, *extra: str) -> TrainConfig:
    return maze.load(["--core", core, "--run_dir", run_dir, *tiny_flags(core), *SMALL, *extra])


@pytest.mark.parametrize("core", list(fastnet.CORES))
def test_every_core_trains_logs_checkpoints_and_resumes(core, tmp_path):
    run_dir = str(tmp_path / core)
    first = train(config(core, run_dir, "--total_steps", "960"))
    assert first["step"] == 960 and first["episodes"] > 0
    payload = read_checkpoint(checkpoints(run_dir)[0])
    assert payload["counters"]["step"] == 960 and payload["recent_returns"]  # episodes last 20 steps here
    second = train(config(core, run_dir, "--total_steps", "1920"))
    assert second["step"] == 1920
    assert read_checkpoint(checkpoints(run_dir)[0])["counters"]["updates"] == 12
    def written():  # checkpoints and logs (config.yaml is the command's, written on every start)
        return {name: os.stat(os.path.join(run_dir, name)).st_mtime_ns for name in os.listdir(run_dir)
                if name != "config.yaml"}

    before = written()
    assert train(config(core, run_dir, "--total_steps", "1920"))["step"] == 1920  # finished: started again
    assert written() == before
    rows = read_csv(os.path.join(run_dir, "logs.csv"))
    assert [r["step"] for r in rows] == [160 * i for i in range(1, 13)]
    assert not math.isnan(rows[-1]["mean_return"]) and math.isfinite(rows[-1]["loss"])
    assert os.path.exists(os.path.join(run_dir, "config.yaml"))
    with pytest.raises(ConfigMismatchError, match="run.seed 0 -> 1"):  # another run's directory
        train(config(core, run_dir, "--total_steps", "2880", "--seed", "1"))
    assert multiprocessing.active_children() == []


def test_starting_afresh_moves_the_earlier_run_aside_whole(tmp_path, capsys):
    """--run.resume false in a run directory that holds a run: the new run starts at step 0 with
    its own log, milestones and TensorBoard; the earlier run's files are kept, unchanged, in
    run_dir/replaced-<time>/ (a fresh run used to leave them beside its own, to be read as its own)."""
    run_dir = str(tmp_path / "run")
    train(config("lstm", run_dir, "--total_steps", "480", "--checkpoint.milestones", "[160]"))
    before = {name: os.stat(os.path.join(run_dir, name)).st_ino for name in os.listdir(run_dir)}
    assert {"checkpoint.pt", "checkpoint-160.pt", "logs.csv"} <= set(before)
    assert train(config("lstm", run_dir, "--total_steps", "320", "--run.resume", "false"))["step"] == 320
    assert "starting afresh (run.resume false): the earlier run in" in capsys.readouterr().out
    (aside,) = [name for name in os.listdir(run_dir) if name.startswith("replaced-")]
    assert {name: os.stat(os.path.join(run_dir, aside, name)).st_ino for name in os.listdir(
        os.path.join(run_dir, aside))} == before
    assert [r["step"] for r in read_csv(os.path.join(run_dir, "logs.csv"))] == [160, 320]
    assert read_checkpoint(checkpoints(run_dir)[0])["counters"]["step"] == 320
    assert not os.path.exists(os.path.join(run_dir, "checkpoint-160.pt"))  # the earlier run's milestone


def crash_the_actors(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every actor raise "boom in the actor" 10 unrolls into the run, by then the learner
    has made updates (only actors sample: ``torch.multinomial``)."""
    multinomial, calls = torch.multinomial, itertools.count()

    def boom_after_a_while(*args, **kwargs):  # each forked actor counts its own calls
        if next(calls) == 100:
            raise ValueError("boom in the actor")
        return multinomial(*args, **kwargs)

    monkeypatch.setattr("torch.multinomial", boom_after_a_while)


def test_crashing_actor_stops_the_run_with_its_traceback_and_keeps_its_progress(tmp_path, monkeypatch):
    crash_the_actors(monkeypatch)
    run_dir = str(tmp_path / "crash")
    with pytest.raises(ActorError, match=r"(?s)actor \d crashed:.*ValueError: boom in the actor"):
        train(config("ff", run_dir, "--total_steps", "100000"))
    assert multiprocessing.active_children() == []
    step = read_checkpoint(checkpoints(run_dir)[0])["counters"]["step"]  # saved on the way out
    assert step > 0 and step == read_csv(os.path.join(run_dir, "logs.csv"))[-1]["step"]


@pytest.mark.parametrize("cause", ["stop", "dead_actor"])
def test_the_last_checkpoint_is_written_before_the_acting_side_closes(cause, tmp_path, monkeypatch):
    """On a stop (Ctrl-C or SIGTERM) or a failed actor, the checkpoint is written before the
    transport closes, so a close that fails (or hangs until a scheduler's SIGKILL) loses nothing
    (H200 session of 2026-11-28: a run died at its SIGTERM and left no checkpoint)."""
    close = Transport.__exit__

    def close_then_fail(self, *exc):
        close(self, *exc)  # the processes stop, then the close fails
        raise RuntimeError("the acting side failed to close")

    monkeypatch.setattr(Transport, "__exit__", close_then_fail)

    def stop_at_320(step, metrics):
        if step == 320:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: the run stops after this update

    if cause == "dead_actor":
        crash_the_actors(monkeypatch)
    run_dir = str(tmp_path / cause)
    with pytest.raises(RuntimeError, match="failed to close"):
        train(config("ff", run_dir, "--total_steps", "100000"), on_update=stop_at_320 if cause == "stop" else None)
    assert multiprocessing.active_children() == []
    step = read_checkpoint(checkpoints(run_dir)[0])["counters"]["step"]
    assert step > 0 and step == read_csv(os.path.join(run_dir, "logs.csv"))[-1]["step"]
    assert cause != "stop" or step == 320


def wait_for_run(proc: subprocess.Popen, condition, stderr_path: str, timeout: float = 120) -> None:
    """Wait until ``condition()``; fail at once, with the run's stderr, if the process ``proc``
    has exited (a run that cannot start: a broken install, a bad flag), or after ``timeout`` s."""
    deadline = time.time() + timeout
    while not condition():
        if proc.poll() is not None or time.time() > deadline:
            with open(stderr_path) as f:
                pytest.fail(f"the run exited ({proc.poll()}) or stalled before the moment of the test:\n"
                            f"{f.read()[-3000:]}")
        time.sleep(0.1)


def start_run(argv: list[str], run_dir: str, tmp_path, *, rows: int) -> subprocess.Popen:
    """Start the training command ``argv`` in a session of its own, and wait until its log in
    ``run_dir`` has ``rows`` rows (:func:`wait_for_run`)."""
    stderr = str(tmp_path / "stderr.txt")
    with open(stderr, "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    csv_path = os.path.join(run_dir, "logs.csv")
    wait_for_run(proc, lambda: os.path.exists(csv_path) and len(read_csv(csv_path)) >= rows, stderr)
    return proc


def _group_members(pgid: int) -> list[int]:
    members = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # fields[2] is the process group
            members.append(int(pid))
    return members


@pytest.mark.parametrize("stop_signal,to_group,inference", [
    pytest.param(signal.SIGINT, False, "actor", id="sigint_to_learner-actor"),
    pytest.param(signal.SIGTERM, True, "server", id="sigterm_to_group-server"),
    pytest.param(signal.SIGINT, False, "server", id="sigint_to_learner-server", marks=pytest.mark.slow),
    pytest.param(signal.SIGTERM, True, "actor", id="sigterm_to_group-actor", marks=pytest.mark.slow),
])
def test_stop_signal_checkpoints_and_stops_every_process(stop_signal, to_group, inference, tmp_path):
    """Ctrl-C reaches the learner; a scheduler's SIGTERM (preemption) reaches every process."""
    run_dir = str(tmp_path / "stop")
    argv = [sys.executable, MAZE, "--core", "lstm", "--run_dir", run_dir, "--total_steps", "10000000",
            *tiny_flags("lstm"), *SMALL, "--actor.inference", inference]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    csv_path = os.path.join(run_dir, "logs.csv")
    deadline = time.time() + 120
    while time.time() < deadline and not (os.path.exists(csv_path) and len(read_csv(csv_path)) >= 2):
        time.sleep(0.2)
    assert len(_group_members(proc.pid)) >= 3  # the learner and its 2 actors
    (os.killpg if to_group else os.kill)(proc.pid, stop_signal)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "stopping at step" in out
    step = read_checkpoint(checkpoints(run_dir)[0])["counters"]["step"]
    assert step >= 320
    deadline = time.time() + 10
    while _group_members(proc.pid) and time.time() < deadline:
        time.sleep(0.1)
    assert _group_members(proc.pid) == []


def test_sigkill_leaves_no_orphans_and_the_same_command_resumes(tmp_path):
    run_dir = str(tmp_path / "sigkill")
    argv = [sys.executable, MAZE, "--core", "delta", "--run_dir", run_dir, "--total_steps", "10000000",
            *tiny_flags("delta"), "--checkpoint.milestones", "[320]", *SMALL]
    proc = start_run(argv, run_dir, tmp_path, rows=3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 15
    while _group_members(proc.pid) and time.time() < deadline:
        time.sleep(0.1)
    assert _group_members(proc.pid) == []  # the actors noticed and exited
    argv[argv.index("10000000")] = "960"
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout
    assert "resuming from" in out and "at step 320\n" in out
    assert read_checkpoint(checkpoints(run_dir)[0])["counters"]["step"] == 960
