"""Fast-weight update rules ("programming instructions"), as single steps and as sequence ops.

Shapes: W [B,H,dv,dk] (value × key), k [B,H,dk], v [B,H,dv], β [B,H].
Equation numbers refer to Schlag, Irie & Schmidhuber (2021), "Linear Transformers Are
Secretly Fast Weight Programmers".

The sequence op :func:`fast_weight_sequence` runs T steps with resets and reads the memory
after each write (y_t = W_t q_t, Eq. 25). On CUDA it dispatches to the Triton kernels of
``fastnet.kernels`` (except with attention normalisation's ``key_scale``, which runs the
reference on any device); elsewhere it runs :class:`FastWeightSequence`, a custom autograd
Function whose backward walks back in time and *undoes* each update to recover W_{t-1}
(appendix F), so the fast weights cost O(B·H·dv·dk) memory whatever T is.
"""
from __future__ import annotations

import math
from typing import Literal, Optional

import torch
from torch import Tensor

RuleName = Literal["sum", "delta", "gated"]
RULES = ("sum", "delta", "gated")


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


def fast_weight_sequence(
    rule: RuleName,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Optional[Tensor] = None,
    done: Optional[Tensor] = None,
    initial_state: Optional[Tensor] = None,
    key_scale: Optional[Tensor] = None,
) -> tuple[Tensor, Tensor]:
    """Run ``rule`` over a sequence and read after each write.

    Args:
        q, k: [T,B,H,dk] (φ already applied); v: [T,B,H,dv]; beta: [T,B,H] (unused by "sum").
        done: [T,B] bool; where set, the state is zeroed before that step.
        initial_state: [B,H,dv,dk], zeros if None.
        key_scale: [T,B,H], multiplies the delta rule's retrieval v̄ (Eq. 27); delta only.
    Returns:
        y [T,B,H,dv] with y_t = W_t q_t, and the final state W_T.
    """
    if rule not in RULES:
        raise ValueError(f"unknown update rule {rule!r}; choose one of {list(RULES)}")
    T, B, H, dk = k.shape
    dv = v.shape[-1]
    if beta is None:
        if rule != "sum":
            raise ValueError(f"the {rule} rule needs beta")
        beta = q.new_ones(T, B, H)
    if key_scale is not None and rule != "delta":
        raise ValueError("key_scale applies to the delta rule only")
    done = torch.zeros(T, B, dtype=torch.bool, device=q.device) if done is None else done.bool()
    if initial_state is None:
        initial_state = q.new_zeros(B, H, dv, dk)
    if q.is_cuda and key_scale is None:
        from fastnet.kernels import delta_rule, fused_recurrent_fast_weight

        args = (q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), beta.transpose(0, 1),
                initial_state, done.transpose(0, 1))
        # the delta rule takes the chunked kernel for T >= 256, the fused recurrent one below
        y, state = delta_rule(*args, mode="auto") if rule == "delta" else fused_recurrent_fast_weight(*args, rule=rule)
        return y.transpose(0, 1), state
    if key_scale is None:
        key_scale = q.new_ones(T, B, H)
    return FastWeightSequence.apply(rule, q, k, v, beta, done, initial_state, key_scale)


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
