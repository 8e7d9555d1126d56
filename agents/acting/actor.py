"""Actor mode: actor processes that step envs with a CPU copy of the policy, and the
shared-memory rollout buffers they fill (torchbeast monobeast's design).

Each of ``num_actors`` processes steps ``envs_per_actor`` envs from ``envs.make`` and runs the
policy on the CPU. It takes a free buffer index from ``free_queue``, writes an unroll of T+1
steps into shared tensors (the layout of :mod:`agents.acting.transport`), and puts the index on
``full_queue`` for the learner, which copies the data out and hands the index back.

Actors read their weights from ``model``, a shared-memory copy that the learner overwrites
after each update (:meth:`ActorPool.publish_weights`), so the learner never waits for them.
"""
from __future__ import annotations

import os
import queue
from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor, nn

from agents.acting.transport import ActorConfig, Batch, EnvSetup, Transport
from agents.acting.workers import IndexQueue, PipeFlag, WorkerProcesses
from agents.normalization import discounted_returns
from fastnet.state import State


def create_buffers(num_buffers: int, unroll_length: int, num_envs: int, observation_shape: tuple[int, ...],
                   observation_dtype: torch.dtype, policy: nn.Module, state: State,
                   device: torch.device | str = "cpu") -> dict[str, Tensor]:
    """Rollout buffers [num_buffers, T+1, num_envs, ...] in the layout of :mod:`agents.acting.transport`
    for ``policy``'s actions and logits (with ``discounted_return`` where it scales rewards), plus
    ``state_i`` [num_buffers, *state[i].shape]; in shared memory if on the CPU."""
    steps = (num_buffers, unroll_length + 1, num_envs)
    actions = policy.action_space
    specs = {
        "obs": (steps + tuple(observation_shape), observation_dtype),
        "reward": (steps, torch.float32),
        "done": (steps, torch.bool),
        "action": (steps + actions.action_shape, actions.action_dtype),
        "logits": (steps + (policy.num_logits,), torch.float32),
        "episode_return": (steps, torch.float32),
        "episode_length": (steps, torch.int32),
        "final_value": (steps, torch.float32),
        "policy_version": (steps, torch.int64),
    }
    if getattr(policy, "return_stats", None) is not None:
        specs["discounted_return"] = (steps, torch.float32)
    specs.update({f"state_{i}": ((num_buffers, *s.shape), s.dtype) for i, s in enumerate(state)})
    buffers = {key: torch.zeros(shape, dtype=dtype, device=device) for key, (shape, dtype) in specs.items()}
    return {key: buf.share_memory_() if buf.device.type == "cpu" else buf for key, buf in buffers.items()}


def truncation_values(model: nn.Module, info: dict[str, Any], reward: Tensor, action: Tensor, state: State) -> Tensor:
    """[N]: where ``info["truncated"]`` (an env's episode was cut by a time limit at this step),
    the value of its last observation ``info["final_obs"]`` (:meth:`AgentNet.final_values`, from
    ``state``, the core state before the reset); 0 elsewhere."""
    truncated = info["truncated"]
    if not truncated.any():
        return torch.zeros(len(reward))
    final_obs = torch.from_numpy(np.ascontiguousarray(info["final_obs"]))
    values = model.final_values(final_obs, reward, action, state).float().cpu()
    return torch.where(torch.from_numpy(truncated), values, 0.0)


class EnvRunner:
    """Steps a batch of envs with a copy of the policy, one unroll of T+1 steps at a time,
    carrying the last step and the core state from one unroll to the next (an actor's work, in
    actor mode and on a Ray actor host). ``version`` (a 0-d tensor that the owner of the copy
    updates) counts the weights published into ``model``; each step records it as ``policy_version``.
    Where the model scales rewards (``model.return_stats``), each step also records the discounted
    return so far of each env, whose spread the learner measures."""

    def __init__(self, env: Any, model: nn.Module, version: Tensor):
        n = env.num_envs
        self.env, self.model, self.version = env, model, version
        actions = model.action_space
        self.step = {
            "obs": torch.from_numpy(env.reset()),
            "reward": torch.zeros(n),
            "done": torch.ones(n, dtype=torch.bool),
            "action": torch.zeros((n, *actions.action_shape), dtype=actions.action_dtype),
            "logits": torch.zeros(n, model.num_logits),
            "episode_return": torch.zeros(n),
            "episode_length": torch.zeros(n, dtype=torch.int32),
            "policy_version": torch.zeros(n, dtype=torch.int64),
        }
        if getattr(model, "return_stats", None) is not None:
            self.step["discounted_return"] = torch.zeros(n)
        self.state = model.initial_state(n)

    def unroll(self, out: dict[str, Tensor]) -> None:
        """Write the next unroll into ``out`` (one buffer: [T+1, num_envs, ...], ``state_i``
        [num_envs, ...]); step 0 repeats the last step of the previous unroll."""
        for k, s in enumerate(self.state):
            out[f"state_{k}"][:] = s
        for t in range(out["obs"].shape[0]):
            if t > 0:
                step, version = self.step, int(self.version)  # read first: in actor mode the copy may change
                action, logits, self.state = self.model.act(step["obs"], step["reward"], step["action"],
                                                            step["done"], self.state)
                obs, reward, done, info = self.env.step(self.model.env_actions(action).numpy())
                reward = torch.from_numpy(reward)
                self.step = {
                    "obs": torch.from_numpy(obs), "reward": reward,
                    "done": torch.from_numpy(done), "action": action, "logits": logits,
                    "episode_return": torch.from_numpy(np.asarray(info["episode_return"], np.float32)),
                    "episode_length": torch.from_numpy(np.asarray(info["episode_length"], np.int32)),
                    "policy_version": version,
                }
                if "truncated" in info:  # an env with time limits (the maze has none: its buffer stays 0)
                    self.step["final_value"] = truncation_values(self.model, info, reward, action, self.state)
                if "discounted_return" in step:
                    self.step["discounted_return"] = discounted_returns(step["discounted_return"], reward,
                                                                        step["done"], self.model.return_discount)
            for key, value in self.step.items():
                out[key][t] = value


def actor_loop(env_name: str, env_options: dict[str, Any], num_envs: int, seed: int, model: nn.Module,
               version: Tensor, buffers: dict[str, Tensor], free_queue: IndexQueue, full_queue: IndexQueue,
               stop: PipeFlag) -> None:
    """Process body: fill free buffers with unrolls until ``stop`` is set or the learner dies."""
    import envs

    parent = os.getppid()
    torch.set_num_threads(1)
    torch.manual_seed(seed)  # forked actors would otherwise share the learner's sampling stream
    model.eval()  # e.g. FAVOR+ features are redrawn only in train mode
    env = envs.make(env_name, num_envs=num_envs, seed=seed, **env_options)
    runner = EnvRunner(env, model, version)
    while not stop.is_set() and os.getppid() == parent:  # an actor whose learner was killed exits
        try:
            i = free_queue.get(timeout=0.5)
        except queue.Empty:
            continue
        runner.unroll({key: buf[i] for key, buf in buffers.items()})
        full_queue.put(i)
    env.close()


class ActorPool(Transport):
    """Actor mode: starts the actors, hands batches of unrolls to the learner, and stops everything."""

    def __init__(self, model: nn.Module, *, envs: EnvSetup, actor: ActorConfig, unrolls_per_batch: int):
        """``model`` is the actors' copy, on the CPU in shared memory (``model.share_memory()``);
        ``actor.num_actors`` processes step ``actor.envs_per_actor`` envs each, in unrolls of
        ``actor.unroll_length``, and a batch is ``unrolls_per_batch`` of them.

        ``actor.num_buffers`` rollout buffers (default 2 x num_actors + unrolls_per_batch) circulate
        between the actors and the learner. When the learner is the slower side, the actors keep
        them all full, and a batch was acted about ``num_buffers / unrolls_per_batch`` updates
        before the one that learns from it (the logged ``policy_lag``: 5 on the maze's defaults);
        ``unrolls_per_batch`` buffers bound that lag to one update (the actors fill the next batch
        while the learner learns from this one)."""
        num_buffers = 2 * actor.num_actors + unrolls_per_batch if actor.num_buffers is None else actor.num_buffers
        if num_buffers < unrolls_per_batch:
            raise ValueError(f"num_buffers ({num_buffers}) must be at least the unrolls per batch "
                             f"({unrolls_per_batch})")
        self.model = model
        self.shared_tensors = list(model.state_dict().values())  # what publish_weights copies into, in place
        self.version = torch.zeros((), dtype=torch.int64).share_memory_()  # weights published so far
        self.buffers = create_buffers(num_buffers, actor.unroll_length, actor.envs_per_actor, envs.observation_shape,
                                      envs.observation_dtype, model, model.initial_state(actor.envs_per_actor))
        self.free_queue, self.full_queue = IndexQueue(), IndexQueue()
        for i in range(num_buffers):
            self.free_queue.put(i)
        self.unrolls_per_batch = unrolls_per_batch
        self.workers = WorkerProcesses(
            actor_loop, [(envs.name, envs.options, actor.envs_per_actor, envs.seeds[i], model, self.version,
                          self.buffers, self.free_queue, self.full_queue) for i in range(actor.num_actors)], "actor",
            start_method=actor.start_method, nice=actor.nice)
        self.processes = self.workers.processes

    def start(self) -> None:
        self.workers.start()

    def get_batch(self, should_stop: Callable[[], bool] = lambda: False) -> Batch | None:
        """``unrolls_per_batch`` unrolls joined on the batch dim: [T+1, N, ...]; ``state_i`` [N, ...]."""
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

    def publish_weights(self, model: nn.Module) -> None:
        """Copy the learner's weights and buffers into the actors' shared copy, tensor by tensor in
        place (the copy has the learner's architecture; ``load_state_dict``'s checks of every
        module and key cost about a tenth of a maze update), then count them in ``version``. An
        actor may act while the copy is written: its steps record the version before it."""
        with torch.no_grad():
            for shared, learned in zip(self.shared_tensors, model.state_dict().values(), strict=True):
                shared.copy_(learned)
            self.version += 1

    def check(self) -> None:
        self.workers.check()

    def close(self) -> None:
        self.workers.close()
        self.free_queue.close()
        self.full_queue.close()
