"""Actor processes and the shared-memory rollout buffers they fill (torchbeast monobeast's design).

Each of ``num_actors`` processes steps ``envs_per_actor`` envs from ``envs.make`` and runs the
policy on the CPU. It takes a free buffer index from ``free_queue``, writes an unroll of T+1
steps into shared tensors, and puts the index on ``full_queue`` for the learner, which copies
the data out and hands the index back. Index 0 of an unroll repeats the last step of the
previous one, and ``state_*`` holds the core state before step 0, so the learner can re-run
the unroll exactly as the actor did.

Layout at step t (as monobeast): ``obs``, ``reward`` (received on arriving at obs_t), ``done``
(obs_t starts a new episode), ``action`` (the action a_{t-1} that led to obs_t, also the
network's "previous action" input) and ``logits`` (the behaviour logits that chose a_{t-1}).
``episode_return`` / ``episode_length`` are the finished episode's totals where ``done``.

Actors read their weights from ``model``, a shared-memory copy that the learner overwrites
after each update, so the learner never waits for them.

Nothing the pool creates has a name in /dev/shm, so nothing outlives a run killed with
``kill -9``, whatever the start method: the queues and the stop flag are anonymous pipes (a
``multiprocessing`` Queue or Event is made of named POSIX semaphores, ``/dev/shm/sem.mp-*``,
which under spawn and forkserver only the resource tracker, killed with the group, would
remove), and shared tensors are passed as file descriptors (torch's ``file_descriptor`` sharing
strategy, the default on Linux, unlinks each ``/dev/shm/torch_*`` file as soon as it has
opened it).
"""
from __future__ import annotations

import os
import queue
import select
import signal
import struct
import sys
import time
import traceback
from multiprocessing.connection import Connection
from multiprocessing.reduction import DupFd
from typing import Any, Callable

import numpy as np
import torch
import torch.multiprocessing as mp
from torch import Tensor, nn

from agents.errors import ActorError
from fastnet.state import State


def _readable(fd: int, timeout: float) -> bool:
    """Whether ``fd`` has data to read (or is at end of file) within ``timeout`` seconds."""
    return bool(select.select([fd], [], [], max(timeout, 0.0))[0])


class IndexQueue:
    """A queue of buffer indices between processes on an anonymous pipe.

    Each index is one 4-byte write, which the kernel keeps whole (it is below PIPE_BUF), so any
    number of processes may put and get; the reading end is non-blocking, so a getter that loses
    the race for an index waits again. A pipe needs no lock and nothing in /dev/shm.
    """

    _ITEM = struct.Struct("i")

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)  # shared by every process holding the pipe

    def __reduce__(self) -> tuple[Any, ...]:
        # DupFd hands the descriptors to a spawned or forkserver child (forked ones inherit them)
        return _rebuild, (type(self), DupFd(self.read_fd), DupFd(self.write_fd))

    def put(self, index: int) -> None:
        os.write(self.write_fd, self._ITEM.pack(index))

    def get(self, timeout: float) -> int:
        """The next index; raises ``queue.Empty`` if none comes within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._ITEM.unpack(os.read(self.read_fd, self._ITEM.size))[0]
            except BlockingIOError:
                if not _readable(self.read_fd, deadline - time.monotonic()):
                    raise queue.Empty from None

    def empty(self) -> bool:
        return not _readable(self.read_fd, 0.0)

    def close(self) -> None:
        os.close(self.read_fd)
        os.close(self.write_fd)


class PipeFlag(IndexQueue):
    """A flag that any process can set once and all can test (as an Event), on a pipe: set
    writes a byte that nobody reads, so the reading end stays readable."""

    def set(self) -> None:
        os.write(self.write_fd, b"1")

    def is_set(self) -> bool:
        return not self.empty()


def _rebuild(cls: type[IndexQueue], read_fd: Any, write_fd: Any) -> IndexQueue:
    """Unpickle an :class:`IndexQueue` or :class:`PipeFlag` in a child process."""
    obj = cls.__new__(cls)
    obj.read_fd, obj.write_fd = read_fd.detach(), write_fd.detach()
    return obj


def create_buffers(num_buffers: int, unroll_length: int, num_envs: int, observation_shape: tuple[int, ...],
                   observation_dtype: torch.dtype, num_actions: int, state: State) -> dict[str, Tensor]:
    """Shared-memory tensors [num_buffers, T+1, num_envs, ...], plus ``state_i`` [num_buffers, *state[i].shape]."""
    steps = (num_buffers, unroll_length + 1, num_envs)
    specs = {
        "obs": (steps + tuple(observation_shape), observation_dtype),
        "reward": (steps, torch.float32),
        "done": (steps, torch.bool),
        "action": (steps, torch.int64),
        "logits": (steps + (num_actions,), torch.float32),
        "episode_return": (steps, torch.float32),
        "episode_length": (steps, torch.int32),
    }
    specs.update({f"state_{i}": ((num_buffers, *s.shape), s.dtype) for i, s in enumerate(state)})
    return {key: torch.zeros(shape, dtype=dtype).share_memory_() for key, (shape, dtype) in specs.items()}


def actor_loop(index: int, env_name: str, env_options: dict[str, Any], num_envs: int, seed: int,
               model: nn.Module, buffers: dict[str, Tensor], free_queue: IndexQueue, full_queue: IndexQueue,
               errors: Connection, stop: PipeFlag) -> None:
    """Process body: fill free buffers with unrolls until ``stop`` is set or the learner dies.

    SIGINT and SIGTERM are ignored: Ctrl-C, or a scheduler's SIGTERM to the whole process group,
    reaches the learner too, which checkpoints and stops the actors itself. If the learner is
    killed outright, the actor notices its parent is gone within one unroll and exits. If the
    actor fails, it prints its traceback and sends it on ``errors`` to the learner.
    """
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, signal.SIG_IGN)
    parent = os.getppid()
    try:
        import envs

        torch.set_num_threads(1)
        torch.manual_seed(seed)  # forked actors would otherwise share the learner's sampling stream
        model.eval()  # e.g. FAVOR+ features are redrawn only in train mode
        env = envs.make(env_name, num_envs=num_envs, seed=seed, **env_options)
        unroll_length = buffers["obs"].shape[1] - 1
        step = {
            "obs": torch.from_numpy(env.reset()),
            "reward": torch.zeros(num_envs),
            "done": torch.ones(num_envs, dtype=torch.bool),
            "action": torch.zeros(num_envs, dtype=torch.int64),
            "logits": torch.zeros(num_envs, model.num_actions),
            "episode_return": torch.zeros(num_envs),
            "episode_length": torch.zeros(num_envs, dtype=torch.int32),
        }
        state = model.initial_state(num_envs)
        while not stop.is_set() and os.getppid() == parent:
            try:
                i = free_queue.get(timeout=0.5)
            except queue.Empty:
                continue
            for k, s in enumerate(state):
                buffers[f"state_{k}"][i] = s
            for t in range(unroll_length + 1):
                if t > 0:
                    action, logits, state = model.act(step["obs"], step["reward"], step["action"], step["done"], state)
                    obs, reward, done, info = env.step(action.numpy())
                    step = {
                        "obs": torch.from_numpy(obs), "reward": torch.from_numpy(reward),
                        "done": torch.from_numpy(done), "action": action, "logits": logits,
                        "episode_return": torch.from_numpy(np.asarray(info["episode_return"], np.float32)),
                        "episode_length": torch.from_numpy(np.asarray(info["episode_length"], np.int32)),
                    }
                for key, value in step.items():
                    buffers[key][i, t] = value
            full_queue.put(i)
        env.close()
    except Exception:
        details = traceback.format_exc()
        print(f"actor {index} crashed:\n{details}", file=sys.stderr, flush=True)
        errors.send(details)
        raise SystemExit(1) from None


class ActorPool:
    """Starts the actors, hands batches of unrolls to the learner, and stops everything.

    Use as a context manager: leaving the block (normally, by an exception or by Ctrl-C) stops
    every actor, so no process outlives the run.
    """

    def __init__(self, model: nn.Module, env_name: str, env_options: dict[str, Any], num_actors: int,
                 envs_per_actor: int, unroll_length: int, unrolls_per_batch: int,
                 observation_shape: tuple[int, ...], observation_dtype: torch.dtype, seeds: list[int],
                 start_method: str = "fork"):
        ctx = mp.get_context(start_method)
        num_buffers = 2 * num_actors + unrolls_per_batch
        self.buffers = create_buffers(num_buffers, unroll_length, envs_per_actor, observation_shape,
                                      observation_dtype, model.num_actions, model.initial_state(envs_per_actor))
        self.free_queue, self.full_queue, self.stop_event = IndexQueue(), IndexQueue(), PipeFlag()
        for i in range(num_buffers):
            self.free_queue.put(i)
        self.unrolls_per_batch = unrolls_per_batch
        self.errors = [ctx.Pipe(duplex=False) for _ in range(num_actors)]  # (learner's end, actor's end)
        self.processes = [
            ctx.Process(target=actor_loop, name=f"actor-{i}", daemon=True,
                        args=(i, env_name, env_options, envs_per_actor, seeds[i], model, self.buffers,
                              self.free_queue, self.full_queue, self.errors[i][1], self.stop_event))
            for i in range(num_actors)
        ]

    def __enter__(self) -> ActorPool:
        for p in self.processes:
            p.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def get_batch(self, should_stop: Callable[[], bool] = lambda: False) -> dict[str, Tensor] | None:
        """``unrolls_per_batch`` unrolls joined on the batch dim: [T+1, N, ...]; ``state_i`` [N, ...].

        Returns None if ``should_stop()`` turns true while waiting. Raises :class:`ActorError` as
        soon as an actor has crashed or exited.
        """
        indices = []
        while len(indices) < self.unrolls_per_batch:
            if should_stop():  # first: a stop signal sent to the whole group may also end the actors
                for i in indices:
                    self.free_queue.put(i)
                return None
            self.check()
            try:
                indices.append(self.full_queue.get(timeout=0.5))
            except queue.Empty:
                pass
        batch = {}
        for key, buf in self.buffers.items():
            data = buf[indices]  # advanced indexing copies, so the buffers can be reused at once
            batch[key] = data.flatten(0, 1) if key.startswith("state_") else data.transpose(0, 1).flatten(1, 2)
        for i in indices:
            self.free_queue.put(i)
        return batch

    def check(self) -> None:
        """Raise :class:`ActorError` if an actor crashed (its error, the traceback in ``details``)
        or died (its exit code or signal), saying what to do."""
        for i, (p, (errors, _)) in enumerate(zip(self.processes, self.errors)):
            exitcode = p.exitcode  # first: an actor that crashed has sent its error before it exited
            if errors.poll():  # read as it comes: a long traceback must not block the actor's send
                details = errors.recv()
                error = details.rstrip().splitlines()[-1]
                raise ActorError(f"actor {i} crashed: {error} (its traceback is above); fix the cause and run "
                                 f"the same command again to resume from the last checkpoint", details)
            if exitcode is not None:
                raise ActorError(f"actor {i} {_death(exitcode)}; run the same command again to resume "
                                 f"from the last checkpoint")

    def close(self) -> None:
        """Stop every actor: ask them, wait a little, then terminate and reap the rest."""
        self.stop_event.set()
        deadline = time.time() + 5.0
        for p in self.processes:
            if p.pid is not None:
                p.join(timeout=max(0.0, deadline - time.time()))
        for p in self.processes:
            if p.is_alive():
                p.kill()  # SIGKILL: actors ignore SIGINT and SIGTERM
                p.join()
        for q in (self.free_queue, self.full_queue, self.stop_event):
            q.close()
        for ends in self.errors:
            for end in ends:
                end.close()


def _death(exitcode: int) -> str:
    """How an actor process ended, from its exit code (negative: the signal that killed it)."""
    if exitcode >= 0:
        return f"exited with code {exitcode} (its output above may say why)"
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:  # a signal number that has no name
        name = f"signal {-exitcode}"
    hint = " (by the kernel's out-of-memory killer? see `dmesg`; if so, use fewer actors or envs)" \
        if -exitcode == signal.SIGKILL else ""
    return f"was killed by {name}{hint}"
