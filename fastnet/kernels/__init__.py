"""Triton GPU kernels for the fast-weight cores, each beside its PyTorch reference.

Layout (fla's ``ops/<op>/``, with one difference): ``fast_weight/`` holds ``pytorch.py`` (the sum /
delta / gated rules, Gated DeltaNet and DeltaProduct in PyTorch), ``fused_recurrent.py`` and
``chunk.py``; ``recurrent_cores/`` and ``srwm/`` hold ``pytorch.py`` and ``fused_recurrent.py``.
Where fla's ``naive.py`` is a plain reference, each ``pytorch.py`` is the production path on the
CPU and the reference the kernels are tested against: in ``fast_weight/``, autograd Functions with
hand-written, memory-saving backward passes, which the tests check in turn against float64 step
loops; in ``recurrent_cores/`` and ``srwm/``, step loops that autograd differentiates. Which one a core
runs is decided by :mod:`fastnet.kernels.dispatch` (``set_kernel_mode`` / ``$DELTABEAST_KERNELS``), whose
self-check runs the cases of :mod:`fastnet.kernels.cases` (each kernel beside its reference).

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

They are defined in :mod:`fastnet.kernels.ops` (the wrappers) and :mod:`fastnet.kernels.dispatch`, and
re-exported here.

All are torch.autograd-differentiable. They run on CUDA tensors, or on CPU tensors when
TRITON_INTERPRET=1 (the Triton interpreter; slow, for tests).
"""
from __future__ import annotations

from fastnet.kernels._common import HEAD_SIZES, require_cuda
from fastnet.kernels.dispatch import kernel_mode, self_check, set_kernel_mode
from fastnet.kernels.ops import (
    CHUNK_MIN_T,
    chunk_delta_rule,
    delta_rule,
    fused_recurrent_delta_rnn,
    fused_recurrent_fast_weight,
    fused_recurrent_rec_delta,
    fused_recurrent_srwm,
    gated_delta_rule,
    supported,
)

__all__ = [
    "HEAD_SIZES", "require_cuda", "fused_recurrent_fast_weight", "fused_recurrent_rec_delta",
    "fused_recurrent_delta_rnn", "chunk_delta_rule", "delta_rule", "gated_delta_rule", "fused_recurrent_srwm",
    "set_kernel_mode", "kernel_mode", "self_check", "supported", "CHUNK_MIN_T",
]
