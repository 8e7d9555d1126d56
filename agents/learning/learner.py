"""The IMPALA learner: the loss on a batch of unrolls, the acting side it starts, and the
training loop (its config tree is :class:`agents.run_config.TrainConfig`).

The learner re-runs every unroll from the core state stored at its start, in sequence mode
(one ``core.forward`` over the T+1 steps), so the gradient flows through the fast weights
across the unroll; ``truncate_per_step`` instead steps the core one step at a time and detaches
the carried state, as the official code does. V-trace and the loss follow Espeholt et al.
(2018), see :mod:`agents.learning.vtrace`.
"""
from __future__ import annotations

import collections
import contextlib
import copy
import functools
import math
import signal
import time
from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor

from agents.acting.actor import ActorPool
from agents.acting.inference import InferenceServer
from agents.acting.ray_backend import RayTransport, ray_connection
from agents.acting.transport import EnvSetup, Transport
from agents.config import options, to_dict
from agents.errors import ActorError, ConfigError
from agents.learning.logger import Logger, RecentMean
from agents.learning.losses import Unrolls, actor_critic_losses, advantage_statistics, estimate_returns, total_loss
from agents.learning.training import Trainer, configure_kernels, resolve_device
from agents.network import AgentNet
from agents.popart import PopArt
from agents.run_config import TrainConfig, build_model, check_config
from fastnet.feature_maps import redraw_random_features


def run_unrolls(model: AgentNet, batch: dict[str, Tensor],
                cfg: TrainConfig) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """The model re-run over a batch of unrolls [T+1, N, ...] (layout of
    :mod:`agents.acting.transport`) from the stored core state: logits [T+1, N, A], the value
    head's input [T+1, N, ...] (:meth:`AgentNet.heads`) and the core's aux losses."""
    state = tuple(batch[f"state_{i}"] for i in range(sum(k.startswith("state_") for k in batch)))
    y, _, aux = model.core_outputs(batch["obs"], batch["reward"], batch["action"], batch["done"], state,
                                   truncate_per_step=cfg.learner.truncate_per_step)
    return *model.heads(y), aux


def rewards_and_discounts(batch: dict[str, Tensor], cfg: TrainConfig,
                          reward_scale: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The rewards r_1..r_T (times ``reward_scale`` under ``loss.scale_rewards``, then clipped with
    ``network.reward_clip``) and discounts γ·(1 − done_{t+1}) [T, N] that score steps 0..T-1 of a
    batch. Where a time limit cut an episode, the step's reward gains γ·V(x_final), the value of
    the episode's last observation (``final_value``): the cut is not an end, so the target goes on
    (Pardo et al. 2018); a termination's stops at its reward."""
    rewards = batch["reward"][1:]
    if reward_scale is not None:
        rewards = rewards * reward_scale
    if cfg.network.reward_clip is not None:
        rewards = rewards.clamp(-cfg.network.reward_clip, cfg.network.reward_clip)
    rewards = rewards + cfg.loss.discount * batch["final_value"][1:]
    return rewards, (~batch["done"][1:]).float() * cfg.loss.discount


def unrolls_of(logits: Tensor, baseline: Tensor, batch: dict[str, Tensor], cfg: TrainConfig,
               model: AgentNet | None) -> Unrolls:
    """What the loss scores in :func:`run_unrolls`'s outputs [T+1, N, ...]: the logits and
    baselines at 0..T-1 against the actions a_0..a_{T-1} (stored at 1..T) and
    :func:`rewards_and_discounts` (scaled by ``model``'s reward scale, if it keeps one); the
    baseline at step T bootstraps (V(x_T) in Eq. 1). ``model`` None: one categorical over the logits."""
    scale = model.reward_scale() if model is not None and model.return_stats is not None else None
    rewards, discounts = rewards_and_discounts(batch, cfg, scale)
    return Unrolls(logits[:-1], batch["logits"][1:], batch["action"][1:], rewards, discounts, baseline[:-1],
                   baseline[-1], model.action_space if model is not None else None)


@torch.no_grad()
def update_popart(popart: PopArt, logits: Tensor, features: Tensor, batch: dict[str, Tensor], cfg: TrainConfig,
                  model: AgentNet) -> tuple[Tensor, Tensor]:
    """Move PopArt's statistics towards the value targets of a batch under the network as it is
    (``logits`` and the value head's input ``features``, [T+1, N, ...]),
    and rescale its head (van Hasselt et al. 2016, Algorithm 1: statistics first, then the
    gradient step, which then learns in the new normalisation). Returns the value targets and
    advantages, which the rescale leaves as they were (it keeps every value)."""
    returns = estimate_returns(unrolls_of(logits, popart(features).squeeze(-1), batch, cfg, model), cfg.loss)
    popart.update(returns[0])
    return returns


def compute_loss(model: AgentNet, batch: dict[str, Tensor], cfg: TrainConfig, *, old_values: Tensor | None = None,
                 popart_first: bool = False,
                 advantage_stats: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """The loss on a batch of unrolls: IMPALA's, or PPO's clipped surrogate with ``loss.clip``
    (:mod:`agents.learning.losses`), with the advantages and value targets computed here from
    the values the network gives now (:func:`run_unrolls`, :func:`unrolls_of`). The core's aux
    losses (means over steps, e.g. MNM's meta loss) are multiplied by the T·N samples so that
    an aux weight of 1 weighs them per sample like the summed terms. ``old_values`` [T, N] are
    the values before the batch's first update (for ``loss.value_clip``). ``popart_first``:
    PopArt's statistics move first (:func:`update_popart`; its head's weights change in place
    before the graph of the loss holds them, so only the head runs twice). ``advantage_stats``: the
    batch's (mean, std) of the advantages, which ``loss.normalize_advantages`` then uses.
    """
    logits, features, aux = run_unrolls(model, batch, cfg)
    popart = model.baseline if isinstance(model.baseline, PopArt) else None
    returns = update_popart(popart, logits, features, batch, cfg, model) if popart_first else None
    baseline = model.baseline(features).squeeze(-1)
    losses, _ = actor_critic_losses(unrolls_of(logits, baseline, batch, cfg, model), cfg.loss,
                                    value_scale=popart.sigma if popart is not None else None,
                                    old_values=old_values, returns=returns, advantage_stats=advantage_stats)
    num_samples = baseline[:-1].numel()  # the loss terms are sums over T x N; aux losses are means
    loss = total_loss(losses, cfg.loss.baseline_cost, cfg.loss.entropy_cost,
                      {k: num_samples * v for k, v in aux.items()}, cfg.loss.aux_loss_weights)
    return loss, {**losses, **{f"aux_{k}": v for k, v in aux.items()}}


@torch.no_grad()
def update_statistics(model: AgentNet, batch: dict[str, Tensor]) -> None:
    """Move the model's running statistics with a batch's new steps 1..T (step 0 repeats the last
    unroll's): the observations' (``network.normalize_observations``) and the discounted returns'
    (``loss.scale_rewards``). Before the batch's updates, so they learn in the new normalisation,
    which reaches the acting side with the weights."""
    if model.obs_norm is not None:
        model.obs_norm.update(batch["obs"][1:])
    if model.return_stats is not None:
        model.return_stats.update(batch["discounted_return"][1:])


def minibatch_columns(num_trajectories: int, minibatches: int, generator: torch.Generator) -> list[Tensor]:
    """A random partition of the batch's trajectories 0..N-1 into ``minibatches`` groups of
    (nearly) equal size."""
    return list(torch.randperm(num_trajectories, generator=generator).tensor_split(minibatches))


def select_trajectories(batch: dict[str, Tensor], columns: Tensor) -> dict[str, Tensor]:
    """The trajectories ``columns`` of a batch: [T+1, N, ...] tensors along N, and the per-trajectory
    ``state_i`` [N, ...] and ``env_slot`` [N] along their first dim."""
    columns = columns.to(batch["reward"].device)
    return {k: v[columns] if k.startswith("state_") or k == "env_slot" else v[:, columns] for k, v in batch.items()}


def learn_from_batch(trainer: Trainer, model: AgentNet, batch: dict[str, Tensor], cfg: TrainConfig,
                     generator: torch.Generator) -> dict[str, float]:
    """``learner.epochs`` passes over ``batch``, each in ``learner.minibatches`` minibatches of
    whole trajectories (a fresh random partition per pass), one optimiser step each, all with
    the random features (FAVOR+) drawn once for the batch. With PopArt, its statistics move once
    per batch, in the first update before its step, towards the value targets of the first
    minibatch (the whole batch with one minibatch; :func:`update_popart`). Returns the mean of the
    updates' metrics (``nonfinite``: whether any update was skipped).

    One forward pass over the whole batch without gradients, before the updates, gives the values
    that ``loss.value_clip`` keeps the value near, and under ``loss.advantage_statistics`` batch the
    mean and std of the batch's advantages, with which every minibatch standardises its own.

    The advantages and value targets are recomputed in every minibatch from the network as it
    is then: its forward pass gives the values anyway, and V-trace's importance weights then
    correct for how far the current policy has moved from the behaviour policy. With one epoch
    and one minibatch this is one IMPALA update on the whole batch, exactly as before.
    """
    learner_cfg = cfg.learner
    num_trajectories = batch["reward"].shape[1]
    redraw_random_features(model)  # once per batch: every update on it sees the same features
    popart = isinstance(model.baseline, PopArt)
    batch_statistics = cfg.loss.normalize_advantages and cfg.loss.advantage_statistics == "batch"
    old_values = advantage_stats = None
    if cfg.loss.value_clip is not None or batch_statistics:
        with torch.no_grad():
            logits, features, _ = run_unrolls(model, batch, cfg)
            values = model.baseline(features).squeeze(-1)
        if cfg.loss.value_clip is not None:
            old_values = values[:-1]
        if batch_statistics:
            advantage_stats = advantage_statistics(
                estimate_returns(unrolls_of(logits, values, batch, cfg, model), cfg.loss)[1])
    rows = []
    for epoch in range(learner_cfg.epochs):
        parts = ([None] if learner_cfg.minibatches == 1
                 else minibatch_columns(num_trajectories, learner_cfg.minibatches, generator))
        for i, columns in enumerate(parts):
            minibatch = batch if columns is None else select_trajectories(batch, columns)
            minibatch_old = old_values if columns is None or old_values is None else old_values[:, columns.to(
                old_values.device)]
            first = popart and epoch == 0 and i == 0  # PopArt's statistics: once per batch, before its first step
            loss = functools.partial(compute_loss, model, minibatch, cfg, old_values=minibatch_old, popart_first=first,
                                     advantage_stats=advantage_stats)
            rows.append(trainer.update(loss, redraw=False))
    metrics = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
    metrics["nonfinite"] = max(r["nonfinite"] for r in rows)
    return metrics


def make_transport(cfg: TrainConfig, model: AgentNet, *, device: torch.device, envs: EnvSetup, seed: int) -> Transport:
    """The acting side that ``actor.backend`` and ``actor.inference`` ask for: Ray actor hosts, the
    inference server (``inference`` auto picks it when ``device`` is CUDA), or the actor pool.
    ``seed`` seeds the server's sampling."""
    actor, unrolls_per_batch = cfg.actor, cfg.learner.batch_size // cfg.actor.envs_per_actor
    if actor.backend == "ray":
        return RayTransport(model, run_config=to_dict(cfg), actor=actor, ray_config=cfg.ray,
                            unrolls_per_batch=unrolls_per_batch, seeds=envs.seeds)
    if cfg.actor.inference_mode(device.type) == "server":
        return InferenceServer(model, envs=envs, actor=actor, batch_size=cfg.learner.batch_size, device=device,
                               seed=seed)
    actor_model = copy.deepcopy(model).cpu()  # the actors' copy, in shared memory
    actor_model.share_memory()
    return ActorPool(actor_model, envs=envs, actor=actor, unrolls_per_batch=unrolls_per_batch)


class GracefulStop:
    """Within the block, the first SIGINT (Ctrl-C) or SIGTERM only sets a flag that the loop
    checks between updates, so the run stops with a consistent checkpoint; a second one
    interrupts at once."""

    def __enter__(self) -> GracefulStop:
        self.flag = False
        self.previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.flag:
            raise KeyboardInterrupt
        self.flag = True

    def requested(self) -> bool:
        return self.flag

    def __exit__(self, *exc: Any) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)


PROGRESS_KEYS = ("sps", "mean_return", "loss", "pg_loss", "baseline_loss", "entropy", "learner_wait", "policy_lag")


def train(cfg: TrainConfig, on_update: Callable[[int, dict[str, float]], None] | None = None) -> dict[str, Any]:
    """Train until ``run.total_steps`` environment steps, resuming from the run directory if it
    holds a checkpoint (and ``run.resume``). ``on_update(step, metrics)``, if given, sees every
    row of the log as it is written (a sweep reports them to Ray Tune).

    Returns the final counters, the mean recent return and the SPS from the first update to the end
    (leaving out the start-up).
    """
    device = resolve_device(cfg.run.device)
    check_config(cfg, device.type)
    # Ray first: an unreachable cluster is reported before anything is written to the run directory
    with ray_connection(cfg.ray.address) if cfg.actor.backend == "ray" else contextlib.nullcontext():
        return _train(cfg, device, on_update)


def _train(cfg: TrainConfig, device: torch.device,
           on_update: Callable[[int, dict[str, float]], None] | None) -> dict[str, Any]:
    import envs

    configure_kernels(cfg.run.kernels, device)
    if cfg.run.num_threads:
        torch.set_num_threads(cfg.run.num_threads)
    torch.manual_seed(cfg.run.seed)
    env_options = options(cfg.env)
    try:
        env_spec = envs.spec(cfg.env.name, seed=cfg.run.seed, **env_options)
    except ValueError as e:
        raise ConfigError(f"env: {e}") from None
    obs_shape, action_sizes = env_spec.observation_shape, env_spec.action_sizes
    obs_dtype = torch.from_numpy(np.zeros(0, env_spec.observation_dtype)).dtype

    try:  # a stem that does not fit the observations (an image stem on flat ones)
        model = build_model(cfg, obs_shape, action_sizes, action_dim=env_spec.action_dim).to(device)
    except ValueError as e:
        raise ConfigError(f"network: {e}") from None
    steps_per_update = cfg.learner.batch_size * cfg.actor.unroll_length
    run_dir = cfg.resolved_run_dir()
    optimiser_steps = cfg.run.total_steps / steps_per_update * cfg.learner.epochs * cfg.learner.minibatches
    trainer = Trainer(model, cfg.optim, total_updates=optimiser_steps, run_dir=run_dir, config=cfg,
                      keep=cfg.run.keep_checkpoints)
    counters = {"step": 0, "updates": 0, "episodes": 0}
    returns = RecentMean(cfg.log.return_window)
    payload = trainer.resume(device, resume=cfg.run.resume)
    if payload is not None:
        counters.update(payload["counters"])
        returns.extend(payload["recent_returns"])
    if counters["step"] >= cfg.run.total_steps:  # a finished run started again: nothing to do, nothing rewritten
        print(f"{run_dir} is already done (step {counters['step']:,} of {cfg.run.total_steps:,}); nothing to do. To "
              "go on, raise --total_steps; to train it afresh, use --run.resume false or another --run_dir", flush=True)
        return {**counters, "mean_return": returns.mean(), "sps": math.nan}
    seeds = [int(np.random.SeedSequence([cfg.run.seed, i, counters["step"]]).generate_state(1)[0])
             for i in range(cfg.actor.num_actors)]
    logger = Logger(run_dir, resume_step=counters["step"], tensorboard=cfg.log.tensorboard,
                    print_every_s=cfg.log.print_every_s, tensorboard_every_s=cfg.log.tensorboard_every_s)
    milestones = sorted(m for m in cfg.checkpoint.milestones if m > counters["step"])

    def checkpoint(milestone: bool = False) -> None:
        trainer.save(counters, milestone=milestone, recent_returns=list(returns.values))

    setup = EnvSetup(cfg.env.name, env_options, seeds, obs_shape, obs_dtype)
    transport = make_transport(cfg, model, device=device, envs=setup,
                               seed=int(np.random.SeedSequence([cfg.run.seed, counters["step"]]).generate_state(1)[0]))
    model.train()
    minibatch_generator = torch.Generator().manual_seed(
        int(np.random.SeedSequence([cfg.run.seed, counters["step"], 1]).generate_state(1)[0]))
    last_ckpt = time.time()
    history: collections.deque[tuple[float, int, float]] = collections.deque(maxlen=20)  # (time, step, waited)
    waited, first, published = 0.0, None, 0  # published: weights published to the acting side by this process
    try:
        with transport, GracefulStop() as stop:
            try:
                while counters["step"] < cfg.run.total_steps and not stop.requested():
                    t0 = time.time()
                    batch = transport.get_batch(stop.requested)
                    if batch is None:
                        break
                    waited += time.time() - t0
                    policy_lag = published - batch["policy_version"][1:].double().mean().item()
                    batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
                    update_statistics(model, batch)
                    metrics = learn_from_batch(trainer, model, batch, cfg, minibatch_generator)
                    transport.publish_weights(model)
                    published += 1

                    done = batch["done"][1:]
                    returns.extend(batch["episode_return"][1:][done].tolist())
                    counters["step"] += steps_per_update
                    counters["updates"] += 1
                    counters["episodes"] += int(done.sum())
                    history.append((time.time(), counters["step"], waited))
                    first = first or history[0]
                    (t_a, step_a, wait_a), (t_b, step_b, wait_b) = history[0], history[-1]
                    metrics = {"sps": (step_b - step_a) / (t_b - t_a) if t_b > t_a else math.nan,
                               "learner_wait": (wait_b - wait_a) / (t_b - t_a) if t_b > t_a else math.nan,
                               "mean_return": returns.mean(), "episodes": counters["episodes"],
                               "policy_lag": policy_lag, **metrics,
                               **transport.stats()}
                    logger.log(counters["step"], metrics)
                    if on_update is not None:
                        on_update(counters["step"], metrics)
                    logger.progress(counters["step"], {k: metrics[k] for k in PROGRESS_KEYS if k in metrics},
                                    force=bool(metrics["nonfinite"]))
                    if milestones and counters["step"] >= milestones[0]:
                        while milestones and counters["step"] >= milestones[0]:
                            milestones.pop(0)
                        checkpoint(milestone=True)
                        last_ckpt = time.time()
                    elif time.time() - last_ckpt > 60 * cfg.checkpoint.interval_minutes:
                        checkpoint()
                        last_ckpt = time.time()
            except ActorError:  # between updates, so consistent: keep the progress, then report the actor
                checkpoint()
                raise
            if stop.requested():
                print(f"stopping at step {counters['step']:,}", flush=True)
            checkpoint()  # before the acting side closes: a close that fails or hangs loses nothing
    finally:
        logger.close()
    elapsed, steps = (history[-1][0] - first[0], history[-1][1] - first[1]) if first else (0.0, 0)
    summary = {**counters, "mean_return": returns.mean(), "sps": steps / elapsed if elapsed else math.nan}
    logger.progress(counters["step"], {k: summary[k] for k in ("sps", "mean_return", "episodes")}, force=True)
    return summary
