"""The transport between the acting side and the learner: the one interface the learner sees.

The acting side puts unrolls; the learner gets them in batches, publishes its weights after
each update, and asks whether the acting side is alive. Two implementations run on one machine
over shared memory, :class:`agents.acting.actor.ActorPool` (actor mode: each actor process runs a CPU
copy of the policy) and :class:`agents.acting.inference.InferenceServer` (server mode: processes only
step envs, and the policy runs batched on the learner's device); a distributed backend plugs
in here without touching the learner.

A batch holds N unrolls of one env each (IMPALA's trajectories) in the layout of torchbeast's
monobeast, [T+1, N, ...] per key. At step t: ``obs``; ``reward``, received on arriving at obs_t;
``done``, obs_t starts a new episode; ``action``, the action a_{t-1} that led to obs_t (also the
network's "previous action" input); ``logits``, the behaviour logits that chose a_{t-1};
``episode_return`` and ``episode_length``, the finished episode's totals where ``done``;
``final_value``, where a time limit cut the episode at obs_t (``done``, but not terminated),
the acting policy's value of the episode's last observation, V(x_final), and 0 elsewhere
(the learner bootstraps from it, Pardo et al. 2018); ``policy_version``, how many weights the
learner had published to the acting side when a_{t-1} was chosen (the learner's count minus it
is the policy lag). Step 0 of an unroll repeats the last step of the previous one, and
``state_<i>`` [N, ...] holds the core state before step 0, so the learner can re-run the unroll
exactly as it was acted.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional

import torch
from jsonargparse.typing import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, restricted_number_type
from torch import Tensor, nn

from agents.config import RESUMABLE

Batch = dict[str, Tensor]


Niceness = restricted_number_type("Niceness", int, [(">=", 0), ("<=", 19)])


@dataclass
class ServerConfig:
    """Server mode (actor.inference: server): the inference loop's batches and the env workers' turns."""

    max_batch: NonNegativeInt = field(default=0, metadata=RESUMABLE)
    """The most envs one inference batch serves (0: all)."""
    max_wait_ms: NonNegativeFloat = field(default=2.0, metadata=RESUMABLE)
    """How long a batch waits for more envs after the first is ready."""
    worker_splits: PositiveInt = 1
    """Groups each worker's envs take turns in, stepping one while the server acts for another."""
    side_stream: bool = False
    """On CUDA: the inference loop on a stream of its own, with events (checked, not timed, on a GPU)."""


# Server mode's keys before they had a section of their own (flags, YAML files and saved configs)
SERVER_KEYS_RENAMED = {"actor.server_max_batch": "actor.server.max_batch",
                       "actor.server_max_wait_ms": "actor.server.max_wait_ms",
                       "actor.worker_splits": "actor.server.worker_splits",
                       "actor.server_side_stream": "actor.server.side_stream"}


@dataclass
class ActorConfig:
    """The acting side: processes that step the envs, and where the policy runs."""

    num_actors: PositiveInt = field(default=2, metadata=RESUMABLE)
    """Actor (or, in server mode, env worker) processes."""
    envs_per_actor: PositiveInt = 64
    """Envs each process steps as one batch (learner.batch_size must be a multiple of it)."""
    unroll_length: PositiveInt = 20
    """T: steps per unroll, the learner's backpropagation span."""
    inference: Literal["auto", "actor", "server"] = field(default="auto", metadata=RESUMABLE)
    """Where the policy runs: a CPU copy per actor (actor), or batched on the learner device (server, auto on CUDA)."""
    num_buffers: Optional[PositiveInt] = field(default=None, metadata=RESUMABLE)
    """Actor mode: rollout buffers the actors fill (null: 2 x num_actors + a batch's; a batch's caps the lag at one)."""
    server: ServerConfig = field(default_factory=ServerConfig)
    """Server mode's settings."""
    backend: Literal["local", "ray"] = field(default="local", metadata=RESUMABLE)
    """Where the actors run: processes on this machine (local), or actor hosts across a Ray cluster (ray)."""
    start_method: Literal["fork", "spawn", "forkserver"] = field(default="fork", metadata=RESUMABLE)
    """How the processes start (fork starts fastest; the actors act on the CPU, so a CUDA learner forks them too)."""
    nice: Niceness = field(default=0, metadata=RESUMABLE)
    """Niceness the processes add to the learner's (0-19): where they share its cores, the learner goes first."""

    def inference_mode(self, device_type: str) -> str:
        """Where the policy acts with a learner on a device of type ``device_type``: ``inference``,
        with auto resolved (server on CUDA, with the local backend)."""
        if self.inference != "auto":
            return self.inference
        return "server" if device_type == "cuda" and self.backend == "local" else "actor"


@dataclass
class RayConfig:
    """The Ray backend (actor.backend: ray): the cluster, and how unrolls and weights travel."""

    address: str = "auto"
    """Cluster to join: auto (a running one, else start one here), local (always start one here), or host:port."""
    max_in_flight: PositiveInt = 2
    """Unroll calls outstanding per host: the backpressure bound."""
    weights_every: PositiveInt = 1
    """Publish the learner's weights to the hosts every this many updates."""
    max_restarts: NonNegativeInt = 10
    """Restarts Ray makes of a host that died, before the run stops."""
    unrolls_per_call: PositiveInt = 2
    """Unrolls a host makes per call: more amortise Ray's cost per call (~7 ms), and the policy lag grows."""
    cpus_per_host: PositiveFloat = 1.0
    """CPUs each host reserves in the placement group."""


@dataclass(frozen=True)
class EnvSetup:
    """The envs a transport's processes step: ``envs.make(name, **options)``, one seed per
    process, and the observations they give (for the shared buffers)."""

    name: str
    options: dict[str, Any]
    seeds: list[int]
    observation_shape: tuple[int, ...]
    observation_dtype: torch.dtype


class Transport(abc.ABC):
    """Start with ``with transport:``; leaving the block (normally, by an exception or by Ctrl-C)
    stops every process and thread of the acting side."""

    def __enter__(self) -> Transport:
        try:
            self.start()
        except BaseException:  # a start that failed partway (a fork, Ctrl-C) stops what it started
            self.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @abc.abstractmethod
    def start(self) -> None:
        """Start acting."""

    @abc.abstractmethod
    def get_batch(self, should_stop: Callable[[], bool] = lambda: False) -> Batch | None:
        """The next batch of unrolls (layout above), or None if ``should_stop()`` turns true while
        waiting. It stays valid until the next call. Raises :class:`agents.errors.ActorError` as
        soon as the acting side has failed."""

    @abc.abstractmethod
    def publish_weights(self, model: nn.Module) -> None:
        """Make the learner's new weights the ones that act from now on."""

    @abc.abstractmethod
    def check(self) -> None:
        """Liveness: raise :class:`agents.errors.ActorError` if the acting side has failed."""

    def stats(self) -> dict[str, float]:
        """Figures of the acting side for the learner's log (e.g. the policy lag); none by default."""
        return {}

    @abc.abstractmethod
    def close(self) -> None:
        """Stop acting and release every process, thread and buffer."""
