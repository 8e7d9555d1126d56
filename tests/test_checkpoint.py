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
from agents.learner import RESUMABLE_CHANGES, TrainConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
        f"sys.path.insert(0, {ROOT!r})\n"
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
    saved = to_dict(TrainConfig(core="lstm", core_options={"hidden_size": 64}))
    resumable = TrainConfig(core="lstm", core_options={"hidden_size": 64}, total_steps=10**9, device="cuda")
    resumable.log.tensorboard, resumable.actor.num_actors = False, 48
    check_same_run(saved, resumable, RESUMABLE_CHANGES, "ckpt.pt")  # a longer run, more actors: fine
    other = TrainConfig(core="lstm", core_options={"hidden_size": 128})
    other.optim.lr, other.actor.unroll_length = 1.0, 80
    with pytest.raises(ValueError) as error:
        check_same_run(saved, other, RESUMABLE_CHANGES, "ckpt.pt")
    message = str(error.value)
    for line in ("core_options: {'hidden_size': 64} in the checkpoint, {'hidden_size': 128} now",
                 "optim.lr: 0.0006 in the checkpoint, 1.0 now", "actor.unroll_length: 20 in the checkpoint, 80 now"):
        assert line in message
    assert "total_steps" not in message and message.count(" now") == 3
    del saved["learner"]["rho_bar"]  # a setting this checkpoint predates is not compared
    other = TrainConfig(core="lstm", core_options={"hidden_size": 64})
    other.learner.rho_bar = 2.0
    check_same_run(saved, other, RESUMABLE_CHANGES, "ckpt.pt")


def test_atomic_files_get_the_permissions_open_would_give(tmp_path):
    """mkstemp creates private (0600) files; logs and checkpoints should be as readable as usual."""
    (tmp_path / "plain.txt").write_text("x")
    checkpoint.atomic_write_text(str(tmp_path / "atomic.txt"), "x")
    modes = [os.stat(tmp_path / name).st_mode & 0o777 for name in ("atomic.txt", "plain.txt")]
    assert modes[0] == modes[1]
