"""PyTorch reference of the self-referential weight matrix (SRWM); the Triton kernel beside this
file (``fused_recurrent.py``) is tested against it.

Irie, Schlag, Csordás & Schmidhuber (2022), "A Modern Self-Referential Weight Matrix That Learns
to Modify Itself", Eqs. 5-8. Per head, one matrix W_t ∈ R^{(3d+4)×d} maps the input x_t ∈ R^d to
its own output, key, query and four learning rates, then rewrites itself:

* [y_t; k_t; q_t; β_t] = W_{t-1} x_t                         (Eq. 5; y, k, q ∈ R^d, β ∈ R^4)
* v_t = W_{t-1} φ(q_t),  v̄_t = W_{t-1} φ(k_t)                (Eqs. 6-7; φ = softmax)
* W_t = W_{t-1} + σ(β_t) ⊙ (v_t - v̄_t) ⊗ φ(k_t)              (Eq. 8)

where the four rates σ(β_t) scale the y, k, q and β rows of the update respectively.

W_0 is a learned slow parameter. The state carried between calls is D_t = W_t - W_0, so the zero
state is W_0 and the shared reset rule (multiply the state by 1 - done) sets W back to the learned
W_0, not to 0.
"""
from __future__ import annotations

import torch
from torch import Tensor

from fastnet.state import reset_state, reset_steps

NUM_RATES = 4


def srwm_rows(d: int) -> int:
    """Rows of one head's matrix: output, key and query (d each) and the four learning rates."""
    return 3 * d + NUM_RATES


def rate_groups(d: int, device: torch.device | str | None = None) -> Tensor:
    """For each of the 3d+4 rows, the index of its learning rate (0: y rows, 1: k, 2: q, 3: β)."""
    sizes = torch.tensor([d, d, d, NUM_RATES], device=device)
    return torch.repeat_interleave(torch.arange(NUM_RATES, device=device), sizes)


def srwm_step(W: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    """One SRWM step from W = W_{t-1} [B,H,3d+4,d] and x_t [B,H,d]: returns (y_t, the update
    W_t - W_{t-1}) by Eqs. 5-8."""
    d = x.shape[-1]
    o = (W * x.unsqueeze(-2)).sum(-1)  # Eq. 5
    y, k, q, b = o.split([d, d, d, NUM_RATES], dim=-1)
    pk, pq = torch.softmax(k, -1), torch.softmax(q, -1)
    v = (W * pq.unsqueeze(-2)).sum(-1)  # Eq. 6
    v_bar = (W * pk.unsqueeze(-2)).sum(-1)  # Eq. 7
    rate = torch.sigmoid(b)[..., rate_groups(d, x.device)]
    return y, (rate * (v - v_bar)).unsqueeze(-1) * pk.unsqueeze(-2)  # Eq. 8


def srwm_reference(x: Tensor, W0: Tensor, done: Tensor, D0: Tensor) -> tuple[Tensor, Tensor]:
    """Run the SRWM over a sequence (autograd step loop).

    Args:
        x: [T,B,H,d]; W0: [H,3d+4,d] (learned); done: [T,B] bool, where set W resets to W0 before
        that step; D0: [B,H,3d+4,d], the carried state W - W0 (zeros at an episode start).
    Returns:
        y [T,B,H,d] (y_t = the first d rows of W_{t-1} x_t) and the final D_T = W_T - W0.
    """
    D, ys = D0, []
    for t, (resets, x_t) in enumerate(zip(reset_steps(done), x.unbind(0))):
        if resets:
            (D,) = reset_state((D,), done[t])
        y, update = srwm_step(W0 + D, x_t)
        D = D + update
        ys.append(y)
    return torch.stack(ys), D
