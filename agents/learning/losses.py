"""The actor-critic losses of the learner: IMPALA's (Espeholt et al., 2018, §4) and, with a
clip, the clipped surrogate of PPO (Schulman et al., 2017, Eq. 7) on the ratio of the current
policy to the behaviour policy.

Each piece reads on its own: :func:`vtrace_returns` and :func:`gae_returns` (the value targets
and advantages of each estimator), :func:`policy_loss` (IMPALA's or PPO's), :func:`value_loss`
(plain or clipped), and :func:`actor_critic_losses`, which scores :class:`Unrolls` with them
under the ``loss`` config section.

With a clip and V-trace, the advantage is r_s + γ_s v_{s+1} − V(x_s), without V-trace's ρ_s:
the surrogate's ratio π/μ already weighs the sample by how far the policy moved, and ρ_s = min(ρ̄,
π/μ) would count that move a second time. Sample Factory's APPO does multiply by ρ_s. GAE
has no correction of its own, so it needs the clip (``check_config`` refuses it without one).

Each term is a sum over the T × B samples (as in torchbeast). The advantages and value targets
are computed from the values the network gives now.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

import torch
from jsonargparse.typing import ClosedUnitInterval, NonNegativeFloat, OpenUnitInterval, PositiveFloat
from torch import Tensor

from agents.actions import Actions, CategoricalActions
from agents.config import RESUMABLE
from agents.learning.vtrace import gae, vtrace


@dataclass
class LossConfig:
    """The IMPALA loss (Espeholt et al., 2018, Eqs. 1-4) and the cores' auxiliary losses."""

    discount: ClosedUnitInterval = 0.9
    """γ."""
    baseline_cost: NonNegativeFloat = 0.5
    """Weight of the baseline (value) loss."""
    entropy_cost: NonNegativeFloat = 0.01
    """Weight of the entropy bonus."""
    rho_bar: PositiveFloat = 1.0
    """V-trace's ρ̄, the clip of the importance weights in the targets."""
    c_bar: NonNegativeFloat = 1.0
    """V-trace's c̄, the clip of the trace-cutting weights."""
    aux_loss_weights: dict[str, float] = field(default_factory=dict)
    """Weight of each core auxiliary loss by name (MNM: meta); a loss not listed has weight 1."""
    clip: Optional[PositiveFloat] = None
    """PPO's ε: the clipped surrogate on the ratio π/μ (null: IMPALA's ρ-weighted policy gradient)."""
    advantages: Literal["vtrace", "gae"] = "vtrace"
    """Advantages and value targets: V-trace (off-policy corrected) or GAE (on-policy; needs loss.clip)."""
    gae_lambda: ClosedUnitInterval = 0.95
    """GAE's λ."""
    normalize_advantages: bool = False
    """Standardise the advantages (mean 0, std 1), with ``advantage_statistics``' mean and std."""
    advantage_statistics: Literal["minibatch", "batch"] = "minibatch"
    """Whose mean and std ``normalize_advantages`` takes: each minibatch's own (SB3's and CleanRL's, whose
    minibatches are random samples of the rollout), or the whole batch's under the network before its
    updates (one more forward pass per batch, without gradients). A minibatch of whole trajectories is
    one stretch of play per trajectory: its own mean takes out how much better than expected that
    stretch went, and with it a share of each action's advantage (GAE spreads an action's effect over
    ~1/(1 − γλ) steps of the trajectory's sum)."""
    scale_rewards: bool = False
    """Divide rewards by the running std of the discounted return (gymnasium's NormalizeReward; CleanRL's
    continuous PPO), in the loss and in the core's input; its statistics ride in the checkpoint."""
    value_clip: Optional[PositiveFloat] = None
    """PPO's value clipping: keep the value within this of its value before the batch's updates (null: off)."""
    popart: bool = False
    """Normalise the value targets with PopArt (scale-free value loss and advantages)."""
    popart_step: OpenUnitInterval = 0.01
    """PopArt: the step β of the targets' running mean and mean square, per batch."""
    popart_min_sigma: PositiveFloat = 0.01
    """PopArt: floor of σ, so a solved task's near-constant targets do not blow up the advantages."""
    popart_zero_init: bool = field(default=False, metadata=RESUMABLE)
    """PopArt: start a new value head at zero, so the first statistics do not magnify its random outputs."""


MAX_LOG_RATIO = 20.0
"""The clamp of log π/μ (:meth:`Unrolls.log_probs`): e^20 ≈ 5e8, finite in float32 and far past any clip."""


@dataclass(frozen=True)
class Unrolls:
    """What the loss scores, time-major: the learner's ``target_logits`` and the actors'
    ``behaviour_logits`` [T, B, A], the ``actions`` taken [T, B], the ``rewards`` and
    ``discounts`` γ_s [T, B] (zero where the episode ended), the ``values`` V(x_s) [T, B] and
    the ``bootstrap_value`` V(x_T) [B]. ``action_space`` reads the logits (:mod:`agents.actions`:
    a MultiDiscrete space's factorised categorical, a Box space's Gaussian, whose actions are
    [T, B, D]; default: one categorical over the logits)."""

    target_logits: Tensor
    behaviour_logits: Tensor
    actions: Tensor
    rewards: Tensor
    discounts: Tensor
    values: Tensor
    bootstrap_value: Tensor
    action_space: Optional[Actions] = None

    @property
    def space(self) -> Actions:
        return self.action_space or CategoricalActions((self.target_logits.shape[-1],))

    def log_probs(self) -> tuple[Tensor, Tensor]:
        """(log π(a_s|x_s), log ρ_s = log π(a_s|x_s) − log μ(a_s|x_s)), each [T, B]. The log-ratio
        is clamped to ±:data:`MAX_LOG_RATIO` before anything takes its exp: a Gaussian's density
        ratio at a far-off action can pass float32's range (e^89), and V-trace's ρ̄ and PPO's clip
        cut far nearer than the clamp, so no value they use changes."""
        log_pi = self.space.log_prob(self.target_logits, self.actions)
        log_rhos = log_pi - self.space.log_prob(self.behaviour_logits, self.actions)
        return log_pi, log_rhos.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)


@torch.no_grad()
def vtrace_returns(u: Unrolls, log_rhos: Tensor, loss: LossConfig) -> tuple[Tensor, Tensor]:
    """V-trace's value targets v_s (Eq. 1) and advantages: ρ_s (r_s + γ_s v_{s+1} − V(x_s))
    (§4.2), or, with ``loss.clip``, the same without ρ_s (the surrogate's ratio weighs it)."""
    returns = vtrace(log_rhos, u.discounts, u.rewards, u.values, u.bootstrap_value,
                     rho_bar=loss.rho_bar, c_bar=loss.c_bar)
    if loss.clip is None:
        return returns.vs, returns.pg_advantages
    targets_next = torch.cat([returns.vs[1:], u.bootstrap_value.unsqueeze(0)])
    return returns.vs, u.rewards + u.discounts * targets_next - u.values


@torch.no_grad()
def gae_returns(u: Unrolls, loss: LossConfig) -> tuple[Tensor, Tensor]:
    """GAE's value targets A_s + V(x_s) and advantages A_s (Schulman et al., 2016, Eq. 16), with λ
    ``loss.gae_lambda``; on-policy, so the clipped surrogate corrects for the policy's lag."""
    return gae(u.discounts, u.rewards, u.values, u.bootstrap_value, loss.gae_lambda)


def estimate_returns(u: Unrolls, loss: LossConfig, log_rhos: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """(value targets, advantages) [T, B] of ``loss.advantages``'s estimator."""
    if loss.advantages == "gae":
        return gae_returns(u, loss)
    return vtrace_returns(u, u.log_probs()[1] if log_rhos is None else log_rhos, loss)


@torch.no_grad()
def advantage_statistics(advantages: Tensor) -> tuple[Tensor, Tensor]:
    """(mean, std) of a batch's advantages, as ``loss.advantage_statistics`` batch uses them in every
    minibatch (the unbiased std; a one-sample batch has no spread: mean 0, std 1)."""
    if advantages.numel() < 2:
        return advantages.new_zeros(()), advantages.new_ones(())
    return advantages.mean(), advantages.std()


def policy_loss(log_probs: Tensor, log_rhos: Tensor, advantages: Tensor, clip: Optional[float]) -> dict[str, Tensor]:
    """IMPALA's −Σ A_s log π(a_s|x_s) (advantages held fixed) with ``clip`` None; with ``clip``
    ε, PPO's −Σ min(r_s A_s, clip(r_s, 1 − ε, 1 + ε) A_s), r_s = π/μ, and ``clip_fraction``,
    the share of samples whose ratio is past the clip (a diagnostic)."""
    if clip is None:
        return {"pg_loss": -(log_probs * advantages).sum()}
    ratio = torch.exp(log_rhos)
    clipped = ratio.clamp(1.0 - clip, 1.0 + clip)
    return {"pg_loss": -torch.minimum(ratio * advantages, clipped * advantages).sum(),
            "clip_fraction": ((ratio - 1.0).abs() > clip).float().mean().detach()}


def value_loss(targets: Tensor, values: Tensor, *, scale: Optional[Tensor] = None, old_values: Optional[Tensor] = None,
               clip: Optional[float] = None) -> Tensor:
    """½ Σ (v_s − V(x_s))², in units of ``scale`` σ (PopArt) if given; with ``clip`` c and
    ``old_values`` V_old (before the batch's updates), PPO's value clipping:
    ½ Σ max((v_s − V)², (v_s − V_old − clip(V − V_old, −c, c))²), c in units of σ."""
    scale = 1.0 if scale is None else scale
    errors = (targets - values) / scale
    if clip is None or old_values is None:
        return 0.5 * (errors ** 2).sum()
    clipped_values = old_values + (values - old_values).clamp(-clip * scale, clip * scale)
    return 0.5 * torch.maximum(errors ** 2, ((targets - clipped_values) / scale) ** 2).sum()


def actor_critic_losses(u: Unrolls, loss: LossConfig, *, value_scale: Optional[Tensor] = None,
                        old_values: Optional[Tensor] = None, returns: Optional[tuple[Tensor, Tensor]] = None,
                        advantage_stats: Optional[tuple[Tensor, Tensor]] = None) -> tuple[dict[str, Tensor], Tensor]:
    """(terms, value targets [T, B]): :func:`policy_loss`'s terms, ``baseline_loss``
    (:func:`value_loss`) and ``entropy`` −Σ_s Σ_a π(a|x_s) log π(a|x_s) (summed over a
    MultiDiscrete space's components), each summed over the T × B samples.

    The targets and advantages are ``loss.advantages``'s (:func:`estimate_returns`), or
    ``returns`` if the caller has them already. ``value_scale`` σ (PopArt, Hessel et al. 2019,
    §2) divides the value errors, the value clip and the advantages, so the value is regressed in
    normalised units and the policy sees advantages of unit scale; ``loss.normalize_advantages``
    standardises A, over these samples or, given ``advantage_stats`` (mean, std) of A in the
    rewards' units (:func:`advantage_statistics`), with those (σ then cancels). With the defaults
    this is exactly IMPALA's loss.
    """
    log_probs, log_rhos = u.log_probs()
    targets, advantages = returns or estimate_returns(u, loss, log_rhos)
    if loss.normalize_advantages and advantage_stats is not None:
        mean, std = advantage_stats
        advantages = (advantages - mean) / (std + 1e-8)
    else:
        if value_scale is not None:
            advantages = advantages / value_scale
        if loss.normalize_advantages and advantages.numel() > 1:  # one sample has no spread (SB3 skips it too)
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    terms = policy_loss(log_probs, log_rhos, advantages, loss.clip)
    terms["baseline_loss"] = value_loss(targets, u.values, scale=value_scale, old_values=old_values,
                                        clip=loss.value_clip)
    terms["entropy"] = u.space.entropy_sum(u.target_logits)
    return terms, targets


def total_loss(losses: dict[str, Tensor], baseline_cost: float, entropy_cost: float,
               aux: dict[str, Tensor] | None = None, aux_weights: dict[str, float] | None = None) -> Tensor:
    """pg_loss + baseline_cost · baseline_loss − entropy_cost · entropy + Σ_k w_k · aux_k.

    ``aux`` are the core's auxiliary losses (e.g. MNM's ``meta``); a name missing from
    ``aux_weights`` has weight 1.
    """
    loss = losses["pg_loss"] + baseline_cost * losses["baseline_loss"] - entropy_cost * losses["entropy"]
    for name, value in (aux or {}).items():
        loss = loss + (aux_weights or {}).get(name, 1.0) * value
    return loss
