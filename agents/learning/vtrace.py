"""The advantage estimators: V-trace (Espeholt et al., 2018, "IMPALA", §4), off-policy, and GAE
(Schulman et al., 2016), on-policy. The losses built on them are in :mod:`agents.learning.losses`.

Shapes are time-major: [T, B]. ``log_rhos`` are log π(a_t|x_t) − log μ(a_t|x_t) for the
target policy π (the learner) and the behaviour policy μ (the actor).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from fastnet.scan import linear_scan


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


@torch.no_grad()
def gae(discounts: Tensor, rewards: Tensor, values: Tensor, bootstrap_value: Tensor, lam: float
        ) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman et al., 2016, Eq. 16), on-policy (no
    importance weights): A_s = Σ_{t≥s} (Π_{i=s}^{t−1} γ_i λ) δ_t with δ_t = r_t + γ_t V(x_{t+1})
    − V(x_t), that is A_s = δ_s + γ_s λ A_{s+1} from A_T = 0, with V(x_T) = ``bootstrap_value``:
    a linear recurrence backwards in time, run as fastnet's chunked scan over the reversed steps
    (~2√T small loops instead of T). Returns (the value targets A_s + V(x_s), the advantages A_s), [T, B]."""
    values_next = torch.cat([values[1:], bootstrap_value.unsqueeze(0)])
    deltas = rewards + discounts * values_next - values
    decays = (discounts * lam).to(deltas.dtype)  # the inputs' promoted dtype, as the step loop had it
    advantages = linear_scan(decays.flip(0), deltas.flip(0), deltas.new_zeros(deltas.shape[1:])).flip(0)
    return advantages + values, advantages
