"""Running statistics for continuous control: the observations' mean and variance
(:class:`RunningNorm`) and the discounted return whose spread scales the rewards
(:func:`discounted_returns`), the practice of CleanRL's ``ppo_continuous_action`` and SB3's
``VecNormalize``.

The statistics are module buffers: they ride in the checkpoint with the weights, are restored
exactly on resume, and reach the actors with every weight publication. Only the learner moves them
(:meth:`RunningNorm.update`), from the data of each batch; acting and evaluation read them as they are.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn


class RunningNorm(nn.Module):
    """x ↦ clip((x − m) / sqrt(v + ε), ±``clip``), elementwise over ``shape``, with m and v the mean
    and variance of every sample passed to :meth:`update` so far (float64, merged batch by batch
    with Chan et al.'s parallel update, as SB3's ``RunningMeanStd``; ``count`` starts at ε so the first
    batch sets them). Before any update it is the identity (m = 0, v = 1)."""

    def __init__(self, shape: tuple[int, ...], *, epsilon: float = 1e-8, clip: float = 10.0):
        super().__init__()
        self.epsilon, self.clip = epsilon, clip
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        """Merge the samples x [..., *shape] into the statistics."""
        x = x.reshape(-1, *self.mean.shape).to(self.mean.device, torch.float64)
        n = x.shape[0]
        if n == 0:
            return
        batch_mean, batch_var = x.mean(0), x.var(0, unbiased=False)
        delta, total = batch_mean - self.mean, self.count + n
        self.var.copy_((self.var * self.count + batch_var * n + delta ** 2 * self.count * n / total) / total)
        self.mean.add_(delta * n / total)
        self.count.fill_(total)

    def forward(self, x: Tensor) -> Tensor:
        """x [..., *shape], normalised (float32)."""
        scale = torch.rsqrt(self.var + self.epsilon).float()
        return ((x.float() - self.mean.float()) * scale).clamp(-self.clip, self.clip)


def discounted_returns(previous: Tensor, reward: Tensor, previous_done: Tensor, discount: float) -> Tensor:
    """Each env's discounted return so far after a step, G_t = r_t + γ G_{t−1} (1 − done_{t−1}), from
    G_{t−1} ``previous`` and ``previous_done`` [N]. In the actors' layout a step's ``done`` marks an
    observation that starts an episode, while that step's reward is the last of the episode before;
    so G restarts after the step that began an episode (gymnasium's ``NormalizeReward`` keeps the same sum)."""
    return reward + discount * previous * (~previous_done).float()


__all__ = ["RunningNorm", "discounted_returns"]
