"""The policy's action distributions, behind one interface: the factorised categorical of
Discrete and MultiDiscrete spaces, and the diagonal Gaussian of Box spaces.

Both read the policy head's output, ``logits`` [..., num_logits], and give ``log_prob``,
``entropy_sum``, ``sample``, ``mode``, ``features`` (the core's previous-action input, ``input_size``
wide) and ``to_env`` (what the env is stepped with). Actions are stored as the policy drew them
(``action_shape``, ``action_dtype``), so the behaviour log-probs that V-trace's ratios and PPO's clip
read are exact.

:class:`CategoricalActions`: a categorical per component of the action, independent of each other
(a factorised categorical, as OpenAI Baselines' and SB3's MultiCategorical), so a Discrete space is
one component and a MultiDiscrete space [n_1, ..., n_K] is K of them. The logits [..., n_1 + ... +
n_K] hold each component's logits side by side. An action is stored as one integer, the
mixed-radix index of its components (a_1 · n_2 ⋯ n_K + ... + a_K, numpy's ``ravel_multi_index``),
so every buffer, queue and transport keeps one int64 per step whatever the space. log π(a|x) =
Σ_k log π_k(a_k|x) and H(π) = Σ_k H(π_k): the components are independent given x, so V-trace's
ratios, PPO's clip and the entropy bonus keep their meaning.

:class:`GaussianActions`: D independent normals, π(u|x) = Π_d N(u_d; μ_d(x), σ_d²), whose logits
are (μ, log σ) side by side [..., 2D]; log σ is a learned parameter that does not depend on x
(:class:`agents.network.AgentNet`), as in CleanRL's and SB3's PPO. The draw u is stored as it is, in
float32 [..., D]; the env gets clip(u, −1, 1), or tanh(u) with ``squash``, which the gym adapter maps
linearly onto the space's bounds. With ``squash`` the log-prob is the density of a = tanh(u):
log π(a|x) = Σ_d [log N(u_d; μ_d, σ_d²) − log(1 − tanh² u_d)] (Haarnoja et al. 2018, Eq. 21).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Union

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class CategoricalActions:
    """The components' sizes (n_1, ..., n_K); ``CategoricalActions((n,))`` is a Discrete space of n."""

    sizes: tuple[int, ...]

    continuous: ClassVar[bool] = False
    action_shape: ClassVar[tuple[int, ...]] = ()
    """One integer per step."""
    action_dtype: ClassVar[torch.dtype] = torch.int64

    @property
    def num_logits(self) -> int:
        return sum(self.sizes)

    @property
    def input_size(self) -> int:
        """Width of :meth:`features`: the components' one-hots side by side."""
        return self.num_logits

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

    def features(self, actions: Tensor) -> Tensor:
        """The core's previous-action input [..., input_size]: :meth:`one_hot`."""
        return self.one_hot(actions.long())

    def to_env(self, actions: Tensor) -> Tensor:
        """What the env is stepped with: the integer actions themselves."""
        return actions

    def one_hot(self, actions: Tensor) -> Tensor:
        """[..., num_logits]: the components' one-hot vectors side by side (float)."""
        if len(self.sizes) == 1:
            return F.one_hot(actions, self.sizes[0]).float()
        parts = self.components(actions)
        return torch.cat([F.one_hot(parts[..., k], n).float() for k, n in enumerate(self.sizes)], dim=-1)




LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@dataclass(frozen=True)
class GaussianActions:
    """A diagonal Gaussian over ``dim`` real actions (module docstring), tanh-squashed with ``squash``."""

    dim: int
    squash: bool = False

    continuous: ClassVar[bool] = True
    action_dtype: ClassVar[torch.dtype] = torch.float32

    @property
    def num_logits(self) -> int:
        """μ and log σ side by side."""
        return 2 * self.dim

    @property
    def input_size(self) -> int:
        """Width of :meth:`features`: the env action."""
        return self.dim

    @property
    def action_shape(self) -> tuple[int, ...]:
        return (self.dim,)

    def mean_and_log_std(self, logits: Tensor) -> tuple[Tensor, Tensor]:
        """(μ, log σ) [..., D] of logits [..., 2D]."""
        return logits[..., :self.dim], logits[..., self.dim:]

    def log_prob(self, logits: Tensor, actions: Tensor) -> Tensor:
        """log π(u|x) [...] of the stored draws u [..., D]: Σ_d −½ z_d² − log σ_d − ½ log 2π with
        z = (u − μ)/σ, less Σ_d log(1 − tanh² u_d) with ``squash`` (the density of tanh(u))."""
        mean, log_std = self.mean_and_log_std(logits)
        z = (actions - mean) * torch.exp(-log_std)
        log_prob = (-0.5 * z * z - log_std - LOG_SQRT_2PI).sum(-1)
        if self.squash:  # log(1 − tanh² u) = 2 (log 2 − u − softplus(−2u)), exact where tanh u rounds to ±1
            log_prob = log_prob - (2.0 * (math.log(2.0) - actions - F.softplus(-2.0 * actions))).sum(-1)
        return log_prob

    def entropy_sum(self, logits: Tensor) -> Tensor:
        """Σ H over every sample of logits [..., 2D]: Σ_d log σ_d + ½ (1 + log 2π), the Gaussian's
        entropy. With ``squash`` this is the entropy of u before the tanh (the squashed density's has
        no closed form); the bonus then keeps σ from collapsing, as it does without it."""
        _, log_std = self.mean_and_log_std(logits)
        return (log_std + 0.5 + LOG_SQRT_2PI).sum()

    def sample(self, logits: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Draws u = μ + σ ε [B, D], ε ~ N(0, I)."""
        mean, log_std = self.mean_and_log_std(logits)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        return mean + torch.exp(log_std) * noise

    def mode(self, logits: Tensor) -> Tensor:
        """The deterministic policy: μ (its tanh with ``squash``, through :meth:`to_env`)."""
        return self.mean_and_log_std(logits)[0]

    def features(self, actions: Tensor) -> Tensor:
        """The core's previous-action input [..., D]: the env action :meth:`to_env`, in [−1, 1]."""
        return self.to_env(actions.float())

    def to_env(self, actions: Tensor) -> Tensor:
        """What the env is stepped with, in [−1, 1]: tanh(u) with ``squash``, else u clipped."""
        return torch.tanh(actions) if self.squash else actions.clamp(-1.0, 1.0)


Actions = Union[CategoricalActions, GaussianActions]


def make_actions(*, sizes: tuple[int, ...] = (), dim: int = 0, squash: bool = False) -> Actions:
    """A Box space's :class:`GaussianActions` of ``dim`` > 0 dimensions, else the categorical of ``sizes``."""
    return GaussianActions(dim, squash) if dim else CategoricalActions(tuple(sizes))


__all__ = ["Actions", "CategoricalActions", "GaussianActions", "make_actions"]
