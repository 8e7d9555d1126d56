"""Atomic checkpoints: a write that fails or is killed leaves the previous checkpoint intact."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from agents import checkpoint
from agents.checkpoint import check_same_run, latest_checkpoint, load_checkpoint, save_checkpoint
from agents.config import to_dict
from agents.errors import ConfigError
from agents.training import RESUMABLE
from launch.maze import load


def _save(directory, step, milestone=False):
    torch.manual_seed(step)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    save_checkpoint(str(directory), model=model, optimizer=opt, scheduler=sched,
                    counters={"step": step}, config={"core": "lstm"}, milestone=milestone)
    return model


def test_roundtrip_and_milestones(tmp_path):
    model = _save(tmp_path, 7, milestone=True)
    assert os.path.exists(tmp_path / "checkpoint-7.pt")
    other = torch.nn.Linear(3, 2)
    payload = load_checkpoint(latest_checkpoint(str(tmp_path)), model=other)
    assert payload["counters"]["step"] == 7 and payload["config"] == {"core": "lstm"}
    assert torch.equal(other.weight, model.weight)
    os.remove(tmp_path / "checkpoint.pt")
    assert latest_checkpoint(str(tmp_path)).endswith("checkpoint-7.pt")
    assert latest_checkpoint(str(tmp_path / "none")) is None


def test_failed_write_keeps_previous(tmp_path, monkeypatch):
    _save(tmp_path, 1)

    def broken_save(obj, f):
        f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint.torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        _save(tmp_path, 2)
    monkeypatch.undo()
    assert load_checkpoint(str(tmp_path / "checkpoint.pt"))["counters"]["step"] == 1
    assert [p for p in os.listdir(tmp_path) if p.startswith(".tmp")] == []


def test_killed_write_keeps_previous(tmp_path):
    """SIGKILL the writer after it wrote the temp file but before the rename."""
    _save(tmp_path, 1)
    code = (
        "import os, signal, sys, torch\n"
        "from agents import checkpoint\n"
        "checkpoint.os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
        "m = torch.nn.Linear(3, 2)\n"
        f"checkpoint.save_checkpoint({str(tmp_path)!r}, model=m, optimizer=None, scheduler=None,"
        " counters={'step': 2}, config={})\n"
    )
    result = subprocess.run([sys.executable, "-c", code])
    assert result.returncode == -9
    assert load_checkpoint(latest_checkpoint(str(tmp_path)))["counters"]["step"] == 1
    _save(tmp_path, 3)  # the next save clears the killed writer's temp file
    assert [p for p in os.listdir(tmp_path) if p.startswith(".tmp")] == []


def test_check_same_run_names_the_settings_that_differ():
    saved = to_dict(load(["--core", "lstm", "--core.hidden_size", "64"]))
    resumable = load(["--core", "lstm", "--core.hidden_size", "64", "--total_steps", "1000000000",
                      "--device", "auto", "--log.tensorboard", "false", "--num_actors", "48"])
    check_same_run(saved, resumable, RESUMABLE, "ckpt.pt")  # a longer run, more actors: fine
    other = load(["--core", "lstm", "--core.hidden_size", "128", "--optim.lr", "1.0", "--actor.unroll_length", "80"])
    with pytest.raises(ConfigError) as error:
        check_same_run(saved, other, RESUMABLE, "ckpt.pt")
    message = str(error.value)
    assert "\n" not in message
    for change in ("core.hidden_size 64 -> 128", "optim.lr 0.002 -> 1.0", "actor.unroll_length 20 -> 80"):
        assert change in message
    assert "total_steps" not in message and message.count(" -> ") == 3
    del saved["loss"]["rho_bar"]  # a setting this checkpoint predates is not compared
    other = load(["--core", "lstm", "--core.hidden_size", "64", "--loss.rho_bar", "2.0"])
    check_same_run(saved, other, RESUMABLE, "ckpt.pt")


def test_atomic_files_get_the_permissions_open_would_give(tmp_path):
    """mkstemp creates private (0600) files; logs and checkpoints should be as readable as usual."""
    (tmp_path / "plain.txt").write_text("x")
    checkpoint.atomic_write_text(str(tmp_path / "atomic.txt"), "x")
    modes = [os.stat(tmp_path / name).st_mode & 0o777 for name in ("atomic.txt", "plain.txt")]
    assert modes[0] == modes[1]
