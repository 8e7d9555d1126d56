"""The IMPALA learner: config schema, loss on a batch of unrolls, and the training loop.

The learner re-runs every unroll from the core state stored at its start, in sequence mode
(one ``core.forward`` over the T+1 steps), so the gradient flows through the fast weights
across the unroll; ``truncate_per_step`` instead steps the core one step at a time and detaches
the carried state, as the official code does. V-trace and the loss follow Espeholt et al.
(2018), see :mod:`agents.vtrace`.
"""
from __future__ import annotations

import collections
import math
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from agents.actor import ActorError, ActorPool
from agents.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from agents.config import check_ranges, save_yaml, to_dict
from agents.logger import Logger, RecentMean
from agents.network import AgentNet
from agents.vtrace import impala_losses, total_loss
from fastnet.feature_maps import redraw_random_features


@dataclass
class EnvConfig:
    name: str = "maze"
    options: dict[str, Any] = field(default_factory=dict)  # keyword options of envs.make


@dataclass
class ActorConfig:
    num_actors: int = 2
    envs_per_actor: int = 64
    unroll_length: int = 20  # T: the learner's backpropagation span
    start_method: Literal["fork", "spawn", "forkserver"] = "fork"  # fork starts fastest (as monobeast)


@dataclass
class NetworkConfig:
    stem: str = "mlp"
    stem_options: dict[str, Any] = field(default_factory=dict)
    reward_clip: float | None = None  # clip rewards to ±this for the input and the loss; None = raw
    prev_action: bool = True  # feed the one-hot previous action to the core


@dataclass
class LearnerConfig:
    batch_size: int = 128  # trajectories per update; a multiple of actor.envs_per_actor
    discount: float = 0.9
    baseline_cost: float = 0.5
    entropy_cost: float = 0.01
    rho_bar: float = 1.0
    c_bar: float = 1.0
    truncate_per_step: bool = False
    aux_loss_weights: dict[str, float] = field(default_factory=dict)  # weight per core aux loss; default 1
    num_threads: int = 1  # torch threads of the learner process


@dataclass
class OptimConfig:
    name: Literal["rmsprop", "adam"] = "rmsprop"
    lr: float = 6e-4
    eps: float = 0.01
    alpha: float = 0.99  # RMSProp smoothing
    momentum: float = 0.0  # RMSProp momentum
    grad_clip: float = 40.0  # max global gradient norm (0 = no clipping)
    lr_decay: bool = True  # decay the learning rate linearly to 0 at total_steps


@dataclass
class LogConfig:
    return_window: int = 100  # mean return over this many recent episodes
    print_every_s: float = 5.0
    tensorboard: bool = True


@dataclass
class CheckpointConfig:
    interval_minutes: float = 5.0
    milestones: list[int] = field(default_factory=list)  # also keep checkpoint-<step>.pt at these steps


@dataclass
class TrainConfig:
    core: str = "lstm"
    device: str = "cpu"
    seed: int = 0
    total_steps: int = 1_000_000  # environment steps
    run_dir: str = "runs/{env}-{core}"  # {env} and {core} are filled in
    core_options: dict[str, Any] = field(default_factory=dict)  # make_core options
    core_defaults: dict[str, Any] = field(default_factory=dict)  # per-core overrides of any section
    env: EnvConfig = field(default_factory=EnvConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    log: LogConfig = field(default_factory=LogConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def resolved_run_dir(self) -> str:
        return self.run_dir.format(env=self.env.name, core=self.core)


def resolve_device(name: str) -> torch.device:
    """``torch.device(name)``, with a clear error if CUDA is asked for but unavailable."""
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"--device {name} was asked for, but CUDA is not available "
                           f"(torch {torch.__version__}, built with CUDA {torch.version.cuda}); use --device cpu")
    return device


def build_model(cfg: TrainConfig, observation_shape: tuple[int, ...], num_actions: int) -> AgentNet:
    return AgentNet(observation_shape, num_actions, cfg.core, cfg.core_options, stem=cfg.network.stem,
                    stem_options=cfg.network.stem_options, reward_clip=cfg.network.reward_clip,
                    prev_action=cfg.network.prev_action)


def compute_loss(model: AgentNet, batch: dict[str, Tensor], cfg: TrainConfig) -> tuple[Tensor, dict[str, Tensor]]:
    """The IMPALA loss on a batch of unrolls [T+1, N, ...] (layout of :mod:`agents.actor`).

    The model re-runs steps 0..T from the stored state; its logits and baselines at 0..T-1 are
    scored against the actions a_0..a_{T-1} (stored at 1..T), rewards r_1..r_T and discounts
    γ·(1 − done_{t+1}); the baseline at step T bootstraps (V(x_T) in Eq. 1). The core's aux
    losses (means over steps, e.g. MNM's meta loss) are multiplied by the T·N samples so that
    an aux weight of 1 weighs them per sample like the summed IMPALA terms.
    """
    lc = cfg.learner
    state = tuple(batch[f"state_{i}"] for i in range(sum(k.startswith("state_") for k in batch)))
    logits, baseline, _, aux = model(batch["obs"], batch["reward"], batch["action"], batch["done"], state,
                                     truncate_per_step=lc.truncate_per_step)
    rewards = batch["reward"][1:]
    if cfg.network.reward_clip is not None:
        rewards = rewards.clamp(-cfg.network.reward_clip, cfg.network.reward_clip)
    discounts = (~batch["done"][1:]).float() * lc.discount
    losses = impala_losses(logits[:-1], batch["logits"][1:], batch["action"][1:], rewards, discounts,
                           baseline[:-1], baseline[-1], rho_bar=lc.rho_bar, c_bar=lc.c_bar)
    num_samples = rewards.numel()  # the IMPALA terms are sums over T x N; aux losses are means
    loss = total_loss(losses, lc.baseline_cost, lc.entropy_cost, {k: num_samples * v for k, v in aux.items()},
                      lc.aux_loss_weights)
    return loss, {**losses, **{f"aux_{k}": v for k, v in aux.items()}}


def make_optimizer(cfg: TrainConfig, params: Any, steps_per_update: int) -> tuple[torch.optim.Optimizer, Any]:
    """RMSProp or Adam, and a LambdaLR decaying the lr linearly to 0 at ``total_steps`` (if ``lr_decay``)."""
    oc = cfg.optim
    if oc.name == "rmsprop":
        opt = torch.optim.RMSprop(params, lr=oc.lr, alpha=oc.alpha, eps=oc.eps, momentum=oc.momentum)
    else:
        opt = torch.optim.Adam(params, lr=oc.lr, eps=oc.eps)
    total = cfg.total_steps

    def factor(update: int) -> float:
        return 1.0 - min(update * steps_per_update, total) / total if oc.lr_decay else 1.0

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


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


PROGRESS_KEYS = ("sps", "mean_return", "loss", "pg_loss", "baseline_loss", "entropy", "learner_wait")


def learn(model: AgentNet, optimizer: torch.optim.Optimizer, scheduler: Any, batch: dict[str, Tensor],
          cfg: TrainConfig, device: torch.device) -> dict[str, float]:
    """One update on ``batch``: loss, backward, gradient-norm clipping, optimiser and lr steps."""
    batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    redraw_random_features(model)
    loss, terms = compute_loss(model, batch, cfg)
    optimizer.zero_grad()
    loss.backward()
    grad_norm = nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip or math.inf)
    optimizer.step()
    lr = scheduler.get_last_lr()[0]
    scheduler.step()
    return {"loss": loss.item(), **{k: v.item() for k, v in terms.items()}, "grad_norm": grad_norm.item(), "lr": lr}


# Settings a resumed run may change (a longer budget, more actors, other logging); any other
# difference from the checkpoint's config is an error (agents.checkpoint.check_same_run).
RESUMABLE_CHANGES = ("total_steps", "device", "run_dir", "core_defaults", "actor.num_actors", "actor.start_method",
                     "learner.num_threads", "log", "checkpoint")


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Train until ``total_steps`` environment steps, resuming from ``run_dir`` if it holds a checkpoint.

    Returns the final counters, the mean recent return and the SPS from the first update to the end
    (leaving out the start-up).
    """
    import envs

    check_ranges(cfg, positive=("total_steps", "actor.num_actors", "actor.envs_per_actor", "actor.unroll_length",
                                "learner.batch_size", "learner.rho_bar", "learner.num_threads", "network.reward_clip",
                                "log.return_window"),
                 non_negative=("learner.c_bar", "optim.lr", "optim.grad_clip", "checkpoint.interval_minutes"))
    if cfg.learner.batch_size % cfg.actor.envs_per_actor:
        raise ValueError(f"learner.batch_size ({cfg.learner.batch_size}) must be a multiple of "
                         f"actor.envs_per_actor ({cfg.actor.envs_per_actor})")
    device = resolve_device(cfg.device)
    torch.set_num_threads(cfg.learner.num_threads)
    torch.manual_seed(cfg.seed)
    probe = envs.make(cfg.env.name, num_envs=1, seed=cfg.seed, **cfg.env.options)
    obs_shape, num_actions = tuple(probe.observation_shape), probe.num_actions
    obs_dtype = torch.from_numpy(probe.reset()).dtype
    probe.close()

    model = build_model(cfg, obs_shape, num_actions).to(device)
    actor_model = build_model(cfg, obs_shape, num_actions)
    steps_per_update = cfg.learner.batch_size * cfg.actor.unroll_length
    optimizer, scheduler = make_optimizer(cfg, model.parameters(), steps_per_update)

    run_dir = cfg.resolved_run_dir()
    os.makedirs(run_dir, exist_ok=True)
    counters = {"step": 0, "updates": 0, "episodes": 0}
    returns = RecentMean(cfg.log.return_window)
    ckpt = latest_checkpoint(run_dir)
    if ckpt is not None:
        payload = load_checkpoint(ckpt, model, optimizer, scheduler, map_location=device, config=cfg,
                                  may_change=RESUMABLE_CHANGES)
        counters.update(payload["counters"])
        returns.extend(payload.get("recent_returns", []))  # absent in checkpoints of older versions
        print(f"resuming from {ckpt} at step {counters['step']:,}", flush=True)
    save_yaml(cfg, os.path.join(run_dir, "config.yaml"))
    actor_model.load_state_dict(model.state_dict())
    actor_model.share_memory()

    seeds = [int(np.random.SeedSequence([cfg.seed, i, counters["step"]]).generate_state(1)[0])
             for i in range(cfg.actor.num_actors)]
    logger = Logger(run_dir, resume_step=counters["step"], tensorboard=cfg.log.tensorboard,
                    print_every_s=cfg.log.print_every_s)
    milestones = sorted(m for m in cfg.checkpoint.milestones if m > counters["step"])

    def checkpoint(milestone: bool = False) -> None:
        save_checkpoint(run_dir, model=model, optimizer=optimizer, scheduler=scheduler, counters=counters,
                        config=to_dict(cfg), milestone=milestone, recent_returns=list(returns.values))

    pool = ActorPool(actor_model, cfg.env.name, cfg.env.options, cfg.actor.num_actors, cfg.actor.envs_per_actor,
                     cfg.actor.unroll_length, cfg.learner.batch_size // cfg.actor.envs_per_actor,
                     obs_shape, obs_dtype, seeds, cfg.actor.start_method)
    model.train()
    last_ckpt = time.time()
    history: collections.deque[tuple[float, int, float]] = collections.deque(maxlen=20)  # (time, step, waited)
    waited, first = 0.0, None
    try:
        with pool, GracefulStop() as stop:
            while counters["step"] < cfg.total_steps and not stop.requested():
                t0 = time.time()
                batch = pool.get_batch(stop.requested)
                if batch is None:
                    break
                waited += time.time() - t0
                metrics = learn(model, optimizer, scheduler, batch, cfg, device)
                actor_model.load_state_dict(model.state_dict())

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
                           "mean_return": returns.mean(), "episodes": counters["episodes"], **metrics}
                logger.log(counters["step"], metrics)
                logger.progress(counters["step"], {k: metrics[k] for k in PROGRESS_KEYS})
                if milestones and counters["step"] >= milestones[0]:
                    while milestones and counters["step"] >= milestones[0]:
                        milestones.pop(0)
                    checkpoint(milestone=True)
                    last_ckpt = time.time()
                elif time.time() - last_ckpt > 60 * cfg.checkpoint.interval_minutes:
                    checkpoint()
                    last_ckpt = time.time()
        if stop.requested():
            print(f"stopping at step {counters['step']:,}", flush=True)
        checkpoint()
    except ActorError:
        checkpoint()  # between updates, so consistent: keep the progress, then report the actor
        raise
    finally:
        logger.close()
    elapsed, steps = (history[-1][0] - first[0], history[-1][1] - first[1]) if first else (0.0, 0)
    summary = {**counters, "mean_return": returns.mean(), "sps": steps / elapsed if elapsed else math.nan}
    logger.progress(counters["step"], {k: summary[k] for k in ("sps", "mean_return", "episodes")}, force=True)
    return summary
