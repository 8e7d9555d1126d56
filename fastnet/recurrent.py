"""Recurrent fast-weight recurrences: Recurrent Delta Net, Delta RNN and Delta LSTM.

Irie, Schlag, Csordás & Schmidhuber (2021), "Going Beyond Linear Transformers with
Recurrent Fast Weight Programmers"; equations as written out in docs/cores.md and the
appendix (Delta LSTM Version D, Eqs. 36-40). These recurrences have no parallel form: the
references are step loops differentiated by autograd (``fastnet.kernels.recurrent_cores.pytorch``
for rec_delta and delta_rnn); the rec_delta and delta_rnn sequence functions run fused Triton
kernels where ``fastnet.kernels.dispatch.use_triton`` says so.

Per head: W, R [B,H,d,d]; vectors [B,H,d]; β [B,H]. Time-major sequences [T,B,H,d].

The step loops (here, in the references and in ``layers`` and ``mnm``) take their inputs from ``x.unbind(0)``,
whose backward stacks the T step gradients once; indexing ``x[t]`` inside the loop would
build and fill a zero [T,...] gradient for every step instead, O(T²) in the backward pass.
"""
from __future__ import annotations

import torch
from torch import Tensor

from fastnet.kernels._common import SRWM_HEAD_SIZES
from fastnet.kernels.dispatch import use_triton
from fastnet.kernels.ops import supported
from fastnet.kernels.recurrent_cores.pytorch import (
    delta_rnn_reference,
    delta_rnn_step,
    rec_delta_reference,
    rec_delta_step,
)
from fastnet.kernels.srwm.pytorch import srwm_reference
from fastnet.rule_steps import delta_rule_step, head_matvec

__all__ = ["rec_delta_step", "rec_delta_sequence", "delta_rnn_step", "delta_rnn_sequence", "delta_lstm_step",
           "srwm_sequence"]


def rec_delta_sequence(
    aq: Tensor, ak: Tensor, av: Tensor, ab: Tensor, R: Tensor, rb: Tensor, done: Tensor,
    state: tuple[Tensor, Tensor],
) -> tuple[Tensor, Tensor, Tensor]:
    """Run :func:`rec_delta_step` over [T,B,...] inputs, with the recurrent slow weights
    R = (R_q, R_k, R_v) [3,H,d,d] and state (W_0, y_0); returns (y [T,B,H,d], W_T, y_T)."""
    (Rq, Rk, Rv), (W0, y0) = R.unbind(0), state
    if use_triton("rec_delta", aq, supported(aq, aq.shape[-1])):
        from fastnet.kernels.ops import fused_recurrent_rec_delta

        y, W, y_last = fused_recurrent_rec_delta(
            aq.transpose(0, 1), ak.transpose(0, 1), av.transpose(0, 1), ab.transpose(0, 1),
            Rq, Rk, Rv, rb, done.transpose(0, 1), W0, y0,
        )
        return y.transpose(0, 1), W, y_last
    return rec_delta_reference(aq, ak, av, ab, Rq, Rk, Rv, rb, done, W0, y0)


def delta_rnn_sequence(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, kr: Tensor, vr: Tensor, beta_r: Tensor, done: Tensor,
    state: tuple[Tensor, Tensor, Tensor],
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Run :func:`delta_rnn_step` over [T,B,...] inputs from state (W_0, R_0, y_0); returns
    (y, W_T, R_T, y_T)."""
    W0, R0, y0 = state
    if use_triton("delta_rnn", q, supported(q, q.shape[-1], v.shape[-1])):
        from fastnet.kernels.ops import fused_recurrent_delta_rnn

        tr = [x.transpose(0, 1) for x in (q, k, v, beta, kr, vr, beta_r, done)]
        y, W, R, y_last = fused_recurrent_delta_rnn(*tr, W0, R0, y0)
        return y.transpose(0, 1), W, R, y_last
    return delta_rnn_reference(q, k, v, beta, kr, vr, beta_r, done, W0, R0, y0)


def delta_lstm_step(
    fast: tuple[Tensor, ...], y_prev: Tensor, c_prev: Tensor, q: Tensor,
    keys: Tensor, values: Tensor, betas: Tensor,
) -> tuple[tuple[Tensor, ...], Tensor, Tensor]:
    """One Delta LSTM (Version D, appendix Eqs. 36-40) step.

    ``fast`` = (W, R, W_f, R_f, W_o, R_o), each written by its own delta rule with
    ``keys[i]`` (softmax-ed), ``values[i]`` and ``betas[i]`` ([6,B,H,d], [6,B,H,d], [6,B,H]).
    W_* are read with the query q, R_* with f(y_{t-1}) = softmax(y_{t-1}):
    u = W q + R f(y); f = σ(W_f q + R_f f(y)); o = σ(W_o q + R_o f(y));
    c = f ⊙ c_{t-1} + (1 - f) ⊙ u; y = c ⊙ o.
    """
    fast = tuple(delta_rule_step(M, keys[i], values[i], betas[i]) for i, M in enumerate(fast))
    fy = torch.softmax(y_prev, -1)
    W, R, Wf, Rf, Wo, Ro = fast
    u = head_matvec(W, q) + head_matvec(R, fy)
    f = torch.sigmoid(head_matvec(Wf, q) + head_matvec(Rf, fy))
    o = torch.sigmoid(head_matvec(Wo, q) + head_matvec(Ro, fy))
    c = f * c_prev + (1 - f) * u
    return fast, c * o, c


def srwm_sequence(x: Tensor, W0: Tensor, done: Tensor, D0: Tensor) -> tuple[Tensor, Tensor]:
    """The self-referential weight matrix (Irie et al. 2022, Eqs. 5-8) over [T,B,H,d] inputs, from the
    carried state D0 = W - W0 [B,H,3d+4,d]; returns (y [T,B,H,d], D_T). Where ``done`` is set, W resets to
    the learned W0 [H,3d+4,d]. See :mod:`fastnet.kernels.srwm.pytorch`."""
    if use_triton("srwm", x, supported(x, x.shape[-1]) and x.shape[-1] in SRWM_HEAD_SIZES):
        from fastnet.kernels.ops import fused_recurrent_srwm

        y, D = fused_recurrent_srwm(x.transpose(0, 1), W0, done.transpose(0, 1), D0)
        return y.transpose(0, 1), D
    return srwm_reference(x, W0, done, D0)
