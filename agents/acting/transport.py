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
(the learner bootstraps from it, Pardo et al. 2018). Step 0
of an unroll repeats the last step of the previous one, and ``state_<i>`` [N, ...] holds the
core state before step 0, so the learner can re-run the unroll exactly as it was acted.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor, nn

Batch = dict[str, Tensor]


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
        self.start()
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
