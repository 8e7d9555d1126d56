"""What the RL learner and the supervised trainer share: the config sections both have (run,
log, optim), the optimiser and its schedule, the update step (clipping, a guard against non-finite losses and
gradients), checkpoints and resume.

Both trainers build a :class:`Trainer` around their model and call :meth:`Trainer.update` with a
function that returns the loss; the rest of each loop (actors and V-trace, or batches and
evaluation) stays in its own module.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional

import torch
from jsonargparse.typing import (
    ClosedUnitInterval,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    restricted_number_type,
)
from torch import Tensor, nn

from agents.config import RESUMABLE, check, resumable_keys, save_yaml, to_dict
from agents.errors import ConfigError, UserError, WriteFailure
from agents.learning.checkpoint import checkpoints, load_latest_good, save_checkpoint
from fastnet.feature_maps import redraw_random_features

# A momentum or an Adam β of 1 or more never forgets: the step grows without bound.
UnitIntervalHalfOpen = restricted_number_type("UnitIntervalHalfOpen", float, [(">=", 0), ("<", 1)])


@dataclass
class RunConfig:
    """The run: seed, device, run directory."""

    seed: NonNegativeInt = 0
    """Seed of torch, numpy and the environments."""
    device: str = field(default="cpu", metadata=RESUMABLE)
    """Where the model trains: cpu, cuda, cuda:N, or auto (cuda when there is one)."""
    run_dir: str = field(default="runs/{core}", metadata=RESUMABLE)
    """Directory for checkpoints, logs and config.yaml; {env}, {id}, {game}, {task} and {core} are filled in."""
    num_threads: NonNegativeInt = field(default=1, metadata=RESUMABLE)
    """torch threads of the training process (0: torch's default)."""
    resume: bool = field(default=True, metadata=RESUMABLE)
    """Resume from the run directory's checkpoint if it has one (false: start afresh, the old run in replaced-*/)."""
    kernels: Optional[Literal["auto", "triton", "reference"]] = field(default=None, metadata=RESUMABLE)
    """Sequence kernels: auto (Triton on CUDA after a self-check), triton, reference; null: $DELTABEAST_KERNELS."""
    keep_checkpoints: PositiveInt = field(default=2, metadata=RESUMABLE)
    """Checkpoints kept besides milestones (the latest and those before it, for a resume to fall back on)."""


@dataclass
class LogConfig:
    """Progress line, CSV and TensorBoard."""

    print_every_s: NonNegativeFloat = 5.0
    """Seconds between progress lines."""
    tensorboard: bool = True
    """Also write TensorBoard scalars to run_dir/tb."""


@dataclass
class OptimConfig:
    """The optimiser, its learning-rate schedule and the update's safeguards."""

    name: Literal["rmsprop", "adam"] = "rmsprop"
    """RMSProp (as IMPALA) or Adam."""
    lr: PositiveFloat = 6e-4
    """Learning rate (at the end of the warm-up)."""
    eps: NonNegativeFloat = 0.01
    """ε added to the denominator (RMSProp and Adam)."""
    alpha: ClosedUnitInterval = 0.99
    """RMSProp: smoothing of the squared gradients."""
    momentum: UnitIntervalHalfOpen = 0.0
    """RMSProp: momentum, in [0, 1)."""
    beta1: UnitIntervalHalfOpen = 0.9
    """Adam: β1, in [0, 1)."""
    beta2: UnitIntervalHalfOpen = 0.999
    """Adam: β2, in [0, 1)."""
    grad_clip: NonNegativeFloat = field(default=40.0, metadata=RESUMABLE)
    """Clip the global gradient norm to this (0: no clipping)."""
    warmup_steps: NonNegativeInt = 0
    """Updates of linear warm-up from 0 to lr."""
    lr_decay: bool = False
    """Decay the learning rate linearly to ``lr_final`` x lr at the end of the budget (from lr, after the warm-up)."""
    lr_final: ClosedUnitInterval = 0.0
    """With ``lr_decay``: the fraction of lr the decay ends at (0: to 0, as CleanRL's PPO anneals)."""
    max_nonfinite_steps: PositiveInt = field(default=10, metadata=RESUMABLE)
    """Stop the run after this many updates in a row whose loss or gradient is NaN or inf (each is skipped)."""


def check_optim(cfg: OptimConfig) -> None:
    """ConfigError for optimiser settings that are valid alone but not together."""
    check(cfg.lr_decay or cfg.lr_final == 0, "optim.lr_final",
          f"{cfg.lr_final} is the end of a decay, but optim.lr_decay is false (the lr stays at optim.lr)")


class NonFiniteError(UserError):
    """Too many updates in a row had a NaN or infinite loss or gradient."""


def resolve_device(name: str, *, flag: str = "--run.device") -> torch.device:
    """``torch.device(name)`` (``auto``: cuda when available); ConfigError, naming ``flag``, for a
    device that is not there."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"{flag}: unknown device {name!r}; use cpu, cuda, cuda:N or auto") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{flag}: {name} was asked for, but CUDA is not available (torch {torch.__version__}); "
                          "use --device cpu")
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"{flag}: {name!r} is not supported; use cpu, cuda, cuda:N or auto")
    return device


def configure_kernels(mode: str | None, device: torch.device) -> None:
    """Set the kernel mode (None: ``$DELTABEAST_KERNELS``, else auto) and, for auto on CUDA, run the
    kernels' self-check now, at start-up, so that a kernel that fails is reported (one warning)
    before training rather than at its first call."""
    from fastnet.kernels import kernel_mode, self_check, set_kernel_mode

    try:
        if mode is not None:
            set_kernel_mode(mode)
        effective = kernel_mode()
    except (ValueError, RuntimeError) as e:
        raise ConfigError(f"--run.kernels: {e}") from None
    if effective == "auto" and device.type == "cuda":
        self_check(device)


def build_optimizer(params: Any, cfg: OptimConfig, total_updates: float
                    ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """RMSProp or Adam, and a schedule: linear warm-up over ``warmup_steps`` updates, then (with
    ``lr_decay``) a linear decay reaching ``lr_final`` x lr after ``total_updates``."""
    # foreach: one multi-tensor op per step of the rule, also on the CPU (where torch's default is a
    # Python loop over the tensors, which shows in updates as small as the maze's); Adam's fused
    # step is one kernel for all tensors, ~3x faster again on the CPU (docs/results.md)
    if cfg.name == "rmsprop":
        opt = torch.optim.RMSprop(params, lr=cfg.lr, alpha=cfg.alpha, eps=cfg.eps, momentum=cfg.momentum, foreach=True)
    else:
        opt = torch.optim.Adam(params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, fused=True)

    def factor(update: int) -> float:
        if update < cfg.warmup_steps:
            return (update + 1) / cfg.warmup_steps
        if not cfg.lr_decay:
            return 1.0
        span = max(total_updates - cfg.warmup_steps, 1.0)  # the decay's updates, after the warm-up's
        return 1.0 - (1.0 - cfg.lr_final) * min(update - cfg.warmup_steps, span) / span

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


class Trainer:
    """A model's optimiser, schedule, update step and checkpoints in ``run_dir``.

    ``config`` is the run's config dataclass: checkpoints carry it, and a resume refuses a
    checkpoint written under other settings than those its fields mark resumable
    (:data:`agents.config.RESUMABLE`: budgets, hardware, logging and checkpoint cadence, the clip
    and guard of the update).
    """

    def __init__(self, model: nn.Module, optim: OptimConfig, *, total_updates: float, run_dir: str, config: Any,
                 keep: int = 2):
        self.model, self.optim_cfg, self.run_dir, self.config, self.keep = model, optim, run_dir, config, keep
        self.params = list(model.parameters())  # listed once: the clip and the weight check take it every update
        self.optimizer, self.scheduler = build_optimizer(self.params, optim, total_updates)
        self.nonfinite_in_a_row = 0
        self.saved_step: int | None = None

    def resume(self, device: torch.device, *, resume: bool = True) -> dict[str, Any] | None:
        """Load the newest checkpoint of ``run_dir`` into the model, optimiser and schedule and
        return its payload (None if there is none, or ``resume`` is false); then save config.yaml."""
        found = None
        if not resume and checkpoints(self.run_dir):  # a run is there (not just any files: a run_dir may be shared)
            self._move_aside()
        if resume:
            found = load_latest_good(self.run_dir, self.model, self.optimizer, self.scheduler, map_location=device,
                                     config=self.config, may_change=resumable_keys(self.config))
        if found is not None:
            path, payload = found
            self.saved_step = int(payload["counters"]["step"])
            # The optimiser's saved lr is the old schedule's (0 at its end); a longer budget
            # (run.total_steps, train.max_steps) stretches the schedule, so the next step takes its lr
            schedule, update = self.scheduler.lr_lambdas[0], self.scheduler.last_epoch
            for group, base_lr in zip(self.optimizer.param_groups, self.scheduler.base_lrs):
                group["lr"] = base_lr * schedule(update)
                # the step kind (foreach, fused) of build_optimizer, not the checkpoint's
                for key in {"foreach", "fused"} & self.optimizer.defaults.keys():
                    group[key] = self.optimizer.defaults[key]
            print(f"resuming from {path} at step {self.saved_step:,}", flush=True)
        try:
            os.makedirs(self.run_dir, exist_ok=True)
        except OSError as e:
            raise WriteFailure(f"cannot create the run directory {self.run_dir}: {e.strerror or e}") from None
        save_yaml(self.config, os.path.join(self.run_dir, "config.yaml"))
        return found[1] if found else None

    def _move_aside(self) -> None:
        """Start afresh (``run.resume`` false): the run that was in ``run_dir`` (its checkpoints,
        milestones, logs and TensorBoard) moves to ``run_dir/replaced-<time>/``, so that nothing of
        it is lost and nothing of it is read as the new run's."""
        aside = os.path.join(self.run_dir, time.strftime("replaced-%Y%m%d-%H%M%S"))
        try:
            os.makedirs(aside)
            for name in os.listdir(self.run_dir):
                if not name.startswith("replaced-"):
                    os.replace(os.path.join(self.run_dir, name), os.path.join(aside, name))
        except OSError as e:
            raise WriteFailure(f"cannot move the earlier run in {self.run_dir} aside: {e.strerror or e}") from None
        print(f"starting afresh (run.resume false): the earlier run in {self.run_dir} is now in {aside}", flush=True)

    def update(self, loss_fn: Callable[[], tuple[Tensor, dict[str, Tensor]]], redraw: bool = True) -> dict[str, float]:
        """One update: redraw FAVOR+ features (unless ``redraw`` is false: the caller drew them for
        several updates on one batch), ``loss, terms = loss_fn()``, backward, clip, step.

        An update whose loss or gradient norm is not finite is skipped (no optimiser or schedule
        step) and reported with ``nonfinite = 1``; after ``max_nonfinite_steps`` in a row,
        :class:`NonFiniteError` stops the run. A step from a finite gradient that leaves a weight
        NaN or infinite (RMSProp with eps 0 divides by a zero average) stops the run at once with
        :class:`NonFiniteError`, before the caller can hand the weights to the actors; the last
        checkpoint, written before, stays the run's.
        """
        if redraw:
            redraw_random_features(self.model)
        loss, terms = loss_fn()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(self.params, self.optim_cfg.grad_clip or math.inf, foreach=True)
        lr = self.optimizer.param_groups[0]["lr"]  # what this step uses
        metrics = {"loss": loss.item(), **{k: v.item() for k, v in terms.items()}, "grad_norm": grad_norm.item(),
                   "lr": lr}
        if math.isfinite(metrics["loss"]) and math.isfinite(metrics["grad_norm"]):
            self.optimizer.step()
            self.scheduler.step()
            self.nonfinite_in_a_row = 0
            weight_norm = nn.utils.get_total_norm(self.params, foreach=True)  # one fused pass, ~50 µs
            if not math.isfinite(weight_norm.item()):
                raise NonFiniteError(f"an update made the weights NaN or inf (from a finite loss {metrics['loss']:.4g} "
                                     f"and gradient norm {metrics['grad_norm']:.4g}); stopped before they reached the "
                                     f"actors; {self._last_good()}")
            return {**metrics, "nonfinite": 0}
        self.optimizer.zero_grad(set_to_none=True)
        self.nonfinite_in_a_row += 1
        if self.nonfinite_in_a_row >= self.optim_cfg.max_nonfinite_steps:
            raise NonFiniteError(f"the loss or gradient was NaN or inf in {self.nonfinite_in_a_row} updates in a row "
                                 f"(loss {metrics['loss']}, gradient norm {metrics['grad_norm']}); stopped; "
                                 f"{self._last_good()}")
        return {**metrics, "nonfinite": 1}

    def _last_good(self) -> str:
        """Where the run can resume from, and what to change, for a divergence message."""
        where = (f"the last checkpoint ({self.run_dir}, step {self.saved_step:,}) is finite and resumes"
                 if self.saved_step is not None else "no checkpoint was written yet, so there is nothing to resume")
        return f"{where}. Start a new run with a lower optim.lr, a larger optim.eps or a gradient clip"

    def save(self, counters: dict[str, int], milestone: bool = False, **extra: Any) -> None:
        """Checkpoint the model, optimiser, schedule, ``counters`` and config (atomically)."""
        save_checkpoint(self.run_dir, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler,
                        counters=counters, config=to_dict(self.config), milestone=milestone, keep=self.keep, **extra)
        self.saved_step = int(counters["step"])
