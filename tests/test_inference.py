"""Server mode (agents/acting/inference.py): the inference loop acts exactly as a sequential single-process
rollout does; dynamic batching serves late workers in the next batch and starves none; a killed
env worker stops the run cleanly; a maze run in server mode learns."""
from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import queue
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import envs
from agents.acting.inference import WAKE, InferenceServer, _runs, split_seed
from agents.acting.transport import ActorConfig, EnvSetup, ServerConfig
from agents.errors import ActorError
from agents.learning.learner import train
from agents.learning.logger import read_csv
from agents.network import AgentNet
from fastnet.registry import core_class
from tests.test_actor import _shm_files, _shm_inodes, _wait_for
from tests.test_maze_training import MAZE, SMALL, TINY, _group_members, config, tiny_flags

pytest.importorskip("envs.maze")
pytestmark = pytest.mark.usefixtures("one_torch_thread")


# CartPole: each env starts elsewhere and its episodes end at their own times (every ~10 steps),
# so the envs' histories, core states and argmax actions differ and a mix-up shows.
ENV, ENV_OPTIONS = "gym", {"id": "CartPole-v1"}


def _policy(core: str, env_name: str = ENV, env_options: dict = ENV_OPTIONS, **core_options) -> AgentNet:
    """A small agent whose argmax action depends on its inputs (its first and last layers scaled up)."""
    probe = envs.make(env_name, num_envs=1, **env_options)
    torch.manual_seed(0)
    fields = {f.name for f in dataclasses.fields(core_class(core).Config)}
    model = AgentNet(tuple(probe.observation_shape), probe.num_actions, core,
                     {**{k: v for k, v in TINY.items() if k in fields}, **core_options})
    with torch.no_grad():
        next(m for m in model.stem.modules() if isinstance(m, torch.nn.Linear)).weight.mul_(10)
        model.policy.weight.mul_(30)
    return model.eval()


def _server(model: AgentNet, num_workers: int, envs_per_worker: int, unroll_length: int, batch_size: int,
            sample: bool = True, **server) -> InferenceServer:
    """A server of ``num_workers`` x ``envs_per_worker`` envs of ENV; ``server``: ServerConfig's fields."""
    probe = envs.make(ENV, num_envs=1, **ENV_OPTIONS)
    setup = EnvSetup(ENV, ENV_OPTIONS, [10 + i for i in range(num_workers)], tuple(probe.observation_shape),
                     torch.from_numpy(probe.reset()).dtype)
    return InferenceServer(model, envs=setup, actor=ActorConfig(num_actors=num_workers, envs_per_actor=envs_per_worker,
                                                                unroll_length=unroll_length,
                                                                server=ServerConfig(**server)),
                           batch_size=batch_size, device=torch.device("cpu"), sample=sample)


def _sequential(model: AgentNet, num_envs: int, seed: int, steps: int) -> tuple[dict, list]:
    """A plain single-process rollout with the argmax policy: the rows (the transport's layout)
    and the core state before each row."""
    env = envs.make(ENV, num_envs=num_envs, seed=seed, **ENV_OPTIONS)
    row = {"obs": torch.from_numpy(env.reset()), "reward": torch.zeros(num_envs),
           "done": torch.ones(num_envs, dtype=torch.bool), "action": torch.zeros(num_envs, dtype=torch.int64),
           "logits": torch.zeros(num_envs, model.num_logits)}
    state = model.initial_state(num_envs)
    rows, states = [], []
    for _ in range(steps):
        rows.append(row)
        states.append(state)
        action, logits, state = model.act(row["obs"], row["reward"], row["action"], row["done"], state, sample=False)
        obs, reward, done, _ = env.step(action.numpy())
        row = {"obs": torch.from_numpy(obs), "reward": torch.from_numpy(reward), "done": torch.from_numpy(done),
               "action": action, "logits": logits}
    return {k: torch.stack([r[k] for r in rows]) for k in rows[0]}, states


def _unrolls(batch: dict, envs_per_worker: int) -> list[tuple[int, dict]]:
    """The batch split into its groups of ``envs_per_worker`` (a unit's envs): (unit, {key: [T+1, E, ...]
    or state [E, ...]})."""
    E, out = envs_per_worker, []
    for g in range(batch["env_slot"].shape[0] // E):
        cols = slice(g * E, (g + 1) * E)
        worker = int(batch["env_slot"][g * E]) // E
        assert batch["env_slot"][cols].tolist() == [worker * E + e for e in range(E)]
        out.append((worker, {k: (v[cols] if k.startswith("state_") else v[:, cols]).clone()
                             for k, v in batch.items() if k != "env_slot"}))
    return out


def _matches(unroll: dict, rows: dict, states: list, k: int, T: int) -> bool:
    if (k + 1) * T >= rows["obs"].shape[0]:
        return False
    span = slice(k * T, k * T + T + 1)
    return (all(torch.equal(unroll[key], rows[key][span]) for key in ("obs", "reward", "done", "action"))
            and torch.allclose(unroll["logits"], rows["logits"][span], atol=1e-4)  # logits ~25: float32 sums
            and all(torch.allclose(unroll[f"state_{i}"], s, atol=1e-5) for i, s in enumerate(states[k * T])))


def _closest(unroll: dict, rows: dict, states: list, T: int, candidates: int) -> str:
    """Where an unroll parts from the rollout step that resembles it most (for the failure message)."""
    def parts(k: int) -> dict[str, float]:
        span = slice(k * T, k * T + T + 1)
        diff = {key: (unroll[key].double() - rows[key][span].double()).abs().max().item()
                for key in ("obs", "reward", "done", "action", "logits")}
        diff.update({f"state_{i}": (unroll[f"state_{i}"] - s).abs().max().item() for i, s in enumerate(states[k * T])})
        return diff
    valid = [k for k in range(candidates) if (k + 1) * T < rows["obs"].shape[0]]
    k = min(valid, key=lambda k: sum(v > 1e-4 for v in parts(k).values()))
    span = slice(k * T, k * T + T + 1)
    envs_apart = (unroll["obs"] != rows["obs"][span]).flatten(2).any(-1).any(0).nonzero().flatten().tolist()
    return (f"closest is unroll {k} (its envs {envs_apart} see other observations), max differences "
            + ", ".join(f"{n} {v:.2g}" for n, v in parts(k).items()))


def _check_acts_as_sequential_rollouts(model, server, num_workers, splits, envs_per_unit, T, groups_per_batch):
    """Every unroll the server assembles is its unit's sequential rollout (observations, rewards,
    dones, actions, logits, and the core state at its start: with T = 1, the state at every
    step), across episode ends; each unit's rows match only its own rollout."""
    per_unit = max(8, 48 // T)  # unrolls compared per unit: 48 steps or more
    units = num_workers * splits
    references = [_sequential(model, envs_per_unit, split_seed(10 + u // splits, u % splits), per_unit * T * 2 + 2)
                  for u in range(units)]
    found: dict[int, list[int]] = {u: [] for u in range(units)}
    with server:
        while min(len(k) for k in found.values()) < per_unit:
            for unit, unroll in _unrolls(server.get_batch(), envs_per_unit):
                if len(found[unit]) == per_unit:  # a unit served more often than the slowest (a loaded machine):
                    continue  # its first per_unit unrolls are checked; its rollout reference is not longer
                rows, states = references[unit]
                k = next((k for k in range(per_unit * 2) if k not in found[unit]
                          and _matches(unroll, rows, states, k, T)), None)  # (an episode may repeat another)
                assert k is not None, (f"unroll {len(found[unit])} of unit {unit} matches no other unroll of its "
                                       f"sequential rollout; {_closest(unroll, rows, states, T, per_unit * 2)}")
                found[unit].append(k)
    assert multiprocessing.active_children() == []
    for ks in found.values():
        if groups_per_batch == 1:  # one unit's unrolls come in order
            assert ks == list(range(len(ks)))
        else:  # batches of several units' unrolls complete out of order, the early ones first
            assert sorted(ks)[:per_unit // 2] == list(range(per_unit // 2))
    # what the test relies on to see a mix-up: episode ends, and envs that act differently
    assert sum(bool(rows["done"][1:per_unit * T].any()) for rows, _ in references) >= units / 2
    assert any((rows["action"][:, 0] != rows["action"][:, 1]).any() for rows, _ in references)


# The default suite plays a Latin square of the 27 cases (every pair of core, unroll and split
# once: 9 cases); the other 18 are slow.
SERVER_CASES = [pytest.param(core, T, g, splits, marks=() if (i + j) % 3 + 1 == splits else pytest.mark.slow)
                for i, core in enumerate(["lstm", "delta", "srwm"]) for j, (T, g) in enumerate([(1, 1), (4, 1), (3, 2)])
                for splits in (1, 2, 3)]


@pytest.mark.parametrize("core,unroll_length,groups_per_batch,splits", SERVER_CASES)
def test_server_mode_acts_exactly_as_a_sequential_rollout(core, unroll_length, groups_per_batch, splits):
    """Argmax policy, fixed seeds, 3 workers whose envs take turns in 1, 2 or 3 units of 2 envs."""
    W, e, T = 3, 2, unroll_length
    model = _policy(core)
    server = _server(model, W, e * splits, T, e * groups_per_batch, sample=False, worker_splits=splits)
    _check_acts_as_sequential_rollouts(model, server, W, splits, e, T, groups_per_batch)


def test_each_step_records_the_version_of_the_weights_that_chose_its_action():
    """Version v of the published weights makes logit 0 equal v, so the logits say which
    version chose each action; ``policy_version`` must say the same at every step, in unrolls
    that span several publications (3 workers in 2 units each, batches of two units' envs)."""
    learner = _policy("lstm")
    with torch.no_grad():
        learner.policy.weight.zero_()
        learner.policy.bias.zero_()
    published, versions = 0, set()
    with _server(learner, 3, 4, 3, 4, sample=False, worker_splits=2) as server:
        for _ in range(12):
            batch = server.get_batch()
            acted = batch["policy_version"][1:]
            assert torch.equal(acted.float(), batch["logits"][1:, :, 0])
            assert (acted <= published).all() and (acted.diff(dim=0) >= 0).all()
            versions |= set(acted.unique().tolist())
            with torch.no_grad():
                learner.policy.bias[0] = published = published + 1
            server.publish_weights(learner)
    assert len(versions) >= 4, versions  # the check saw weights change between batches


def test_rows_merge_into_runs_of_consecutive_units_and_groups_by_hand():
    """(unit, batch, step, group) rows become one copy per run of consecutive units writing one
    step of one batch into consecutive groups, whatever order they come in."""
    rows = [(3, 1, 0, 0), (0, 0, 5, 6), (1, 0, 5, 7), (2, 1, 5, 3), (4, 1, 0, 1), (5, 1, 0, 3), (6, 0, 5, 8)]
    assert sorted(_runs(rows)) == sorted([(0, 0, 5, 6, 2), (6, 0, 5, 8, 1),  # unit 6 is not unit 2's neighbour
                                          (3, 1, 0, 0, 2), (5, 1, 0, 3, 1),  # group 2 skipped: a new run
                                          (2, 1, 5, 3, 1)])                  # another step of batch 1
    assert _runs([]) == []
    covered = sorted((u + i, b, t, g + i) for u, b, t, g, n in _runs(rows) for i in range(n))
    assert covered == sorted(rows)


def test_a_clocked_core_acts_in_server_mode_as_a_sequential_rollout():
    """The clock of ``position_features`` is one more core-state tensor, a count, for the server's table."""
    model = _policy("delta", position_features=4)
    server = _server(model, 2, 4, 3, 2, sample=False, worker_splits=2)
    _check_acts_as_sequential_rollouts(model, server, 2, 2, 2, 3, 1)


def test_a_planted_swap_of_two_units_states_fails_the_equivalence_check(monkeypatch):
    """The check above can fail: swapping the core-state rows of two units after the server's
    20th inference batch is caught."""
    W, splits, e, T = 2, 2, 2, 4
    model = _policy("lstm")
    server = _server(model, W, e * splits, T, e, sample=False, worker_splits=splits)
    serve = server._serve

    def serve_then_swap(units, stalled):
        serve(units, stalled)
        if server.served[0] == 20:
            for table in server.state_table:
                table[[0, 1, 2, 3]] = table[[2, 3, 0, 1]].clone()  # unit 0's rows <-> unit 1's
    monkeypatch.setattr(server, "_serve", serve_then_swap)
    with pytest.raises(AssertionError, match="matches no other unroll"):
        _check_acts_as_sequential_rollouts(model, server, W, splits, e, T, 1)


@pytest.mark.parametrize("splits", [1, 2])
def test_late_workers_are_served_in_the_next_batch(splits):
    """Dynamic batching, on the loop's own bookkeeping (no processes): a batch waits up to
    max_wait for more units, takes all that came, and one that comes later is in the next."""
    server = _server(_policy("lstm"), num_workers=3, envs_per_worker=splits, unroll_length=2, batch_size=1,
                     max_wait_ms=200.0, worker_splits=splits, max_batch=3)  # 3 units of 1 env: a full batch
    stalled: list[int] = []
    server.ready.put(2)
    server.ready.put(0)
    start = time.monotonic()
    assert server._collect(stalled) == [2, 0]  # waited for the third until max_wait
    assert 0.15 < time.monotonic() - start < 2.0
    server.ready.put(1)
    assert server._collect(stalled) == [1]
    server.ready.put(1)
    server.ready.put(0)
    server.ready.put(2)
    start = time.monotonic()
    assert server._collect(stalled) == [1, 0, 2]  # all three: served at once
    assert time.monotonic() - start < 0.15
    with pytest.raises(queue.Empty):
        server.ready.get(timeout=0)
    server.free_groups.clear()  # no free group: a worker at an unroll start waits (backpressure)
    stalled.append(0)
    assert server._collect(stalled) == [] and stalled == [0]
    server.released.put((1, None))  # the learner hands batch 1 back
    server.ready.put(WAKE)
    server.max_wait_s = 0.01
    start = time.monotonic()
    assert server._collect(stalled) == [0] and stalled == []
    assert time.monotonic() - start < 0.08  # it waited max_wait for company, not the 0.1 s idle poll
    server.workers.close()


class SlowEnv:
    """A batched env of one-number observations whose step sleeps ``delay_s``, 10x longer for seed 0."""

    @dataclasses.dataclass
    class Config:
        delay_s: float = 0.004

    def __init__(self, num_envs: int, seed: int = 0, **options):
        self.num_envs, self.observation_shape, self.num_actions = num_envs, (1,), 2
        self.delay_s = self.Config(**options).delay_s * (10 if seed == 0 else 1)

    def reset(self) -> np.ndarray:
        return np.zeros((self.num_envs, 1), np.float32)

    def step(self, actions: np.ndarray):
        time.sleep(self.delay_s)
        zeros = np.zeros(self.num_envs, np.float32)
        return self.reset(), zeros, np.zeros(self.num_envs, bool), {"episode_return": zeros, "episode_length": zeros}

    def close(self) -> None:
        pass


@pytest.mark.parametrize("splits", [1, 2])
def test_a_10x_slower_worker_neither_starves_nor_holds_the_others_back(monkeypatch, splits):
    """Worker 0's first unit (seed 0) steps 10x slower; its other unit shares its process, so
    only the other workers' units must keep their own pace."""
    monkeypatch.setitem(envs.ENVS, "slow", f"{__name__}:SlowEnv")  # forked workers inherit it
    W, T, seconds = 4, 4, 3.0
    setup = EnvSetup("slow", {}, list(range(W)), (1,), torch.float32)
    actor = ActorConfig(num_actors=W, envs_per_actor=splits, unroll_length=T, server=ServerConfig(worker_splits=splits))
    server = InferenceServer(_policy("lstm", "slow", {}), envs=setup, actor=actor, batch_size=1,
                             device=torch.device("cpu"))
    unrolls = [0] * (W * splits)
    with server:
        for _ in range(W * splits):  # every unit has started
            server.get_batch()
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            unrolls[int(server.get_batch()["env_slot"][0])] += 1
    slow_ideal = seconds / (10 * 0.004 * T)  # ~19 unrolls if each step is served at once
    assert unrolls[0] >= 0.6 * slow_ideal / splits, unrolls  # its sibling unit takes turns with it
    assert min(unrolls[splits:]) >= 3 * unrolls[0], unrolls  # ideally 10x: not held to the slow one's pace


def test_a_killed_env_worker_stops_the_run_cleanly_within_10_s(tmp_path):
    """SIGKILL of one env worker of a training run in server mode: one clear line, a checkpoint,
    exit within 10 s, no process left, nothing left in /dev/shm."""
    run_dir = str(tmp_path / "run")
    argv = [sys.executable, MAZE, "--core", "lstm", "--run_dir", run_dir, "--total_steps", "10000000",
            *tiny_flags("lstm"), "--actor.inference", "server", *SMALL]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    csv_path = os.path.join(run_dir, "logs.csv")
    inodes: set[int] = set()

    def training() -> bool:
        inodes.update(_shm_inodes(set(_group_members(proc.pid))))
        return os.path.exists(csv_path) and len(read_csv(csv_path)) >= 2

    try:
        _wait_for(training)
        workers = [p for p in _group_members(proc.pid) if p != proc.pid]
        assert len(workers) == 2  # the 2 env workers; the inference loop is a thread
        os.kill(workers[1], signal.SIGKILL)
        killed_at = time.monotonic()
        _, err = proc.communicate(timeout=10)
        assert time.monotonic() - killed_at < 10
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 1, err
    assert "env worker 1 was killed by SIGKILL" in err and "resume from the last checkpoint" in err
    assert "Traceback" not in err
    _wait_for(lambda: _group_members(proc.pid) == [], timeout=5)
    assert inodes and _shm_files(inodes) == []


@pytest.mark.parametrize("splits", [1, 2])
def test_a_worker_killed_under_the_server_is_named(splits):
    with _server(_policy("lstm"), 2, 2, 3, 2, worker_splits=splits) as server:
        server.get_batch()
        os.kill(server.processes[0].pid, signal.SIGKILL)
        with pytest.raises(ActorError, match=r"^env worker 0 was killed by SIGKILL"):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                server.get_batch()
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("core", ["lstm", "delta", "mnm_p", "srwm"])
def test_cores_train_and_resume_in_server_mode(core, tmp_path):
    run_dir = str(tmp_path / core)
    first = train(config(core, run_dir, "--total_steps", "960", "--actor.inference", "server"))
    assert first["step"] == 960 and first["episodes"] > 0
    second = train(config(core, run_dir, "--total_steps", "1920", "--actor.inference", "actor"))
    assert second["step"] == 1920  # a run may switch modes on resume
    rows = read_csv(os.path.join(run_dir, "logs.csv"))
    assert [r["step"] for r in rows] == [160 * i for i in range(1, 13)]
    batch_envs = [r["inference_batch"] for r in rows[:6] if not math.isnan(r["inference_batch"])]
    assert batch_envs and all(8 <= b <= 16 for b in batch_envs)  # 1 or 2 workers of 8 envs per inference batch
    lags = [r["policy_lag"] for r in rows]  # each process's first batch is acted before it publishes any weights
    assert lags[0] == lags[6] == 0 and all(0 <= lag <= 6 for lag in lags), lags


@pytest.mark.slow
def test_a_maze_run_in_server_mode_learns(tmp_path):
    from launch import maze

    cfg = maze.load(["--core", "lstm", "--run_dir", str(tmp_path), "--total_steps", "800000", "--log.tensorboard",
                     "false", "--log.return_window", "200", "--actor.inference", "server"])
    result = train(cfg)
    assert result["mean_return"] > 30, result  # random ≈ 9; actor mode passes the same bar


def test_a_favor_redraw_never_lands_inside_an_inference_batch(monkeypatch):
    """The learner redraws FAVOR+'s random features and publishes its weights while the loop acts:
    every inference batch reads one projection from its first feature map call to its last
    (publish_weights waits for the batch under the server's lock), and the redraws do reach it."""
    from fastnet.feature_maps import FeatureMap, redraw_random_features

    probe = envs.make(ENV, num_envs=1, **ENV_OPTIONS)
    torch.manual_seed(0)
    options = {k: v for k, v in TINY.items() if k in {f.name for f in dataclasses.fields(core_class("delta").Config)}}
    learner = AgentNet(tuple(probe.observation_shape), probe.num_actions, "delta",
                       {**options, "feature_map": "favor", "favor_features": 4})
    server = _server(learner, 2, 2, 2, 2, worker_splits=2)
    seen: list[list[torch.Tensor]] = []  # the projections one inference batch read, in order
    act = server.policy.act
    maps = [m for m in server.policy.modules() if isinstance(m, FeatureMap)]

    def slow_forward(self, x, forward=FeatureMap.forward):
        seen[-1].append(self.projection.clone())
        time.sleep(0.002)  # a wide window for a copy to land in
        return forward(self, x)

    def act_and_record(*args, **kwargs):
        seen.append([])
        out = act(*args, **kwargs)
        seen[-1].append(maps[0].projection.clone())
        return out
    monkeypatch.setattr(FeatureMap, "forward", slow_forward)
    monkeypatch.setattr(server.policy, "act", act_and_record)
    with server:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            server.get_batch()
            learner.train()
            redraw_random_features(learner)
            server.publish_weights(learner)
    batches = [b for b in seen if len(b) > 1]
    assert len(batches) > 20
    assert all(torch.equal(p, b[0]) for b in batches for p in b), "a redraw landed inside an inference batch"
    assert len({tuple(b[0].flatten().tolist()) for b in batches}) > 5  # the redraws reached the loop


@pytest.mark.parametrize("reads", ["act", "final_values"])
def test_with_the_side_stream_a_weight_copy_and_the_loops_reads_wait_for_each_other(monkeypatch, reads):
    """The weights lock orders the two threads, not their CUDA streams: with the side stream a
    weight copy must wait on the GPU for the loop's last reads of the weights (an inference batch,
    or the values of truncated episodes' last observations), and the loop's next reads for the
    copy. The loop's bookkeeping is run directly (no processes), with the events logged."""
    server = _server(_policy("lstm"), num_workers=2, envs_per_worker=2, unroll_length=2, batch_size=2)
    server.side_stream = True  # its events, logged in place of CUDA's (this is a CPU machine)
    log: list[tuple] = []
    recorded = iter(range(1, 100))
    monkeypatch.setattr(server, "_event", lambda: log.append(("record", next(recorded))) or log[-1][1])
    monkeypatch.setattr(server, "_wait", lambda event: event is not None and log.append(("wait", event)))
    read, load = getattr(server.policy, reads), server.policy.load_state_dict
    monkeypatch.setattr(server.policy, reads, lambda *a, **k: log.append((reads,)) or read(*a, **k))
    monkeypatch.setattr(server.policy, "load_state_dict", lambda *a, **k: log.append(("copy",)) or load(*a, **k))
    if reads == "final_values":
        server.slots["truncated"][0] = True
    learner = _policy("lstm")
    for _ in range(2):
        server._serve([0, 1], []) if reads == "act" else server._final_values([0])
        server.publish_weights(learner)
    assert log == [(reads,), ("record", 1), ("wait", 1), ("copy",), ("record", 2),
                   ("wait", 2), (reads,), ("record", 3), ("wait", 3), ("copy",), ("record", 4)]
    server.workers.close()


def test_a_separate_critic_trains_and_resumes_in_server_mode_and_actor_mode(tmp_path):
    """``network.separate_critic``'s second core state rides through the server's state table,
    the actors' buffers and the checkpoint; MNM's meta loss comes from both cores."""
    run_dir = str(tmp_path / "critic")
    flags = ("--network.separate_critic", "true")
    first = train(config("mnm_p", run_dir, "--total_steps", "960", "--actor.inference", "server", *flags))
    second = train(config("mnm_p", run_dir, "--total_steps", "1920", "--actor.inference", "actor", *flags))
    assert first["step"] == 960 and second["step"] == 1920 and second["episodes"] > first["episodes"]
    rows = read_csv(os.path.join(run_dir, "logs.csv"))
    assert all(math.isfinite(r["aux_meta"]) and math.isfinite(r["aux_critic_meta"]) for r in rows)
