"""The Ray backend on a local Ray (2 CPUs): a maze run trains, logs the policy lag and resumes
(on either backend); the hosts never run ahead of a slow learner by more than the in-flight bound."""
from __future__ import annotations

import math
import os
import time

import numpy as np
import pytest
import torch

from agents.acting.ray_backend import RayTransport
from agents.acting.transport import ActorConfig, RayConfig
from agents.errors import ActorError, ConfigError
from agents.learning.checkpoint import checkpoints, read_checkpoint
from agents.learning.learner import train
from agents.learning.logger import read_csv
from agents.run_config import build_model
from tests.test_maze_training import config

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_maze_trains_on_ray_logs_the_policy_lag_and_resumes(local_ray, tmp_path):
    run_dir = str(tmp_path / "run")
    first = train(config("lstm", run_dir, "--total_steps", "960", "--actor.backend", "ray"))
    assert first["step"] == 960 and first["episodes"] > 0
    rows = read_csv(os.path.join(run_dir, "logs.csv"))
    assert [r["step"] for r in rows] == [160 * i for i in range(1, 7)]
    lags = [r["policy_lag"] for r in rows]
    assert all(0 <= lag <= 6 for lag in lags) and max(lags) > 0  # acting runs ahead of learning
    assert rows[-1]["host_failures"] == rows[-1]["hosts_restarted"] == rows[-1]["unrolls_lost"] == 0
    second = train(config("lstm", run_dir, "--total_steps", "1920", "--actor.backend", "local"))
    assert second["step"] == 1920 and math.isfinite(read_csv(os.path.join(run_dir, "logs.csv"))[-1]["loss"])


def test_server_inference_needs_the_local_backend(tmp_path):
    with pytest.raises(ConfigError, match="actor.inference"):
        train(config("lstm", str(tmp_path), "--total_steps", "960", "--actor.backend", "ray",
                     "--actor.inference", "server"))


@pytest.mark.parametrize("unrolls_per_call", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_hosts_stay_within_the_in_flight_bound_of_a_slow_learner(local_ray, unrolls_per_call, tmp_path):
    """Slowed on purpose, the learner takes one batch per 0.3 s; hosts that unroll far faster
    have made exactly what was taken, plus what a call brought beyond it, plus what is in flight:
    never more than the bound of calls each."""
    cfg = config("lstm", str(tmp_path), "--actor.backend", "ray")
    model = build_model(cfg, (10,), 4)  # the maze's observation and actions
    from agents.config import to_dict

    transport = RayTransport(model, run_config=to_dict(cfg), actor=ActorConfig(num_actors=2, envs_per_actor=8),
                             ray_config=RayConfig(max_in_flight=2, unrolls_per_call=unrolls_per_call),
                             unrolls_per_batch=1, seeds=[0, 1])
    taken, most_in_flight = 0, 0
    with transport:
        for _ in range(8):
            batch = transport.get_batch()
            assert batch["obs"].shape[:2] == (11, 8)
            taken += 1
            time.sleep(0.3)
            in_flight_per_host = [sum(h == host for h, _ in transport.pending.values()) for host in range(2)]
            most_in_flight = max(most_in_flight, *in_flight_per_host)
        in_flight, carried = len(transport.pending), len(transport.carried)
        made = sum(w["unrolls_done"] for w in ray.get([h.where.remote() for h in transport.hosts]))
    assert most_in_flight == 2 and in_flight == 4
    assert made == taken + carried + in_flight * unrolls_per_call  # where() ran after the calls in flight
    assert carried < unrolls_per_call  # a call's extra unrolls are used before waiting again
    assert isinstance(batch["state_0"], torch.Tensor)


@pytest.mark.slow
def test_a_maze_run_on_ray_learns(local_ray, tmp_path):
    from launch import maze

    cfg = maze.load(["--core", "lstm", "--run_dir", str(tmp_path), "--total_steps", "800000", "--log.tensorboard",
                     "false", "--log.return_window", "200", "--actor.backend", "ray"])
    result = train(cfg)
    assert result["mean_return"] > 30, result  # random ≈ 9; the local backend passes the same bar


class _Ref:
    """Stands in for the object reference of one unroll call."""


class _FakeHost:
    """A host handle whose ``unroll.remote`` only makes a reference (the calls' results come from the
    scripted ``ray.get`` below)."""

    def __init__(self):
        self.unroll = self
        self.calls = 0

    def remote(self, weights, version, count):
        self.calls += 1
        return _Ref()


def _scripted_transport(monkeypatch, outcomes: list, max_restarts: int = 0) -> tuple[RayTransport, _FakeHost]:
    """A one-host transport whose calls end, in turn, as ``outcomes`` say: an exception to raise, or
    None for an unroll. No cluster: ``ray.wait`` and ``ray.get`` are scripted."""
    import agents.acting.ray_backend as ray_backend

    monkeypatch.setattr(ray_backend, "RETRY_DELAY_S", 0.001)
    monkeypatch.setattr(ray, "wait", lambda refs, num_returns, timeout: (refs[:1], refs[1:]))
    script = iter(outcomes)

    def get(ref):
        outcome = next(script)
        if outcome is not None:
            raise outcome
        return {"node": "n", "pid": 1, "version": 0, "unrolls": [{"reward": np.zeros((3, 1))}]}

    monkeypatch.setattr(ray, "get", get)
    host = _FakeHost()
    transport = RayTransport(torch.nn.Linear(1, 1), run_config={}, actor=ActorConfig(num_actors=1, envs_per_actor=1),
                             ray_config=RayConfig(max_in_flight=1, max_restarts=max_restarts), unrolls_per_batch=1,
                             seeds=[0], log=lambda line: None)
    transport.hosts = [host]
    transport._submit(0)
    return transport, host


def test_a_restarting_host_is_waited_for_not_counted_as_dead(monkeypatch):
    """Calls to a host that Ray is restarting fail at once with ActorUnavailableError, many more times
    than max_restarts would allow deaths: they are made again, and the run goes on when it is back."""
    unavailable = ray.exceptions.ActorUnavailableError("The actor is restarting.", None)
    outcomes = [ray.exceptions.RayActorError()] + [unavailable] * 50 + [None]
    transport, host = _scripted_transport(monkeypatch, outcomes, max_restarts=1)
    batch = transport.get_batch()
    assert batch["reward"].shape == (3, 1) and host.calls == 53  # 52 failed calls, then the unroll
    assert transport.counters == {"host_failures": 1, "hosts_restarted": 0, "unrolls_lost": 51}


def test_a_host_that_keeps_dying_or_never_comes_back_stops_the_run(monkeypatch):
    import agents.acting.ray_backend as ray_backend

    transport, _ = _scripted_transport(monkeypatch, [ray.exceptions.RayActorError()] * 3, max_restarts=1)
    with pytest.raises(ActorError, match="could not be restarted"):
        transport.get_batch()  # (max_restarts + 1) × max_in_flight = 2 deaths are allowed, not 3
    monkeypatch.setattr(ray_backend, "RESTART_TIMEOUT_S", 0.05)
    unavailable = ray.exceptions.ActorUnavailableError("The actor is restarting.", None)
    transport, _ = _scripted_transport(monkeypatch, [unavailable] * 10_000)
    with pytest.raises(ActorError, match="ActorUnavailableError"):
        transport.get_batch()


def test_an_exception_in_a_hosts_code_stops_the_run_with_its_line(monkeypatch, capsys):
    """A host whose unroll raised (Ray hands the driver a RayTaskError, not a RayActorError) is a bug,
    not a lost node: an ActorError naming the cause, with the host's traceback printed above it."""
    crash = ray.exceptions.RayTaskError("unroll", "Traceback (most recent call last):\nRuntimeError: boom",
                                        RuntimeError("boom"))
    transport, host = _scripted_transport(monkeypatch, [crash])
    with pytest.raises(ActorError, match="actor host 0 crashed: RuntimeError: boom") as e:
        transport.get_batch()
    assert "RuntimeError: boom" in e.value.details and host.calls == 1
    assert "actor host 0 crashed:" in capsys.readouterr().err


@pytest.mark.slow  # a real kill and restart: 8-9 s on the 2-core machine
def test_a_restarted_host_plays_new_episodes_not_its_first_incarnations(local_ray):
    """Ray rebuilds a dead host from the arguments it was made with, its seed included: the rebuilt
    host draws another, so its envs do not replay the episodes (and actions) of its first unroll."""
    import envs
    from agents.acting.ray_backend import ActorHost
    from agents.config import to_dict
    from agents.run_config import rl_schema

    cfg = rl_schema("maze", "lstm")()
    cfg.core.hidden_size, cfg.actor.unroll_length = 8, 5
    probe = envs.make("maze", num_envs=1)
    model = build_model(cfg, tuple(probe.observation_shape), envs.action_sizes(probe))
    weights = [ray.put({k: v.numpy() for k, v in model.state_dict().items()})]
    host = ray.remote(ActorHost).options(max_restarts=1, max_task_retries=0).remote(to_dict(cfg), 2, 0)
    first, pid = ray.get(host.unroll.remote(weights, 0))["unrolls"][0], ray.get(host.where.remote())["pid"]
    ray.kill(host, no_restart=False)
    deadline = time.monotonic() + 60
    while True:
        try:
            if ray.get(host.where.remote())["pid"] != pid:  # the rebuilt host (the kill takes a moment)
                break
        except ray.exceptions.RayActorError:  # dead, then restarting
            pass
        assert time.monotonic() < deadline, "the host did not come back"
        time.sleep(0.2)
    again = ray.get(host.unroll.remote(weights, 0))["unrolls"][0]
    assert not (np.array_equal(first["obs"], again["obs"]) and np.array_equal(first["action"], again["action"]))


def test_ray_hosts_carry_the_values_of_cut_episodes(local_ray):
    """CartPole cut after 4 steps: every unroll from a Ray host has ``final_value`` non-zero
    exactly where an episode of 4 steps ended (the cut), and 0 elsewhere."""
    from agents.config import section, to_dict
    from agents.run_config import rl_schema

    schema = rl_schema("gym", "lstm")
    cfg = schema(env=section("env", "gym")(id="CartPole-v1", max_episode_steps=4))
    cfg.core.hidden_size, cfg.actor.unroll_length = 8, 9
    model = build_model(cfg, (4,), 2)
    transport = RayTransport(model, run_config=to_dict(cfg), actor=ActorConfig(num_actors=1, envs_per_actor=2),
                             ray_config=RayConfig(), unrolls_per_batch=1, seeds=[0])
    with transport:
        batch = transport.get_batch()
    cut = batch["done"] & (batch["episode_length"] == 4)
    assert cut[1:].sum() >= 2 and torch.equal(batch["final_value"] != 0, cut)


def test_ray_hosts_act_in_a_multidiscrete_space(local_ray):
    """MineSweeper's [4, 4] actions: the hosts' unrolls hold one integer per step (< 16) and both
    components' logits side by side (4 + 4)."""
    pytest.importorskip("popgym")
    from agents.config import section, to_dict
    from agents.run_config import rl_schema

    cfg = rl_schema("gym", "lstm")(env=section("env", "gym")(id="popgym:popgym-MineSweeperEasy-v0"))
    cfg.core.hidden_size = 8
    model = build_model(cfg, (3,), (4, 4))
    transport = RayTransport(model, run_config=to_dict(cfg), actor=ActorConfig(num_actors=1, envs_per_actor=2),
                             ray_config=RayConfig(), unrolls_per_batch=1, seeds=[0])
    with transport:
        batch = transport.get_batch()
    assert batch["logits"].shape[-1] == 8 and 0 <= batch["action"].min() and batch["action"].max() < 16


def test_a_box_action_run_on_ray(local_ray, tmp_path):
    """Float actions through the hosts: a tiny Pendulum run whose reward scaling reads the returns they record."""
    from launch import train as train_launcher
    from tests.test_continuous import TINY

    run_dir = str(tmp_path / "ray")
    result = train_launcher.main([*TINY, "--run_dir", run_dir, "--actor.backend", "ray", "--total_steps", "640"])
    assert result["step"] == 640
    model = read_checkpoint(checkpoints(run_dir)[0])["model"]
    assert model["return_stats.count"] > 600 and model["return_stats.var"] > 0 and model["log_std"].shape == (1,)
