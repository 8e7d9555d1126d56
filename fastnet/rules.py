"""Fast-weight update rules ("programming instructions") as sequence ops; their single steps are in
:mod:`fastnet.rule_steps`.

Shapes: W [B,H,dv,dk] (value × key), k [B,H,dk], v [B,H,dv], β [B,H].
Equation numbers refer to Schlag, Irie & Schmidhuber (2021), "Linear Transformers Are
Secretly Fast Weight Programmers", unless a docstring names another paper.

The sequence ops :func:`fast_weight_sequence` (sum, delta, gated) and
:func:`householder_sequence` (Gated DeltaNet, DeltaProduct) run T steps with resets and read
the memory after each write (y_t = W_t q_t, Eq. 25). Each runs the Triton kernel of
``fastnet.kernels`` where :func:`fastnet.kernels.dispatch.use_triton` says so (CUDA tensors,
kernels mode auto or triton), else its PyTorch reference in ``fastnet.kernels.fast_weight.pytorch``:
for the sum, delta and gated rules a custom autograd Function whose backward walks back in time
and *undoes* each update to recover W_{t-1} (appendix F), so the fast weights cost
O(B·H·dv·dk) memory whatever T is; for Gated DeltaNet and DeltaProduct the chunked form (WY
representation / UT transform) with one state per chunk. Attention normalisation's ``key_scale``
always runs the reference.
"""
from __future__ import annotations

from typing import Literal, Optional

import torch
from torch import Tensor

from fastnet.kernels.dispatch import use_triton
from fastnet.kernels.fast_weight import pytorch
from fastnet.kernels.fast_weight.pytorch import FastWeightSequence
from fastnet.kernels.ops import CHUNK_MIN_T, supported
from fastnet.options import check_choice

RuleName = Literal["sum", "delta", "gated"]
RULES = ("sum", "delta", "gated")


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
    check_choice(rule, RULES, kind="update rule")
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
    if key_scale is None and use_triton("chunk" if rule == "delta" and T >= CHUNK_MIN_T else "fused_recurrent",
                                        q, supported(q, dk, dv)):
        from fastnet.kernels.ops import delta_rule, fused_recurrent_fast_weight

        args = (q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), beta.transpose(0, 1),
                initial_state, done.transpose(0, 1))
        y, state = delta_rule(*args, mode="auto") if rule == "delta" else fused_recurrent_fast_weight(*args, rule=rule)
        return y.transpose(0, 1), state
    if key_scale is None:
        key_scale = q.new_ones(T, B, H)
    return FastWeightSequence.apply(rule, q, k, v, beta, done, initial_state, key_scale)


def delta_rule_writes(k: Tensor, v: Tensor, beta: Tensor, g: Optional[Tensor] = None) -> Tensor:
    """The memory after N (gated) delta-rule writes into W_0 = 0 with no read in between, in one shot.

    Write i is W_i = exp(g_i) W_{i-1} + β_i (v_i - exp(g_i) W_{i-1} k_i) ⊗ k_i (Eqs. 20-24; with the
    decay, Gated DeltaNet's Eq. 10). Unrolled, W_N = Σ_i exp(G_N - G_i) u_i ⊗ k_i with G the cumulative
    sum of g, and the write factors u solve the unit lower-triangular system
    u_i + β_i Σ_{j<i} exp(G_i - G_j) (k_i·k_j) u_j = β_i v_i: the WY form / UT transform of the chunked
    kernels (``fastnet.kernels.fast_weight.chunk``) and of the CPU reference
    (:func:`fastnet.kernels.fast_weight.pytorch.householder_sequence`), here over the whole sequence as one
    chunk, with its helpers. A few batched products and one triangular solve replace N autograd steps, so
    models that write a memory and then read it once (the retrieval memories of ``agents.learning.supervised``)
    train in seconds, not hours.
    DeltaProduct's n_h writes per step are n_h consecutive writes here, the decay on the first.

    Args:
        k: [N,B,dk]; v: [N,B,dv]; beta: [N,B]; g: [N,B] log-decay (<= 0) before each write, or None.
    Returns:
        W_N [B,dv,dk].
    """
    k, v, beta = k.transpose(0, 1), v.transpose(0, 1), beta.t()            # [B,N,*]
    N = k.shape[1]
    causal = torch.ones(N, N, dtype=torch.bool, device=k.device).tril()
    E = pytorch.decay_matrix(None if g is None else g.t().cumsum(-1), causal, k.dtype)  # exp(G_i - G_j), j <= i
    u = pytorch.unit_lower_solve(beta.unsqueeze(-1) * (k @ k.transpose(1, 2)) * E, beta.unsqueeze(-1) * v)
    return (E[..., -1, :, None] * u).transpose(1, 2) @ k                   # Σ_i exp(G_N - G_i) u_i ⊗ k_i


def householder_sequence(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Optional[Tensor] = None,
    done: Optional[Tensor] = None, initial_state: Optional[Tensor] = None,
) -> tuple[Tensor, Tensor]:
    """Gated DeltaNet (n_h = 1) and DeltaProduct (n_h writes per step) over a sequence.

    Per step, after the reset: W <- exp(g_t) W (Gated DeltaNet, Yang et al. 2025, Eq. 10; no decay
    when ``g`` is None), then n_h delta-rule writes W <- W + β_j (v_j - W k_j) ⊗ k_j (DeltaProduct,
    Siems et al. 2025), then y_t = W q_t. See :func:`fastnet.kernels.fast_weight.pytorch.householder_sequence`.

    Args:
        q: [T,B,H,dk]; k: [T,B,H,n_h,dk]; v: [T,B,H,n_h,dv]; beta: [T,B,H,n_h];
        g: [T,B,H] log-decay (<= 0) or None; done: [T,B] bool; initial_state: [B,H,dv,dk] (zeros if None).
    Returns:
        y [T,B,H,dv] and the final state W_T.

    The Triton path runs the gated-delta kernel on the sequence of the n_h·T writes (the decay and
    the reset on each step's first write) and keeps the reads at every n_h-th position; the PyTorch
    reference does the same in chunks (the WY form), keeping one state per chunk for the backward pass.
    """
    T, B, H, n, dk = k.shape
    dv = v.shape[-1]
    done = torch.zeros(T, B, dtype=torch.bool, device=q.device) if done is None else done.bool()
    if initial_state is None:
        initial_state = q.new_zeros(B, H, dv, dk)
    if use_triton("chunk" if n * T >= CHUNK_MIN_T else "fused_recurrent", q, supported(q, dk, dv)):
        from fastnet.kernels.ops import gated_delta_rule

        first = torch.zeros(n, dtype=torch.bool, device=q.device)
        first[0] = True
        long_g = None if g is None else (g.unsqueeze(-1) * first).permute(1, 0, 3, 2).reshape(B, T * n, H)
        long_done = (done.t().unsqueeze(-1) & first).reshape(B, T * n)
        y, state = gated_delta_rule(
            q.transpose(0, 1).repeat_interleave(n, dim=1), k.transpose(0, 1).transpose(2, 3).flatten(1, 2),
            v.transpose(0, 1).transpose(2, 3).flatten(1, 2), beta.transpose(0, 1).transpose(2, 3).flatten(1, 2),
            long_g, initial_state, long_done)
        return y[:, n - 1::n].transpose(0, 1), state
    return pytorch.householder_sequence(q, k, v, beta, g, done, initial_state)
