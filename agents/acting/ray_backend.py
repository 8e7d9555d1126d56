"""The Ray backend: actor hosts spread over the machines of a Ray cluster (``actor.backend: ray``).

* Each of ``actor.num_actors`` hosts is a Ray actor (``@ray.remote`` with ``max_restarts``) that
  steps ``actor.envs_per_actor`` envs with a CPU copy of the policy, ``ray.unrolls_per_call``
  unrolls per call (two halve the calls and their round trips), as an actor process does in
  actor mode (:class:`agents.acting.actor.EnvRunner`). A placement group with
  one bundle per host, strategy SPREAD, places them across the nodes; the learner is the driver
  process, on the node where the run was launched (the GPU node).
* Unrolls come back through the object store. Each host has at most ``ray.max_in_flight``
  unroll calls outstanding; a new one is asked for only when the learner has taken a result
  (``ray.wait``), so a slow learner slows the hosts instead of filling memory.
* The learner publishes its weights with ``ray.put`` every ``ray.weights_every`` updates; each
  call carries a reference to the latest weights, which a host loads between unrolls when they
  are newer than its own. Each unroll reports the weights version it was acted with, and the
  learner logs the policy lag (updates between acting and learning).
* A host that dies (its process killed, its node removed) is restarted by Ray, on another node
  if its own is gone; the run goes on, and the log counts the restarts and the unrolls lost.
  After ``ray.max_restarts`` restarts of one host the run stops with an :class:`ActorError`; so
  does an exception raised in a host's code (a bug, which a restart would meet again).
"""
from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import nn

from agents.acting.transport import ActorConfig, Batch, RayConfig, Transport
from agents.errors import ActorError, ConfigError, RunFailure, UserError

# A host that Ray is restarting answers calls at once with ActorUnavailableError: such calls are made
# again after RETRY_DELAY_S, and do not count as deaths; one still restarting after RESTART_TIMEOUT_S
# (Ray notices a lost node within seconds; placing the host elsewhere can take a while on a busy
# cluster) stops the run.
RETRY_DELAY_S = 0.5
RESTART_TIMEOUT_S = 300.0
CONNECT_TIMEOUT_S = 10.0  # for the TCP check of an explicit --ray.address


def init_ray(address: str) -> bool:
    """Connect to (or start) a Ray cluster; returns whether this call started or joined it (and so
    should shut it down). A cluster already initialised in this process is used as it is.

    An explicit ``host:port`` is first checked with a plain TCP connection (Ray itself would
    retry an unreachable address for ever): nothing listening there is a :class:`RunFailure`
    within :data:`CONNECT_TIMEOUT_S`."""
    import ray

    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"log_to_driver": True, "configure_logging": False}
    if address == "local":
        ray.init(**kwargs)
    elif address == "auto":
        try:
            ray.init(address="auto", **kwargs)
        except ConnectionError:  # no cluster running here: start one
            ray.init(**kwargs)
    else:
        unreachable = f"cannot reach a Ray cluster at {address}"
        advice = "start one there with `ray start --head`, or use --ray.address local or auto"
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"--ray.address: {address!r} is not host:port, auto or local")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as e:
            reason = os.strerror(e.errno).lower() if e.errno else str(e) or type(e).__name__
            raise RunFailure(f"{unreachable}: {reason}; {advice}") from None
        try:
            ray.init(address=address, **kwargs)
        except ConnectionError as e:
            raise RunFailure(f"{unreachable}: {str(e).splitlines()[0] if str(e) else 'no answer'}; {advice}") from None
    return True


@contextlib.contextmanager
def ray_connection(address: str) -> Iterator[None]:
    """Within the block, this process is connected to the Ray cluster at ``address``
    (:func:`init_ray`); a cluster the block started or joined is left at its end."""
    import ray

    owned = init_ray(address)
    try:
        yield
    finally:
        if owned:
            ray.shutdown()


class ActorHost:
    """A Ray actor: a batch of envs and a CPU copy of the policy; :meth:`unroll` returns the next
    unroll as numpy arrays in the layout of :mod:`agents.acting.transport`."""

    def __init__(self, config: dict[str, Any], num_envs: int, seed: int):
        import ray

        import envs
        from agents.acting.actor import EnvRunner, create_buffers
        from agents.config import options
        from agents.run_config import build_model, config_from_dict

        torch.set_num_threads(1)
        if ray.get_runtime_context().was_current_actor_reconstructed:  # rebuilt with the same arguments:
            seed = int.from_bytes(os.urandom(4), "little")  # new episodes, not the first incarnation's again
        torch.manual_seed(seed)
        cfg = config_from_dict(config, "the learner's config")
        env = envs.make(cfg.env.name, num_envs=num_envs, seed=seed, **options(cfg.env))
        self.model = build_model(cfg, tuple(env.observation_shape), envs.action_sizes(env),
                                 action_dim=getattr(env, "action_dim", 0)).eval()
        self.version = torch.tensor(-1)  # the weights held: the learner's count of those published
        self.runner = EnvRunner(env, self.model, self.version)
        buffers = create_buffers(1, cfg.actor.unroll_length, num_envs, tuple(env.observation_shape),
                                 self.runner.step["obs"].dtype, self.model, self.model.initial_state(num_envs))
        self.out = {key: buf[0] for key, buf in buffers.items()}
        self.unrolls_done = 0
        self.node = ray.get_runtime_context().get_node_id()

    def unroll(self, weights: list[Any], version: int, count: int = 1) -> dict[str, Any]:
        """The next ``count`` unrolls, acted with the weights ``weights[0]`` (an object reference,
        fetched only if ``version`` is newer than those held)."""
        import ray

        if version > int(self.version):
            self.model.load_state_dict({k: torch.from_numpy(v) for k, v in ray.get(weights[0]).items()})
            self.version.fill_(version)
        unrolls = []
        try:
            for _ in range(count):
                self.runner.unroll(self.out)
                self.unrolls_done += 1
                unrolls.append({key: value.numpy().copy() for key, value in self.out.items()})
        except UserError as e:  # e.g. non-finite logits: the run's one line, not a traceback in the driver's log
            return {"failure": str(e)}
        return {"unrolls": unrolls, "node": self.node, "pid": os.getpid()}

    def where(self) -> dict[str, Any]:
        """The host's node, process and the unrolls it has made (for monitoring and tests)."""
        return {"node": self.node, "pid": os.getpid(), "unrolls_done": self.unrolls_done}


class RayTransport(Transport):
    """The learner's side of the Ray backend (module docstring)."""

    def __init__(self, model: nn.Module, *, run_config: dict[str, Any], actor: ActorConfig, ray_config: RayConfig,
                 unrolls_per_batch: int, seeds: list[int],
                 log: Callable[[str], None] = lambda line: print(line, flush=True)):
        """``actor.num_actors`` hosts of ``actor.envs_per_actor`` envs each, built from ``run_config``
        (the run's config as saved), the ``seeds`` one per host."""
        self.run_config, self.num_hosts, self.envs_per_host = run_config, actor.num_actors, actor.envs_per_actor
        self.unrolls_per_batch, self.seeds, self.ray_config, self.log = unrolls_per_batch, seeds, ray_config, log
        self.model = model
        self.hosts: list[Any] = []
        self.pending: dict[Any, tuple[int, int]] = {}  # object reference of an unroll call -> (host, call number)
        self.calls = 0  # unroll calls made so far
        self.carried: list[dict[str, np.ndarray]] = []  # unrolls received beyond the last batch
        self.updates = 0  # learner updates so far (publish_weights calls)
        self.version = 0  # the updates count of the published weights
        self.weights: list[Any] = []
        self.failures = [0] * self.num_hosts  # deaths in a row (RayActorError)
        self.unavailable_since: list[float | None] = [None] * self.num_hosts  # restarting (ActorUnavailableError) since
        self.retries: list[tuple[float, int]] = []  # (time, host): calls to make again once the host is back
        self.counters = {"host_failures": 0, "hosts_restarted": 0, "unrolls_lost": 0}
        self.incarnations: dict[int, tuple[str, int]] = {}  # host -> (node, pid) of its last unroll
        self.down = [False] * self.num_hosts  # failed, and no unroll from a new incarnation yet
        self.up_since = [0] * self.num_hosts  # the call that brought the first unroll of the host's incarnation
        self.owns_ray = False
        self.placement_group = None

    def start(self) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.owns_ray = init_ray(self.ray_config.address)
        cpus = self.ray_config.cpus_per_host
        self.placement_group = placement_group([{"CPU": cpus}] * self.num_hosts, strategy="SPREAD")
        ready, _ = ray.wait([self.placement_group.ready()], timeout=120)
        if not ready:
            raise ActorError(f"the Ray cluster cannot place {self.num_hosts} actor hosts of {cpus:g} "
                             f"CPU each (it has {ray.cluster_resources().get('CPU', 0):g} CPUs); use fewer "
                             "--num_actors, a smaller --ray.cpus_per_host, or more nodes")
        host_class = ray.remote(ActorHost)
        self.hosts = [host_class.options(
            num_cpus=cpus, max_restarts=self.ray_config.max_restarts, max_task_retries=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(self.placement_group, placement_group_bundle_index=i),
        ).remote(self.run_config, self.envs_per_host, self.seeds[i]) for i in range(self.num_hosts)]
        self._put_weights()
        for host in range(self.num_hosts):
            for _ in range(self.ray_config.max_in_flight):
                self._submit(host)

    def _put_weights(self) -> None:
        import ray

        # numpy arrays: the hosts read them straight from the object store, without unpickling tensors
        self.weights = [ray.put({k: v.detach().cpu().numpy() for k, v in self.model.state_dict().items()})]
        self.version = self.updates

    def _submit(self, host: int) -> None:
        self.calls += 1
        self.pending[self.hosts[host].unroll.remote(self.weights, self.version, self.ray_config.unrolls_per_call)] = \
            (host, self.calls)

    def get_batch(self, should_stop: Callable[[], bool] = lambda: False) -> Batch | None:
        """``unrolls_per_batch`` unrolls joined on the batch dim; each taken unroll's host is asked
        for its next one."""
        import ray

        unrolls = self.carried  # made by the last call beyond the last batch
        while len(unrolls) < self.unrolls_per_batch:
            if should_stop():
                return None
            now = time.monotonic()
            for _, host in [r for r in self.retries if r[0] <= now]:
                self._submit(host)
            self.retries = [r for r in self.retries if r[0] > now]
            if not self.pending:  # every host is restarting
                time.sleep(RETRY_DELAY_S / 4)
                continue
            done, _ = ray.wait(list(self.pending), num_returns=1, timeout=0.5)
            for ref in done:
                host, call = self.pending.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayActorError as e:  # ActorUnavailableError included
                    self._host_failed(host, call, e)
                    if isinstance(e, ray.exceptions.ActorUnavailableError):  # restarting: call again shortly
                        self.retries.append((time.monotonic() + RETRY_DELAY_S, host))
                        continue
                except ray.exceptions.RayTaskError as e:  # the host's code raised: a bug, as a local actor's crash
                    print(f"actor host {host} crashed:\n{e}", file=sys.stderr, flush=True)
                    raise ActorError(f"actor host {host} crashed: {type(e.cause).__name__}: {e.cause} (its traceback "
                                     "is above); fix the cause and run the same command again to resume from the "
                                     "last checkpoint", str(e)) from None
                else:
                    if "failure" in result:
                        raise ActorError(f"actor host {host} stopped: {result['failure']}")
                    self.unavailable_since[host] = None
                    incarnation = (result["node"], result["pid"])
                    if self.incarnations.get(host, incarnation) != incarnation:
                        self.counters["hosts_restarted"] += 1
                        self.log(f"actor host {host} restarted, on node {result['node'][:8]}")
                        self.down[host] = False
                        self.up_since[host] = call
                    self.incarnations[host], self.failures[host] = incarnation, 0
                    unrolls.extend(result["unrolls"])
                self._submit(host)
        unrolls, self.carried = unrolls[:self.unrolls_per_batch], unrolls[self.unrolls_per_batch:]
        return {key: (torch.from_numpy(np.concatenate([u[key] for u in unrolls], axis=0)) if key.startswith("state_")
                      else torch.from_numpy(np.concatenate([u[key] for u in unrolls], axis=1)))
                for key in unrolls[0]}

    def _host_failed(self, host: int, call: int, error: Exception) -> None:
        """An unroll call failed: its unroll is lost. RayActorError: the host died, and Ray restarts it;
        ActorUnavailableError: it is restarting, and the call is made again after ``RETRY_DELAY_S``. The
        run stops when the host does not come back: more than (max_restarts + 1) × max_in_flight deaths
        in a row (``max_restarts`` used up, or no node can take it), or ``RESTART_TIMEOUT_S`` restarting."""
        import ray

        self.counters["unrolls_lost"] += 1
        if not self.down[host] and call > self.up_since[host]:  # the first failure of this incarnation
            self.down[host] = True
            self.counters["host_failures"] += 1
            self.log(f"actor host {host} died ({type(error).__name__}); its unrolls in flight are lost; "
                     "Ray restarts it")
        if isinstance(error, ray.exceptions.ActorUnavailableError):
            now = time.monotonic()
            since = self.unavailable_since[host] = self.unavailable_since[host] or now
            stuck = now - since > RESTART_TIMEOUT_S
        else:
            self.failures[host] += 1
            stuck = self.failures[host] > (self.ray_config.max_restarts + 1) * self.ray_config.max_in_flight
        if stuck:
            raise ActorError(f"actor host {host} died and could not be restarted ({type(error).__name__}: "
                             f"{str(error).splitlines()[0] if str(error) else ''}); run the same command again to "
                             f"resume from the last checkpoint")

    def publish_weights(self, model: nn.Module) -> None:
        self.updates += 1
        if self.updates % self.ray_config.weights_every == 0:
            self._put_weights()

    def check(self) -> None:
        """Hosts are checked as their unrolls come back (:meth:`get_batch`)."""

    def stats(self) -> dict[str, float]:
        hosts_up = sum(host in self.incarnations and not self.down[host] for host in range(self.num_hosts))
        return {"hosts_up": hosts_up, **self.counters}

    def close(self) -> None:
        import ray

        if not ray.is_initialized():
            return
        for host in self.hosts:
            ray.kill(host, no_restart=True)
        if self.placement_group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.placement_group)
        if self.owns_ray:
            ray.shutdown()
