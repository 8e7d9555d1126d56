"""PyTorch references of the fast-weight sequence ops; the Triton kernels beside this file
(``fused_recurrent.py``, ``chunk.py``) are tested against them.

* :class:`FastWeightSequence`: the sum (Eq. 17), delta (Eqs. 20-25) and gated (appendix Eq. 52)
  rules of Schlag, Irie & Schmidhuber (2021), as a reversible autograd Function.
* :func:`householder_sequence`: Gated DeltaNet (Yang, Kautz & Hatamizadeh, ICLR 2025, Eq. 10)
  and DeltaProduct (Siems et al., 2025: n_h generalised Householder steps per token): a decay,
  then n_h delta-rule writes per step; in chunks (the WY form / UT transform), with the backward
  pass written out (:class:`HouseholderChunks`), or for a few writes by the step loop
  :func:`householder_loop`.

Shapes are time-major: q, k [T,B,H,dk], v [T,B,H,dv], beta [T,B,H], done [T,B], W [B,H,dv,dk].
"""
from __future__ import annotations

import math
from dataclasses import dataclass
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
    """Gated rule: recompute W' (post-reset, pre-write) for every step of t's chunk. The chunk's
    checkpoint is copied: backward writes a reset's W back into the state it is given, and a second
    backward over the same graph replays from the same checkpoint."""
    _, k, v, beta, resets, _, _, _ = ctx.saved_tensors
    start = t - t % ctx.chunk
    W, states = ctx.checkpoints[start].clone(), {}
    for s in range(start, t + 1):
        if s > start and s in ctx.pre_reset:
            W = W * (~resets[s]).to(W.dtype)[:, None, None]
        states[s] = W
        W = (1 - beta[s, :, None, None]) * W + torch.bmm((beta[s, :, None] * v[s])[:, :, None], k[s, :, None, :])
    return states


CHUNK_WRITES = 24
"""Writes per chunk of :func:`householder_sequence` (so CHUNK_WRITES // n_h tokens, at least 1, evened out over
the sequence). Larger chunks do more [C,C] work per write, smaller ones more steps of the sequential pass;
at head size 32 on the CPU (forward and backward; T = 50, B = 32 and T = 1024, B = 8; n_h = 1 and 2) 16 to 32
were within about 20% of each other, 24 about the best at T = 50."""
LOOP_MAX_WRITES = 4
"""Sequences of at most this many writes (n_h·T) run :func:`householder_loop` instead: the chunked form's fixed
cost of some 40 small ops outweighs its gain there (an actor's step: T = 1)."""


def decay_matrix(G: Optional[Tensor], causal: Tensor, dtype: torch.dtype) -> Tensor:
    """E [...,C,C]: E_ij = exp(G_i - G_j) where ``causal`` (j <= i and no reset in (j, i]), else 0.

    G [...,C] is the cumulative log-decay (None: no decay, E = the mask). The differences are masked to
    -inf before the exp, so no exp of a positive number is formed, however strong the decay."""
    if G is None:
        return causal.to(dtype)
    return (G.unsqueeze(-1) - G.unsqueeze(-2)).masked_fill(~causal, float("-inf")).exp()


def unit_lower_solve(A: Tensor, rhs: Tensor) -> Tensor:
    """(I + A)^-1 rhs for the strictly lower triangle of A [...,C,C] (its diagonal and upper part are not
    read): one triangular solve, in float32 for half-precision inputs (the CPU solver takes no other)."""
    wide = torch.promote_types(torch.promote_types(A.dtype, rhs.dtype), torch.float32)
    x = torch.linalg.solve_triangular(A.to(wide), rhs.to(wide), upper=False, unitriangular=True)
    return x.to(torch.promote_types(A.dtype, rhs.dtype))


@dataclass
class _Chunking:
    """T tokens of n writes each in NC chunks of L tokens (C = L·n writes), the last ones padded with zero
    writes (k = v = β = g = 0 change nothing) and reads that are dropped."""

    T: int
    n: int
    NC: int
    L: int

    @classmethod
    def of(cls, T: int, n: int, chunk_writes: int) -> "_Chunking":
        NC = -(-T // max(1, chunk_writes // n))
        return cls(T, n, NC, -(-T // NC))

    def tokens(self, x: Tensor) -> Tensor:
        """[T,B,X,...] -> [B,X,NC,L,...] (contiguous)."""
        pad = self.NC * self.L - self.T
        if pad:
            x = torch.nn.functional.pad(x, (0, 0) * (x.dim() - 1) + (0, pad))
        return x.movedim(0, 2).unflatten(2, (self.NC, self.L)).contiguous()

    def writes(self, x: Tensor) -> Tensor:
        """[T,B,X,n,...] -> [B,X,NC,C,...], the writes in order (token-major)."""
        return self.tokens(x).flatten(3, 4)

    def first_writes(self, x: Tensor) -> Tensor:
        """[T,B,X] per token -> [B,X,NC,C] on each token's first write, 0 on the others."""
        return self.writes(torch.nn.functional.pad(x.unsqueeze(-1), (0, self.n - 1)))

    def untokens(self, x: Tensor) -> Tensor:
        """Inverse of :meth:`tokens`: [B,X,NC,L,...] -> [T,B,X,...]."""
        return x.flatten(2, 3)[:, :, :self.T].movedim(2, 0)

    def unwrites(self, x: Tensor) -> Tensor:
        """Inverse of :meth:`writes`: [B,X,NC,C,...] -> [T,B,X,n,...]."""
        return self.untokens(x.unflatten(3, (self.L, self.n)))


def _within_chunks(c: _Chunking, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Optional[Tensor],
                   done: Tensor) -> tuple[Tensor, ...]:
    """The chunks' inputs and the products that need no state: Q [B,H,NC,L,dk], K, V, β, E, Γ, K Kᵀ,
    (I + A)^-1 and the write factors' parts U = (I + A)^-1 βV, Wk = (I + A)^-1 βΓK (see
    :func:`householder_sequence`)."""
    Q, K, V, bt = c.tokens(q), c.writes(k), c.writes(v), c.writes(beta)
    seg = c.first_writes(done.long().unsqueeze(-1)).cumsum(-1)                 # resets so far, [B,1,NC,C]
    causal = (seg.unsqueeze(-1) == seg.unsqueeze(-2)).tril()
    G = None if g is None else c.first_writes(g).cumsum(-1)
    E = decay_matrix(G, causal, q.dtype)
    Gam = (seg == 0).to(q.dtype) if G is None else G.exp() * (seg == 0)
    KK = K @ K.transpose(-1, -2)
    # the inverse itself, then products: the backward needs it, and on the CPU a solve against the
    # identity and a batched product beat one solve against the wider [βV | βΓK]
    eye = torch.eye(c.L * c.n, dtype=q.dtype, device=q.device)
    Linv = unit_lower_solve(bt.unsqueeze(-1) * KK * E, eye.expand_as(KK))
    UW = Linv @ torch.cat([bt.unsqueeze(-1) * V, (bt * Gam).unsqueeze(-1) * K], -1)
    return Q, K, V, bt, E, Gam, KK, Linv, UW


def _entry_states(W0: Tensor, U: Tensor, Wk: Tensor, K: Tensor, last: Tensor, gam: Tensor) -> tuple[Tensor, Tensor]:
    """The sequential pass: the state entering each chunk [B,H,NC,dv,dk] and the final state."""
    S, states = W0, []
    for U_c, W_c, K_c, last_c, gam_c in zip(U.unbind(2), Wk.unbind(2), K.unbind(2), last.unbind(2), gam.unbind(2)):
        states.append(S)
        u = U_c - W_c @ S.transpose(-1, -2)
        S = gam_c[..., None, None] * S + (last_c.unsqueeze(-1) * u).transpose(-1, -2) @ K_c
    return torch.stack(states, 2), S


class HouseholderChunks(torch.autograd.Function):
    """:func:`householder_sequence` with its backward pass written out. It saves the inputs and the state
    entering each chunk; the backward recomputes the within-chunk products, runs the chunks backwards for
    the state's gradient, then differentiates the within-chunk products for all chunks at once."""

    @staticmethod
    def forward(ctx, q, k, v, beta, g, done, W0, chunk_writes):
        n, dv = k.shape[3], v.shape[-1]
        c = _Chunking.of(k.shape[0], n, chunk_writes)
        Q, K, _, _, E, Gam, _, _, UW = _within_chunks(c, q, k, v, beta, g, done)
        U, Wk = UW.split([dv, UW.shape[-1] - dv], -1)
        S0, S = _entry_states(W0, U, Wk, K, E[..., -1, :], Gam[..., -1])
        u = U - Wk @ S0.transpose(-1, -2)
        r = slice(n - 1, None, n)                                                  # each token's last write
        y = Gam[..., r, None] * (Q @ S0.transpose(-1, -2)) + ((Q @ K.transpose(-1, -2)) * E[..., r, :]) @ u
        ctx.chunking = c
        ctx.save_for_backward(q, k, v, beta, g, done, S0)
        return c.untokens(y), S

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy, dS):
        q, k, v, beta, g, done, S0 = ctx.saved_tensors
        c = ctx.chunking
        n, dv = c.n, v.shape[-1]
        r = slice(n - 1, None, n)
        Q, K, V, bt, E, Gam, KK, Linv, UW = _within_chunks(c, q, k, v, beta, g, done)
        U, Wk = UW.split([dv, UW.shape[-1] - dv], -1)
        u = U - Wk @ S0.transpose(-1, -2)
        dY, Er, last, Gr = c.tokens(dy), E[..., r, :], E[..., -1, :], Gam[..., r]
        QK = Q @ K.transpose(-1, -2)
        # the chunks backwards: dS is the gradient of the state leaving chunk i, du of its write factors
        du_read = (QK * Er).transpose(-1, -2) @ dY                                 # through the reads
        dS_read = (Gr.unsqueeze(-1) * dY).transpose(-1, -2) @ Q
        dS_out, dus = [], []
        for i in reversed(range(c.NC)):
            dS_out.append(dS)
            du = torch.addcmul(du_read[:, :, i], last[:, :, i].unsqueeze(-1), K[:, :, i] @ dS.transpose(-1, -2))
            dus.append(du)
            dS = Gam[:, :, i, -1, None, None] * dS + dS_read[:, :, i] - du.transpose(-1, -2) @ Wk[:, :, i]
        dW0 = dS
        dS_out, du = torch.stack(dS_out[::-1], 2), torch.stack(dus[::-1], 2)
        # through the exit states, the reads and u = U - Wk Sᵀ
        dK = (last.unsqueeze(-1) * u) @ dS_out
        dP = dY @ u.transpose(-1, -2)
        dQK = dP * Er
        dQ = Gr.unsqueeze(-1) * (dY @ S0) + dQK @ K
        dK = dK + dQK.transpose(-1, -2) @ Q
        # through [U | Wk] = (I + A)^-1 [βV | βΓK] and A = β_i (k_i·k_j) E_ij (j < i)
        dR = Linv.transpose(-1, -2) @ torch.cat([du, -(du @ S0)], -1)
        dA = -(dR @ UW.transpose(-1, -2)).tril(-1)
        dRv, dRk = dR.split([dv, dR.shape[-1] - dv], -1)
        dAE_KK, dRk_K = dA * E * KK, (dRk * K).sum(-1)
        dbeta = (dRv * V).sum(-1) + dRk_K * Gam + dAE_KK.sum(-1)
        dV = bt.unsqueeze(-1) * dRv
        dKK = bt.unsqueeze(-1) * dA * E
        dK = dK + (bt * Gam).unsqueeze(-1) * dRk + (dKK + dKK.transpose(-1, -2)) @ K
        dg = None
        if ctx.needs_input_grad[4]:  # dG_i = Σ_j (dE ⊙ E)_ij - Σ_j (dE ⊙ E)_ji + dΓ_i Γ_i, then G = cumsum(g)
            dEE = bt.unsqueeze(-1) * dAE_KK
            dEE[..., r, :] += dP * QK * Er
            dEE[..., -1, :] += (u * (K @ dS_out.transpose(-1, -2))).sum(-1) * last
            dGam = bt * dRk_K
            dGam[..., r] += (dY * (Q @ S0.transpose(-1, -2))).sum(-1)
            dGam[..., -1] += (dS_out * S0).sum((-1, -2))
            dG = dEE.sum(-1) - dEE.sum(-2) + dGam * Gam
            dg = c.untokens(dG.flip(-1).cumsum(-1).flip(-1).unflatten(-1, (c.L, n))[..., 0])
        return (c.untokens(dQ), c.unwrites(dK), c.unwrites(dV), c.unwrites(dbeta), dg, None, dW0, None)


def householder_sequence(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Optional[Tensor], done: Tensor, W0: Tensor,
    chunk_writes: int = CHUNK_WRITES,
) -> tuple[Tensor, Tensor]:
    """Decay, then n_h delta-rule writes, then one read, per step, computed chunk by chunk.

    For each step t, after the reset (W <- W (1 - done_t)):

    * W_{t,0} = α_t W_{t-1}, α_t = exp(g_t) (Gated DeltaNet, Yang, Kautz & Hatamizadeh 2025, Eq. 10;
      α ≡ 1 when ``g`` is None);
    * W_{t,j} = W_{t,j-1} + β_{t,j} (v_{t,j} - W_{t,j-1} k_{t,j}) ⊗ k_{t,j}, j = 1..n_h
      (DeltaProduct, Siems et al. 2025: a product of n_h generalised Householder transitions);
    * y_t = W_{t,n_h} q_t.

    With n_h = 1 this is Gated DeltaNet's W_t = α_t W_{t-1}(I - β_t k_t k_tᵀ) + β_t v_t k_tᵀ.

    The n_h·T writes run as one gated delta rule (the decay and the reset on each token's first write,
    the read after its last), in chunks of C writes: the chunkwise algorithm of Gated DeltaNet (Yang et al.
    2025), the WY representation / UT transform of DeltaNet's (Yang et al. 2024) with the decay. In a
    chunk entered with state S, with G_i the cumulative log-decay of its writes i = 1..C,
    E_ij = exp(G_i - G_j) for j <= i with no reset in (j, i] (else 0; :func:`decay_matrix`) and
    Γ_i = exp(G_i) with no reset in [1, i] (else 0), the state after write i is
    S_i = Γ_i S + Σ_{j<=i} E_ij u_j ⊗ k_j, and the write factors u_i = β_i (v_i - (state before write i,
    decayed) k_i) solve the unit lower-triangular system u_i + β_i Σ_{j<i} E_ij (k_i·k_j) u_j = β_i (v_i - Γ_i S k_i):
    u = U - Wk Sᵀ with U = (I + A)^-1 βV and Wk = (I + A)^-1 βΓK, A_ij = β_i E_ij k_i·k_j (one solve per
    chunk, no state needed). A read at write r is y = Γ_r S q + Σ_{j<=r} E_rj (q·k_j) u_j; the state leaving
    the chunk is S_C. Only that last step runs chunk after chunk. Memory: the inputs and one state per chunk
    (:class:`HouseholderChunks`), not one per step. Up to :data:`LOOP_MAX_WRITES` writes run the step loop
    :func:`householder_loop` instead.

    Args:
        q: [T,B,H,dk]; k: [T,B,H,n_h,dk]; v: [T,B,H,n_h,dv]; beta: [T,B,H,n_h];
        g: [T,B,H] log-decay (<= 0) or None; done: [T,B] bool; W0: [B,H,dv,dk];
        chunk_writes: writes per chunk (see :data:`CHUNK_WRITES`).
    Returns:
        y [T,B,H,dv] and the final state [B,H,dv,dk].
    """
    if k.shape[0] * k.shape[3] <= LOOP_MAX_WRITES:
        return householder_loop(q, k, v, beta, g, done, W0)
    return HouseholderChunks.apply(q, k, v, beta, g, done, W0, chunk_writes)


def householder_loop(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Optional[Tensor], done: Tensor, W0: Tensor,
) -> tuple[Tensor, Tensor]:
    """:func:`householder_sequence` step by step (decay, n_h delta-rule writes, read), differentiated by
    autograd, which keeps every state for the backward pass. It runs the short sequences (at most
    :data:`LOOP_MAX_WRITES` writes: one step of an actor), and the tests hold the chunked form against it."""
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
