"""Chunked delta rule (WY / UT transform) in Triton, forward and backward, for long sequences.

Per chunk of C steps with chunk-initial state W0 (held transposed, S = W0^T [dk, dv]):
    (I + A) U = diag(beta) (V - m * K S),   A_ij = beta_i k_i.k_j  (j < i, same segment)
    Y = m * (Q S) + (Q K^T * L) U           (L: j <= i, same segment; read after write)
    S_end = g S + K^T (last * U)
U holds the write factors u_t of the delta rule (W_t = W_{t-1} + u_t k_t^T). T^{-1} = (I+A)^{-1}
is built by forward substitution; everything else is tl.dot products (tensor cores; tf32
when precision="tf32", exact fp32 FMA when "ieee").

Resets (done) inside the sequence are handled exactly with segment masks instead of
splitting: with c_t = cumsum(done)_t, steps i, j interact only if c_i = c_j; row i sees the
chunk-initial state only if c_i = c_{start-1} (m); the state leaves the chunk only through
the last segment (last) and the chunk-initial state survives only if no reset fell in the
chunk (g). So no fallback is needed for resets.

One program owns one (b, h) and a block of BV value columns of S, and walks the chunks in
order (forward) or in reverse (backward). Forward saves the chunk-initial states
([B,H,ceil(T/C),dk,dv] fp32: O(B*H*d^2*T/C)) and U ([B,T,H,dv] fp32); backward recomputes
T^{-1} per chunk. dq, dk, dbeta sum over value blocks (fp32 partials, summed on the host).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fastnet.kernels._common import check_device, check_dtype, check_head_size


@triton.jit
def _tinv(K, be, cc, C: tl.constexpr, PREC: tl.constexpr):
    """(I + A)^{-1} for A_ij = be_i k_i.k_j (j < i, c_i == c_j); also returns K K^T and the same-segment mask."""
    o = tl.arange(0, C)
    KK = tl.dot(K, tl.trans(K), input_precision=PREC)
    same = cc[:, None] == cc[None, :]
    N = -tl.where((o[:, None] > o[None, :]) & same, be[:, None] * KK, 0.0)
    for i in range(1, C):
        a = tl.sum(tl.where(o[:, None] == i, N, 0.0), 0)
        a = a + tl.sum(a[:, None] * N, 0) * (o < i)
        N = tl.where(o[:, None] == i, a[None, :], N)
    return N + (o[:, None] == o[None, :]).to(tl.float32), KK, same


@triton.jit
def _offs(b, h, start, col, T, H, D: tl.constexpr, C: tl.constexpr, BD: tl.constexpr):
    """Scalar int64 base of x[b, start, h, col] in a [B,T,H,D] tensor, int32 tile offsets, row mask."""
    base = ((b * T + start) * H + h).to(tl.int64) * D + col
    r = tl.arange(0, C)
    return base, r[:, None] * (H * D) + tl.arange(0, BD)[None, :], (start + r < T)[:, None]


@triton.jit
def _ld(x, b, h, start, col, T, H, D: tl.constexpr, C: tl.constexpr, BD: tl.constexpr):
    base, o, msk = _offs(b, h, start, col, T, H, D, C, BD)
    return tl.load(x + base + o, mask=msk, other=0.0).to(tl.float32)


@triton.jit
def _st(x, val, b, h, start, col, T, H, D: tl.constexpr, C: tl.constexpr, BD: tl.constexpr):
    base, o, msk = _offs(b, h, start, col, T, H, D, C, BD)
    tl.store(x + base + o, val, mask=msk)


@triton.jit
def _chunk_fwd_kernel(
    q, k, v, beta, cseg, w0, y, wT, u_out, ckpt,
    T, H,
    DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr, C: tl.constexpr,
    HAS_W0: tl.constexpr, PREC: tl.constexpr,
):
    pid_v = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    oc = tl.arange(0, C)
    ok = tl.arange(0, DK)
    ov = pid_v * BV + tl.arange(0, BV)
    stile = ov[None, :] * DK + ok[:, None]  # S[j, i] = W[i, j]
    sbase = pid_bh.to(tl.int64) * DV * DK
    if HAS_W0:
        S = tl.load(w0 + sbase + stile).to(tl.float32)
    else:
        S = tl.zeros([DK, BV], dtype=tl.float32)
    NT = (T + C - 1) // C
    for n in range(NT):
        start = n * C
        t = start + oc
        tm = t < T
        rb = (b * T + t) * H + h
        Q = _ld(q, b, h, start, 0, T, H, DK, C, DK)
        K = _ld(k, b, h, start, 0, T, H, DK, C, DK)
        V = _ld(v, b, h, start, pid_v * BV, T, H, DV, C, BV)
        be = tl.load(beta + rb, mask=tm, other=0.0).to(tl.float32)
        cc = tl.load(cseg + b * T + t, mask=tm, other=-1)
        cprev = tl.load(cseg + b * T + tl.maximum(start - 1, 0)) * (start > 0).to(tl.int32)
        cend = tl.load(cseg + b * T + tl.minimum(start + C, T) - 1)
        m = cc == cprev
        last = cc == cend
        g = (cend == cprev).to(tl.float32)
        tl.store(ckpt + (pid_bh.to(tl.int64) * NT + n) * DK * DV + stile, S)
        Tinv, KK, same = _tinv(K, be, cc, C, PREC)
        KS = tl.dot(K, S, input_precision=PREC)
        R = be[:, None] * (V - tl.where(m[:, None], KS, 0.0))
        U = tl.dot(Tinv, R, input_precision=PREC)
        QK = tl.where((oc[:, None] >= oc[None, :]) & same, tl.dot(Q, tl.trans(K), input_precision=PREC), 0.0)
        Y = tl.where(m[:, None], tl.dot(Q, S, input_precision=PREC), 0.0) + tl.dot(QK, U, input_precision=PREC)
        _st(y, Y.to(y.dtype.element_ty), b, h, start, pid_v * BV, T, H, DV, C, BV)
        _st(u_out, U, b, h, start, pid_v * BV, T, H, DV, C, BV)
        S = g * S + tl.dot(tl.trans(K), tl.where(last[:, None], U, 0.0), input_precision=PREC)
    tl.store(wT + sbase + stile, S)


@triton.jit
def _chunk_bwd_kernel(
    q, k, v, beta, cseg, ckpt, u_in, dy, dwT,
    dq_p, dk_p, dv, dbeta_p, dw0,
    T, H, B,
    DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr, C: tl.constexpr,
    HAS_DWT: tl.constexpr, PREC: tl.constexpr,
):
    pid_v = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    oc = tl.arange(0, C)
    ok = tl.arange(0, DK)
    ov = pid_v * BV + tl.arange(0, BV)
    stile = ov[None, :] * DK + ok[:, None]
    sbase = pid_bh.to(tl.int64) * DV * DK
    pbase = pid_v.to(tl.int64) * B * T * H
    if HAS_DWT:
        dS = tl.load(dwT + sbase + stile).to(tl.float32)
    else:
        dS = tl.zeros([DK, BV], dtype=tl.float32)
    NT = (T + C - 1) // C
    for nn in range(NT):
        n = NT - 1 - nn
        start = n * C
        t = start + oc
        tm = t < T
        rb = ((b * T + t) * H + h).to(tl.int64)
        Q = tl.load(q + rb[:, None] * DK + ok[None, :], mask=tm[:, None], other=0.0).to(tl.float32)
        K = tl.load(k + rb[:, None] * DK + ok[None, :], mask=tm[:, None], other=0.0).to(tl.float32)
        V = tl.load(v + rb[:, None] * DV + ov[None, :], mask=tm[:, None], other=0.0).to(tl.float32)
        U = tl.load(u_in + rb[:, None] * DV + ov[None, :], mask=tm[:, None], other=0.0)
        dY = tl.load(dy + rb[:, None] * DV + ov[None, :], mask=tm[:, None], other=0.0).to(tl.float32)
        be = tl.load(beta + rb, mask=tm, other=0.0).to(tl.float32)
        cc = tl.load(cseg + b * T + t, mask=tm, other=-1)
        cprev = tl.load(cseg + b * T + tl.maximum(start - 1, 0)) * (start > 0).to(tl.int32)
        cend = tl.load(cseg + b * T + tl.minimum(start + C, T) - 1)
        m = cc == cprev
        last = cc == cend
        g = (cend == cprev).to(tl.float32)
        S = tl.load(ckpt + (pid_bh.to(tl.int64) * NT + n) * DK * DV + stile)
        Tinv, KK, same = _tinv(K, be, cc, C, PREC)
        incl = (oc[:, None] >= oc[None, :]) & same
        QK = tl.where(incl, tl.dot(Q, tl.trans(K), input_precision=PREC), 0.0)
        dU = tl.dot(tl.trans(QK), dY, input_precision=PREC) + tl.where(
            last[:, None], tl.dot(K, dS, input_precision=PREC), 0.0)
        dYU = tl.where(incl, tl.dot(dY, tl.trans(U), input_precision=PREC), 0.0)
        dQ = tl.where(m[:, None], tl.dot(dY, tl.trans(S), input_precision=PREC), 0.0) + tl.dot(
            dYU, K, input_precision=PREC)
        dK = tl.dot(tl.trans(dYU), Q, input_precision=PREC) + tl.where(
            last[:, None], tl.dot(U, tl.trans(dS), input_precision=PREC), 0.0)
        dS0 = g * dS + tl.dot(tl.trans(Q), tl.where(m[:, None], dY, 0.0), input_precision=PREC)
        Z = tl.dot(tl.trans(Tinv), dU, input_precision=PREC)
        dA = tl.where((oc[:, None] > oc[None, :]) & same, -tl.dot(Z, tl.trans(U), input_precision=PREC), 0.0)
        dbe = tl.sum(dA * KK, 1)
        dAb = be[:, None] * dA
        dK += tl.dot(dAb, K, input_precision=PREC) + tl.dot(tl.trans(dAb), K, input_precision=PREC)
        KS = tl.dot(K, S, input_precision=PREC)
        dbe += tl.sum(Z * (V - tl.where(m[:, None], KS, 0.0)), 1)
        mbZ = tl.where(m[:, None], be[:, None] * Z, 0.0)
        dK -= tl.dot(mbZ, tl.trans(S), input_precision=PREC)
        dS0 -= tl.dot(tl.trans(K), mbZ, input_precision=PREC)
        tl.store(dq_p + (pbase + rb[:, None]) * DK + ok[None, :], dQ, mask=tm[:, None])
        tl.store(dk_p + (pbase + rb[:, None]) * DK + ok[None, :], dK, mask=tm[:, None])
        tl.store(dv + rb[:, None] * DV + ov[None, :], (be[:, None] * Z).to(dv.dtype.element_ty), mask=tm[:, None])
        tl.store(dbeta_p + pbase + rb, dbe, mask=tm)
        dS = dS0
    tl.store(dw0 + sbase + stile, dS)


def pick_bv(dk: int, dv: int) -> int:
    return min(dv, 32)


def pick_warps(dk: int, bv: int, c: int) -> int:
    return 4 if c <= 32 else 8


DEFAULT_CHUNK = 16  # see cuda/NOTES.md: C=32/64 spill registers in this version


class ChunkDeltaRule(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, beta, w0, done, chunk_size, precision, bv):
        B, T, H, DK = q.shape
        DV = v.shape[-1]
        dev = q.device
        nv, C = DV // bv, chunk_size
        NT = triton.cdiv(T, C)
        y = torch.empty(B, T, H, DV, device=dev, dtype=q.dtype)
        wT = torch.empty(B, H, DV, DK, device=dev, dtype=torch.float32)
        u = torch.empty(B, T, H, DV, device=dev, dtype=torch.float32)
        ckpt = torch.empty(B, H, NT, DV, DK, device=dev, dtype=torch.float32)
        cseg = torch.cumsum(done.to(torch.int32), 1).to(torch.int32).contiguous()
        has_w0 = w0 is not None
        _chunk_fwd_kernel[(nv, B * H)](
            q, k, v, beta, cseg, w0 if has_w0 else wT, y, wT, u, ckpt, T, H,
            DK=DK, DV=DV, BV=bv, C=C, HAS_W0=has_w0, PREC=precision, num_warps=pick_warps(DK, bv, C),
        )
        ctx.cfg = (C, precision, bv, has_w0, None if w0 is None else w0.dtype)
        ctx.save_for_backward(q, k, v, beta, cseg, ckpt, u, wT)
        state_dtype = q.dtype if w0 is None else w0.dtype
        return y, (wT if state_dtype == torch.float32 else wT.to(state_dtype))

    @staticmethod
    def backward(ctx, dy, dwT):
        q, k, v, beta, cseg, ckpt, u, wT = ctx.saved_tensors
        C, precision, bv, has_w0, w0_dtype = ctx.cfg
        B, T, H, DK = q.shape
        DV = v.shape[-1]
        dev = q.device
        nv = DV // bv
        dy = torch.zeros(B, T, H, DV, device=dev, dtype=q.dtype) if dy is None else dy.contiguous()
        has_dwT = dwT is not None
        dwT = dwT.float().contiguous() if has_dwT else wT
        dq_p = torch.empty(nv, B, T, H, DK, device=dev, dtype=torch.float32)
        dk_p = torch.empty_like(dq_p)
        dbeta_p = torch.empty(nv, B, T, H, device=dev, dtype=torch.float32)
        dv = torch.empty_like(v)
        dw0 = torch.empty(B, H, DV, DK, device=dev, dtype=torch.float32)
        _chunk_bwd_kernel[(nv, B * H)](
            q, k, v, beta, cseg, ckpt, u, dy, dwT, dq_p, dk_p, dv, dbeta_p, dw0, T, H, B,
            DK=DK, DV=DV, BV=bv, C=C, HAS_DWT=has_dwT, PREC=precision, num_warps=pick_warps(DK, bv, C),
        )
        return (dq_p.sum(0).to(q.dtype), dk_p.sum(0).to(k.dtype), dv, dbeta_p.sum(0).to(beta.dtype),
                dw0.to(w0_dtype) if has_w0 else None, None, None, None, None)


def chunk_delta_rule(q, k, v, beta, initial_state=None, done=None, chunk_size=DEFAULT_CHUNK, precision=None, block_v=None):
    """Chunked (UT-transform) delta rule over a batch-major sequence.

    Args as :func:`fastnet.kernels.fused_recurrent_fast_weight` with rule="delta"; resets in
    ``done`` may fall anywhere (handled with segment masks). ``chunk_size`` in {16, 32, 64} (default 16);
    ``precision``: "ieee" (exact fp32 products) or "tf32" (tensor cores); default "ieee" for
    fp32 inputs and "tf32" for bf16 inputs. Returns (y [B,T,H,dv], final state [B,H,dv,dk]).
    """
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"expected q, k [B,T,H,dk] and v [B,T,H,dv]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, T, H, DK = q.shape
    DV = v.shape[-1]
    check_head_size("dk", DK)
    check_head_size("dv", DV)
    for name, x in (("q", q), ("k", k), ("v", v), ("beta", beta)):
        check_dtype(name, x)
    if beta.shape != (B, T, H):
        raise ValueError(f"beta must be [B,T,H]={[B, T, H]}, got {list(beta.shape)}")
    if chunk_size not in (16, 32, 64):
        raise ValueError(f"chunk_size must be 16, 32 or 64, got {chunk_size}")
    if precision is None:
        precision = "ieee" if q.dtype == torch.float32 else "tf32"
    if precision not in ("ieee", "tf32"):
        raise ValueError(f"precision must be 'ieee' or 'tf32', got {precision!r}")
    if done is None:
        done = torch.zeros(B, T, dtype=torch.bool, device=q.device)
    if done.shape != (B, T):
        raise ValueError(f"done must be [B,T]={[B, T]}, got {list(done.shape)}")
    if initial_state is not None:
        check_dtype("initial_state", initial_state)
        if initial_state.shape != (B, H, DV, DK):
            raise ValueError(f"initial_state must be [B,H,dv,dk]={[B, H, DV, DK]}, got {list(initial_state.shape)}")
        initial_state = initial_state.contiguous()
    check_device(q, k, v, beta, done, *([initial_state] if initial_state is not None else []))
    bv = pick_bv(DK, DV) if block_v is None else block_v
    if bv < 16 or DV % bv or bv & (bv - 1):
        raise ValueError(f"block_v={bv} must be a power of two >= 16 dividing dv={DV}")
    return ChunkDeltaRule.apply(q.contiguous(), k.contiguous(), v.contiguous(), beta.contiguous(),
                                initial_state, done, chunk_size, precision, bv)


def compile_specs(d, KernelSpec, sig, chunk_size=DEFAULT_CHUNK, precision="tf32"):
    x = "*fp32"
    bv = pick_bv(d, d)
    w = pick_warps(d, bv, chunk_size)
    lab = f"d={d} C={chunk_size} BV={bv} {precision}"
    cx = dict(DK=d, DV=d, BV=bv, C=chunk_size, PREC=precision)
    return [
        KernelSpec(
            "chunk_delta_fwd", _chunk_fwd_kernel,
            sig(f"q:{x},k:{x},v:{x},beta:{x},cseg:*i32,w0:*fp32,y:{x},wT:*fp32,u_out:*fp32,ckpt:*fp32,T:i32,H:i32,"
                "DK:constexpr,DV:constexpr,BV:constexpr,C:constexpr,HAS_W0:constexpr,PREC:constexpr"),
            dict(cx, HAS_W0=True), w, lab,
        ),
        KernelSpec(
            "chunk_delta_bwd", _chunk_bwd_kernel,
            sig(f"q:{x},k:{x},v:{x},beta:{x},cseg:*i32,ckpt:*fp32,u_in:*fp32,dy:{x},dwT:*fp32,dq_p:*fp32,dk_p:*fp32,"
                f"dv:{x},dbeta_p:*fp32,dw0:*fp32,T:i32,H:i32,B:i32,"
                "DK:constexpr,DV:constexpr,BV:constexpr,C:constexpr,HAS_DWT:constexpr,PREC:constexpr"),
            dict(cx, HAS_DWT=True), w, lab,
        ),
    ]
