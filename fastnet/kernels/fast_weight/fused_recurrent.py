"""Fused recurrent Triton kernels for the sum, delta, gated and gated-delta fast-weight rules.

Layout: batch-major q, k [B,T,H,DK], v [B,T,H,DV], beta [B,T,H], done [B,T], state
W [B,H,DV,DK] (value x key). One program owns a block of BV value rows of one (b, h) state;
the rows are independent under all three rules (the write u_i k_j and the reads W k, W q act
row by row), so the grid is (DV/BV, B*H). W stays in registers in fp32 for the whole sequence.

Per step t: W = W * (1 - done[b,t]); write; y_t = W_t q_t (read after write). The gated-delta
write (Gated DeltaNet, Yang et al. 2025, Eq. 10) is W = exp(g_t) W, then the delta write.

Backward, without one W per step (Schlag et al. 2021, appendix F):
  * sum / delta: forward saves the value factor u_t of each write (delta only; for sum u = v),
    backward walks back in time and undoes each write, W_{t-1}' = W_t - u_t k_t^T. At a reset,
    the zeroed state cannot be undone; the state before the reset is rebuilt by replaying the
    writes u_s k_s^T of the segment since the previous reset (or from W0), which costs at most
    T extra rank-1 updates in total and no memory.
  * gated / gated_delta: cannot be undone stably (divides by 1 - beta, or by exp(g)). Forward
    checkpoints W (after the reset, before the write) every C = ceil(sqrt(T)) steps; backward replays each chunk from
    its checkpoint into a per-program scratch of C states, then walks it backwards.
    Extra memory: B*H*DV*DK*(ceil(T/C) + C) fp32.
dq, dk and dbeta sum over value rows; with DV/BV > 1 blocks they are written as fp32
partials per block and summed on the host.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from fastnet.kernels._common import check_dtype, check_sequence_args, seg_start
from fastnet.options import check_choice

RULE_IDS = {"sum": 0, "delta": 1, "gated": 2, "gated_delta": 3}


def pick_bv(dk: int, dv: int) -> int:
    """Value-row block: keep one fp32 [BV, DK] tile at <= 4096 elements (W and G in backward)."""
    return min(dv, max(16, 4096 // dk), 64)


def pick_warps(bv: int, dk: int) -> int:
    return 4 if bv * dk <= 4096 else 8


@triton.jit
def _state_program(H, DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr):
    """A program's value block pid_v and row b*H + h, its BV state rows, the key columns,
    the [BV, DK] tile offsets and the base offset of (b, h)'s [DV, DK] state."""
    pid_v = tl.program_id(0)
    pid_bh = tl.program_id(1)
    rows = pid_v * BV + tl.arange(0, BV)
    cols = tl.arange(0, DK)
    tile = rows[:, None] * DK + cols[None, :]
    return pid_v, pid_bh, pid_bh // H, pid_bh % H, rows, cols, tile, pid_bh.to(tl.int64) * DV * DK


@triton.jit
def _state_before_reset(w0_tile, HAS_W0: tl.constexpr, u, kk, done, seg, b, h, t, T, H,
                        DU: tl.constexpr, DKK: tl.constexpr, rows, cols):
    """The [rows, cols] state just before the reset at step t, rebuilt by replaying the writes
    u_s ⊗ k_s of the segment since the previous reset (or since W0): no stored state needed."""
    s0 = tl.load(seg + b * T + tl.maximum(t - 1, 0))
    if HAS_W0:
        W = tl.load(w0_tile).to(tl.float32) * (1.0 - tl.load(done + b * T + s0).to(tl.float32))
    else:
        W = (rows[:, None] * 0 + cols[None, :] * 0).to(tl.float32)
    for s in range(s0, t):
        bs = ((b * T + s) * H + h).to(tl.int64)
        W += tl.load(u + bs * DU + rows).to(tl.float32)[:, None] * tl.load(kk + bs * DKK + cols).to(tl.float32)[None, :]
    return W


@triton.jit
def _fw_fwd_kernel(
    q, k, v, beta, g, done, w0, y, wT, u_out, ckpt,
    T, H, CHUNK,
    DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr,
    RULE: tl.constexpr, HAS_W0: tl.constexpr,
):
    pid_v, pid_bh, b, h, rows, cols, tile, sbase = _state_program(H, DK, DV, BV)
    if HAS_W0:
        W = tl.load(w0 + sbase + tile).to(tl.float32)
    else:
        W = tl.zeros([BV, DK], dtype=tl.float32)
    ckpt_row = ckpt + pid_bh.to(tl.int64) * ((T + CHUNK - 1) // CHUNK) * DV * DK
    for t in range(T):
        base = ((b * T + t) * H + h).to(tl.int64)
        kt = tl.load(k + base * DK + cols).to(tl.float32)
        qt = tl.load(q + base * DK + cols).to(tl.float32)
        vt = tl.load(v + base * DV + rows).to(tl.float32)
        dt = tl.load(done + b * T + t).to(tl.float32)
        W = W * (1.0 - dt)
        if RULE == 0:
            W += vt[:, None] * kt[None, :]
        elif RULE == 1:
            bt = tl.load(beta + base).to(tl.float32)
            u = bt * (vt - tl.sum(W * kt[None, :], axis=1))
            tl.store(u_out + base * DV + rows, u)
            W += u[:, None] * kt[None, :]
        else:
            if t % CHUNK == 0:
                tl.store(ckpt_row + (t // CHUNK) * DV * DK + tile, W)
            bt = tl.load(beta + base).to(tl.float32)
            if RULE == 2:
                W = (1.0 - bt) * W + (bt * vt)[:, None] * kt[None, :]
            else:  # W <- a W + u k^T with u = beta (v - a W k), a = exp(g)
                at = tl.exp(tl.load(g + base).to(tl.float32))
                u = bt * (vt - at * tl.sum(W * kt[None, :], axis=1))
                W = at * W + u[:, None] * kt[None, :]
        yt = tl.sum(W * qt[None, :], axis=1)
        tl.store(y + base * DV + rows, yt.to(y.dtype.element_ty))
    tl.store(wT + sbase + tile, W)


@triton.jit
def _fw_bwd_undo_kernel(
    q, k, v, beta, done, seg, w0, wT, u_in, dy, dwT,
    dq_p, dk_p, dv, dbeta_p, dw0,
    T, H, B,
    DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr,
    RULE: tl.constexpr, HAS_W0: tl.constexpr, HAS_DWT: tl.constexpr,
):
    pid_v, pid_bh, b, h, rows, cols, tile, sbase = _state_program(H, DK, DV, BV)
    # partial buffers: [NV, B, T, H, ...]
    pbase = pid_v.to(tl.int64) * B * T * H
    W = tl.load(wT + sbase + tile)
    if HAS_DWT:
        G = tl.load(dwT + sbase + tile).to(tl.float32)
    else:
        G = tl.zeros([BV, DK], dtype=tl.float32)
    for i in range(T):
        t = T - 1 - i
        base = ((b * T + t) * H + h).to(tl.int64)
        kt = tl.load(k + base * DK + cols).to(tl.float32)
        qt = tl.load(q + base * DK + cols).to(tl.float32)
        vt = tl.load(v + base * DV + rows).to(tl.float32)
        dyt = tl.load(dy + base * DV + rows).to(tl.float32)
        dt = tl.load(done + b * T + t)
        G += dyt[:, None] * qt[None, :]
        tl.store(dq_p + (pbase + base) * DK + cols, tl.sum(W * dyt[:, None], axis=0))
        if RULE == 0:
            u = vt
        else:
            u = tl.load(u_in + base * DV + rows)
        W = W - u[:, None] * kt[None, :]  # W'_t: after the reset, before the write
        Gk = tl.sum(G * kt[None, :], axis=1)
        if RULE == 0:
            tl.store(dv + base * DV + rows, Gk.to(dv.dtype.element_ty))
            tl.store(dk_p + (pbase + base) * DK + cols, tl.sum(G * u[:, None], axis=0))
        else:
            bt = tl.load(beta + base).to(tl.float32)
            bGk = bt * Gk
            tl.store(dv + base * DV + rows, bGk.to(dv.dtype.element_ty))
            resid = vt - tl.sum(W * kt[None, :], axis=1)
            tl.store(dbeta_p + pbase + base, tl.sum(Gk * resid, axis=0))
            dkt = tl.sum(G * u[:, None], axis=0) - tl.sum(W * bGk[:, None], axis=0)
            tl.store(dk_p + (pbase + base) * DK + cols, dkt)
            G = G - bGk[:, None] * kt[None, :]
        if dt != 0:
            # reset before step t: no gradient flows further back, and the state before the
            # reset is rebuilt by replaying the writes since the previous reset (or W0).
            G = G * 0.0
            if RULE == 0:
                W = _state_before_reset(w0 + sbase + tile, HAS_W0, v, k, done, seg, b, h, t, T, H, DV, DK, rows, cols)
            else:
                W = _state_before_reset(w0 + sbase + tile, HAS_W0, u_in, k, done, seg, b, h, t, T, H, DV, DK, rows,
                                        cols)
    tl.store(dw0 + sbase + tile, G)


@triton.jit
def _fw_bwd_gated_kernel(
    q, k, v, beta, g, done, ckpt, scratch, dy, dwT,
    dq_p, dk_p, dv, dbeta_p, dg_p, dw0,
    T, H, B, CHUNK,
    DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr, RULE: tl.constexpr, HAS_DWT: tl.constexpr,
):
    """Backward of the gated (RULE 2) and gated-delta (RULE 3) rules: replay each chunk from its
    checkpoint into scratch (W' after the reset, before the write), then walk it backwards."""
    pid_v, pid_bh, b, h, rows, cols, tile, sbase = _state_program(H, DK, DV, BV)
    NV = tl.num_programs(0)
    ltile = tl.arange(0, BV)[:, None] * DK + cols[None, :]
    pbase = pid_v.to(tl.int64) * B * T * H
    scr = scratch + (pid_bh.to(tl.int64) * NV + pid_v) * CHUNK * BV * DK
    NC = ((T + CHUNK - 1) // CHUNK)
    if HAS_DWT:
        G = tl.load(dwT + sbase + tile).to(tl.float32)
    else:
        G = tl.zeros([BV, DK], dtype=tl.float32)
    for ci in range(NC):
        c = NC - 1 - ci
        start = c * CHUNK
        end = tl.minimum(start + CHUNK, T)
        W = tl.load(ckpt + (pid_bh.to(tl.int64) * NC + c) * DV * DK + tile)
        for s in range(start, end):
            bs = ((b * T + s) * H + h).to(tl.int64)
            ds = tl.load(done + b * T + s).to(tl.float32) * (s > start).to(tl.float32)
            W = W * (1.0 - ds)
            tl.store(scr + (s - start) * BV * DK + ltile, W)
            ks = tl.load(k + bs * DK + cols).to(tl.float32)
            vs = tl.load(v + bs * DV + rows).to(tl.float32)
            bt = tl.load(beta + bs).to(tl.float32)
            if RULE == 2:
                W = (1.0 - bt) * W + (bt * vs)[:, None] * ks[None, :]
            else:
                W = W * tl.exp(tl.load(g + bs).to(tl.float32))
                W += (bt * (vs - tl.sum(W * ks[None, :], axis=1)))[:, None] * ks[None, :]
        tl.debug_barrier()
        for j in range(0, end - start):
            t = end - 1 - j
            base = ((b * T + t) * H + h).to(tl.int64)
            Wp = tl.load(scr + (t - start) * BV * DK + ltile)
            kt = tl.load(k + base * DK + cols).to(tl.float32)
            qt = tl.load(q + base * DK + cols).to(tl.float32)
            vt = tl.load(v + base * DV + rows).to(tl.float32)
            bt = tl.load(beta + base).to(tl.float32)
            dyt = tl.load(dy + base * DV + rows).to(tl.float32)
            dt = tl.load(done + b * T + t).to(tl.float32)
            if RULE == 2:
                Wt = (1.0 - bt) * Wp + (bt * vt)[:, None] * kt[None, :]
            else:  # Wp is the decayed state exp(g) W' from here on; u the delta write's value factor
                at = tl.exp(tl.load(g + base).to(tl.float32))
                Wp = Wp * at
                u = bt * (vt - tl.sum(Wp * kt[None, :], axis=1))
                Wt = Wp + u[:, None] * kt[None, :]
            G += dyt[:, None] * qt[None, :]
            tl.store(dq_p + (pbase + base) * DK + cols, tl.sum(Wt * dyt[:, None], axis=0))
            Gk = tl.sum(G * kt[None, :], axis=1)
            tl.store(dv + base * DV + rows, (bt * Gk).to(dv.dtype.element_ty))
            if RULE == 2:
                tl.store(dk_p + (pbase + base) * DK + cols, bt * tl.sum(G * vt[:, None], axis=0))
                dbt = tl.sum(Gk * vt, axis=0) - tl.sum(tl.sum(G * Wp, axis=1), axis=0)
                tl.store(dbeta_p + pbase + base, dbt)
                G = G * ((1.0 - bt) * (1.0 - dt))
            else:
                bGk = bt * Gk
                tl.store(dbeta_p + pbase + base, tl.sum(Gk * (vt - tl.sum(Wp * kt[None, :], axis=1)), axis=0))
                dkt = tl.sum(G * u[:, None], axis=0) - tl.sum(Wp * bGk[:, None], axis=0)
                tl.store(dk_p + (pbase + base) * DK + cols, dkt)
                G = G - bGk[:, None] * kt[None, :]  # the gradient of the decayed state
                tl.store(dg_p + pbase + base, tl.sum(tl.sum(G * Wp, axis=1), axis=0))
                G = G * (at * (1.0 - dt))
        tl.debug_barrier()
    tl.store(dw0 + sbase + tile, G)


def gated_chunk(T: int) -> int:
    return max(1, math.isqrt(max(T - 1, 0)) + 1)


class FusedRecurrentFastWeight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, beta, g, w0, done, rule, bv):
        B, T, H, DK = q.shape
        DV = v.shape[-1]
        rid = RULE_IDS[rule]
        nv = DV // bv
        dev = q.device
        y = torch.empty(B, T, H, DV, device=dev, dtype=q.dtype)
        wT = torch.empty(B, H, DV, DK, device=dev, dtype=torch.float32)
        u = torch.empty(B, T, H, DV, device=dev, dtype=torch.float32) if rid == 1 else wT
        chunk = gated_chunk(T) if rid >= 2 else 1
        ckpt = (
            torch.empty(B, H, triton.cdiv(T, chunk), DV, DK, device=dev, dtype=torch.float32) if rid >= 2 else wT
        )
        done8 = done.to(torch.int8).contiguous()
        has_w0 = w0 is not None
        _fw_fwd_kernel[(nv, B * H)](
            q, k, v, beta, beta if g is None else g, done8, w0 if has_w0 else wT, y, wT, u, ckpt,
            T, H, chunk, DK=DK, DV=DV, BV=bv, RULE=rid, HAS_W0=has_w0, num_warps=pick_warps(bv, DK),
        )
        ctx.rule, ctx.bv, ctx.chunk, ctx.has_w0 = rule, bv, chunk, has_w0
        ctx.w0_dtype = None if w0 is None else w0.dtype
        ctx.save_for_backward(q, k, v, beta, g, done8, w0, wT, u, ckpt)
        state_dtype = q.dtype if w0 is None else w0.dtype
        return y, (wT if state_dtype == torch.float32 else wT.to(state_dtype))

    @staticmethod
    def backward(ctx, dy, dwT):
        q, k, v, beta, g, done8, w0, wT, u, ckpt = ctx.saved_tensors
        B, T, H, DK = q.shape
        DV = v.shape[-1]
        bv = ctx.bv
        nv = DV // bv
        rid = RULE_IDS[ctx.rule]
        dev = q.device
        dy = dy.contiguous() if dy is not None else torch.zeros(B, T, H, DV, device=dev, dtype=q.dtype)
        has_dwT = dwT is not None
        dwT = dwT.float().contiguous() if has_dwT else wT
        dq_p = torch.empty(nv, B, T, H, DK, device=dev, dtype=torch.float32)
        dk_p = torch.empty(nv, B, T, H, DK, device=dev, dtype=torch.float32)
        dbeta_p = torch.zeros(nv, B, T, H, device=dev, dtype=torch.float32)
        dg_p = torch.zeros(nv, B, T, H, device=dev, dtype=torch.float32) if g is not None else dbeta_p
        dv = torch.empty_like(v)
        dw0 = torch.empty(B, H, DV, DK, device=dev, dtype=torch.float32)
        warps = pick_warps(bv, DK)
        if rid >= 2:
            scratch = torch.empty(B * H * nv, ctx.chunk, bv, DK, device=dev, dtype=torch.float32)
            _fw_bwd_gated_kernel[(nv, B * H)](
                q, k, v, beta, beta if g is None else g, done8, ckpt, scratch, dy, dwT, dq_p, dk_p, dv, dbeta_p,
                dg_p, dw0, T, H, B, ctx.chunk, DK=DK, DV=DV, BV=bv, RULE=rid, HAS_DWT=has_dwT, num_warps=warps,
            )
        else:
            seg = seg_start(done8.bool())
            _fw_bwd_undo_kernel[(nv, B * H)](
                q, k, v, beta, done8, seg, w0 if ctx.has_w0 else wT, wT, u, dy, dwT,
                dq_p, dk_p, dv, dbeta_p, dw0,
                T, H, B, DK=DK, DV=DV, BV=bv, RULE=rid, HAS_W0=ctx.has_w0, HAS_DWT=has_dwT, num_warps=warps,
            )
        dq = dq_p.sum(0).to(q.dtype)
        dk = dk_p.sum(0).to(k.dtype)
        dbeta = dbeta_p.sum(0).to(beta.dtype)
        dg = dg_p.sum(0).to(g.dtype) if g is not None else None
        dw0_out = dw0.to(ctx.w0_dtype) if ctx.has_w0 else None
        return dq, dk, dv, dbeta, dg, dw0_out, None, None, None


def fused_recurrent_fast_weight(q, k, v, beta=None, initial_state=None, done=None, rule="delta", block_v=None,
                                g=None):
    """Fused recurrent sum / delta / gated / gated_delta fast-weight sequence op (batch-major).

    Args:
        q, k: [B,T,H,dk]; v: [B,T,H,dv] (phi already applied), fp32 or bf16.
        beta: [B,T,H] (ignored by "sum"; may be None for it).
        initial_state: [B,H,dv,dk] or None (zeros).
        done: [B,T] bool or None; where set, the state is zeroed before that step.
        rule: "sum", "delta", "gated" or "gated_delta".
        block_v: value rows per program (power of two dividing dv); default :func:`pick_bv`.
        g: [B,T,H] log-decay of "gated_delta" (W <- exp(g_t) W before the delta write); None: no decay.
    Returns:
        y [B,T,H,dv] (dtype of q) with y_t = W_t q_t, and the final state [B,H,dv,dk]
        (dtype of initial_state, or of q when it is None).
    Differentiable in q, k, v, beta, g and initial_state.
    """
    check_choice(rule, RULE_IDS, kind="update rule")
    if beta is None:
        if rule != "sum":
            raise ValueError(f"the {rule} rule needs beta")
        beta = q.new_ones(q.shape[:3])
    done, initial_state, bv = check_sequence_args(
        q, k, v, beta, done, initial_state, block_v, lambda: pick_bv(q.shape[-1], v.shape[-1]))
    if g is not None:
        if rule != "gated_delta":
            raise ValueError(f"g (the log-decay) applies to the gated_delta rule only, not {rule!r}")
        if g.shape != beta.shape:
            raise ValueError(f"g must be [B,T,H]={list(beta.shape)}, got {list(g.shape)}")
        check_dtype("g", g)
        g = g.contiguous()
    elif rule == "gated_delta":
        g = torch.zeros_like(beta)
    return FusedRecurrentFastWeight.apply(
        q.contiguous(), k.contiguous(), v.contiguous(), beta.contiguous(), g, initial_state, done, rule, bv
    )
