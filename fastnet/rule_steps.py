"""Single steps of the fast-weight update rules, in PyTorch. This module imports nothing from fastnet, so
that the references in ``fastnet.kernels.*.naive``, :mod:`fastnet.recurrent` and the tests build on them
without an import cycle (:mod:`fastnet.rules` holds the sequence ops, which dispatch to those references).

Shapes: W [B,H,dv,dk] (value × key), k [B,H,dk], v [B,H,dv], β [B,H].
Equation numbers refer to Schlag, Irie & Schmidhuber (2021), "Linear Transformers Are
Secretly Fast Weight Programmers".
"""
from __future__ import annotations

from typing import Optional

from torch import Tensor


def sum_rule_step(W: Tensor, k: Tensor, v: Tensor, beta: Optional[Tensor] = None) -> Tensor:
    """Linear Transformer update (Eq. 17): W_t = W_{t-1} + v_t ⊗ k_t. β is ignored."""
    return W + v.unsqueeze(-1) * k.unsqueeze(-2)


def head_matvec(W: Tensor, x: Tensor) -> Tensor:
    """W x per head, [B,H,d,d] × [B,H,d] -> [B,H,d]: a broadcast product and sum, about twice as
    fast on the CPU (forward and backward) as the batched d×d matmuls that einsum makes of it."""
    return (W * x.unsqueeze(-2)).sum(-1)


def delta_rule_step(W: Tensor, k: Tensor, v: Tensor, beta: Tensor, key_scale: Optional[Tensor] = None) -> Tensor:
    """Delta rule (Eqs. 20-24): v̄ = W k; W_t = W_{t-1} + β (v - v̄) ⊗ k.

    ``key_scale`` [B,H] multiplies the retrieval v̄ (attention normalisation, Eq. 27).
    """
    v_old = head_matvec(W, k)
    if key_scale is not None:
        v_old = v_old * key_scale.unsqueeze(-1)
    return W + (beta.unsqueeze(-1) * (v - v_old)).unsqueeze(-1) * k.unsqueeze(-2)


def gated_rule_step(W: Tensor, k: Tensor, v: Tensor, beta: Tensor) -> Tensor:
    """Peng et al.'s gated rule (appendix Eq. 52): W_t = (1 - β) W_{t-1} + β v ⊗ k."""
    b = beta[..., None, None]
    return (1 - b) * W + b * v.unsqueeze(-1) * k.unsqueeze(-2)
