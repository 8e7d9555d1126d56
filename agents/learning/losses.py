"""The actor-critic losses of the learner: IMPALA's (Espeholt et al., 2018, §4) and, with a
clip, the clipped surrogate of PPO (Schulman et al., 2017, Eq. 7) on the ratio of the current
policy to the behaviour policy.

With a clip and V-trace, the advantage is r_s + γ_s v_{s+1} − V(x_s), without V-trace's ρ_s:
the surrogate's ratio π/μ already weighs the sample by how far the policy moved, and ρ_s = min(ρ̄,
π/μ) would count that move a second time. Sample Factory's APPO does multiply by ρ_s. GAE
has no correction of its own, so it needs the clip (``check_config`` refuses it without one).

Each term is a sum over the T × B samples (as in torchbeast). The advantages and value targets
come from V-trace (:func:`agents.learning.vtrace.vtrace`) or GAE (:func:`agents.learning.vtrace.gae`),
computed from the values the network gives now.
"""
from __future__ import annotations

from typing import Literal, Optional

import torch
from torch import Tensor

from agents.actions import ActionSpace
from agents.learning.vtrace import gae, vtrace


def actor_critic_losses(target_logits: Tensor, behaviour_logits: Tensor, actions: Tensor, rewards: Tensor,
                        discounts: Tensor, values: Tensor, bootstrap_value: Tensor, *, rho_bar: float = 1.0,
                        c_bar: float = 1.0, clip: Optional[float] = None,
                        estimator: Literal["vtrace", "gae"] = "vtrace", gae_lambda: float = 0.95,
                        normalize_advantages: bool = False, value_scale: Optional[Tensor] = None,
                        old_values: Optional[Tensor] = None, value_clip: Optional[float] = None,
                        action_space: Optional[ActionSpace] = None,
                        returns: Optional[tuple[Tensor, Tensor]] = None) -> tuple[dict[str, Tensor], Tensor]:
    """(terms, value targets): the policy, value and entropy terms, each summed over the T × B
    batch (and, with a clip, the diagnostic ``clip_fraction``), and the value targets [T, B].

    * ``pg_loss``: with ``clip`` None, IMPALA's −Σ A_s log π(a_s|x_s) (§4.2, advantages held
      fixed), where A_s = ρ_s (r_s + γ_s v_{s+1} − V(x_s)) for V-trace and the GAE advantage for
      GAE; with ``clip`` ε, PPO's −Σ min(r_s A_s, clip(r_s, 1 − ε, 1 + ε) A_s) with r_s = π/μ
      and A_s = r_s + γ_s v_{s+1} − V(x_s) (the ratio now weighs the sample, so ρ does not).
    * ``baseline_loss``: ½ Σ (v_s − V(x_s))², the value regressed on the targets (V-trace's v_s
      of Eq. 1, or GAE's A_s + V(x_s)); with ``value_clip`` c and ``old_values`` V_old (the
      values before this batch's updates), ½ Σ max((v_s − V)², (v_s − V_old − clip(V − V_old,
      −c, c))²) (PPO's value clipping).
    * ``entropy``: −Σ_s Σ_a π(a|x_s) log π(a|x_s).

    ``action_space`` (:mod:`agents.actions`) factorises the logits and actions of a MultiDiscrete
    space: log π and the entropy are sums over its components (default: one categorical over
    the logits).

    ``value_scale`` σ (PopArt, Hessel et al. 2019, §2) divides the value errors, the value clip
    and the advantages: the value is regressed in normalised units and the policy sees
    advantages of unit scale. ``normalize_advantages`` standardises A over the batch. With the
    defaults this is exactly IMPALA's loss. ``returns``: the value targets and advantages of
    :func:`estimate_returns` on these logits and values, if the caller has them already.
    """
    space = action_space or ActionSpace((target_logits.shape[-1],))
    target_log_probs = space.log_prob(target_logits, actions)
    log_rhos = target_log_probs - space.log_prob(behaviour_logits, actions)
    targets, advantages = returns or estimate_returns(log_rhos, rewards, discounts, values, bootstrap_value,
                                                      rho_bar=rho_bar, c_bar=c_bar, clip=clip, estimator=estimator,
                                                      gae_lambda=gae_lambda)
    errors = targets - values
    if value_scale is not None:
        advantages, errors = advantages / value_scale, errors / value_scale
    if normalize_advantages:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    terms = {}
    if clip is None:
        terms["pg_loss"] = -(target_log_probs * advantages).sum()
    else:
        ratio = torch.exp(log_rhos)
        clipped = ratio.clamp(1.0 - clip, 1.0 + clip)
        terms["pg_loss"] = -torch.minimum(ratio * advantages, clipped * advantages).sum()
        terms["clip_fraction"] = ((ratio - 1.0).abs() > clip).float().mean().detach()
    if value_clip is not None and old_values is not None:
        bound = value_clip if value_scale is None else value_clip * value_scale
        clipped_values = old_values + (values - old_values).clamp(-bound, bound)
        clipped_errors = targets - clipped_values
        if value_scale is not None:
            clipped_errors = clipped_errors / value_scale
        terms["baseline_loss"] = 0.5 * torch.maximum(errors ** 2, clipped_errors ** 2).sum()
    else:
        terms["baseline_loss"] = 0.5 * (errors ** 2).sum()
    terms["entropy"] = space.entropy_sum(target_logits)
    return terms, targets


@torch.no_grad()
def estimate_returns(log_rhos: Tensor, rewards: Tensor, discounts: Tensor, values: Tensor, bootstrap_value: Tensor, *,
                     rho_bar: float, c_bar: float, clip: Optional[float], estimator: Literal["vtrace", "gae"],
                     gae_lambda: float) -> tuple[Tensor, Tensor]:
    """(value targets, advantages) [T, B] for :func:`actor_critic_losses` (its docstring gives
    both): V-trace's v_s and ρ-weighted advantages, or, with a clip, the advantages without ρ;
    or GAE's."""
    if estimator == "gae":
        return gae(discounts, rewards, values, bootstrap_value, gae_lambda)
    returns = vtrace(log_rhos, discounts, rewards, values, bootstrap_value, rho_bar=rho_bar, c_bar=c_bar)
    if clip is None:
        return returns.vs, returns.pg_advantages
    targets_next = torch.cat([returns.vs[1:], bootstrap_value.unsqueeze(0)])  # the ratio weighs the sample: no ρ
    return returns.vs, rewards + discounts * targets_next - values


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
