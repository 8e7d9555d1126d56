"""The actor pool: pipe queues that leave nothing in /dev/shm, even after kill -9 of the whole
process group under every start method; a dead actor's message names it, its signal and what to do."""
from __future__ import annotations

import copy
import multiprocessing
import os
import queue
import signal
import subprocess
import sys
import time

import pytest
import torch

import envs
from agents.acting.actor import ActorPool
from agents.acting.transport import ActorConfig, EnvSetup
from agents.acting.workers import IndexQueue, PipeFlag
from agents.errors import ActorError
from agents.learning.checkpoint import load_latest_good
from agents.learning.logger import read_csv
from agents.network import AgentNet
from tests.test_maze_training import MAZE, SMALL, _group_members, tiny_flags, wait_for_run

pytest.importorskip("envs.maze")

START_METHODS = ["fork", "spawn", "forkserver"]


def _put_all(q: IndexQueue, values: list[int], flag: PipeFlag) -> None:
    for v in values:
        q.put(v)
    flag.set()


@pytest.mark.parametrize("start_method", START_METHODS)
def test_pipe_queue_and_flag_cross_processes(start_method):
    q, flag = IndexQueue(), PipeFlag()
    assert q.empty() and not flag.is_set()
    with pytest.raises(queue.Empty):
        q.get(timeout=0.05)
    ctx = multiprocessing.get_context(start_method)
    writers = [ctx.Process(target=_put_all, args=(q, list(range(100 * i, 100 * i + 100)), flag)) for i in range(3)]
    for p in writers:
        p.start()
    got = sorted(q.get(timeout=30) for _ in range(300))
    for p in writers:
        p.join()
    assert got == list(range(300)) and q.empty() and flag.is_set() and flag.is_set()  # testing keeps it set
    q.close()
    flag.close()


def test_a_queue_on_descriptors_past_1023_waits_and_wakes():
    """A learner holding many shared tensors hands its queues high descriptor numbers, which select()
    refuses ("filedescriptor out of range")."""
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:
        if hard != resource.RLIM_INFINITY and hard < 2048:
            pytest.skip("the descriptor limit is below 2048")
        resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))
    q, flag = IndexQueue(), PipeFlag()
    for obj, high in ((q, 1500), (flag, 1502)):
        for name, fd in (("read_fd", high), ("write_fd", high + 1)):
            os.dup2(getattr(obj, name), fd)
            os.close(getattr(obj, name))
            setattr(obj, name, fd)
    try:
        assert q.empty() and not flag.is_set()
        with pytest.raises(queue.Empty):
            q.get(timeout=0.01)
        q.put(7)
        flag.set()
        assert not q.empty() and q.get(timeout=1) == 7 and flag.is_set()
    finally:
        q.close()
        flag.close()
        if soft < 2048:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _pool(start_method: str, num_buffers: int | None = None, model: AgentNet | None = None, nice: int = 0) -> ActorPool:
    probe = envs.make("maze", num_envs=1)
    obs_shape, obs_dtype = tuple(probe.observation_shape), torch.from_numpy(probe.reset()).dtype
    model = model or AgentNet(obs_shape, probe.num_actions, "lstm", {"hidden_size": 8})
    model.share_memory()
    return ActorPool(model, envs=EnvSetup("maze", {"episode_length": 20}, [0, 1], obs_shape, obs_dtype),
                     actor=ActorConfig(num_actors=2, envs_per_actor=4, unroll_length=5, start_method=start_method,
                                       num_buffers=num_buffers, nice=nice), unrolls_per_batch=1)


def _policy_lags(num_buffers: int | None, batches: int = 8) -> list[int]:
    """With a learner slower than the actors: for each batch, how many weight versions it lags
    behind the learner's. Version v of the weights makes logit 0 equal v, so each unroll's
    logits say which versions acted in it (the oldest counts); the ``policy_version`` the
    actors record at each step must say the same (no weights are written while they act here)."""
    probe = envs.make("maze", num_envs=1)
    learner = AgentNet(tuple(probe.observation_shape), probe.num_actions, "lstm", {"hidden_size": 8})
    with torch.no_grad():
        learner.policy.weight.zero_()
        learner.policy.bias.zero_()
    actors = copy.deepcopy(learner)
    lags = []
    with _pool("fork", num_buffers, actors) as pool:
        for version in range(batches):
            batch = pool.get_batch()
            lags.append(version - int(batch["logits"][1:, :, 0].min()))
            assert torch.equal(batch["policy_version"][1:].float(), batch["logits"][1:, :, 0])
            time.sleep(0.3)  # the learner's update: the actors fill every free buffer meanwhile
            with torch.no_grad():
                learner.policy.bias[0] = version + 1
            pool.publish_weights(learner)
    return lags


def test_publishing_copies_every_weight_and_buffer_also_a_redrawn_one():
    """The actors' shared copy takes the learner's weights, PopArt statistics and FAVOR+
    projections; a redraw replaces the learner's projection tensor, and the copy still gets it."""
    from fastnet.feature_maps import redraw_random_features

    probe = envs.make("maze", num_envs=1)
    learner = AgentNet(tuple(probe.observation_shape), probe.num_actions, "linear",
                       {"feature_map": "favor", "favor_features": 8, "hidden_size": 16, "num_layers": 1,
                        "num_heads": 2, "head_dim": 8, "ff_size": 16},
                       popart={"step": 0.01, "min_sigma": 0.01})
    actors = copy.deepcopy(learner)
    pool = _pool("fork", model=actors)  # not started: no processes needed to publish
    (projection,) = [k for k in learner.state_dict() if k.endswith("projection")]
    redraw_random_features(learner)
    assert not torch.equal(actors.state_dict()[projection], learner.state_dict()[projection])
    with torch.no_grad():
        for p in learner.parameters():
            p.add_(1.0)
        learner.baseline.mu.fill_(3.0)
    pool.publish_weights(learner)
    shared, learned = actors.state_dict(), learner.state_dict()
    for key, value in learned.items():
        assert torch.equal(shared[key], value), key
    pool.close()


def test_num_buffers_of_one_batch_bound_the_policy_lag_to_one_batch():
    """A batch's worth of buffers: each batch was acted with the weights one update old at most
    (the actors fill it while the learner learns from the last); the default's 5 buffers lag more."""
    bounded = _policy_lags(num_buffers=1)
    assert max(bounded[2:]) <= 1, bounded
    default = _policy_lags(num_buffers=None)
    assert max(default[2:]) >= 3, default
    with pytest.raises(ValueError, match="num_buffers \\(0\\) must be at least the unrolls per batch \\(1\\)"):
        _pool("fork", num_buffers=0)


@pytest.mark.parametrize("nice", [0, 3, 19])
def test_actors_run_at_the_learners_niceness_plus_actor_nice(nice):
    """Each actor process adds ``actor.nice`` to the niceness it inherits (Linux caps it at 19)."""
    learner = os.getpriority(os.PRIO_PROCESS, 0)
    with _pool("fork", nice=nice) as pool:
        pool.get_batch()  # both actors are past their start
        assert [os.getpriority(os.PRIO_PROCESS, p.pid) for p in pool.processes] == [min(19, learner + nice)] * 2


def test_a_killed_actor_is_named_with_its_signal_and_what_to_do():
    with _pool("fork") as pool:
        assert pool.get_batch()["obs"].shape[:2] == (6, 4)  # [T+1, N, ...]
        os.kill(pool.processes[1].pid, signal.SIGKILL)
        pool.processes[1].join()
        with pytest.raises(ActorError) as error:
            while True:
                pool.get_batch()
    assert str(error.value).startswith("actor 1 was killed by SIGKILL (by the kernel's out-of-memory killer? "
                                       "see `dmesg`")
    assert str(error.value).endswith("; run the same command again to resume from the last checkpoint")
    assert error.value.exit_code == 1
    assert multiprocessing.active_children() == []


def test_an_actor_that_exits_is_named_with_its_exit_code(monkeypatch):
    pool = _pool("fork")
    monkeypatch.setattr(envs, "make", lambda *args, **kwargs: os._exit(3))  # the actors forked next inherit it
    with pool, pytest.raises(ActorError, match=r"^actor \d exited with code 3 \(its output above "
                                                                r"may say why\); run the same command again"):
        pool.get_batch()


def test_a_start_that_fails_partway_stops_the_actors_it_started():
    """The second actor's fork fails (EAGAIN, or a Ctrl-C there): the first, already running, is
    stopped on the way out of the ``with``, so the interpreter does not wait on it at exit."""
    pool = _pool("fork")

    def fork_fails():
        raise OSError(11, "Resource temporarily unavailable")

    pool.processes[1].start = fork_fails
    with pytest.raises(OSError), pool:
        pass
    assert pool.processes[0].pid is not None and not pool.processes[0].is_alive()
    assert multiprocessing.active_children() == []


def _shm_inodes(pids: set[int]) -> set[int]:
    """The inode numbers of the /dev/shm files, named or already unlinked, that the processes
    ``pids`` have mapped or open (a named semaphore is mapped under the temporary name it was
    created with, and linked to its ``sem.mp-*`` name after)."""
    inodes = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                inodes |= {int(line.split()[4]) for line in f if " /dev/shm/" in line}
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/dev/shm/"):
                    inodes.add(os.stat(f"/proc/{pid}/fd/{fd}").st_ino)
        except OSError:  # the process or descriptor is gone meanwhile
            continue
    return inodes


def _shm_files(inodes: set[int]) -> list[str]:
    """The names in /dev/shm of the files with these inode numbers."""
    found = []
    for entry in os.scandir("/dev/shm"):
        try:
            if entry.inode() in inodes:
                found.append(entry.name)
        except OSError:
            continue
    return found


def _wait_for(condition, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.1)


@pytest.mark.parametrize("start_method, moment", [
    ("spawn", "starting"), ("fork", "training"),
    *[pytest.param(method, "starting", marks=pytest.mark.slow) for method in START_METHODS if method != "spawn"],
    *[pytest.param(method, "training", marks=pytest.mark.slow) for method in START_METHODS[1:]],  # 12-15 s each
])
def test_kill_9_of_the_group_leaves_nothing_in_dev_shm(start_method, moment, tmp_path):
    """After kill -9 of the whole group (the resource tracker and forkserver included), no file
    that the run had mapped or open is left in /dev/shm; the same command then resumes, and the
    log up to the resume point is unchanged."""
    run_dir = str(tmp_path / "run")
    argv = [sys.executable, MAZE, "--core", "lstm", "--run_dir", run_dir, "--total_steps", "10000000",
            *tiny_flags("lstm"), "--actor.start_method", start_method, "--checkpoint.milestones", "[320]", *SMALL]
    stderr = str(tmp_path / "stderr.txt")
    with open(stderr, "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    csv_path = os.path.join(run_dir, "logs.csv")
    inodes = set()

    def reached() -> bool:
        members = _group_members(proc.pid)
        inodes.update(_shm_inodes(members))
        if moment == "starting":
            return len(members) >= 3  # the learner and its 2 actors at least
        return os.path.exists(csv_path) and len(read_csv(csv_path)) >= 3

    try:
        wait_for_run(proc, reached, stderr)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    _wait_for(lambda: _group_members(proc.pid) == [], timeout=15)
    assert inodes  # the shared tensors at least (their names are gone)
    assert _shm_files(inodes) == []
    if moment == "training":  # the same command resumes; the log up to the resume point is unchanged
        with open(csv_path, "rb") as f:
            log_before = f.read().splitlines(keepends=True)
        resumed = load_latest_good(run_dir)[1]["counters"]["step"]  # 320, a milestone
        argv[argv.index("10000000")] = str(resumed + 320)
        result = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"at step {resumed:,}\n" in result.stdout
        with open(csv_path, "rb") as f:
            log_after = f.read().splitlines(keepends=True)
        kept = 1 + sum(1 for row in read_csv(csv_path) if row["step"] <= resumed)
        assert kept == 3 and log_after[:kept] == log_before[:kept]  # the header and the rows at 160 and 320
