"""Atomic checkpoints: a write that fails or is killed leaves the previous checkpoint intact."""
from __future__ import annotations

import errno
import functools
import math
import os
import subprocess
import sys

import pytest
import torch

from agents import files
from agents.config import resumable_keys, to_dict
from agents.errors import (
    ConfigMismatchError,
    CorruptCheckpointError,
    NoGoodCheckpointError,
    NonFiniteStateError,
    WriteFailure,
)
from agents.learning import checkpoint
from agents.learning.checkpoint import (
    check_same_run,
    checkpoints,
    load_latest_good,
    read_checkpoint,
    save_checkpoint,
)
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
    payload = read_checkpoint(checkpoints(str(tmp_path))[0])
    other.load_state_dict(payload["model"])
    assert payload["counters"]["step"] == 7 and payload["config"] == {"core": "lstm"}
    assert torch.equal(other.weight, model.weight)
    os.remove(tmp_path / "checkpoint.pt")
    assert checkpoints(str(tmp_path))[0].endswith("checkpoint-7.pt")
    assert checkpoints(str(tmp_path / "none")) == []


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
    assert read_checkpoint(str(tmp_path / "checkpoint.pt"))["counters"]["step"] == 1
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.pt"]


def test_a_real_full_disk_is_one_line_and_keeps_previous(tiny_tmpfs):
    small = torch.nn.Linear(3, 2)
    save_checkpoint(str(tiny_tmpfs), model=small, optimizer=None, scheduler=None, counters={"step": 1}, config={})
    big = torch.nn.Linear(300, 300)  # 360 KB
    with pytest.raises(WriteFailure, match=r"^cannot write the checkpoint to .*tiny: no space left on device "
                                           r"\(the previous checkpoint is intact\)"):
        save_checkpoint(str(tiny_tmpfs), model=big, optimizer=None, scheduler=None, counters={"step": 2}, config={})
    assert read_checkpoint(str(tiny_tmpfs / "checkpoint.pt"))["counters"]["step"] == 1
    assert sorted(os.listdir(tiny_tmpfs)) == ["checkpoint.pt"]
    with pytest.raises(WriteFailure,
                       match=r"^cannot write the log to .*tiny: no space left on device; free some space"):
        files.atomic_write_text(str(tiny_tmpfs / "logs.csv"), "x" * 400_000, what="the log")


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
        "from agents.learning import checkpoint\n"
        "checkpoint.os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
        "m = torch.nn.Linear(3, 2)\n"
        f"checkpoint.save_checkpoint({str(tmp_path)!r}, model=m, optimizer=None, scheduler=None,"
        " counters={'step': 2}, config={})\n"
    )
    result = subprocess.run([sys.executable, "-c", code])
    assert result.returncode == -9
    assert read_checkpoint(checkpoints(str(tmp_path))[0])["counters"]["step"] == 1
    _save(tmp_path, 3)  # the next save clears the killed writer's temp file
    assert [p for p in os.listdir(tmp_path) if p.startswith(".tmp")] == []


def test_check_same_run_names_the_settings_that_differ():
    saved = to_dict(load(["--core", "lstm", "--core.hidden_size", "64"]))
    resumable = load(["--core", "lstm", "--core.hidden_size", "64", "--total_steps", "1000000000",
                      "--device", "auto", "--log.tensorboard", "false", "--num_actors", "48"])
    check_same_run(saved, resumable, resumable_keys(resumable), "ckpt.pt")  # a longer run, more actors: fine
    other = load(["--core", "lstm", "--core.hidden_size", "128", "--optim.lr", "1.0", "--actor.unroll_length", "80"])
    with pytest.raises(ConfigMismatchError) as error:
        check_same_run(saved, other, resumable_keys(other), "ckpt.pt")
    message = str(error.value)
    assert "\n" not in message
    lr, unroll = saved["optim"]["lr"], saved["actor"]["unroll_length"]  # maze.yaml's defaults
    for change in ("core.hidden_size 64 -> 128", f"optim.lr {lr} -> 1.0", f"actor.unroll_length {unroll} -> 80"):
        assert change in message
    assert "total_steps" not in message and message.count(" -> ") == 3
    del saved["loss"]["rho_bar"]  # a setting this checkpoint predates is not compared
    other = load(["--core", "lstm", "--core.hidden_size", "64", "--loss.rho_bar", "2.0"])
    check_same_run(saved, other, resumable_keys(other), "ckpt.pt")


def test_the_fields_marked_resumable_are_the_budgets_hardware_logging_and_cadence():
    """The keys a resume may change, as issue 24 listed them, now read off the fields' metadata; and
    PopArt's zero start, which only a new head reads."""
    from launch import supervised

    assert set(resumable_keys(load([]))) == {
        "run.total_steps", "run.device", "run.run_dir", "run.num_threads", "run.resume", "run.keep_checkpoints",
        "run.kernels", "actor.num_actors", "actor.num_buffers", "actor.inference", "actor.server.max_batch",
        "actor.server.max_wait_ms", "actor.backend", "actor.start_method", "actor.nice", "ray", "log", "checkpoint",
        "optim.grad_clip", "optim.max_nonfinite_steps", "loss.popart_zero_init"}
    assert set(resumable_keys(supervised.load([]))) == {
        "run.device", "run.run_dir", "run.num_threads", "run.resume", "run.keep_checkpoints", "run.kernels",
        "optim.grad_clip", "optim.max_nonfinite_steps", "log", "train.max_steps", "train.max_epochs",
        "train.max_time_s", "train.eval_every", "train.eval_batch_size", "train.patience", "train.min_delta",
        "train.target_loss", "train.checkpoint_every"}


def test_atomic_files_get_the_permissions_open_would_give(tmp_path):
    """mkstemp creates private (0600) files; logs and checkpoints should be as readable as usual."""
    (tmp_path / "plain.txt").write_text("x")
    files.atomic_write_text(str(tmp_path / "atomic.txt"), "x")
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
    assert read_checkpoint(checkpoints(str(tmp_path))[0])["counters"]["step"] == 1
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.pt"]


def _steps(directory):
    return {name: read_checkpoint(str(directory / name))["counters"]["step"] for name in sorted(os.listdir(directory))}


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
        read_checkpoint(str(tmp_path / "checkpoint.pt"))
    assert str(error.value).startswith(f"checkpoint {tmp_path / 'checkpoint.pt'} {reason}")
    assert "\n" not in str(error.value) and error.value.exit_code == 1


def _nan(path):
    state = torch.load(path, weights_only=True)
    state["model"]["weight"][0, 0] = math.nan  # as written by a version that saved diverged states
    torch.save(state, path)


def test_resume_falls_back_to_the_newest_good_checkpoint_and_keeps_it(tmp_path):
    for step in (1, 2, 3):
        _save(tmp_path, step, milestone=step == 1)
    _damage(tmp_path / "checkpoint.pt", "truncated")
    warnings = []
    model = torch.nn.Linear(3, 2)
    path, payload = load_latest_good(str(tmp_path), model=model, warn=warnings.append)
    assert path == str(tmp_path / "checkpoint.prev1.pt") and payload["counters"]["step"] == 2
    assert torch.equal(model.weight, _save(tmp_path / "other", 2).weight)
    assert len(warnings) == 1 and warnings[0].startswith(f"checkpoint {tmp_path / 'checkpoint.pt'} is truncated")
    assert warnings[0].endswith("; skipping it (kept as checkpoint.pt.bad)")
    # the damaged file set aside and the good one the latest again, so the run's next save keeps it
    # as the one before (the damaged one used to take its place, and the good one was dropped)
    assert os.path.getsize(tmp_path / "checkpoint.pt.bad") > 0
    _save(tmp_path, 4)
    assert {name: read_checkpoint(str(tmp_path / name))["counters"]["step"] for name in (
        "checkpoint.pt", "checkpoint.prev1.pt", "checkpoint-1.pt")} == {
        "checkpoint.pt": 4, "checkpoint.prev1.pt": 2, "checkpoint-1.pt": 1}


def test_resume_past_a_bad_checkpoint_in_a_read_only_directory_still_resumes(tmp_path, monkeypatch):
    for step in (1, 2):
        _save(tmp_path, step)
    _damage(tmp_path / "checkpoint.pt", "empty")

    def read_only(src, dst):
        raise PermissionError(30, "Read-only file system")

    monkeypatch.setattr(checkpoint.os, "replace", read_only)
    warnings = []
    path, payload = load_latest_good(str(tmp_path), warn=warnings.append)
    assert path == str(tmp_path / "checkpoint.prev1.pt") and payload["counters"]["step"] == 1
    assert len(warnings) == 1 and warnings[0].endswith("is empty; skipping it")


def test_resume_skips_non_finite_checkpoints_and_names_every_unusable_one(tmp_path):
    for step in (1, 2, 3):
        _save(tmp_path, step, milestone=step == 1)
    _nan(tmp_path / "checkpoint.pt")
    _nan(tmp_path / "checkpoint.prev1.pt")
    warnings = []
    path, payload = load_latest_good(str(tmp_path), warn=warnings.append)
    assert path == str(tmp_path / "checkpoint-1.pt") and payload["counters"]["step"] == 1
    assert "checkpoint.pt holds NaN or infinite values: model.weight" in warnings[0]
    assert "checkpoint.prev1.pt holds NaN or infinite values: model.weight" in warnings[1]

    other = tmp_path / "none_good"
    for step in (1, 2, 3):
        _save(other, step, milestone=step == 1)
    _damage(other / "checkpoint.pt", "truncated")
    _nan(other / "checkpoint.prev1.pt")
    _damage(other / "checkpoint-1.pt", "empty")
    warnings.clear()
    with pytest.raises(NoGoodCheckpointError) as error:
        load_latest_good(str(other), warn=warnings.append)
    message = str(error.value)  # one line naming every file and why; no warnings besides it
    assert message.startswith(f"no usable checkpoint in {other} (checkpoint.pt is truncated")
    assert "checkpoint.prev1.pt holds NaN" in message and "checkpoint-1.pt is empty" in message
    assert "\n" not in message and warnings == []
    assert sorted(os.listdir(other)) == ["checkpoint-1.pt", "checkpoint.prev1.pt", "checkpoint.pt"]  # none renamed
    assert load_latest_good(str(tmp_path / "none")) is None


def test_resume_does_not_fall_back_past_a_checkpoint_of_other_settings(tmp_path):
    save_checkpoint(str(tmp_path), model=torch.nn.Linear(3, 2), optimizer=None, scheduler=None,
                    counters={"step": 1}, config=to_dict(load(["--seed", "0"])))
    with pytest.raises(ConfigMismatchError, match="run.seed 0 -> 1"):
        load_latest_good(str(tmp_path), config=load(["--seed", "1"]), may_change=resumable_keys(load([])))


# ---------------------------------------------------------------- a checkpoint is data (issue 24)

class _RunsCommand:
    """Unpickling this runs a shell command (a crafted checkpoint's payload)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _evil_zip(path, marker):
    torch.save({"model": _RunsCommand(marker), "counters": {"step": 1}}, path)


def _evil_pickle(path, marker, *, protocol):
    import pickle

    with open(path, "wb") as f:
        pickle.dump(_RunsCommand(marker), f, protocol=protocol)


def _random_bytes(path, marker, *, seed):
    import random

    with open(path, "wb") as f:
        f.write(random.Random(seed).randbytes(4096))


def _truncated(path, marker, *, length):
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:length])


def _missing_member(path, marker):
    """The zip of a real checkpoint less one tensor's storage (data/0)."""
    import zipfile

    with zipfile.ZipFile(path) as src:
        members = {info.filename: src.read(info) for info in src.infolist()}
    with zipfile.ZipFile(path, "w") as dst:
        for name, data in members.items():
            if not name.endswith("/data/0"):
                dst.writestr(name, data)


# Each case damages checkpoint.pt, given its path and a marker file that code in it would create.
BAD_CHECKPOINTS = {
    "code_running_zip": _evil_zip,
    **{f"code_running_pickle_protocol_{k}": functools.partial(_evil_pickle, protocol=k) for k in (0, 2, 4)},
    **{f"random_bytes_seed_{s}": functools.partial(_random_bytes, seed=s) for s in (*range(8), 43)},
    **{f"truncated_to_{n}": functools.partial(_truncated, length=n) for n in (0, 1, 10, 100, 1000, 2000, -1)},
    "missing_zip_member": _missing_member,
}


@pytest.mark.parametrize("make", BAD_CHECKPOINTS.values(), ids=BAD_CHECKPOINTS.keys())
def test_a_crafted_or_corrupt_checkpoint_is_refused_in_one_line_and_runs_nothing(make, tmp_path):
    from agents.errors import CheckpointError

    for step in (1, 2):
        _save(tmp_path, step)
    marker = tmp_path / "code_ran"
    make(str(tmp_path / "checkpoint.pt"), marker)
    with pytest.raises(CheckpointError) as error:
        read_checkpoint(str(tmp_path / "checkpoint.pt"))
    message = str(error.value)
    assert message.startswith(f"checkpoint {tmp_path / 'checkpoint.pt'} ") and "\n" not in message, message
    assert error.value.exit_code == 1
    warnings = []  # a resume falls back to the checkpoint before it
    path, payload = load_latest_good(str(tmp_path), warn=warnings.append)
    assert path == str(tmp_path / "checkpoint.prev1.pt") and payload["counters"]["step"] == 1
    assert len(warnings) == 1 and warnings[0].endswith("; skipping it (kept as checkpoint.pt.bad)")
    assert not marker.exists()


def test_a_code_running_checkpoint_names_what_it_would_call_and_how_to_convert(tmp_path):
    from agents.errors import UnsafeCheckpointError

    path = tmp_path / "checkpoint.pt"
    _evil_zip(path, tmp_path / "code_ran")
    with pytest.raises(UnsafeCheckpointError) as error:
        read_checkpoint(str(path))
    assert "names posix.system" in str(error.value) and "nothing in it ran" in str(error.value)
    assert f"python launch/convert_checkpoint.py {path}" in str(error.value)
    assert not (tmp_path / "code_ran").exists()


def test_a_directory_named_checkpoint_stops_the_resume(tmp_path):
    """Not skipped: the run could never write its next checkpoint there."""
    for step in (1, 2):
        _save(tmp_path, step)
    os.remove(tmp_path / "checkpoint.pt")
    os.mkdir(tmp_path / "checkpoint.pt")
    with pytest.raises(CorruptCheckpointError, match="checkpoint.pt is a directory, not a file; move it away"):
        load_latest_good(str(tmp_path))


def test_checkpoints_are_plain_data_that_load_without_any_allowlist(tmp_path):
    """jsonargparse's restricted numbers (the config's types) become plain numbers when saved."""
    from jsonargparse.typing import NonNegativeFloat, PositiveInt

    model = torch.nn.Linear(3, 2)
    opt = torch.optim.RMSprop(model.parameters(), lr=NonNegativeFloat(0.5), eps=NonNegativeFloat(0.01))
    save_checkpoint(str(tmp_path), model=model, optimizer=opt, scheduler=None,
                    counters={"step": PositiveInt(3)}, config={"optim": {"lr": NonNegativeFloat(0.5)}})
    payload = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert type(payload["optimizer"]["param_groups"][0]["lr"]) is float and payload["counters"]["step"] == 3
    with pytest.raises(TypeError, match="holds only tensors"):
        save_checkpoint(str(tmp_path), model=model, optimizer=None, scheduler=None, counters={"step": 4}, config={},
                        note=object())
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["counters"]["step"] == 3


def test_an_older_checkpoint_with_jsonargparse_numbers_still_loads(tmp_path):
    """As versions before issue 24 wrote them: the optimiser's settings as restricted numbers."""
    from jsonargparse.typing import NonNegativeFloat

    model = torch.nn.Linear(3, 2)
    opt = torch.optim.RMSprop(model.parameters(), lr=NonNegativeFloat(0.5), eps=NonNegativeFloat(0.01))
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "counters": {"step": 3}},
               tmp_path / "old.pt")
    with pytest.raises(Exception, match="NonNegativeFloat"):
        torch.load(tmp_path / "old.pt", weights_only=True)  # the allowlist is what reads it
    payload = read_checkpoint(str(tmp_path / "old.pt"))
    restored = torch.optim.RMSprop(model.parameters())
    restored.load_state_dict(payload["optimizer"])
    assert payload["optimizer"]["param_groups"][0]["lr"] == 0.5 and restored.param_groups[0]["lr"] == 0.5
    assert type(payload["optimizer"]["param_groups"][0]["lr"]) is float


def test_convert_checkpoint_makes_an_older_file_plain_data(tmp_path, capsys):
    """An older file with numpy values and a config dataclass is refused, converted knowingly, then loads."""
    import numpy as np

    from agents.errors import UnsafeCheckpointError
    from agents.learning.training import OptimConfig
    from launch import convert_checkpoint

    model = torch.nn.Linear(3, 2)
    path = tmp_path / "old.pt"
    torch.save({"model": model.state_dict(), "counters": {"step": np.int64(7)},
                "recent_returns": np.array([1.5, 2.5]), "config": OptimConfig(lr=1e-3)}, path)
    with pytest.raises(UnsafeCheckpointError, match="names agents.learning.training.OptimConfig, numpy"):
        read_checkpoint(str(path))
    convert_checkpoint.main([str(path), "--output", str(tmp_path / "new.pt")])
    assert "loads as data only" in capsys.readouterr().out
    payload = torch.load(tmp_path / "new.pt", weights_only=True)
    assert payload["counters"]["step"] == 7 and type(payload["counters"]["step"]) is int
    assert payload["config"]["lr"] == 1e-3 and payload["config"]["name"] == "rmsprop"
    assert torch.equal(payload["recent_returns"], torch.tensor([1.5, 2.5], dtype=torch.float64))
    assert torch.equal(payload["model"]["weight"], model.weight)


@pytest.mark.parametrize("what,noun", [("a file", "file"), ("the log", "log"), ("the checkpoint", "checkpoint")])
def test_a_failed_write_names_what_is_intact_in_plain_words(tmp_path, what, noun):
    (tmp_path / "f").write_text("kept")
    error = files.write_failure(OSError(errno.ENOSPC, "No space left on device"), what, str(tmp_path / "f"))
    assert f"(the previous {noun} is intact)" in str(error)


def test_check_same_run_reads_saved_lists_as_the_tuples_they_were():
    """A tuple setting (the gym env's ``wrappers``) is saved as a list: the same run resumes, and
    other wrappers are named as a change."""
    from launch import memory

    wrapped = ["--suite", "minigrid", "--env.wrappers", '["minigrid.wrappers:OneHotPartialObsWrapper"]']
    saved = to_dict(memory.load(wrapped))
    assert saved["env"]["wrappers"] == ["minigrid.wrappers:OneHotPartialObsWrapper"]
    check_same_run(saved, memory.load(wrapped), resumable_keys(memory.load(wrapped)), "ckpt.pt")
    change = r"env.wrappers \['minigrid.wrappers:OneHotPartialObsWrapper'\] -> \[\]"
    with pytest.raises(ConfigMismatchError, match=change):
        check_same_run(saved, memory.load(["--suite", "minigrid"]), ("run.total_steps",), "ckpt.pt")
