"""Fast-weight update rules ("programming instructions"), as single steps and as sequence ops.

Shapes: W [B,H,dv,dk] (value × key), k [B,H,dk], v [B,H,dv], β [B,H].
Equation numbers refer to Schlag, Irie & Schmidhuber (2021), "Linear Transformers Are
Secretly Fast Weight Programmers".

The sequence op :func:`fast_weight_sequence` runs T steps with resets and reads the memory
after each write (y_t = W_t q_t, Eq. 25). On CUDA it dispatches to the Triton kernels of
``fastnet.kernels``; elsewhere it runs :class:`FastWeightSequence`, a custom autograd
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


def delta_rule_step(W: Tensor, k: Tensor, v: Tensor, beta: Tensor, key_scale: Optional[Tensor] = None) -> Tensor:
    """Delta rule (Eqs. 20-24): v̄ = W k; W_t = W_{t-1} + β (v - v̄) ⊗ k.

    ``key_scale`` [B,H] multiplies the retrieval v̄ (attention normalisation, Eq. 27).
    """
    v_old = torch.einsum("bhvk,bhk->bhv", W, k)
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
        from fastnet.kernels import fused_recurrent_fast_weight

        y, state = fused_recurrent_fast_weight(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), beta.transpose(0, 1),
            initial_state, done.transpose(0, 1), rule,
        )
        return y.transpose(0, 1), state
    if key_scale is None:
        key_scale = q.new_ones(T, B, H)
    return FastWeightSequence.apply(rule, q, k, v, beta, done, initial_state, key_scale)


def _write(rule: str, W: Tensor, k: Tensor, v: Tensor, beta: Tensor, key_scale: Tensor) -> tuple[Tensor, Tensor]:
    """One write; returns the new W and the increment's value factor u (W_t - W' = u ⊗ k)."""
    if rule == "sum":
        u = v
    elif rule == "delta":
        u = beta.unsqueeze(-1) * (v - key_scale.unsqueeze(-1) * torch.einsum("bhvk,bhk->bhv", W, k))
    else:
        return gated_rule_step(W, k, v, beta), v
    return W + u.unsqueeze(-1) * k.unsqueeze(-2), u


class FastWeightSequence(torch.autograd.Function):
    """Reversible sequence op for the sum, delta and gated rules (CPU reference).

    Forward keeps only the per-step value factors u_t ([T,B,H,dv]), the state just before
    each reset (for the batch elements that reset), and for the gated rule a checkpoint of
    W every ⌈√T⌉ steps. Backward recovers W_{t-1} from W_t by undoing the write,
    W' = W_t - u_t ⊗ k_t (sum, delta); the gated rule cannot be undone stably (it would
    divide by 1-β), so it replays each ⌈√T⌉-step chunk from its checkpoint instead.
    """

    @staticmethod
    def forward(ctx, rule, q, k, v, beta, done, W0, key_scale):
        T = q.shape[0]
        chunk = max(1, math.isqrt(T - 1) + 1) if rule == "gated" else 0
        W = W0
        us, ys, pre_reset, checkpoints = [], [], {}, {}
        for t in range(T):
            if done[t].any():
                pre_reset[t] = W[done[t]]
                W = W * (~done[t]).to(W.dtype)[:, None, None, None]
            if chunk and t % chunk == 0:
                checkpoints[t] = W
            W, u = _write(rule, W, k[t], v[t], beta[t], key_scale[t])
            us.append(u)
            ys.append(torch.einsum("bhvk,bhk->bhv", W, q[t]))
        ctx.rule, ctx.chunk, ctx.pre_reset, ctx.checkpoints = rule, chunk, pre_reset, checkpoints
        ctx.save_for_backward(q, k, v, beta, done, key_scale, torch.stack(us), W)
        return torch.stack(ys), W

    @staticmethod
    def backward(ctx, dy, dW_final):
        q, k, v, beta, done, key_scale, us, W = ctx.saved_tensors
        rule, T = ctx.rule, q.shape[0]
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        dbeta, dscale = torch.zeros_like(beta), torch.zeros_like(key_scale)
        G = dW_final.clone() if dW_final is not None else torch.zeros_like(W)
        replayed: dict[int, Tensor] = {}
        for t in reversed(range(T)):
            kt, vt, bt, qt = k[t], v[t], beta[t], q[t]
            G = G + dy[t].unsqueeze(-1) * qt.unsqueeze(-2)
            dq[t] = torch.einsum("bhvk,bhv->bhk", W, dy[t])
            # W' is the state after the reset and before the write of step t.
            if rule == "gated":
                if t not in replayed:
                    replayed = _replay_chunk(ctx, t)
                W_prev = replayed.pop(t)
            else:
                W_prev = W - us[t].unsqueeze(-1) * kt.unsqueeze(-2)
            Gk = torch.einsum("bhvk,bhk->bhv", G, kt)
            if rule == "sum":
                dv[t], dk[t] = Gk, torch.einsum("bhvk,bhv->bhk", G, vt)
            elif rule == "delta":
                s = key_scale[t].unsqueeze(-1)
                retrieved = torch.einsum("bhvk,bhk->bhv", W_prev, kt)
                u = us[t]
                dv[t] = bt.unsqueeze(-1) * Gk
                dbeta[t] = (Gk * (vt - s * retrieved)).sum(-1)
                dscale[t] = -(bt.unsqueeze(-1) * Gk * retrieved).sum(-1)
                dk[t] = torch.einsum("bhvk,bhv->bhk", G, u) - torch.einsum(
                    "bhvk,bhv->bhk", W_prev, s * bt.unsqueeze(-1) * Gk
                )
                G = G - (s * bt.unsqueeze(-1) * Gk).unsqueeze(-1) * kt.unsqueeze(-2)
            else:
                b = bt[..., None, None]
                dv[t] = bt.unsqueeze(-1) * Gk
                dk[t] = bt.unsqueeze(-1) * torch.einsum("bhvk,bhv->bhk", G, vt)
                dbeta[t] = (Gk * vt).sum(-1) - (G * W_prev).sum((-1, -2))
                G = (1 - b) * G
            if t in ctx.pre_reset:
                keep = (~done[t]).to(G.dtype)[:, None, None, None]
                G = G * keep
                W_prev = W_prev.clone()
                W_prev[done[t]] = ctx.pre_reset[t]
            W = W_prev
        return None, dq, dk, dv, dbeta, None, G, dscale


def _replay_chunk(ctx, t: int) -> dict[int, Tensor]:
    """Gated rule: recompute W' (post-reset, pre-write) for every step of t's chunk."""
    q, k, v, beta, done, key_scale, _, _ = ctx.saved_tensors
    start = t - t % ctx.chunk
    W, states = ctx.checkpoints[start], {}
    for s in range(start, t + 1):
        if s > start and done[s].any():
            W = W * (~done[s]).to(W.dtype)[:, None, None, None]
        states[s] = W
        W = gated_rule_step(W, k[s], v[s], beta[s])
    return states
