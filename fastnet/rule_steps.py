"""Single steps of the delta rule in PyTorch, on which the CPU sequence ops of
``fastnet.kernels.*.pytorch``, :mod:`fastnet.recurrent` and the tests build. It imports nothing
from fastnet, so none of them meets an import cycle (:mod:`fastnet.rules` holds the sequence
ops, which dispatch to those CPU paths or to the kernels).

Shapes: W [B,H,dv,dk] (value × key), k [B,H,dk], v [B,H,dv], β [B,H].
Equation numbers refer to Schlag, Irie & Schmidhuber (2021), "Linear Transformers Are
Secretly Fast Weight Programmers".
"""
from __future__ import annotations

from typing import Optional

from torch import Tensor


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
