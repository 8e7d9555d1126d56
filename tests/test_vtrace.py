"""V-trace against an independent numpy implementation of Eq. 1 and a hand-worked example."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from agents.learning.vtrace import vtrace


def vtrace_numpy(log_rhos, discounts, rewards, values, bootstrap, rho_bar, c_bar):
    """Eq. 1 written as the explicit sum (not the backward recursion):
    v_s = V_s + Σ_{t=s}^{T-1} (Π_{i=s}^{t-1} γ_i c_i) ρ_t (r_t + γ_t V_{t+1} − V_t)."""
    T, B = rewards.shape
    rhos = np.exp(log_rhos)
    values_ext = np.concatenate([values, bootstrap[None]])
    vs = np.zeros((T, B))
    for s in range(T):
        total = values[s].copy()
        for t in range(s, T):
            weight = np.ones(B)
            for i in range(s, t):
                weight *= discounts[i] * np.minimum(c_bar, rhos[i])
            delta = np.minimum(rho_bar, rhos[t]) * (rewards[t] + discounts[t] * values_ext[t + 1] - values[t])
            total += weight * delta
        vs[s] = total
    vs_ext = np.concatenate([vs, bootstrap[None]])
    adv = np.minimum(rho_bar, rhos) * (rewards + discounts * vs_ext[1:] - values)
    return vs, adv


@pytest.mark.parametrize("rho_bar,c_bar", [(1.0, 1.0), (2.0, 0.5)])
def test_matches_numpy_on_random_inputs(rho_bar, c_bar):
    rng = np.random.default_rng(0)
    T, B = 7, 5
    log_rhos = rng.normal(0, 1, (T, B))
    discounts = 0.9 * (rng.random((T, B)) > 0.2)  # some episode ends
    rewards, values, bootstrap = rng.normal(size=(T, B)), rng.normal(size=(T, B)), rng.normal(size=B)
    out = vtrace(*(torch.tensor(a) for a in (log_rhos, discounts, rewards, values, bootstrap)),
                 rho_bar=rho_bar, c_bar=c_bar)
    vs, adv = vtrace_numpy(log_rhos, discounts, rewards, values, bootstrap, rho_bar, c_bar)
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-10)
    np.testing.assert_allclose(out.pg_advantages.numpy(), adv, rtol=1e-10)


def test_hand_worked_three_steps():
    # γ = 0.5, r = [1, 0, 2], V = [1, 2, 3], V(x_3) = 4, π/μ = [2, 0.5, 1] -> ρ = c = [1, 0.5, 1].
    # δ_0 = 1·(1 + 0.5·2 − 1) = 1;  δ_1 = 0.5·(0 + 0.5·3 − 2) = −0.25;  δ_2 = 1·(2 + 0.5·4 − 3) = 1.
    # v_2 − V_2 = δ_2 = 1                                 -> v_2 = 4
    # v_1 − V_1 = δ_1 + γ c_1 (v_2 − V_2) = −0.25 + 0.25 = 0 -> v_1 = 2
    # v_0 − V_0 = δ_0 + γ c_0 (v_1 − V_1) = 1 + 0 = 1       -> v_0 = 2
    # advantages ρ_s (r_s + γ v_{s+1} − V_s): 1·(1 + 1 − 1) = 1; 0.5·(0 + 2 − 2) = 0; 1·(2 + 2 − 3) = 1.
    def col(*xs):
        return torch.tensor(xs, dtype=torch.float64).view(-1, 1)
    out = vtrace(torch.log(col(2.0, 0.5, 1.0)), col(0.5, 0.5, 0.5), col(1.0, 0.0, 2.0), col(1.0, 2.0, 3.0),
                 torch.tensor([4.0], dtype=torch.float64))
    assert out.vs.flatten().tolist() == pytest.approx([2.0, 2.0, 4.0])
    assert out.pg_advantages.flatten().tolist() == pytest.approx([1.0, 0.0, 1.0])
