"""Failures a user can cause at run time (issue 19): each is one line on stderr, exit code 1 (a
run that cannot go on) or 2 (bad input), no traceback, and the run directory as it was. Bad
config input is covered by tests/test_config.py; divergence by tests/test_training.py and here."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
import torch

from agents.learning.checkpoint import checkpoints, read_checkpoint, save_checkpoint
from launch import evaluate, maze, supervised
from tests.test_maze_training import wait_for_run

TINY = ["--core", "lstm", "--core.hidden_size", "16", "--num_actors", "1", "--actor.envs_per_actor", "8",
        "--learner.batch_size", "8", "--actor.unroll_length", "5", "--log.tensorboard", "false",
        "--log.print_every_s", "100"]


def snapshot(directory):
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                out[os.path.relpath(os.path.join(root, name), directory)] = f.read()
    return out


def one_line_failure(main, argv, capsys, code=1):
    """Run ``main(argv)``; check the exit code and that stderr is exactly one line; return it."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert stop.value.code == code, captured.err
    assert len(lines) == 1 and "Traceback" not in captured.err + captured.out, captured.err
    return lines[0]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A maze run with two checkpoints (checkpoint.pt and checkpoint.prev1.pt)."""
    run_dir = str(tmp_path_factory.mktemp("runs") / "done")
    maze.main([*TINY, "--total_steps", "40", "--run_dir", run_dir])
    maze.main([*TINY, "--total_steps", "80", "--run_dir", run_dir])
    assert [os.path.basename(p) for p in checkpoints(run_dir)][:2] == ["checkpoint.pt", "checkpoint.prev1.pt"]
    return run_dir


def _truncate(path):
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])


def _empty(path):
    open(path, "wb").close()


def _garbage(path):
    with open(path, "wb") as f:
        f.write(b"not a checkpoint at all")


@pytest.mark.parametrize("damage", [_truncate, _empty, _garbage])
def test_a_damaged_newest_checkpoint_falls_back_to_the_older_one(damage, finished_run, tmp_path, capsys):
    run_dir = str(tmp_path / "run")
    shutil.copytree(finished_run, run_dir)
    damage(os.path.join(run_dir, "checkpoint.pt"))
    summary = maze.main([*TINY, "--total_steps", "120", "--run_dir", run_dir])
    captured = capsys.readouterr()
    assert "checkpoint.pt" in captured.err and "skipping it" in captured.err
    assert "resuming from" in captured.out and "checkpoint.prev1.pt at step 40" in captured.out
    assert summary["step"] == 120


@pytest.mark.parametrize("damage", [_truncate, _empty, _garbage])
def test_no_usable_checkpoint_is_one_line(damage, finished_run, tmp_path, capsys):
    run_dir = str(tmp_path / "run")
    shutil.copytree(finished_run, run_dir)
    for path in checkpoints(run_dir):
        damage(path)
    before = snapshot(run_dir)
    line = one_line_failure(maze.main, [*TINY, "--total_steps", "120", "--run_dir", run_dir], capsys)
    assert line.startswith("error: no usable checkpoint in") and "another run_dir" in line
    assert snapshot(run_dir) == before


def test_evaluate_a_corrupt_or_missing_checkpoint(finished_run, tmp_path, capsys):
    bad = tmp_path / "bad.pt"
    _garbage(bad)
    line = one_line_failure(evaluate.main, [str(bad), "--out", str(tmp_path / "eval")], capsys)
    assert line.startswith(f"error: checkpoint {bad} is truncated or corrupt")
    line = one_line_failure(evaluate.main, [str(tmp_path / "nowhere"), "--out", str(tmp_path / "eval")], capsys)
    assert line == f"error: no such checkpoint or run directory: {tmp_path / 'nowhere'}"
    assert not os.path.exists(tmp_path / "eval")


def test_run_dir_that_is_a_file(tmp_path, capsys):
    blocker = tmp_path / "run"
    blocker.write_text("a file, not a directory")
    line = one_line_failure(maze.main, [*TINY, "--total_steps", "40", "--run_dir", str(blocker)], capsys)
    assert line == f"error: cannot create the run directory {blocker}: File exists"
    line = one_line_failure(supervised.main, ["--task", "retrieval2", "--task.num_keys", "4", "--train.max_steps", "2",
                                              "--run_dir", str(blocker / "sub")], capsys)
    assert line == f"error: cannot create the run directory {blocker / 'sub'}: Not a directory"
    assert blocker.read_text() == "a file, not a directory"


def test_read_only_run_dir(tmp_path, capsys):
    """A read-only file system (a tmpfs mounted ro, as root), or a directory without write
    permission for everyone else."""
    ro = tmp_path / "ro"
    ro.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)],
                                                    capture_output=True).returncode == 0
    if not mounted:
        if os.geteuid() == 0:
            pytest.skip("cannot mount a read-only tmpfs here")
        ro.chmod(0o555)
    try:
        line = one_line_failure(maze.main, [*TINY, "--total_steps", "40", "--run_dir", str(ro / "run")], capsys)
        assert "cannot create the run directory" in line and ("Read-only" in line or "Permission" in line), line
    finally:
        if mounted:
            subprocess.run(["umount", str(ro)], check=True)


@pytest.mark.parametrize("flags", [["--loss.entropy_cost", "1e39"]], ids=["entropy_overflow"])
def test_divergence_stops_with_a_finite_checkpoint_that_resumes(flags, tmp_path, capsys):
    """An entropy cost that overflows float32 makes every loss -inf: the updates are skipped, the
    run stops after optim.max_nonfinite_steps with one line, the checkpoint is finite, and the
    same command resumes from it (and stops again, for the same reason)."""
    run_dir = str(tmp_path / "run")
    argv = [*TINY, "--total_steps", "100000", "--checkpoint.interval_minutes", "1e-9", "--run_dir", run_dir, *flags]
    line = one_line_failure(maze.main, argv, capsys)
    assert "NaN or inf in 10 updates in a row" in line and "is finite and resumes" in line
    payload = read_checkpoint(os.path.join(run_dir, "checkpoint.pt"))
    assert all(torch.isfinite(v).all() for v in payload["model"].values())
    step = payload["counters"]["step"]
    with pytest.raises(SystemExit) as stop:
        maze.main(argv)
    captured = capsys.readouterr()
    assert stop.value.code == 1 and f"resuming from {run_dir}/checkpoint.pt at step {step:,}" in captured.out
    assert "NaN or inf in 10 updates in a row" in captured.err


@pytest.mark.parametrize("interval", ["1e-9", "5"], ids=["checkpoint_every_update", "checkpoint_every_5_min"])
def test_weights_that_turn_nan_are_never_saved(interval, tmp_path, capsys):
    """RMSProp with eps 0 and lr 1 turns the weights NaN in the first update: the run stops with
    one line (the refused checkpoint, or the non-finite losses that follow) and saves nothing."""
    run_dir = str(tmp_path / "run")
    argv = [*TINY, "--total_steps", "100000", "--optim.eps", "0", "--optim.lr", "1", "--optim.grad_clip", "0",
            "--checkpoint.interval_minutes", interval, "--run_dir", run_dir]
    line = one_line_failure(maze.main, argv, capsys)
    assert "NaN or inf" in line and ("not saving the checkpoint" in line or "no checkpoint was written" in line)
    assert checkpoints(run_dir) == []


def test_supervised_kill_9_then_resume_keeps_the_log_history_byte_identical(tmp_path):
    """kill -9 a supervised run between checkpoints; the same command resumes, and logs.csv up to
    the checkpoint's step is byte for byte what the killed run wrote."""
    import signal

    run_dir = str(tmp_path / "run")
    argv = [sys.executable, "launch/supervised.py", "--task", "retrieval2", "--task.num_keys", "4",
            "--train.batch_size", "8", "--train.eval_every", "7", "--train.checkpoint_every", "10",
            "--log.every", "3", "--log.tensorboard", "false", "--run_dir", run_dir]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    stderr = str(tmp_path / "stderr.txt")
    with open(stderr, "w") as err:
        proc = subprocess.Popen([*argv, "--train.max_steps", "100000"], cwd=root, stdout=subprocess.DEVNULL, stderr=err)
    log = os.path.join(run_dir, "logs.csv")
    wait_for_run(proc, lambda: checkpoints(run_dir) and os.path.exists(log)
                 and read_checkpoint(checkpoints(run_dir)[0])["counters"]["step"] >= 30, stderr)
    time.sleep(0.3)  # a few more rows past the checkpoint
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with open(log, "rb") as f:
        killed = f.read()
    step = read_checkpoint(checkpoints(run_dir)[0])["counters"]["step"]
    kept = [line for line in killed.split(b"\n")[1:] if line and int(line.split(b",")[0]) <= step]
    subprocess.run([*argv, "--train.max_steps", str(step + 9)], cwd=root, check=True, capture_output=True)
    with open(log, "rb") as f:
        resumed = f.read()
    rows = resumed.split(b"\n")[1:]  # the header may have grown by the test metrics at the end
    assert rows[:len(kept)] == kept, (killed[:300], resumed[:300])
    assert len(rows) > len(kept) + 2  # and it went on logging


# ---------------------------------------------------------------- issue 24: a checkpoint is data

class _RunsCommand:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_code_running_checkpoint_never_runs_in_a_resume_or_an_evaluation(finished_run, tmp_path, capsys):
    run_dir = str(tmp_path / "run")
    shutil.copytree(finished_run, run_dir)
    marker = tmp_path / "code_ran"
    for path in checkpoints(run_dir):
        torch.save({"model": _RunsCommand(marker), "counters": {"step": 0}}, path)
    before = snapshot(run_dir)
    line = one_line_failure(maze.main, [*TINY, "--total_steps", "120", "--run_dir", run_dir], capsys)
    assert line.startswith("error: no usable checkpoint in") and "names posix.system" in line
    assert snapshot(run_dir) == before
    path = os.path.join(run_dir, "checkpoint.pt")
    line = one_line_failure(evaluate.main, [path, "--out", str(tmp_path / "eval")], capsys)
    assert line.startswith(f"error: checkpoint {path} is not plain data") and "convert_checkpoint.py" in line
    assert not marker.exists()


def test_evaluate_refuses_what_it_cannot_do_before_playing_a_game(finished_run, tmp_path, capsys):
    """One line each, before any game (Atari's take hours) and with nothing written: results that
    cannot be written where --out says, a device that is not there, a supervised run's checkpoint."""
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    line = one_line_failure(evaluate.main, [finished_run, "--out", str(a_file / "eval")], capsys, code=2)
    assert line == f"config error: --out: cannot write the results under {a_file / 'eval'}: {a_file} is not a directory"
    if not torch.cuda.is_available():
        line = one_line_failure(evaluate.main, [finished_run, "--device", "cuda", "--out", str(tmp_path / "eval")],
                                capsys, code=2)
        assert line.startswith("config error: --device: cuda was asked for, but CUDA is not available")
    supervised_run = str(tmp_path / "supervised")
    save_checkpoint(supervised_run, model=torch.nn.Linear(2, 2), optimizer=None, scheduler=None, counters={"step": 1},
                    config={"task": {"name": "retrieval2"}, "core": {"name": "lstm"}})
    line = one_line_failure(evaluate.main, [supervised_run, "--out", str(tmp_path / "eval")], capsys, code=2)
    assert line.startswith(f"error: {supervised_run}/checkpoint.pt is not an RL checkpoint")
    assert not os.path.exists(tmp_path / "eval")


def test_a_directory_named_checkpoint_is_one_line_before_training(finished_run, tmp_path, capsys):
    run_dir = str(tmp_path / "run")
    shutil.copytree(finished_run, run_dir)
    os.remove(os.path.join(run_dir, "checkpoint.pt"))
    os.mkdir(os.path.join(run_dir, "checkpoint.pt"))
    line = one_line_failure(maze.main, [*TINY, "--total_steps", "120", "--run_dir", run_dir], capsys)
    assert line == f"error: checkpoint {run_dir}/checkpoint.pt is a directory, not a file; move it away"


def _run(argv, timeout=120):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run([sys.executable, *argv], cwd=root, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("inference", ["actor", pytest.param("server", marks=pytest.mark.slow)])
def test_weights_made_nan_never_reach_the_actors_and_no_process_prints_a_traceback(inference, tmp_path):
    """RMSProp with eps 0 and lr 1: the first update makes the weights NaN; the run stops before
    publishing them, with one line, and neither the learner nor any actor or inference thread
    prints a traceback (the whole output of the process group is read)."""
    run_dir = str(tmp_path / "run")
    done = _run(["launch/maze.py", *TINY, "--total_steps", "100000", "--optim.eps", "0", "--optim.lr", "1",
                 "--actor.inference", inference, "--num_actors", "2", "--run_dir", run_dir])
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert lines[0].startswith("error: an update made the weights NaN or inf") and "before they reached the actors" \
        in lines[0] and "no checkpoint was written yet" in lines[0] and "optim.eps" in lines[0]
    assert checkpoints(run_dir) == []


@pytest.mark.parametrize("inference", ["actor", "server"])
def test_actors_that_see_non_finite_logits_stop_with_one_line(inference, capfd):
    """A policy whose logits are NaN (weights that diverged, or a memory that overflowed): the
    acting side stops the run with one line; no process prints a traceback."""
    from agents.acting.transport import EnvSetup
    from agents.config import options
    from agents.errors import ActorError
    from agents.learning.learner import make_transport
    from agents.run_config import build_model

    cfg = maze.load([*TINY, "--actor.inference", inference])
    model = build_model(cfg, _maze_shape(), 4)
    with torch.no_grad():
        model.policy.bias[0] = float("nan")
    transport = make_transport(cfg, model, device=torch.device("cpu"), seed=0,
                               envs=EnvSetup("maze", options(cfg.env), [0, 1], _maze_shape(), torch.float32))
    with pytest.raises(ActorError) as error:
        with transport:
            for _ in range(20):
                transport.get_batch()
    where = "actor 0 stopped" if inference == "actor" else "the inference loop stopped"
    assert str(error.value).startswith(f"{where}: the policy's logits are NaN or inf")
    captured = capfd.readouterr()
    assert "Traceback" not in captured.out + captured.err, captured.err


def _maze_shape():
    import envs

    probe = envs.make("maze", num_envs=1, seed=0)
    shape = tuple(probe.observation_shape)
    probe.close()
    return shape


def test_an_unreachable_ray_cluster_is_one_line_within_60_s_and_writes_nothing(finished_run, tmp_path):
    pytest.importorskip("ray")
    run_dir = str(tmp_path / "run")
    shutil.copytree(finished_run, run_dir)
    before = snapshot(run_dir)
    ray_processes = subprocess.run(["pgrep", "-f", "raylet|gcs_server"], capture_output=True, text=True).stdout
    start = time.monotonic()
    done = _run(["launch/maze.py", *TINY, "--actor.backend", "ray", "--ray.address", "127.0.0.1:1",
                 "--run_dir", run_dir], timeout=90)
    assert time.monotonic() - start < 60
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "error: cannot reach a Ray cluster at 127.0.0.1:1: connection refused; start one there with "
        "`ray start --head`, or use --ray.address local or auto"], done.stderr
    assert snapshot(run_dir) == before
    assert subprocess.run(["pgrep", "-f", "raylet|gcs_server"], capture_output=True, text=True).stdout == \
        ray_processes
