"""Triton GPU kernels for the fast-weight cores, each beside its PyTorch reference.

Layout (as fla's ``ops/*/naive.py``): ``fast_weight/`` holds ``naive.py`` (the sum / delta /
gated rules, Gated DeltaNet and DeltaProduct in PyTorch), ``fused_recurrent.py`` and ``chunk.py``;
``recurrent_cores/`` and ``srwm/`` hold ``naive.py`` and ``fused_recurrent.py``. Which one a core
runs is decided by :mod:`fastnet.kernels.dispatch` (``set_kernel_mode`` / ``$DELTABEAST_KERNELS``).

Triton is imported lazily, on the first call, so that ``import fastnet.kernels`` works on
machines without triton and so that tests can set ``TRITON_INTERPRET=1`` first.

Public entry points (batch-major [B,T,H,d] sequences):

* :func:`fused_recurrent_fast_weight` (q, k, v, beta, initial_state, done, rule, g=None) -> (y, W_T)
  for rule in sum / delta / gated / gated_delta (``g`` [B,T,H]: the log-decay of gated_delta).
* :func:`fused_recurrent_rec_delta` (aq, ak, av, ab, Rq, Rk, Rv, rb, done, W0, y0) -> (y, W_T, y_T)
* :func:`fused_recurrent_delta_rnn` (q, k, v, beta, kr, vr, beta_r, done, W0, R0, y0) -> (y, W_T, R_T, y_T)
* :func:`chunk_delta_rule` (q, k, v, beta, initial_state, done, g=None) -> (y, W_T)  (chunked WY form)
* :func:`delta_rule` (..., mode="auto"): picks chunked for T >= 256, else fused.
* :func:`gated_delta_rule` (q, k, v, beta, g, initial_state, done, mode="auto") -> (y, W_T): Gated
  DeltaNet, fused recurrent or chunked (``chunk_delta_rule(..., g=g)``) as :func:`delta_rule`.
* :func:`fused_recurrent_srwm` (x, W0, done, D0) -> (y, D_T): the self-referential weight matrix.
* :func:`set_kernel_mode`, :func:`kernel_mode`, :func:`self_check`: see :mod:`fastnet.kernels.dispatch`.

All are torch.autograd-differentiable. They run on CUDA tensors, or on CPU tensors when
TRITON_INTERPRET=1 (the Triton interpreter; slow, for tests).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from fastnet.kernels._common import DTYPES, HEAD_SIZES, require_cuda
from fastnet.kernels.dispatch import kernel_mode, self_check, set_kernel_mode

__all__ = [
    "HEAD_SIZES", "require_cuda", "fused_recurrent_fast_weight", "fused_recurrent_rec_delta",
    "fused_recurrent_delta_rnn", "chunk_delta_rule", "delta_rule", "gated_delta_rule", "fused_recurrent_srwm",
    "set_kernel_mode", "kernel_mode", "self_check", "supported", "CHUNK_MIN_T",
]

CHUNK_MIN_T = 256  # delta_rule(mode="auto") and the sequence ops take the chunked kernel from this length


def supported(x: torch.Tensor, *dims: int) -> bool:
    """Whether the kernels take x's dtype and these head sizes (kernels=auto uses the reference otherwise)."""
    return x.dtype in DTYPES and all(d in HEAD_SIZES for d in dims)


def fused_recurrent_fast_weight(q, k, v, beta=None, initial_state=None, done=None, rule="delta", **kw):
    from fastnet.kernels.fast_weight.fused_recurrent import fused_recurrent_fast_weight as f

    return f(q, k, v, beta, initial_state, done, rule, **kw)


def fused_recurrent_rec_delta(aq, ak, av, ab, Rq, Rk, Rv, rb, done=None, W0=None, y0=None):
    from fastnet.kernels.recurrent_cores.fused_recurrent import fused_recurrent_rec_delta as f

    return f(aq, ak, av, ab, Rq, Rk, Rv, rb, done, W0, y0)


def fused_recurrent_delta_rnn(q, k, v, beta, kr, vr, beta_r, done=None, W0=None, R0=None, y0=None):
    from fastnet.kernels.recurrent_cores.fused_recurrent import fused_recurrent_delta_rnn as f

    return f(q, k, v, beta, kr, vr, beta_r, done, W0, R0, y0)


def chunk_delta_rule(q, k, v, beta, initial_state=None, done=None, **kw):
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
