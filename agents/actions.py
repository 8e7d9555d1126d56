"""The policy's action distribution: a categorical per component of the action, independent of
each other (a factorised categorical, as OpenAI Baselines' and SB3's MultiCategorical), so a
Discrete space is one component and a MultiDiscrete space [n_1, ..., n_K] is K of them.

The logits [..., n_1 + ... + n_K] hold each component's logits side by side. An action is
stored as one integer, the mixed-radix index of its components (a_1 · n_2 ⋯ n_K + ... + a_K,
numpy's ``ravel_multi_index``), so every buffer, queue and transport keeps one int64 per step
whatever the space. log π(a|x) = Σ_k log π_k(a_k|x) and H(π) = Σ_k H(π_k): the components are
independent given x, so V-trace's ratios, PPO's clip and the entropy bonus keep their meaning.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class ActionSpace:
    """The components' sizes (n_1, ..., n_K); ``ActionSpace((n,))`` is a Discrete space of n."""

    sizes: tuple[int, ...]

    @property
    def num_logits(self) -> int:
        return sum(self.sizes)

    @property
    def num_actions(self) -> int:
        """Distinct actions (the product of the sizes): actions are 0 .. num_actions - 1."""
        return math.prod(self.sizes)

    def components(self, actions: Tensor) -> Tensor:
        """[..., K]: each component a_k of the integer actions [...]."""
        parts, rest = [], actions
        for n in reversed(self.sizes):
            parts.append(rest % n)
            rest = torch.div(rest, n, rounding_mode="floor")
        return torch.stack(parts[::-1], dim=-1)

    def index(self, components: Tensor) -> Tensor:
        """The integer actions [...] of components [..., K] (the inverse of :meth:`components`)."""
        actions = torch.zeros_like(components[..., 0])
        for k, n in enumerate(self.sizes):
            actions = actions * n + components[..., k]
        return actions

    def log_prob(self, logits: Tensor, actions: Tensor) -> Tensor:
        """log π(a|x) [...] of integer actions [...] under logits [..., num_logits]."""
        if len(self.sizes) == 1:
            return torch.log_softmax(logits, dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        parts = self.components(actions)
        return sum(torch.log_softmax(chunk, dim=-1).gather(-1, parts[..., k:k + 1]).squeeze(-1)
                   for k, chunk in enumerate(logits.split(self.sizes, dim=-1)))

    def entropy_sum(self, logits: Tensor) -> Tensor:
        """Σ H(π(·|x)) over every sample of logits [..., num_logits]: each component's entropy,
        −Σ_a π_k(a|x) log π_k(a|x), summed over the components and the samples."""
        return sum(-(log_p.exp() * log_p).sum()
                   for log_p in (torch.log_softmax(chunk, dim=-1) for chunk in logits.split(self.sizes, dim=-1)))

    def sample(self, logits: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Integer actions [B] drawn from logits [B, num_logits], each component on its own."""
        if len(self.sizes) == 1:  # the actors' hot path: no components to combine
            return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator).squeeze(-1)
        parts = [torch.multinomial(torch.softmax(chunk, dim=-1), 1, generator=generator).squeeze(-1)
                 for chunk in logits.split(self.sizes, dim=-1)]
        return self.index(torch.stack(parts, dim=-1))

    def mode(self, logits: Tensor) -> Tensor:
        """The most likely action [...]: each component's argmax."""
        if len(self.sizes) == 1:
            return logits.argmax(-1)
        return self.index(torch.stack([chunk.argmax(-1) for chunk in logits.split(self.sizes, dim=-1)], dim=-1))

    def one_hot(self, actions: Tensor) -> Tensor:
        """[..., num_logits]: the components' one-hot vectors side by side (float)."""
        if len(self.sizes) == 1:
            return F.one_hot(actions, self.sizes[0]).float()
        parts = self.components(actions)
        return torch.cat([F.one_hot(parts[..., k], n).float() for k, n in enumerate(self.sizes)], dim=-1)


__all__ = ["ActionSpace"]
