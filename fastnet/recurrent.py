"""Recurrent fast-weight recurrences: Recurrent Delta Net, Delta RNN and Delta LSTM.

Irie, Schlag, Csordás & Schmidhuber (2021), "Going Beyond Linear Transformers with
Recurrent Fast Weight Programmers"; equations as written out in shared/MODELS.md and the
appendix (Delta LSTM Version D, Eqs. 36-40). These recurrences have no parallel form: the
sequence functions below are step loops (the PyTorch reference, differentiated by
autograd); on CUDA the rec_delta and delta_rnn loops dispatch to fused Triton kernels.

Per head: W, R [B,H,d,d]; vectors [B,H,d]; β [B,H]. Time-major sequences [T,B,H,d].

The step loops here (and in ``layers`` and ``mnm``) take their inputs from ``x.unbind(0)``,
whose backward stacks the T step gradients once; indexing ``x[t]`` inside the loop would
build and fill a zero [T,...] gradient for every step instead, O(T²) in the backward pass.
"""
from __future__ import annotations

import torch
from torch import Tensor

from fastnet.rules import delta_rule_step, head_matvec
from fastnet.state import reset_state, reset_steps


def rec_delta_step(
    W: Tensor, y_prev: Tensor, aq: Tensor, ak: Tensor, av: Tensor, ab: Tensor,
    Rq: Tensor, Rk: Tensor, Rv: Tensor, rb: Tensor,
) -> tuple[Tensor, Tensor]:
    """One Recurrent Delta Net step (MODELS.md, ``rec_delta``).

    ``aq, ak, av`` [B,H,d] and ``ab`` [B,H] are the feed-forward parts W_* x_t; the slow
    recurrent matrices ``R*`` [H,d,d] and ``rb`` [H,d] read tanh(y_{t-1}):
    q = softmax(aq + Rq h), k = softmax(ak + Rk h), v = av + Rv h, β = σ(ab + rb·h);
    W_t = W_{t-1} + β (v - W_{t-1} k) ⊗ k; y_t = W_t q.
    """
    h = torch.tanh(y_prev)
    q = torch.softmax(aq + torch.einsum("hvk,bhk->bhv", Rq, h), -1)
    k = torch.softmax(ak + torch.einsum("hvk,bhk->bhv", Rk, h), -1)
    v = av + torch.einsum("hvk,bhk->bhv", Rv, h)
    beta = torch.sigmoid(ab + (rb * h).sum(-1))
    W = delta_rule_step(W, k, v, beta)
    return W, head_matvec(W, q)


def rec_delta_sequence(
    aq: Tensor, ak: Tensor, av: Tensor, ab: Tensor, Rq: Tensor, Rk: Tensor, Rv: Tensor, rb: Tensor,
    done: Tensor, W0: Tensor, y0: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """Run :func:`rec_delta_step` over [T,B,...] inputs; returns (y [T,B,H,d], W_T, y_T)."""
    if aq.is_cuda:
        from fastnet.kernels import fused_recurrent_rec_delta

        y, W, y_last = fused_recurrent_rec_delta(
            aq.transpose(0, 1), ak.transpose(0, 1), av.transpose(0, 1), ab.transpose(0, 1),
            Rq, Rk, Rv, rb, done.transpose(0, 1), W0, y0,
        )
        return y.transpose(0, 1), W, y_last
    W, y, ys = W0, y0, []
    inputs = (x.unbind(0) for x in (aq, ak, av, ab))
    for t, (resets, *inputs_t) in enumerate(zip(reset_steps(done), *inputs)):
        if resets:
            W, y = reset_state((W, y), done[t])
        W, y = rec_delta_step(W, y, *inputs_t, Rq, Rk, Rv, rb)
        ys.append(y)
    return torch.stack(ys), W, y


def delta_rnn_step(
    W: Tensor, R: Tensor, y_prev: Tensor, q: Tensor, k: Tensor, v: Tensor, beta: Tensor,
    kr: Tensor, vr: Tensor, beta_r: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """One Delta RNN (Version B) step: both fast weights written by the delta rule, then
    y_t = W_t q_t + R_t softmax(y_{t-1}). q, k, kr are already softmax-ed."""
    W = delta_rule_step(W, k, v, beta)
    R = delta_rule_step(R, kr, vr, beta_r)
    return W, R, head_matvec(W, q) + head_matvec(R, torch.softmax(y_prev, -1))


def delta_rnn_sequence(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, kr: Tensor, vr: Tensor, beta_r: Tensor,
    done: Tensor, W0: Tensor, R0: Tensor, y0: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Run :func:`delta_rnn_step` over [T,B,...] inputs; returns (y, W_T, R_T, y_T)."""
    if q.is_cuda:
        from fastnet.kernels import fused_recurrent_delta_rnn

        tr = [x.transpose(0, 1) for x in (q, k, v, beta, kr, vr, beta_r, done)]
        y, W, R, y_last = fused_recurrent_delta_rnn(*tr, W0, R0, y0)
        return y.transpose(0, 1), W, R, y_last
    W, R, y, ys = W0, R0, y0, []
    inputs = (x.unbind(0) for x in (q, k, v, beta, kr, vr, beta_r))
    for t, (resets, *inputs_t) in enumerate(zip(reset_steps(done), *inputs)):
        if resets:
            W, R, y = reset_state((W, R, y), done[t])
        W, R, y = delta_rnn_step(W, R, y, *inputs_t)
        ys.append(y)
    return torch.stack(ys), W, R, y


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
