"""Triton GPU kernels for the fast-weight cores (tracker issue 4).

Triton is imported lazily, on the first call, so that ``import fastnet.kernels`` works on
machines without triton and so that tests can set ``TRITON_INTERPRET=1`` first.

Public entry points (batch-major [B,T,H,d] sequences):

* :func:`fused_recurrent_fast_weight` (q, k, v, beta, initial_state, done, rule) -> (y, W_T)
  for rule in sum / delta / gated.
* :func:`fused_recurrent_rec_delta` (aq, ak, av, ab, Rq, Rk, Rv, rb, done, W0, y0) -> (y, W_T, y_T)
* :func:`fused_recurrent_delta_rnn` (q, k, v, beta, kr, vr, beta_r, done, W0, R0, y0) -> (y, W_T, R_T, y_T)
* :func:`chunk_delta_rule` (q, k, v, beta, initial_state, done) -> (y, W_T)  (chunked WY form)
* :func:`delta_rule` (..., mode="auto"): picks chunked for T >= 256, else fused.

All are torch.autograd-differentiable. They run on CUDA tensors, or on CPU tensors when
TRITON_INTERPRET=1 (the Triton interpreter; slow, for tests).
"""
from __future__ import annotations

from fastnet.kernels._common import HEAD_SIZES, require_cuda

__all__ = [
    "HEAD_SIZES", "require_cuda", "fused_recurrent_fast_weight", "fused_recurrent_rec_delta",
    "fused_recurrent_delta_rnn", "chunk_delta_rule", "delta_rule",
]


def fused_recurrent_fast_weight(q, k, v, beta=None, initial_state=None, done=None, rule="delta", **kw):
    from fastnet.kernels.fused_recurrent import fused_recurrent_fast_weight as f

    return f(q, k, v, beta, initial_state, done, rule, **kw)


def fused_recurrent_rec_delta(aq, ak, av, ab, Rq, Rk, Rv, rb, done=None, W0=None, y0=None):
    from fastnet.kernels.recurrent_cores import fused_recurrent_rec_delta as f

    return f(aq, ak, av, ab, Rq, Rk, Rv, rb, done, W0, y0)


def fused_recurrent_delta_rnn(q, k, v, beta, kr, vr, beta_r, done=None, W0=None, R0=None, y0=None):
    from fastnet.kernels.recurrent_cores import fused_recurrent_delta_rnn as f

    return f(q, k, v, beta, kr, vr, beta_r, done, W0, R0, y0)


def chunk_delta_rule(q, k, v, beta, initial_state=None, done=None, **kw):
    from fastnet.kernels.chunk import chunk_delta_rule as f

    return f(q, k, v, beta, initial_state, done, **kw)


def delta_rule(q, k, v, beta, initial_state=None, done=None, mode="auto"):
    """Delta rule over a batch-major sequence; mode "fused", "chunk" or "auto".

    "auto" takes the chunked kernel when T >= 256 and the fused recurrent kernel otherwise.
    Both handle resets anywhere in the sequence (the chunked one with segment masks).
    """
    if mode not in ("auto", "fused", "chunk"):
        raise ValueError(f"mode must be 'auto', 'fused' or 'chunk', got {mode!r}")
    if mode == "chunk" or (mode == "auto" and q.shape[1] >= 256):
        return chunk_delta_rule(q, k, v, beta, initial_state, done)
    return fused_recurrent_fast_weight(q, k, v, beta, initial_state, done, "delta")
