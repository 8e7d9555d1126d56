"""PyTorch references of the fast-weight sequence ops; the Triton kernels beside this file
(``fused_recurrent.py``, ``chunk.py``) are tested against them.

* :class:`FastWeightSequence`: the sum (Eq. 17), delta (Eqs. 20-25) and gated (appendix Eq. 52)
  rules of Schlag, Irie & Schmidhuber (2021), as a reversible autograd Function.
* :func:`householder_sequence`: Gated DeltaNet (Yang, Kautz & Hatamizadeh, ICLR 2025, Eq. 10)
  and DeltaProduct (Siems et al., 2025: n_h generalised Householder steps per token): a decay,
  then n_h delta-rule writes per step; a plain autograd loop.

Shapes are time-major: q, k [T,B,H,dk], v [T,B,H,dv], beta [T,B,H], done [T,B], W [B,H,dv,dk].
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from fastnet.rule_steps import delta_rule_step, head_matvec
from fastnet.state import reset_state, reset_steps


class FastWeightSequence(torch.autograd.Function):
    """Reversible sequence op for the sum, delta and gated rules (CPU reference).

    Forward keeps only the per-step value factors u_t ([T,B,H,dv], where W_t - W' = u_t ⊗ k_t
    and W' is the state after the reset and before the write), the state just before each
    reset (for the batch elements that reset), and for the gated rule a checkpoint of W every
    ⌈√T⌉ steps. Backward recovers W' from W_t by undoing the write, W' = W_t - u_t ⊗ k_t
    (sum, delta); the gated rule cannot be undone stably (it would divide by 1-β), so it
    replays each ⌈√T⌉-step chunk from its checkpoint instead. Heads are folded into the batch
    (N = B·H); outer-product updates use ``addcmul_`` (``baddbmm_`` with an inner dimension
    of 1 is up to 10x slower on the CPU).
    """

    @staticmethod
    def forward(ctx, rule, q, k, v, beta, done, W0, key_scale):
        T, B, H, dk = k.shape
        dv = v.shape[-1]
        q, k, v = (x.reshape(T, B * H, -1) for x in (q, k, v))
        beta, key_scale = beta.reshape(T, B * H), key_scale.reshape(T, B * H)
        resets = done.repeat_interleave(H, dim=1)
        chunk = math.isqrt(T - 1) + 1 if rule == "gated" else 0
        W = W0.reshape(B * H, dv, dk).clone()
        y, us = q.new_empty(T, B * H, dv), q.new_empty(T, B * H, dv)
        pre_reset, checkpoints = {}, {}
        for t in range(T):
            if done[t].any():
                pre_reset[t] = W[resets[t]].clone()
                W[resets[t]] = 0
            if chunk and t % chunk == 0:
                checkpoints[t] = W.clone()
            if rule == "delta":
                retrieved = torch.bmm(W, k[t, :, :, None]).squeeze(-1)
                us[t] = beta[t, :, None] * (v[t] - key_scale[t, :, None] * retrieved)
            elif rule == "gated":
                W.mul_(1 - beta[t, :, None, None])
                us[t] = beta[t, :, None] * v[t]
            else:
                us[t] = v[t]
            W.addcmul_(us[t, :, :, None], k[t, :, None, :])
            torch.bmm(W, q[t, :, :, None], out=y[t, :, :, None])
        ctx.rule, ctx.chunk, ctx.shape = rule, chunk, (T, B, H, dk, dv)
        ctx.pre_reset, ctx.checkpoints = pre_reset, checkpoints
        ctx.save_for_backward(q, k, v, beta, resets, key_scale, us, W)
        return y.view(T, B, H, dv), W.view(B, H, dv, dk)

    @staticmethod
    def backward(ctx, dy, dW_final):
        q, k, v, beta, resets, key_scale, us, W_final = ctx.saved_tensors
        rule, (T, B, H, dk, dv) = ctx.rule, ctx.shape
        dy = dy.reshape(T, B * H, dv)
        dq, dk_, dv_ = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        dbeta, dscale = torch.zeros_like(beta), torch.zeros_like(key_scale)
        G = dW_final.reshape(B * H, dv, dk).clone() if dW_final is not None else torch.zeros_like(W_final)
        W = W_final.clone()
        replayed: dict[int, Tensor] = {}
        for t in reversed(range(T)):
            kt, vt, bt = k[t], v[t], beta[t, :, None]
            G.addcmul_(dy[t, :, :, None], q[t, :, None, :])
            dq[t] = torch.bmm(dy[t, :, None, :], W).squeeze(1)
            if rule == "gated":  # W becomes W' (after the reset, before the write)
                if t not in replayed:
                    replayed = _replay_chunk(ctx, t)
                W = replayed.pop(t)
            else:
                W.addcmul_(us[t, :, :, None], kt[:, None, :], value=-1)
            Gk = torch.bmm(G, kt[:, :, None]).squeeze(-1)
            if rule == "sum":
                dv_[t], dk_[t] = Gk, torch.bmm(vt[:, None, :], G).squeeze(1)
            elif rule == "delta":
                retrieved = torch.bmm(W, kt[:, :, None]).squeeze(-1)
                s = key_scale[t, :, None]
                dv_[t] = bt * Gk
                dbeta[t] = (Gk * (vt - s * retrieved)).sum(-1)
                dscale[t] = -(bt * Gk * retrieved).sum(-1)
                sbGk = s * bt * Gk
                dk_[t] = torch.bmm(us[t, :, None, :], G).squeeze(1) - torch.bmm(sbGk[:, None, :], W).squeeze(1)
                G.addcmul_(sbGk[:, :, None], kt[:, None, :], value=-1)
            else:
                dv_[t] = bt * Gk
                dk_[t] = bt * torch.bmm(vt[:, None, :], G).squeeze(1)
                dbeta[t] = (Gk * vt).sum(-1) - (G * W).sum((-1, -2))
                G.mul_(1 - bt[:, :, None])
            if t in ctx.pre_reset:
                G[resets[t]] = 0
                W[resets[t]] = ctx.pre_reset[t]
        return (None, dq.view(T, B, H, dk), dk_.view(T, B, H, dk), dv_.view(T, B, H, dv), dbeta.view(T, B, H),
                None, G.view(B, H, dv, dk), dscale.view(T, B, H))


def _replay_chunk(ctx, t: int) -> dict[int, Tensor]:
    """Gated rule: recompute W' (post-reset, pre-write) for every step of t's chunk."""
    _, k, v, beta, resets, _, _, _ = ctx.saved_tensors
    start = t - t % ctx.chunk
    W, states = ctx.checkpoints[start], {}
    for s in range(start, t + 1):
        if s > start and s in ctx.pre_reset:
            W = W * (~resets[s]).to(W.dtype)[:, None, None]
        states[s] = W
        W = (1 - beta[s, :, None, None]) * W + torch.bmm((beta[s, :, None] * v[s])[:, :, None], k[s, :, None, :])
    return states


def householder_sequence(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Optional[Tensor], done: Tensor, W0: Tensor,
) -> tuple[Tensor, Tensor]:
    """Decay, then n_h delta-rule writes, then one read, per step (autograd step loop).

    For each step t, after the reset (W <- W (1 - done_t)):

    * W_{t,0} = α_t W_{t-1}, α_t = exp(g_t) (Gated DeltaNet, Eq. 10; α ≡ 1 when ``g`` is None);
    * W_{t,j} = W_{t,j-1} + β_{t,j} (v_{t,j} - W_{t,j-1} k_{t,j}) ⊗ k_{t,j}, j = 1..n_h
      (DeltaProduct: a product of n_h generalised Householder transitions);
    * y_t = W_{t,n_h} q_t.

    With n_h = 1 this is Gated DeltaNet's W_t = α_t W_{t-1}(I - β_t k_t k_tᵀ) + β_t v_t k_tᵀ.

    Args:
        q: [T,B,H,dk]; k: [T,B,H,n_h,dk]; v: [T,B,H,n_h,dv]; beta: [T,B,H,n_h];
        g: [T,B,H] log-decay (<= 0) or None; done: [T,B] bool; W0: [B,H,dv,dk].
    Returns:
        y [T,B,H,dv] and the final state [B,H,dv,dk].
    """
    W, ys = W0, []
    decays = g.exp().unbind(0) if g is not None else [None] * q.shape[0]
    steps = zip(reset_steps(done), q.unbind(0), k.unbind(0), v.unbind(0), beta.unbind(0), decays)
    for t, (resets, q_t, k_t, v_t, b_t, a_t) in enumerate(steps):
        if resets:
            (W,) = reset_state((W,), done[t])
        if a_t is not None:
            W = a_t[..., None, None] * W
        for j in range(k_t.shape[2]):
            W = delta_rule_step(W, k_t[:, :, j], v_t[:, :, j], b_t[:, :, j])
        ys.append(head_matvec(W, q_t))
    return torch.stack(ys), W
