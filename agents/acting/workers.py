"""Worker processes and the pipes between them and the learner.

Both ways of acting start a group of processes (:class:`WorkerProcesses`): in actor mode each
runs envs and a CPU copy of the policy (:mod:`agents.acting.actor`); in server mode each only steps envs
for the inference server (:mod:`agents.acting.inference`). The group reports a worker that crashed
(its traceback) or died (its exit code or signal) as an :class:`ActorError`, and stops every
process when the run ends.

Nothing here has a name in /dev/shm, so nothing outlives a run killed with ``kill -9``, whatever
the start method: the queues and the stop flag are anonymous pipes (a ``multiprocessing`` Queue
or Event is made of named POSIX semaphores, ``/dev/shm/sem.mp-*``, which under spawn and
forkserver only the resource tracker, killed with the group, would remove), and shared tensors
are passed as file descriptors (torch's ``file_descriptor`` sharing strategy, the default on
Linux, unlinks each ``/dev/shm/torch_*`` file as soon as it has opened it).
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

import torch.multiprocessing as mp

from agents.errors import ActorError, UserError


def _readable(fd: int, timeout: float) -> bool:
    """Whether ``fd`` has data to read (or is at end of file) within ``timeout`` seconds. poll, not
    select: select refuses descriptors past 1023, which a learner holding many shared tensors reaches."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(timeout, 0.0) * 1000))


class IndexQueue:
    """A queue of small integers (buffer or worker indices) between processes on an anonymous pipe.

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


def _worker_main(body: Callable[..., None], label: str, args: tuple[Any, ...], errors: Connection,
                 stop: PipeFlag, nice: int) -> None:
    """Process entry: at niceness ``nice`` above the learner's, run ``body(*args, stop)`` until it
    returns (``stop`` set, or the learner gone).

    SIGINT and SIGTERM are ignored: Ctrl-C, or a scheduler's SIGTERM to the whole process group,
    reaches the learner too, which checkpoints and stops the workers itself. If the body fails,
    its traceback is printed and sent on ``errors`` to the learner; a :class:`UserError` (e.g.
    non-finite logits) is sent as its one line, with nothing printed.
    """
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, signal.SIG_IGN)
    os.nice(nice)
    try:
        body(*args, stop)
    except UserError as e:
        errors.send(UserError(str(e)))
        raise SystemExit(1) from None
    except Exception:
        details = traceback.format_exc()
        print(f"{label} crashed:\n{details}", file=sys.stderr, flush=True)
        errors.send(details)
        raise SystemExit(1) from None


class WorkerProcesses:
    """``len(args)`` processes, worker i running ``body(*args[i], stop)``; :meth:`close` (which the
    transports call on leaving their ``with`` block, normally, by an exception or by Ctrl-C) stops
    them all, so none outlives the run.

    The workers run ``nice`` steps of niceness below the learner: where they share its cores, the
    scheduler lets the learner (the slower side on the maze) finish its update before a worker
    that its queue just woke takes the core.
    """

    def __init__(self, body: Callable[..., None], args: list[tuple[Any, ...]], label: str, *, start_method: str,
                 nice: int):
        ctx = mp.get_context(start_method)
        self.label = label
        self.stop = PipeFlag()
        self.errors = [ctx.Pipe(duplex=False) for _ in args]  # (learner's end, worker's end)
        self.processes = [
            ctx.Process(target=_worker_main, name=f"{label}-{i}", daemon=True,
                        args=(body, f"{label} {i}", worker_args, self.errors[i][1], self.stop, nice))
            for i, worker_args in enumerate(args)
        ]

    def start(self) -> None:
        for p in self.processes:
            p.start()

    def check(self) -> None:
        """Raise :class:`ActorError` if a worker crashed (its error, the traceback in ``details``)
        or died (its exit code or signal), saying what to do."""
        for i, (p, (errors, _)) in enumerate(zip(self.processes, self.errors)):
            exitcode = p.exitcode  # first: a worker that crashed has sent its error before it exited
            if errors.poll():  # read as it comes: a long traceback must not block the worker's send
                details = errors.recv()
                if isinstance(details, UserError):
                    raise ActorError(f"{self.label} {i} stopped: {details}")
                error = details.rstrip().splitlines()[-1]
                raise ActorError(f"{self.label} {i} crashed: {error} (its traceback is above); fix the cause and "
                                 f"run the same command again to resume from the last checkpoint", details)
            if exitcode is not None:
                raise ActorError(f"{self.label} {i} {_death(exitcode)}; run the same command again to resume "
                                 f"from the last checkpoint")

    def close(self) -> None:
        """Stop every worker: ask them, wait a little, then kill and reap the rest."""
        self.stop.set()
        deadline = time.time() + 5.0
        for p in self.processes:
            if p.pid is not None:
                p.join(timeout=max(0.0, deadline - time.time()))
        for p in self.processes:
            if p.is_alive():
                p.kill()  # SIGKILL: workers ignore SIGINT and SIGTERM
                p.join()
        self.stop.close()
        for ends in self.errors:
            for end in ends:
                end.close()


def _death(exitcode: int) -> str:
    """How a worker process ended, from its exit code (negative: the signal that killed it)."""
    if exitcode >= 0:
        return f"exited with code {exitcode} (its output above may say why)"
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:  # a signal number that has no name
        name = f"signal {-exitcode}"
    hint = " (by the kernel's out-of-memory killer? see `dmesg`; if so, use fewer actors or envs)" \
        if -exitcode == signal.SIGKILL else ""
    return f"was killed by {name}{hint}"
