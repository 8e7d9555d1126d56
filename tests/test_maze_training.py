"""End to end on the maze: every core trains with 2 actors, logs, checkpoints and resumes;
SIGINT stops a run with no processes left behind; a crashing actor stops the run with its traceback."""
from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest

import fastnet
from agents.actor import ActorError
from agents.checkpoint import latest_checkpoint, load_checkpoint
from agents.config import parse_config
from agents.learner import TrainConfig, train
from agents.logger import read_csv
from fastnet.registry import core_class

pytest.importorskip("envs.maze")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAZE = os.path.join(ROOT, "launch", "maze.py")
CONFIG = os.path.join(ROOT, "launch", "configs", "maze.yaml")
SMALL = ["--num_actors", "2", "--envs_per_actor", "8", "--unroll_length", "10", "--batch_size", "16",
         "--set", "env.options.episode_length=20", "--set", "log.tensorboard=false"]
TINY = {"hidden_size": 16, "num_layers": 1, "num_heads": 2, "head_dim": 8, "ff_size": 32,
        "controller_size": 16, "memory_size": 16, "memory_layers": 2, "output_size": 16}


def tiny_options(core: str) -> dict:
    fields = {f.name for f in dataclasses.fields(core_class(core).Config)}
    return {k: v for k, v in TINY.items() if k in fields}


def config(core: str, run_dir: str, *extra: str) -> TrainConfig:
    argv = ["--core", core, "--run_dir", run_dir, "--set", f"core_options={tiny_options(core)}", *SMALL, *extra]
    return parse_config(TrainConfig, argv, CONFIG, variants=("core", "core_defaults"))


def core_available(core: str) -> bool:
    try:
        core_class(core)
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("core", list(fastnet.CORES))
def test_every_core_trains_logs_checkpoints_and_resumes(core, tmp_path):
    if not core_available(core):
        pytest.skip(f"core {core} is not importable yet")
    run_dir = str(tmp_path / core)
    first = train(config(core, run_dir, "--total_steps", "960"))
    assert first["step"] == 960 and first["episodes"] > 0
    payload = load_checkpoint(latest_checkpoint(run_dir))
    assert payload["counters"]["step"] == 960 and payload["recent_returns"]  # episodes last 20 steps here
    second = train(config(core, run_dir, "--total_steps", "1920"))
    assert second["step"] == 1920
    assert load_checkpoint(latest_checkpoint(run_dir))["counters"]["updates"] == 12
    rows = read_csv(os.path.join(run_dir, "logs.csv"))
    assert [r["step"] for r in rows] == [160 * i for i in range(1, 13)]
    assert not math.isnan(rows[-1]["mean_return"]) and math.isfinite(rows[-1]["loss"])
    assert os.path.exists(os.path.join(run_dir, "config.yaml"))
    assert multiprocessing.active_children() == []


def test_crashing_actor_stops_the_run_with_its_traceback(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise ValueError("boom in the actor")

    monkeypatch.setattr("torch.multinomial", boom)  # only actors sample; forked actors inherit it
    with pytest.raises(ActorError, match=r"(?s)actor \d crashed:.*ValueError: boom in the actor"):
        train(config("ff", str(tmp_path / "crash"), "--total_steps", "100000"))
    assert multiprocessing.active_children() == []


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


def test_sigint_stops_every_process(tmp_path):
    run_dir = str(tmp_path / "sigint")
    argv = [sys.executable, MAZE, "--core", "lstm", "--run_dir", run_dir, "--total_steps", "10000000",
            "--set", f"core_options={tiny_options('lstm')}", *SMALL]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    csv_path = os.path.join(run_dir, "logs.csv")
    deadline = time.time() + 120
    while time.time() < deadline and not (os.path.exists(csv_path) and len(read_csv(csv_path)) >= 2):
        time.sleep(0.2)
    assert len(_group_members(proc.pid)) >= 3  # the learner and its 2 actors
    os.kill(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "stopping at step" in out
    step = load_checkpoint(latest_checkpoint(run_dir))["counters"]["step"]
    assert step >= 320
    deadline = time.time() + 10
    while _group_members(proc.pid) and time.time() < deadline:
        time.sleep(0.1)
    assert _group_members(proc.pid) == []


def test_sigkill_leaves_no_orphans_and_the_same_command_resumes(tmp_path):
    run_dir = str(tmp_path / "sigkill")
    argv = [sys.executable, MAZE, "--core", "delta", "--run_dir", run_dir, "--total_steps", "10000000",
            "--set", f"core_options={tiny_options('delta')}", "--set", "checkpoint.milestones=[320]", *SMALL]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    csv_path = os.path.join(run_dir, "logs.csv")
    deadline = time.time() + 120
    while time.time() < deadline and not (os.path.exists(csv_path) and len(read_csv(csv_path)) >= 3):
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 15
    while _group_members(proc.pid) and time.time() < deadline:
        time.sleep(0.1)
    assert _group_members(proc.pid) == []  # the actors noticed and exited
    argv[argv.index("10000000")] = "960"
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout
    assert "resuming from" in out and "at step 320\n" in out
    assert load_checkpoint(latest_checkpoint(run_dir))["counters"]["step"] == 960
