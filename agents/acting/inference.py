"""Server mode: env workers only step envs; one inference loop runs the policy batched on the
learner's device (the design of SEED RL, Espeholt et al. 2020, and Sample Factory).

* Each of ``num_workers`` processes steps ``envs_per_worker`` envs, split into
  ``worker_splits`` *units* of ``envs_per_worker / worker_splits`` envs that take turns (Sample
  Factory's double buffering): for each unit the worker writes observations, rewards and dones
  into the unit's shared slot, puts the unit's index on ``ready``, and steps whichever of its
  units gets its actions next, so that it steps one unit while the server acts for another.
* The inference loop (a thread of the learner's process) takes whichever units are ready
  (dynamic batching: up to ``max_batch_envs`` envs, waiting at most ``max_wait_ms`` after the
  first), runs ``policy.act`` once for all their envs, and writes the actions back. It acts with
  its own copy of the policy, which :meth:`InferenceServer.publish_weights` overwrites after each
  update under a lock that the loop holds while it acts: every inference batch sees one version
  of the weights (and of FAVOR+'s random features), never a half-written update, and never
  weights the learner has not checked. The behaviour logits are stored with each step, so
  V-trace corrects for weights that change during an unroll.
* The core state of every env lives in one table on the device, one row per env; the core
  zeroes a row itself where ``done`` starts an episode. Env ``i`` of unit ``u`` is row
  ``u * envs_per_unit + i``, which is env ``j`` of worker ``w`` at row ``w * envs_per_worker + j``.
* Unrolls are assembled in host memory, in batch buffers [T+1, batch_size, ...] split into groups
  of ``envs_per_unit`` columns; only ``state_<i>``, copied from the core-state table, is on the
  device. A unit's unroll takes a free group; a batch whose groups are all written goes to the
  learner, which moves it to its device in one copy per key, as it does actor mode's batches (on
  the CPU: none, it reads the buffers in place), and hands it back with its next
  :meth:`InferenceServer.get_batch`.
  So the loop's device work is per inference batch, not per unit: the policy's inputs, its
  actions and logits, and the state table. (Rows on the device cost each unit's step seven small
  device copies, five of them from pageable memory, which CUDA may order after all the work
  queued on the stream.) When no group is free (the learner is behind) the unit waits, which is
  the backpressure; the others go on.
* On CUDA the loop and the learner share the device's stream, which keeps their work in order
  without events; ``side_stream`` gives the loop a stream of its own, with an event at each
  handover of a batch or of the weights (checked on an H100 by ``cuda/smoke.py``, not yet
  timed, so off by default).
"""
from __future__ import annotations

import collections
import contextlib
import copy
import math
import os
import queue
import threading
import time
import traceback
from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor, nn

from agents.acting.actor import create_buffers
from agents.acting.transport import ActorConfig, Batch, EnvSetup, Transport
from agents.acting.workers import IndexQueue, PipeFlag, WorkerProcesses
from agents.actions import Actions
from agents.errors import ActorError, UserError
from agents.network import check_actions
from agents.normalization import discounted_returns

WAKE = -1  # put on ``ready`` by the learner when it hands back a batch, so a waiting loop looks again
# What a worker writes, and each row of an unroll copies (final_value: 0 from the worker; the server
# sets it where a time limit cut an episode, from the slots' truncated and final_obs).
STEP_KEYS = ("obs", "reward", "done", "episode_return", "episode_length", "final_value")


def create_slots(num_workers: int, num_envs: int, observation_shape: tuple[int, ...],
                 observation_dtype: torch.dtype, actions: Actions) -> dict[str, Tensor]:
    """Shared-memory slots [num_workers, num_envs, ...]: a worker's last step (with, where a time
    limit cut an episode, ``truncated`` and the episode's last observation ``final_obs``), and
    the next actions it steps its envs with (``actions.to_env`` of the policy's)."""
    shape = (num_workers, num_envs)
    slots = {"obs": torch.zeros(shape + tuple(observation_shape), dtype=observation_dtype),
             "reward": torch.zeros(shape), "done": torch.zeros(shape, dtype=torch.bool),
             "episode_return": torch.zeros(shape), "episode_length": torch.zeros(shape, dtype=torch.int32),
             "final_value": torch.zeros(shape), "truncated": torch.zeros(shape, dtype=torch.bool),
             "final_obs": torch.zeros(shape + tuple(observation_shape), dtype=observation_dtype),
             "action": torch.zeros(shape + actions.action_shape, dtype=actions.action_dtype)}
    return {key: slot.share_memory_() for key, slot in slots.items()}


def split_seed(seed: int, split: int) -> int:
    """The seed of the envs of split ``split`` of a worker seeded ``seed`` (split 0 keeps it)."""
    return seed if split == 0 else int(np.random.SeedSequence([seed, split]).generate_state(1)[0])


def env_worker_loop(env_name: str, env_options: dict[str, Any], num_envs: int, splits: int, seed: int, index: int,
                    slots: dict[str, Tensor], ready: IndexQueue, acted: IndexQueue, stop: PipeFlag) -> None:
    """Process body: step the worker's ``num_envs`` envs, as ``splits`` groups of
    ``num_envs // splits`` (the server's units ``index * splits + s``, each a batched env of its
    own, seeded :func:`split_seed`), with the actions the server writes, until ``stop`` is set or
    the learner dies. Each group is stepped as soon as its actions come, so while the server acts
    for one group the worker steps another (Sample Factory's double buffering)."""
    import envs

    parent = os.getppid()
    torch.set_num_threads(1)
    groups = [envs.make(env_name, num_envs=num_envs // splits, seed=split_seed(seed, s), **env_options)
              for s in range(splits)]
    for s, env in enumerate(groups):
        unit = index * splits + s
        slots["obs"][unit] = torch.from_numpy(env.reset())
        slots["done"][unit] = True  # reward, action and the episode totals start at 0
        ready.put(unit)
    while not stop.is_set() and os.getppid() == parent:  # a worker whose learner was killed exits
        try:
            s = acted.get(timeout=0.5)
        except queue.Empty:
            continue
        unit = index * splits + s
        obs, reward, done, info = groups[s].step(slots["action"][unit].numpy())
        step = {"obs": obs, "reward": reward, "done": done,
                "episode_return": np.asarray(info["episode_return"], np.float32),
                "episode_length": np.asarray(info["episode_length"], np.int32)}
        if "truncated" in info:  # an env with time limits (the maze has none: its slots stay 0)
            step.update(final_value=np.zeros_like(reward), truncated=np.asarray(info["truncated"], bool))
            if step["truncated"].any():
                slots["final_obs"][unit] = torch.from_numpy(np.ascontiguousarray(info["final_obs"]))
        for key, value in step.items():
            slots[key][unit] = torch.from_numpy(value)
        ready.put(unit)
    for env in groups:
        env.close()


class InferenceServer(Transport):
    """Server mode: the env workers, the inference loop and the batch buffers (module docstring)."""

    def __init__(self, policy: nn.Module, *, envs: EnvSetup, actor: ActorConfig, batch_size: int,
                 device: torch.device, seed: int = 0, sample: bool = True):
        """``policy`` is the learner's model (anything with ``num_logits``, ``initial_state`` and
        ``act`` as :class:`agents.network.AgentNet`), on ``device``: the server acts with a copy
        of it that :meth:`publish_weights` updates. ``actor`` gives the env workers
        (``num_actors`` of ``envs_per_actor`` envs, unrolls of ``unroll_length``) and the server's
        settings: ``server.worker_splits`` divides each worker's envs into that many units that take
        turns (``batch_size`` must be a multiple of the envs per unit); ``server.max_batch`` 0
        means all envs; ``server.side_stream`` runs the loop on a CUDA stream of its own, with
        events at each handover (not yet measured on a GPU). ``sample`` false takes the argmax
        action; ``seed`` seeds the sampling."""
        num_workers, envs_per_worker, worker_splits = actor.num_actors, actor.envs_per_actor, actor.server.worker_splits
        unroll_length, observation_shape, observation_dtype = (actor.unroll_length, envs.observation_shape,
                                                               envs.observation_dtype)
        if envs_per_worker % worker_splits:
            raise ValueError(f"envs_per_worker {envs_per_worker} is not a multiple of worker_splits {worker_splits}")
        if batch_size % (envs_per_worker // worker_splits):
            raise ValueError(f"batch_size {batch_size} is not a multiple of the envs per unit, "
                             f"{envs_per_worker // worker_splits}")
        self.policy = copy.deepcopy(policy).eval()  # as the actors' copies: no FAVOR+ redraws of its own
        self.device, self.sample = device, sample
        self.side_stream = actor.server.side_stream and device.type == "cuda"
        self.weights_lock = threading.Lock()  # held by the loop while it acts, and by publish_weights
        self.num_workers, self.splits, self.unroll_length = num_workers, worker_splits, unroll_length
        self.num_units, self.envs_per_unit = num_workers * worker_splits, envs_per_worker // worker_splits
        self.groups_per_batch = batch_size // self.envs_per_unit
        # Units hold at most num_units groups, which the FIFO below keeps within
        # ceil(num_units / groups_per_batch) + 1 batches; one more is the learner's, one is ready.
        num_batches = math.ceil(self.num_units / self.groups_per_batch) + 3
        # One set of tensors per batch: the learner's autograd checks that the tensors it saved
        # are not written meanwhile, which it would see as writes to a shared tensor. The rows
        # must stay pageable host memory (never pinned): a copy from it to the device has read
        # it all when it returns, so the loop's writes to a handed-back batch need no event
        # (pinned rows would: the copy could still be reading them). state_<i> stays on the
        # device, read in place by the learner, and ordered by the stream or the events below.
        self.batches = [{**{key: buf[0].to(device) if key.startswith("state_") else buf[0]
                            for key, buf in create_buffers(
                                1, unroll_length, batch_size, observation_shape, observation_dtype,
                                policy, policy.initial_state(batch_size, device)).items()},
                         "env_slot": torch.zeros(batch_size, dtype=torch.int64)} for _ in range(num_batches)]
        actions = policy.action_space
        self.slots = create_slots(self.num_units, self.envs_per_unit, observation_shape, observation_dtype, actions)
        num_envs = num_workers * envs_per_worker
        self.max_batch_envs = actor.server.max_batch or num_envs
        self.max_wait_s = actor.server.max_wait_ms / 1e3
        self.env_rows = torch.arange(num_envs)
        self.state_table = tuple(policy.initial_state(num_envs, device))
        # on the host, as the rows they go to
        self.prev_action = torch.zeros((num_envs, *actions.action_shape), dtype=actions.action_dtype)
        # reward scaling: each env's discounted return so far, and whether its last step began an episode
        self.return_discount = policy.return_discount if getattr(policy, "return_stats", None) is not None else None
        self.discounted_return, self.prev_done = torch.zeros(num_envs), torch.zeros(num_envs, dtype=torch.bool)
        self.prev_logits = torch.zeros((num_envs, policy.num_logits))
        self.version = 0  # weights published so far
        self.prev_version = torch.zeros(num_envs, dtype=torch.int64)  # the version that chose each env's last action
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.ready, self.acted = IndexQueue(), [IndexQueue() for _ in range(num_workers)]
        self.workers = WorkerProcesses(
            env_worker_loop, [(envs.name, envs.options, envs_per_worker, worker_splits, envs.seeds[i], i, self.slots,
                               self.ready, self.acted[i]) for i in range(num_workers)], "env worker",
            start_method=actor.start_method, nice=actor.nice)
        self.processes = self.workers.processes
        # The loop's bookkeeping (only its thread touches these): free groups (batch, group) in
        # FIFO order, each unit's group and next step, the groups written per batch.
        self.free_groups = collections.deque((b, g) for b in range(num_batches) for g in range(self.groups_per_batch))
        self.group: list[tuple[int, int] | None] = [None] * self.num_units
        self.step_in_unroll = [0] * self.num_units
        self.groups_written = [0] * num_batches
        # Batches handed over, each with a CUDA event after which its writes (or reads) are done
        # (None but with the side stream: one stream keeps the two threads' work in order).
        self.full: queue.Queue[tuple[int, Any]] = queue.Queue()  # loop -> learner
        self.released: queue.Queue[tuple[int, Any]] = queue.Queue()  # learner -> loop
        self.held: int | None = None  # the batch the learner is using
        self.stopping = threading.Event()
        self.error: str | None = None  # the traceback of a crash
        self.failure: UserError | None = None  # a failure that is the run's one line
        # With the side stream: the loop's last act, and the last weights published (events).
        self.acted_event: torch.cuda.Event | None = None
        self.published_event: torch.cuda.Event | None = None
        self.served = [0, 0]  # inference batches, and envs served in them
        self.served_at_last_stats = [0, 0]
        self.thread = threading.Thread(target=self._loop, name="inference", daemon=True)

    def start(self) -> None:
        self.workers.start()
        self.thread.start()

    # --- the learner's side ---------------------------------------------------------------

    def get_batch(self, should_stop: Callable[[], bool] = lambda: False) -> Batch | None:
        """The next full batch, as views of its buffers (host rows, ``state_<i>`` on the device),
        with ``env_slot`` [N], the env (worker × envs_per_worker + env) of each column; valid
        until the next call."""
        if self.held is not None:
            self.released.put((self.held, self._event()))  # the loop writes it again once the learner's reads are done
            self.ready.put(WAKE)
            self.held = None
        while True:
            if should_stop():
                return None
            self.check()
            try:
                b, written = self.full.get(timeout=0.5)
            except queue.Empty:
                continue
            self._wait(written)
            self.held = b
            return self.batches[b]

    def publish_weights(self, model: nn.Module) -> None:
        """Copy the learner's weights (and buffers: FAVOR+ projections, PopArt statistics) into
        the loop's policy, between two inference batches: each batch acts with one version.
        With the side stream the lock orders the two threads but not their streams, so the copy
        also waits for the loop's last batch on the GPU, and the loop's next batch for the copy."""
        with self.weights_lock:
            self._wait(self.acted_event)
            self.policy.load_state_dict(model.state_dict())
            self.version += 1
            self.published_event = self._event()

    def stats(self) -> dict[str, float]:
        """The mean envs per inference batch since the last call (how well dynamic batching batches)."""
        (batches, envs), (batches_0, envs_0) = self.served, self.served_at_last_stats
        self.served_at_last_stats = [batches, envs]
        return {"inference_batch": (envs - envs_0) / (batches - batches_0) if batches > batches_0 else float("nan")}

    def check(self) -> None:
        if self.failure is not None:
            raise ActorError(f"the inference loop stopped: {self.failure}")
        if self.error is not None:
            raise ActorError(f"the inference loop crashed: {self.error.rstrip().splitlines()[-1]} (its traceback "
                             f"is above); fix the cause and run the same command again to resume from the last "
                             f"checkpoint", self.error)
        self.workers.check()

    def close(self) -> None:
        self.stopping.set()
        self.workers.stop.set()  # first: a Ctrl-C during the join below must not leave them waiting
        if self.thread.is_alive():
            self.thread.join(timeout=10.0)
        self.workers.close()
        for q in (self.ready, *self.acted):
            q.close()

    # --- the inference loop ---------------------------------------------------------------

    def _loop(self) -> None:
        stalled: list[int] = []  # units at the start of an unroll that found no free group
        try:
            stream = contextlib.nullcontext()
            if self.side_stream:
                side = torch.cuda.Stream(self.device)
                side.wait_stream(torch.cuda.default_stream(self.device))  # the tables and weights set up there
                stream = torch.cuda.stream(side)
            with torch.no_grad(), stream:
                while not self.stopping.is_set():
                    units = self._collect(stalled)
                    if units:
                        self._serve(units, stalled)
        except UserError as e:  # e.g. non-finite logits: the run's one line, no traceback
            self.failure = e
        except BaseException:
            self.error = traceback.format_exc()
            print(f"the inference loop crashed:\n{self.error}", flush=True)

    def _collect(self, stalled: list[int]) -> list[int]:
        """Dynamic batching: the units to serve now. Stalled units come first once a group is
        free. Waits up to 0.1 s for the first ready unit, then for more until ``max_batch_envs``
        envs are ready or ``max_wait`` has passed; a unit that comes later is in the next batch."""
        units: list[int] = []
        deadline = None
        while len(units) * self.envs_per_unit < self.max_batch_envs:
            while not self.released.empty():  # the learner handed back a batch: its groups are free
                b, read = self.released.get()
                self._wait(read)
                self.free_groups.extend((b, g) for g in range(self.groups_per_batch))
            if stalled and self.free_groups:
                units += stalled
                stalled.clear()
                deadline = deadline or time.monotonic() + self.max_wait_s
                continue
            timeout = 0.1 if deadline is None else deadline - time.monotonic()
            try:
                i = self.ready.get(timeout=timeout)
            except queue.Empty:
                break
            if i != WAKE:
                units.append(i)
                if self.return_discount is not None:  # each step comes through here once (a stalled unit does not)
                    self._add_return(i)
                deadline = deadline or time.monotonic() + self.max_wait_s
        return units

    def _serve(self, units: list[int], stalled: list[int]) -> None:
        """Write the units' steps into their unrolls, act for them, and hand out full batches."""
        E, T = self.envs_per_unit, self.unroll_length
        cut = self.slots["truncated"].any(1).tolist()
        if any(cut[u] for u in units):
            self._final_values([u for u in units if cut[u]])
        units = sorted(units)  # so that consecutive units take consecutive free groups
        rows: list[tuple[int, int, int, int]] = []  # (unit, batch, step, group) of each step to write
        starts: list[tuple[int, int, int]] = []  # (unit, batch, group) of each unroll that starts here
        finished: list[int] = []  # batch of each group that is now complete
        acting: list[int] = []
        for u in units:
            if self.group[u] is not None:
                b, g = self.group[u]
                rows.append((u, b, self.step_in_unroll[u], g))
                self.step_in_unroll[u] += 1
                if self.step_in_unroll[u] > T:
                    finished.append(b)
                    self.group[u] = None
            if self.group[u] is None:  # step 0 of the next unroll repeats step T of the last
                if not self.free_groups:
                    stalled.append(u)  # the backpressure: served once the learner hands a batch back
                    continue
                b, g = self.group[u] = self.free_groups.popleft()
                rows.append((u, b, 0, g))
                starts.append((u, b, g))
                self.step_in_unroll[u] = 1
            acting.append(u)

        # Each step goes from its units' slots straight into its batch's groups (host memory; slices,
        # no index tensors), one copy per key for each run of consecutive units in consecutive
        # groups (the usual case: the FIFO hands out groups in order); the state before an
        # unroll, from the device's table on the device.
        for u, b, t, g, n in _runs(rows):
            batch, cols, envs_of_u = self.batches[b], slice(g * E, (g + n) * E), slice(u * E, (u + n) * E)
            for key in STEP_KEYS:
                batch[key][t, cols] = self.slots[key][u] if n == 1 else self.slots[key][u:u + n].flatten(0, 1)
            batch["action"][t, cols] = self.prev_action[envs_of_u]
            batch["logits"][t, cols] = self.prev_logits[envs_of_u]
            batch["policy_version"][t, cols] = self.prev_version[envs_of_u]
            if self.return_discount is not None:
                batch["discounted_return"][t, cols] = self.discounted_return[envs_of_u]
        for u, b, _, g, n in _runs([(u, b, 0, g) for u, b, g in starts]):
            batch, cols, envs_of_u = self.batches[b], slice(g * E, (g + n) * E), slice(u * E, (u + n) * E)
            for i, table in enumerate(self.state_table):
                batch[f"state_{i}"][cols] = table[envs_of_u]
            batch["env_slot"][cols] = self.env_rows[envs_of_u]

        if acting:  # sorted, as units: consecutive ones (the usual case) read their rows as one slice
            units, envs_ = self._rows(acting, 1), self._rows(acting, E)
            table_rows = envs_ if isinstance(envs_, slice) else envs_.to(self.device, non_blocking=True)
            inputs = {key: self.slots[key][units].flatten(0, 1).to(self.device, non_blocking=True)
                      for key in ("obs", "reward", "done")}
            prev_action = self.prev_action[envs_].to(self.device, non_blocking=True)
            with self._reading_weights():
                action, logits, state = self.policy.act(inputs["obs"], inputs["reward"], prev_action, inputs["done"],
                                                        tuple(s[table_rows] for s in self.state_table),
                                                        sample=self.sample, generator=self.generator)
                version = self.version
            for table, s in zip(self.state_table, state):
                table[table_rows] = s
            action, logits = action.cpu(), logits.cpu()
            check_actions(action)
            self.prev_action[envs_] = action
            self.prev_logits[envs_] = logits
            self.prev_version[envs_] = version
            env_action = self.policy.env_actions(action)  # the stored action is the draw; the env gets its clip
            self.slots["action"][units] = env_action.view(len(acting), E, *env_action.shape[1:])  # unit u owns row u
            for u in acting:
                self.acted[u // self.splits].put(u % self.splits)
            self.served[0] += 1
            self.served[1] += len(acting) * E
        for b in finished:
            self.groups_written[b] += 1
            if self.groups_written[b] == self.groups_per_batch:
                self.groups_written[b] = 0
                self.full.put((b, self._event()))

    def _add_return(self, u: int) -> None:
        """Move the discounted return of unit ``u``'s envs past the step now in its slots (reward scaling)."""
        envs_of_u = slice(u * self.envs_per_unit, (u + 1) * self.envs_per_unit)
        self.discounted_return[envs_of_u] = discounted_returns(
            self.discounted_return[envs_of_u], self.slots["reward"][u], self.prev_done[envs_of_u], self.return_discount)
        self.prev_done[envs_of_u] = self.slots["done"][u]

    def _final_values(self, units: list[int]) -> None:
        """Fill the slots' ``final_value`` where a time limit cut an episode of ``units``: the
        value of its last observation from the core state before the reset (the table's row,
        not yet stepped), the reward received there and the action that led there."""
        envs_ = self.env_rows.view(-1, self.envs_per_unit)[units].flatten()
        table_rows = envs_.to(self.device, non_blocking=True)
        inputs = [self.slots[key][units].flatten(0, 1).to(self.device, non_blocking=True)
                  for key in ("final_obs", "reward")]
        with self._reading_weights():
            values = self.policy.final_values(*inputs, self.prev_action[envs_].to(self.device, non_blocking=True),
                                              tuple(s[table_rows] for s in self.state_table))
        values = values.float().cpu().view(len(units), self.envs_per_unit)
        self.slots["final_value"][units] = torch.where(self.slots["truncated"][units], values, 0.0)

    @contextlib.contextmanager
    def _reading_weights(self):
        """Hold the policy's weights for the loop's reads (an act, the final values): no weight
        copy in between, and with the side stream the reads wait on the GPU for the last copy
        and the next copy for the reads (:meth:`publish_weights`)."""
        with self.weights_lock:
            self._wait(self.published_event)
            yield
            self.acted_event = self._event()

    def _event(self) -> torch.cuda.Event | None:
        """A CUDA event recorded on this thread's current stream (None but with the side stream)."""
        if not self.side_stream:
            return None
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.device))
        return event

    def _wait(self, event: torch.cuda.Event | None) -> None:
        """Make this thread's current stream wait for ``event`` (work of the other thread's stream)."""
        if event is not None:
            torch.cuda.current_stream(self.device).wait_event(event)

    def _rows(self, units: list[int], per_unit: int) -> slice | Tensor:
        """The rows ``per_unit`` * u .. ``per_unit`` * (u + 1) - 1 of each of ``units`` (sorted):
        a slice when they are consecutive, else an index tensor (on the host)."""
        if units[-1] - units[0] == len(units) - 1:
            return slice(units[0] * per_unit, (units[-1] + 1) * per_unit)
        return self.env_rows.view(-1, per_unit)[units].flatten() if per_unit > 1 else torch.tensor(units)


def _runs(rows: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int, int]]:
    """``rows`` (unit, batch, step, group) merged into runs (unit, batch, step, group, n): ``n``
    consecutive units that write the same step of one batch into ``n`` consecutive groups."""
    runs: list[list[int]] = []
    for u, b, t, g in sorted(rows, key=lambda row: (row[1], row[2], row[3])):
        last = runs[-1] if runs else None
        if last and (last[1], last[2]) == (b, t) and (last[0] + last[4], last[3] + last[4]) == (u, g):
            last[4] += 1
        else:
            runs.append([u, b, t, g, 1])
    return [tuple(run) for run in runs]
