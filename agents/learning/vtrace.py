"""V-trace targets and the IMPALA loss (Espeholt et al., 2018, "IMPALA", §4).

Shapes are time-major: [T, B]. ``log_rhos`` are log π(a_t|x_t) − log μ(a_t|x_t) for the
target policy π (the learner) and the behaviour policy μ (the actor).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor


class VTraceReturns(NamedTuple):
    vs: Tensor             # v_s, the V-trace value targets (Eq. 1), [T, B]
    pg_advantages: Tensor  # ρ_s (r_s + γ v_{s+1} − V(x_s)), the policy-gradient advantages, [T, B]


@torch.no_grad()
def vtrace(log_rhos: Tensor, discounts: Tensor, rewards: Tensor, values: Tensor, bootstrap_value: Tensor,
           rho_bar: float = 1.0, c_bar: float = 1.0, pg_rho_bar: float | None = None) -> VTraceReturns:
    """V-trace targets, computed backwards in time with the recursion of Remark 1.

    Eq. 1 defines v_s = V(x_s) + Σ_{t≥s} γ^{t−s} (Π_{i=s}^{t−1} c_i) δ_t V with
    δ_t V = ρ_t (r_t + γ V(x_{t+1}) − V(x_t)), ρ_t = min(ρ̄, π/μ) and c_i = min(c̄, π/μ).
    Remark 1 rewrites it as v_s − V(x_s) = δ_s V + γ_s c_s (v_{s+1} − V(x_{s+1})), with
    v_T = V(x_T) = ``bootstrap_value`` [B]. ``discounts`` [T, B] is γ_s, already zero where the
    episode ended after step s. The policy-gradient advantage (§4.2) is
    min(ρ̄_pg, π/μ) (r_s + γ_s v_{s+1} − V(x_s)), with ρ̄_pg = ρ̄ unless given.
    """
    rhos = torch.exp(log_rhos)
    clipped_rhos = rhos.clamp(max=rho_bar)
    cs = rhos.clamp(max=c_bar)
    values_next = torch.cat([values[1:], bootstrap_value.unsqueeze(0)])
    deltas = clipped_rhos * (rewards + discounts * values_next - values)
    acc = torch.zeros_like(bootstrap_value)
    vs_minus_v = []
    for t in reversed(range(values.shape[0])):
        acc = deltas[t] + discounts[t] * cs[t] * acc
        vs_minus_v.append(acc)
    vs = torch.stack(vs_minus_v[::-1]) + values
    vs_next = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)])
    pg_rhos = rhos.clamp(max=rho_bar if pg_rho_bar is None else pg_rho_bar)
    return VTraceReturns(vs=vs, pg_advantages=pg_rhos * (rewards + discounts * vs_next - values))


def action_log_probs(logits: Tensor, actions: Tensor) -> Tensor:
    """log π(a_t | x_t) for logits [T, B, A] and integer actions [T, B]."""
    return torch.log_softmax(logits, dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)


def impala_losses(target_logits: Tensor, behaviour_logits: Tensor, actions: Tensor, rewards: Tensor,
                  discounts: Tensor, values: Tensor, bootstrap_value: Tensor, rho_bar: float = 1.0,
                  c_bar: float = 1.0) -> dict[str, Tensor]:
    """The three IMPALA loss terms, each summed over the T × B batch (as in torchbeast).

    * ``pg_loss`` = −Σ ρ_s (r_s + γ v_{s+1} − V(x_s)) log π(a_s|x_s)  (§4.2, advantages held fixed);
    * ``baseline_loss`` = ½ Σ (v_s − V(x_s))²  (the value loss, regressing V on the targets of Eq. 1);
    * ``entropy`` = −Σ_s Σ_a π(a|x_s) log π(a|x_s)  (the entropy bonus term).

    The total is pg_loss + baseline_cost · baseline_loss − entropy_cost · entropy (see
    :func:`total_loss`). ``values`` [T, B] and ``bootstrap_value`` [B] are the learner's baselines.
    """
    target_log_probs = action_log_probs(target_logits, actions)
    log_rhos = target_log_probs - action_log_probs(behaviour_logits, actions)
    returns = vtrace(log_rhos.detach(), discounts, rewards, values.detach(), bootstrap_value.detach(),
                     rho_bar=rho_bar, c_bar=c_bar)
    log_policy = F.log_softmax(target_logits, dim=-1)
    return {
        "pg_loss": -(target_log_probs * returns.pg_advantages).sum(),
        "baseline_loss": 0.5 * ((returns.vs - values) ** 2).sum(),
        "entropy": -(log_policy.exp() * log_policy).sum(),
    }


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
