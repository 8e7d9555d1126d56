"""PopArt (van Hasselt et al. 2016; Hessel et al. 2019, "Multi-task deep reinforcement learning
with PopArt", §2): the value head learns in normalised units, and the scale of the targets is
tracked and folded back in without changing what the network outputs.

The head computes V(x) = σ (w·h(x) + b) + μ, where μ and σ are running estimates of the mean
and standard deviation of the value targets. When an update moves (μ, σ) to (μ', σ'), the head
rescales w' = (σ / σ') w and b' = (σ b + μ − μ') / σ' ("Preserving Outputs Precisely", Eq. 2 of
Hessel et al.), so V(x) is unchanged; the loss divides value errors and advantages by σ
(:func:`agents.learning.losses.actor_critic_losses`), so one set of settings works whatever the
scale of the rewards.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

SIGMA_RANGE = (1e-4, 1e6)  # σ is kept within these bounds (the paper's clipping); min_sigma raises the floor


class PopArt(nn.Linear):
    """A linear value head ``in_features -> 1`` whose output is de-normalised by running
    statistics (buffers ``mu`` and ``nu``, the first and second moments of the targets, saved
    with the model); ``step`` is the statistics' step size β, ``min_sigma`` the floor of σ (at
    least the paper's 1e-4: once a task is solved its targets barely vary, σ shrinks towards 0, and
    advantages divided by σ turn noise into large policy gradients).

    ``zero_init`` starts the head at zero (V = μ = 0). The first update sets σ to the first
    targets' spread, which on small rewards is its floor (PositionOnlyCartPole: 0.01), and keeping
    a randomly initialised head's outputs then puts them at 1/σ times their size in normalised
    units: value errors and advantages of tens of σ that are noise, whose gradient (norm ~2e5
    there, against a clip of 40) swamps the first updates' policy gradient."""

    def __init__(self, in_features: int, step: float = 0.01, min_sigma: float = SIGMA_RANGE[0],
                 zero_init: bool = False):
        super().__init__(in_features, 1)
        if zero_init:
            nn.init.zeros_(self.weight)
            nn.init.zeros_(self.bias)
        self.step, self.min_sigma = step, max(min_sigma, SIGMA_RANGE[0])
        self.register_buffer("mu", torch.zeros(()))
        self.register_buffer("nu", torch.ones(()))
        self.register_buffer("updates", torch.zeros((), dtype=torch.int64))

    @property
    def sigma(self) -> Tensor:
        return (self.nu - self.mu ** 2).clamp(min=self.min_sigma ** 2).sqrt().clamp(max=SIGMA_RANGE[1])

    def forward(self, h: Tensor) -> Tensor:
        return super().forward(h) * self.sigma + self.mu

    @torch.no_grad()
    def update(self, targets: Tensor) -> None:
        """Move (μ, ν) towards the mean and mean square of ``targets`` by β (by 1/n for the first
        n < 1/β updates, so the first statistics are averages rather than biased towards the
        initial 0 and 1), then rescale the head so that its outputs stay the same. Targets with a
        NaN or infinity (a diverged batch, which the learner then skips) leave everything as it was:
        one would make μ and ν NaN for good."""
        if not torch.isfinite(targets).all():
            return
        self.updates += 1
        beta = max(self.step, 1.0 / float(self.updates))
        sigma, mu = self.sigma, self.mu.clone()
        targets = targets.detach().to(self.mu.dtype)
        self.mu.lerp_(targets.mean(), beta)
        self.nu.lerp_(targets.square().mean(), beta)
        new_sigma = self.sigma
        self.weight.mul_(sigma / new_sigma)
        self.bias.mul_(sigma).add_(mu - self.mu).div_(new_sigma)
