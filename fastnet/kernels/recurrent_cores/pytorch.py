"""PyTorch references of the Recurrent Delta Net and Delta RNN recurrences (step loops,
differentiated by autograd); the Triton kernels beside this file (``fused_recurrent.py``) are
tested against them. Equations: Irie, Schlag, Csordás & Schmidhuber (2021), "Going Beyond Linear
Transformers with Recurrent Fast Weight Programmers" (see ``fastnet.recurrent``).

The step loops take their inputs from ``x.unbind(0)``, whose backward stacks the T step
gradients once; indexing ``x[t]`` inside the loop would build and fill a zero [T,...] gradient
for every step instead, O(T²) in the backward pass.
"""
from __future__ import annotations

import torch
from torch import Tensor

from fastnet.rule_steps import delta_rule_step, head_matvec
from fastnet.state import reset_state, reset_steps


def rec_delta_step(
    W: Tensor, y_prev: Tensor, aq: Tensor, ak: Tensor, av: Tensor, ab: Tensor,
    Rq: Tensor, Rk: Tensor, Rv: Tensor, rb: Tensor,
) -> tuple[Tensor, Tensor]:
    """One Recurrent Delta Net step (Irie et al. 2021, §3; docs/cores.md).

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


def rec_delta_reference(
    aq: Tensor, ak: Tensor, av: Tensor, ab: Tensor, Rq: Tensor, Rk: Tensor, Rv: Tensor, rb: Tensor,
    done: Tensor, W0: Tensor, y0: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """Run :func:`rec_delta_step` (the reference) over [T,B,...] inputs; returns (y [T,B,H,d], W_T, y_T)."""
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


def delta_rnn_reference(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, kr: Tensor, vr: Tensor, beta_r: Tensor,
    done: Tensor, W0: Tensor, R0: Tensor, y0: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Run :func:`delta_rnn_step` (the reference) over [T,B,...] inputs; returns (y, W_T, R_T, y_T)."""
    W, R, y, ys = W0, R0, y0, []
    inputs = (x.unbind(0) for x in (q, k, v, beta, kr, vr, beta_r))
    for t, (resets, *inputs_t) in enumerate(zip(reset_steps(done), *inputs)):
        if resets:
            W, R, y = reset_state((W, R, y), done[t])
        W, R, y = delta_rnn_step(W, R, y, *inputs_t)
        ys.append(y)
    return torch.stack(ys), W, R, y
