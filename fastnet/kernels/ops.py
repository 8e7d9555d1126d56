"""The kernels' entry points (batch-major sequences, listed in :mod:`fastnet.kernels`): thin wrappers
that import each Triton module on the first call, so that importing this module needs no triton.
Code inside fastnet calls them here (``fastnet.kernels`` re-exports them as the public API), so that
the references and the self-check cases can use them without importing the package.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from fastnet.kernels._common import DTYPES, HEAD_SIZES

CHUNK_MIN_T = 256  # delta_rule(mode="auto") and the sequence ops take the chunked kernel from this length


def supported(x: torch.Tensor, *dims: int) -> bool:
    """Whether the kernels take x's dtype and these head sizes (kernels=auto uses the reference otherwise)."""
    return x.dtype in DTYPES and all(d in HEAD_SIZES for d in dims)


def fused_recurrent_fast_weight(q: Tensor, k: Tensor, v: Tensor, beta: Optional[Tensor] = None,
                                initial_state: Optional[Tensor] = None, done: Optional[Tensor] = None,
                                rule: str = "delta", **kw: Any) -> tuple[Tensor, Tensor]:
    """See :func:`fastnet.kernels.fast_weight.fused_recurrent.fused_recurrent_fast_weight`."""
    from fastnet.kernels.fast_weight.fused_recurrent import fused_recurrent_fast_weight as f

    return f(q, k, v, beta, initial_state, done, rule, **kw)


def fused_recurrent_rec_delta(aq: Tensor, ak: Tensor, av: Tensor, ab: Tensor, Rq: Tensor, Rk: Tensor, Rv: Tensor,
                              rb: Tensor, done: Optional[Tensor] = None, W0: Optional[Tensor] = None,
                              y0: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor]:
    """See :func:`fastnet.kernels.recurrent_cores.fused_recurrent.fused_recurrent_rec_delta`."""
    from fastnet.kernels.recurrent_cores.fused_recurrent import fused_recurrent_rec_delta as f

    return f(aq, ak, av, ab, Rq, Rk, Rv, rb, done, W0, y0)


def fused_recurrent_delta_rnn(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, kr: Tensor, vr: Tensor,
                              beta_r: Tensor, done: Optional[Tensor] = None, W0: Optional[Tensor] = None,
                              R0: Optional[Tensor] = None, y0: Optional[Tensor] = None
                              ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """See :func:`fastnet.kernels.recurrent_cores.fused_recurrent.fused_recurrent_delta_rnn`."""
    from fastnet.kernels.recurrent_cores.fused_recurrent import fused_recurrent_delta_rnn as f

    return f(q, k, v, beta, kr, vr, beta_r, done, W0, R0, y0)


def chunk_delta_rule(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, initial_state: Optional[Tensor] = None,
                     done: Optional[Tensor] = None, **kw: Any) -> tuple[Tensor, Tensor]:
    """See :func:`fastnet.kernels.fast_weight.chunk.chunk_delta_rule`."""
    from fastnet.kernels.fast_weight.chunk import chunk_delta_rule as f

    return f(q, k, v, beta, initial_state, done, **kw)


def delta_rule(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, initial_state: Optional[Tensor] = None,
               done: Optional[Tensor] = None, mode: str = "auto") -> tuple[Tensor, Tensor]:
    """Delta rule over a batch-major sequence; mode "fused", "chunk" or "auto".

    "auto" takes the chunked kernel when T >= CHUNK_MIN_T (256) and the fused recurrent kernel otherwise.
    Both handle resets anywhere in the sequence (the chunked one with segment masks).
    """
    return gated_delta_rule(q, k, v, beta, None, initial_state, done, mode)


def gated_delta_rule(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Optional[Tensor] = None,
                     initial_state: Optional[Tensor] = None, done: Optional[Tensor] = None,
                     mode: str = "auto") -> tuple[Tensor, Tensor]:
    """Gated DeltaNet (Yang et al. 2025, Eq. 10) over a batch-major sequence:
    W_t = exp(g_t) W_{t-1} + β_t (v_t - exp(g_t) W_{t-1} k_t) ⊗ k_t, y_t = W_t q_t.
    ``g`` [B,T,H] is the log-decay (None: no decay, the delta rule). mode as :func:`delta_rule`."""
    if mode not in ("auto", "fused", "chunk"):
        raise ValueError(f"mode must be 'auto', 'fused' or 'chunk', got {mode!r}")
    if mode == "chunk" or (mode == "auto" and q.shape[1] >= CHUNK_MIN_T):
        return chunk_delta_rule(q, k, v, beta, initial_state, done, g=g)
    return fused_recurrent_fast_weight(q, k, v, beta, initial_state, done, "delta" if g is None else "gated_delta",
                                       g=g)


def fused_recurrent_srwm(x: Tensor, W0: Tensor, done: Optional[Tensor] = None,
                         D0: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """The self-referential weight matrix (Irie et al. 2022, Eqs. 5-8) by the fused recurrent kernel; see
    :func:`fastnet.kernels.srwm.fused_recurrent.fused_recurrent_srwm`."""
    from fastnet.kernels.srwm.fused_recurrent import fused_recurrent_srwm as f

    return f(x, W0, done, D0)
