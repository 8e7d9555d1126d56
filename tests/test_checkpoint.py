"""Atomic checkpoints: a write that fails or is killed leaves the previous checkpoint intact."""
from __future__ import annotations

import errno
import math
import os
import subprocess
import sys

import pytest
import torch

from agents import checkpoint
from agents.checkpoint import (
    check_same_run,
    latest_checkpoint,
    load_checkpoint,
    load_latest_good,
    save_checkpoint,
)
from agents.config import to_dict
from agents.errors import (
    ConfigMismatchError,
    CorruptCheckpointError,
    NoGoodCheckpointError,
    NonFiniteStateError,
    WriteFailure,
)
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


def test_disk_full_is_one_line_and_keeps_previous(tmp_path, monkeypatch):
    """ENOSPC while torch.save writes (torch raises its own RuntimeError from inside the OSError)."""
    _save(tmp_path, 1)
    real_save = torch.save

    def disk_full(obj, f):
        real_write = f.write

        def write(data):
            real_write(bytes(data)[:3])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        f.write = write
        real_save(obj, f)

    monkeypatch.setattr(checkpoint.torch, "save", disk_full)
    with pytest.raises(WriteFailure) as error:
        _save(tmp_path, 2)
    assert str(error.value) == (f"cannot write the checkpoint to {tmp_path}: no space left on device (the previous "
                                f"checkpoint is intact); free some space and run the same command again")
    assert error.value.exit_code == 1
    monkeypatch.undo()
    assert load_checkpoint(str(tmp_path / "checkpoint.pt"))["counters"]["step"] == 1
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.pt"]


def test_a_real_full_disk_is_one_line_and_keeps_previous(tiny_tmpfs):
    small = torch.nn.Linear(3, 2)
    save_checkpoint(str(tiny_tmpfs), model=small, optimizer=None, scheduler=None, counters={"step": 1}, config={})
    big = torch.nn.Linear(300, 300)  # 360 KB
    with pytest.raises(WriteFailure, match=r"^cannot write the checkpoint to .*tiny: no space left on device "
                                           r"\(the previous checkpoint is intact\)"):
        save_checkpoint(str(tiny_tmpfs), model=big, optimizer=None, scheduler=None, counters={"step": 2}, config={})
    assert load_checkpoint(str(tiny_tmpfs / "checkpoint.pt"))["counters"]["step"] == 1
    assert sorted(os.listdir(tiny_tmpfs)) == ["checkpoint.pt"]
    with pytest.raises(WriteFailure,
                       match=r"^cannot write the log to .*tiny: no space left on device; free some space"):
        checkpoint.atomic_write_text(str(tiny_tmpfs / "logs.csv"), "x" * 400_000, what="the log")


def test_read_only_file_system_is_one_line(tiny_tmpfs):
    _save(tiny_tmpfs, 1)
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_tmpfs)], check=True)
    with pytest.raises(WriteFailure, match="^cannot write the checkpoint to .*tiny: read-only file system "
                                           r"\(the previous checkpoint is intact\); make it writable or choose"):
        _save(tiny_tmpfs, 2)


def test_run_dir_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "run").write_text("not a directory")
    with pytest.raises(WriteFailure, match=r"^cannot write the checkpoint to .*run/sub: .*run is not a directory$"):
        _save(tmp_path / "run" / "sub", 1)


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
    with pytest.raises(ConfigMismatchError) as error:
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


def test_non_finite_state_is_never_saved(tmp_path):
    _save(tmp_path, 1)
    model = torch.nn.Linear(3, 2)
    with torch.no_grad():
        model.bias[1] = math.nan
    with pytest.raises(NonFiniteStateError, match=r"^not saving the checkpoint at step 2: model\.bias holds NaN "
                                                  r"or infinite values \(training diverged\); .*checkpoint\.pt "
                                                  r"\(the previous checkpoint\) is kept$"):
        save_checkpoint(str(tmp_path), model=model, optimizer=None, scheduler=None, counters={"step": 2}, config={})
    opt = torch.optim.Adam(torch.nn.Linear(3, 2).parameters())
    opt.state[0] = {"exp_avg": torch.tensor([1.0, math.inf])}
    with pytest.raises(NonFiniteStateError, match="optimizer.state.0.exp_avg holds"):
        save_checkpoint(str(tmp_path), model=torch.nn.Linear(3, 2), optimizer=opt, scheduler=None,
                        counters={"step": 3}, config={})
    assert load_checkpoint(latest_checkpoint(str(tmp_path)))["counters"]["step"] == 1
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.pt"]


def _steps(directory):
    return {name: load_checkpoint(str(directory / name))["counters"]["step"] for name in sorted(os.listdir(directory))}


def test_keeps_the_last_k_checkpoints_besides_milestones(tmp_path):
    for step in (1, 2, 3):
        _save(tmp_path, step, milestone=step == 2)
    assert _steps(tmp_path) == {"checkpoint-2.pt": 2, "checkpoint.prev1.pt": 2, "checkpoint.pt": 3}
    save_checkpoint(str(tmp_path), model=torch.nn.Linear(3, 2), optimizer=None, scheduler=None,
                    counters={"step": 4}, config={}, keep=3)
    assert _steps(tmp_path) == {"checkpoint-2.pt": 2, "checkpoint.prev1.pt": 3, "checkpoint.prev2.pt": 2,
                                "checkpoint.pt": 4}
    assert checkpoint.checkpoints(str(tmp_path)) == [str(tmp_path / name) for name in (
        "checkpoint.pt", "checkpoint.prev1.pt", "checkpoint.prev2.pt", "checkpoint-2.pt")]
    save_checkpoint(str(tmp_path), model=torch.nn.Linear(3, 2), optimizer=None, scheduler=None,
                    counters={"step": 5}, config={}, keep=1)
    assert _steps(tmp_path) == {"checkpoint-2.pt": 2, "checkpoint.pt": 5}


def test_without_hard_links_the_copies_are_files_of_their_own(tmp_path, monkeypatch):
    def no_links(source, target):
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(checkpoint.os, "link", no_links)
    for step in (1, 2):
        _save(tmp_path, step, milestone=step == 1)
    assert _steps(tmp_path) == {"checkpoint-1.pt": 1, "checkpoint.prev1.pt": 1, "checkpoint.pt": 2}


def _damage(path, how):
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write({"empty": b"", "truncated": data[: len(data) // 2], "garbage": b"\x80\x04garbage" * 10}[how])


@pytest.mark.parametrize("how,reason", [("empty", "is empty"), ("truncated", "is truncated or corrupt"),
                                        ("garbage", "is truncated or corrupt")])
def test_a_damaged_checkpoint_is_one_line(tmp_path, how, reason):
    _save(tmp_path, 1)
    _damage(tmp_path / "checkpoint.pt", how)
    with pytest.raises(CorruptCheckpointError) as error:
        load_checkpoint(str(tmp_path / "checkpoint.pt"))
    assert str(error.value).startswith(f"checkpoint {tmp_path / 'checkpoint.pt'} {reason}")
    assert "\n" not in str(error.value) and error.value.exit_code == 1


def test_resume_falls_back_to_the_newest_good_checkpoint(tmp_path):
    for step in (1, 2, 3):
        _save(tmp_path, step, milestone=step == 1)
    _damage(tmp_path / "checkpoint.pt", "truncated")
    warnings = []
    model = torch.nn.Linear(3, 2)
    path, payload = load_latest_good(str(tmp_path), model=model, warn=warnings.append)
    assert path == str(tmp_path / "checkpoint.prev1.pt") and payload["counters"]["step"] == 2
    assert torch.equal(model.weight, _save(tmp_path / "other", 2).weight)
    assert len(warnings) == 1 and warnings[0].startswith(f"checkpoint {tmp_path / 'checkpoint.pt'} is truncated")
    assert warnings[0].endswith("; skipping it")

    nan_state = torch.load(tmp_path / "checkpoint.prev1.pt", weights_only=False)
    nan_state["model"]["weight"][0, 0] = math.nan  # as written by a version that saved diverged states
    torch.save(nan_state, tmp_path / "checkpoint.prev1.pt")
    warnings.clear()
    path, payload = load_latest_good(str(tmp_path), warn=warnings.append)
    assert path == str(tmp_path / "checkpoint-1.pt") and payload["counters"]["step"] == 1
    assert "checkpoint.prev1.pt holds NaN or infinite values: model.weight" in warnings[1]

    _damage(tmp_path / "checkpoint-1.pt", "empty")
    warnings.clear()
    with pytest.raises(NoGoodCheckpointError) as error:
        load_latest_good(str(tmp_path), warn=warnings.append)
    message = str(error.value)  # one line naming every file and why; no warnings besides it
    assert message.startswith(f"no usable checkpoint in {tmp_path} (checkpoint.pt is truncated")
    assert "checkpoint.prev1.pt holds NaN" in message and "checkpoint-1.pt is empty" in message
    assert "\n" not in message and warnings == []
    assert load_latest_good(str(tmp_path / "none")) is None


def test_resume_does_not_fall_back_past_a_checkpoint_of_other_settings(tmp_path):
    save_checkpoint(str(tmp_path), model=torch.nn.Linear(3, 2), optimizer=None, scheduler=None,
                    counters={"step": 1}, config=to_dict(load(["--seed", "0"])))
    with pytest.raises(ConfigMismatchError, match="run.seed 0 -> 1"):
        load_latest_good(str(tmp_path), config=load(["--seed", "1"]), may_change=RESUMABLE)
