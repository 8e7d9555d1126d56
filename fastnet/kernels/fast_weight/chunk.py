"""Chunked delta rule (WY / UT transform) in Triton, forward and backward, for long sequences.

Per chunk of C steps with chunk-initial state W0 (held transposed, S = W0^T [dk, dv]):
    (I + A) U = diag(beta) (V - m * K S),   A_ij = beta_i k_i.k_j  (j < i, same segment)
    Y = m * (Q S) + (Q K^T * L) U           (L: j <= i, same segment; read after write)
    S_end = g S + K^T (last * U)
U holds the write factors u_t of the delta rule (W_t = W_{t-1} + u_t k_t^T). T^{-1} = (I+A)^{-1}
is built by forward substitution; everything else is tl.dot products (tensor cores; tf32
when precision="tf32", exact fp32 FMA when "ieee").

Gated DeltaNet (Yang et al. 2025, Eq. 10: W_t = exp(g_t) W_{t-1} + beta_t (v_t - exp(g_t) W_{t-1} k_t) k_t^T)
runs through the same kernels with HAS_G: as in fla, the decay enters in log space as the cumulative
sum G_i = sum_{s<=i} g_s within the chunk, so no product of small numbers is formed. With
E = exp(G) and Gam_ij = exp(G_i - G_j) (j <= i, so Gam <= 1):
    A_ij = beta_i Gam_ij k_i.k_j,  (I + A) U = diag(beta) (V - m E * K S)
    Y = m E * (Q S) + (Q K^T * L * Gam) U,  S_end = g exp(G_C) S + K^T (last exp(G_C - G) * U)
(G_C: G at the chunk's last step). The backward adds dG (rowsum - colsum of the [C, C] gradients
through Gam, and the terms through E, exp(G_C - G), exp(G_C)) and returns dg as dG's reverse
cumulative sum over the chunk. Without g all decays are 1 and the formulas below hold as written.

Resets (done) inside the sequence are handled exactly with segment masks instead of
splitting: with c_t = cumsum(done)_t, steps i, j interact only if c_i = c_j; row i sees the
chunk-initial state only if c_i = c_{start-1} (m); the state leaves the chunk only through
the last segment (last) and the chunk-initial state survives only if no reset fell in the
chunk (g). So no fallback is needed for resets.

Seven kernels, so that only the [dk, BV] state (or its gradient) is carried through the
sequential loops and every per-chunk product runs in a chunk-parallel grid (as in
flash-linear-attention's chunk_delta_rule). With U = Uv - Wm S, Uv = T^{-1} diag(beta) V,
Wm = T^{-1} diag(beta m) K:

  forward   prep     (chunks in parallel)  T^{-1}, Wm, Uv
            fwd      (sequential, dv/BV x B*H programs)  save S, U = Uv - Wm S, S <- g S + K^T (last U)
            out      (chunks in parallel)  Y = m (Q S) + ((Q K^T) * L) U
  backward  bwd_prep (chunks in parallel)  dU_loc = ((Q K^T) * L)^T dY
            bwd      (sequential, reverse)  save dS_out, dU = dU_loc + last (K dS_out),
                                            dS <- g dS_out + Q^T (m dY) - Wm^T dU
            bwd_wy   (chunks in parallel)  Z = T^{-T} dU, dv = beta Z, dP = (dY U^T) * L,
                                            beta dA (dA = -(Z U^T) * strict), dbeta (A and V terms)
            bwd_dqk  (chunks in parallel)  dq = dP K + m dY S^T,
                                            dk = dP^T Q + beta dA K + (beta dA)^T K + last U dS_out^T - m beta Z S^T,
                                            dbeta -= m rowsum((Z S^T) * K)
The parallel kernels loop over value blocks of BV inside the program, so dq, dk, dbeta need no
partial sums. Saved for backward: chunk-initial states ([B,H,ceil(T/C),dv,dk] fp32:
O(B*H*d^2*T/C)), T^{-1} ([B*H,ceil(T/C),C,C]), Wm ([B,T,H,dk]) and U ([B,T,H,dv]), all fp32;
backward adds the chunk-final state gradients (same size as the states), dU and two [C,C]
per chunk. T^{-1} is by forward substitution (exact; the C-step loop runs in the parallel
prep kernel only).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fastnet.kernels._common import check_dtype, check_sequence_args


@triton.jit
def _tinv(K, be, cc, Gam, C: tl.constexpr, PREC: tl.constexpr):
    """(I + A)^{-1} for A_ij = be_i Gam_ij k_i.k_j (j < i, c_i == c_j); also returns K K^T and the same-segment mask."""
    o = tl.arange(0, C)
    KK = tl.dot(K, tl.trans(K), input_precision=PREC)
    same = cc[:, None] == cc[None, :]
    N = -tl.where((o[:, None] > o[None, :]) & same, be[:, None] * KK * Gam, 0.0)
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
def _flags(cseg, b, start, T, C: tl.constexpr):
    """Segment masks of the chunk at ``start``: step ids t, row mask, c_t, m, last, g (see module doc)."""
    t = start + tl.arange(0, C)
    tm = t < T
    cc = tl.load(cseg + b * T + t, mask=tm, other=-1)
    cprev = tl.load(cseg + b * T + tl.maximum(start - 1, 0)) * (start > 0).to(tl.int32)
    cend = tl.load(cseg + b * T + tl.minimum(start + C, T) - 1)
    return t, tm, cc, cc == cprev, cc == cend, (cend == cprev).to(tl.float32)


@triton.jit
def _chunk_program(cseg, T, H, C: tl.constexpr):
    """A chunk-parallel program's chunk n, row b*H + h, b, h, first step, and its segment masks."""
    n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    start = n * C
    t, tm, cc, m, last, g = _flags(cseg, b, start, T, C)
    return n, pid_bh, b, h, start, t, tm, cc, m, last, g


@triton.jit
def _decay(gk, b, h, start, t, tm, T, H, C: tl.constexpr, HAS_G: tl.constexpr):
    """Gated delta: G_i, the sum of the log-decays g over the chunk's steps up to i, and its value G_C at the
    chunk's last step (zeros without g)."""
    if HAS_G:
        G = tl.cumsum(tl.load(gk + (b * T + t) * H + h, mask=tm, other=0.0).to(tl.float32), 0)
    else:
        G = tl.zeros([C], dtype=tl.float32)
    return G, tl.sum(tl.where(t == tl.minimum(start + C, T) - 1, G, 0.0), 0)


@triton.jit
def _gamma(G, C: tl.constexpr):
    """Gam_ij = exp(G_i - G_j) for j <= i, 0 above the diagonal (so the exponent is never positive)."""
    o = tl.arange(0, C)
    low = o[:, None] >= o[None, :]
    return tl.where(low, tl.exp(tl.where(low, G[:, None] - G[None, :], 0.0)), 0.0)


@triton.jit
def _chunk_prep_kernel(
    k, v, beta, gk, cseg, tinv, wm, uv,
    T, H,
    DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr, C: tl.constexpr, PREC: tl.constexpr, HAS_G: tl.constexpr,
):
    """Per chunk, all chunks in parallel: T^{-1}, Wm = T^{-1} diag(beta m E) K, Uv = T^{-1} diag(beta) V."""
    n, pid_bh, b, h, start, t, tm, cc, m, last, g = _chunk_program(cseg, T, H, C)
    G, GC = _decay(gk, b, h, start, t, tm, T, H, C, HAS_G)
    Gam = _gamma(G, C)
    NT = (T + C - 1) // C
    oc = tl.arange(0, C)
    be = tl.load(beta + (b * T + t) * H + h, mask=tm, other=0.0).to(tl.float32)
    K = _ld(k, b, h, start, 0, T, H, DK, C, DK)
    Tinv, KK, same = _tinv(K, be, cc, Gam, C, PREC)
    tl.store(tinv + (pid_bh.to(tl.int64) * NT + n) * C * C + oc[:, None] * C + oc[None, :], Tinv)
    Wm = tl.dot(Tinv, tl.where(m[:, None], (be * tl.exp(G))[:, None] * K, 0.0), input_precision=PREC)
    _st(wm, Wm, b, h, start, 0, T, H, DK, C, DK)
    for j in range(DV // BV):
        V = _ld(v, b, h, start, j * BV, T, H, DV, C, BV)
        _st(uv, tl.dot(Tinv, be[:, None] * V, input_precision=PREC), b, h, start, j * BV, T, H, DV, C, BV)


@triton.jit
def _chunk_fwd_kernel(
    k, gk, cseg, w0, wm, u, wT, ckpt,
    T, H,
    DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr, C: tl.constexpr,
    HAS_W0: tl.constexpr, PREC: tl.constexpr, HAS_G: tl.constexpr,
):
    """Sequential over chunks, carrying only the [DK, BV] state: U = Uv - Wm S (in place over Uv),
    S <- g exp(G_C) S + K^T (last exp(G_C - G) U); saves every chunk-initial S."""
    pid_v = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
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
        t, tm, cc, m, last, g = _flags(cseg, b, start, T, C)
        tl.store(ckpt + (pid_bh.to(tl.int64) * NT + n) * DK * DV + stile, S)
        K = _ld(k, b, h, start, 0, T, H, DK, C, DK)
        Wm = _ld(wm, b, h, start, 0, T, H, DK, C, DK)
        U = _ld(u, b, h, start, pid_v * BV, T, H, DV, C, BV) - tl.dot(Wm, S, input_precision=PREC)
        _st(u, U, b, h, start, pid_v * BV, T, H, DV, C, BV)
        if HAS_G:
            G, GC = _decay(gk, b, h, start, t, tm, T, H, C, HAS_G)
            S = g * tl.exp(GC) * S + tl.dot(tl.trans(K), tl.where(last, tl.exp(GC - G), 0.0)[:, None] * U,
                                            input_precision=PREC)
        else:
            S = g * S + tl.dot(tl.trans(K), tl.where(last[:, None], U, 0.0), input_precision=PREC)
    tl.store(wT + sbase + stile, S)


@triton.jit
def _chunk_out_kernel(
    q, k, gk, cseg, ckpt, u, y,
    T, H,
    DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr, C: tl.constexpr, PREC: tl.constexpr, HAS_G: tl.constexpr,
):
    """Per chunk, in parallel: Y = m E (Q S) + ((Q K^T) * L * Gam) U."""
    n, pid_bh, b, h, start, t, tm, cc, m, last, g = _chunk_program(cseg, T, H, C)
    G, GC = _decay(gk, b, h, start, t, tm, T, H, C, HAS_G)
    Gam = _gamma(G, C)
    NT = (T + C - 1) // C
    oc = tl.arange(0, C)
    ok = tl.arange(0, DK)
    Q = _ld(q, b, h, start, 0, T, H, DK, C, DK)
    K = _ld(k, b, h, start, 0, T, H, DK, C, DK)
    incl = (oc[:, None] >= oc[None, :]) & (cc[:, None] == cc[None, :])
    P = tl.where(incl, tl.dot(Q, tl.trans(K), input_precision=PREC) * Gam, 0.0)
    E = tl.where(m, tl.exp(G), 0.0)
    cbase = (pid_bh.to(tl.int64) * NT + n) * DK * DV
    for j in range(DV // BV):
        ov = j * BV + tl.arange(0, BV)
        S = tl.load(ckpt + cbase + ov[None, :] * DK + ok[:, None])
        U = _ld(u, b, h, start, j * BV, T, H, DV, C, BV)
        Y = E[:, None] * tl.dot(Q, S, input_precision=PREC) + tl.dot(P, U, input_precision=PREC)
        _st(y, Y.to(y.dtype.element_ty), b, h, start, j * BV, T, H, DV, C, BV)


@triton.jit
def _chunk_bwd_prep_kernel(
    q, k, gk, cseg, dy, du,
    T, H,
    DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr, C: tl.constexpr, PREC: tl.constexpr, HAS_G: tl.constexpr,
):
    """Per chunk, in parallel: the intra-chunk part of dU, ((Q K^T) * L * Gam)^T dY."""
    n, pid_bh, b, h, start, t, tm, cc, m, last, g = _chunk_program(cseg, T, H, C)
    G, GC = _decay(gk, b, h, start, t, tm, T, H, C, HAS_G)
    Gam = _gamma(G, C)
    oc = tl.arange(0, C)
    Q = _ld(q, b, h, start, 0, T, H, DK, C, DK)
    K = _ld(k, b, h, start, 0, T, H, DK, C, DK)
    incl = (oc[:, None] >= oc[None, :]) & (cc[:, None] == cc[None, :])
    P = tl.where(incl, tl.dot(Q, tl.trans(K), input_precision=PREC) * Gam, 0.0)
    for j in range(DV // BV):
        dY = _ld(dy, b, h, start, j * BV, T, H, DV, C, BV)
        _st(du, tl.dot(tl.trans(P), dY, input_precision=PREC), b, h, start, j * BV, T, H, DV, C, BV)


@triton.jit
def _chunk_bwd_kernel(
    q, k, gk, cseg, wm, dy, dwT, dckpt, du, dw0,
    T, H,
    DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr, C: tl.constexpr,
    HAS_DWT: tl.constexpr, PREC: tl.constexpr, HAS_G: tl.constexpr,
):
    """Sequential over chunks in reverse, carrying only the [DK, BV] state gradient dS:
    dU = ((Q K^T) * L * Gam)^T dY + last exp(G_C - G) (K dS) (the first term from the pre-pass, in du;
    dU overwrites it), dS <- g exp(G_C) dS + Q^T (m E dY) - Wm^T dU. Saves every chunk-final state's gradient."""
    pid_v = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    ok = tl.arange(0, DK)
    ov = pid_v * BV + tl.arange(0, BV)
    stile = ov[None, :] * DK + ok[:, None]
    sbase = pid_bh.to(tl.int64) * DV * DK
    if HAS_DWT:
        dS = tl.load(dwT + sbase + stile).to(tl.float32)
    else:
        dS = tl.zeros([DK, BV], dtype=tl.float32)
    NT = (T + C - 1) // C
    for nn in range(NT):
        n = NT - 1 - nn
        start = n * C
        t, tm, cc, m, last, g = _flags(cseg, b, start, T, C)
        G, GC = _decay(gk, b, h, start, t, tm, T, H, C, HAS_G)
        tl.store(dckpt + (pid_bh.to(tl.int64) * NT + n) * DK * DV + stile, dS)
        Q = _ld(q, b, h, start, 0, T, H, DK, C, DK)
        K = _ld(k, b, h, start, 0, T, H, DK, C, DK)
        dY = _ld(dy, b, h, start, pid_v * BV, T, H, DV, C, BV)
        lam = tl.where(last, tl.exp(GC - G), 0.0)
        dU = _ld(du, b, h, start, pid_v * BV, T, H, DV, C, BV) + lam[:, None] * tl.dot(K, dS, input_precision=PREC)
        _st(du, dU, b, h, start, pid_v * BV, T, H, DV, C, BV)
        Wm = _ld(wm, b, h, start, 0, T, H, DK, C, DK)
        E = tl.where(m, tl.exp(G), 0.0)
        dS = g * tl.exp(GC) * dS + tl.dot(tl.trans(Q), E[:, None] * dY, input_precision=PREC) - tl.dot(
            tl.trans(Wm), dU, input_precision=PREC)
    tl.store(dw0 + sbase + stile, dS)


@triton.jit
def _chunk_bwd_wy_kernel(
    q, k, v, beta, gk, cseg, tinv, u, du, dy,
    dv, dbe_f, dg_f, dyu_s, dab_s,
    T, H,
    DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr, C: tl.constexpr, PREC: tl.constexpr, HAS_G: tl.constexpr,
):
    """Per chunk, in parallel: Z = T^{-T} dU, dv = beta Z, the intra-chunk part of dbeta (through
    A = beta (K K^T * Gam) and beta V; fp32 dbe_f), and the [C, C] gradients dP = (dY U^T) * L * Gam and
    beta dA * Gam (dyu_s, dab_s) from which bwd_dqk forms the intra-chunk dq, dk. Value blocks are summed in
    the program through the [C, C] products dY U^T and Z U^T only. With g: the intra-chunk part of dG
    (through Gam in P and A: rowsum - colsum of dP * Q K^T + beta dA * Gam * K K^T; fp32 dg_f)."""
    n, pid_bh, b, h, start, t, tm, cc, m, last, g = _chunk_program(cseg, T, H, C)
    G, GC = _decay(gk, b, h, start, t, tm, T, H, C, HAS_G)
    Gam = _gamma(G, C)
    NT = (T + C - 1) // C
    oc = tl.arange(0, C)
    be = tl.load(beta + (b * T + t) * H + h, mask=tm, other=0.0).to(tl.float32)
    ctile = (pid_bh.to(tl.int64) * NT + n) * C * C + oc[:, None] * C + oc[None, :]
    Tinv = tl.load(tinv + ctile)
    dYU = tl.zeros([C, C], dtype=tl.float32)
    ZU = tl.zeros([C, C], dtype=tl.float32)
    dbe = tl.zeros([C], dtype=tl.float32)
    for j in range(DV // BV):
        U = _ld(u, b, h, start, j * BV, T, H, DV, C, BV)
        dU = _ld(du, b, h, start, j * BV, T, H, DV, C, BV)
        dY = _ld(dy, b, h, start, j * BV, T, H, DV, C, BV)
        V = _ld(v, b, h, start, j * BV, T, H, DV, C, BV)
        dYU += tl.dot(dY, tl.trans(U), input_precision=PREC)
        Z = tl.dot(tl.trans(Tinv), dU, input_precision=PREC)
        _st(dv, (be[:, None] * Z).to(dv.dtype.element_ty), b, h, start, j * BV, T, H, DV, C, BV)
        ZU += tl.dot(Z, tl.trans(U), input_precision=PREC)
        dbe += tl.sum(Z * V, 1)
    same = cc[:, None] == cc[None, :]
    dA = tl.where((oc[:, None] > oc[None, :]) & same, -ZU, 0.0)
    dAb = be[:, None] * dA * Gam
    tl.store(dab_s + ctile, dAb)
    dP = tl.where((oc[:, None] >= oc[None, :]) & same, dYU * Gam, 0.0)
    tl.store(dyu_s + ctile, dP)
    K = _ld(k, b, h, start, 0, T, H, DK, C, DK)
    KK = tl.dot(K, tl.trans(K), input_precision=PREC)
    dbe += tl.sum(dA * KK * Gam, 1)
    tl.store(dbe_f + (b * T + t) * H + h, dbe, mask=tm)
    if HAS_G:
        Zg = dP * tl.dot(_ld(q, b, h, start, 0, T, H, DK, C, DK), tl.trans(K), input_precision=PREC) + dAb * KK
        tl.store(dg_f + (b * T + t) * H + h, tl.sum(Zg, 1) - tl.sum(Zg, 0), mask=tm)


@triton.jit
def _chunk_bwd_dqk_kernel(
    q, k, beta, gk, cseg, tinv, ckpt, dckpt, u, du, dy, dyu_s, dab_s, dbe_f, dg_f,
    dq, dk, dbeta, dg,
    T, H,
    DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr, C: tl.constexpr, PREC: tl.constexpr, HAS_G: tl.constexpr,
):
    """Per chunk, in parallel: dq, dk, dbeta (and dg). Intra-chunk parts from bwd_wy's [C, C] gradients
    (dq: dP K; dk: dP^T Q + beta dA K + (beta dA)^T K), then the parts through the chunk-initial state S
    and the chunk-final state gradient dS_out (dq: m E dY S^T; dk: lam U dS_out^T - m beta E Z S^T;
    dbeta: dbe_f - m E rowsum(Z S^T * K)), with lam = last exp(G_C - G). With g, dG adds the terms through
    E (in Y and Wm), lam and the chunk-final decay exp(G_C) to bwd_wy's dg_f, and dg is its reverse
    cumulative sum over the chunk (G_i = sum_{s <= i} g_s)."""
    n, pid_bh, b, h, start, t, tm, cc, m, last, g = _chunk_program(cseg, T, H, C)
    G, GC = _decay(gk, b, h, start, t, tm, T, H, C, HAS_G)
    NT = (T + C - 1) // C
    oc = tl.arange(0, C)
    ok = tl.arange(0, DK)
    be = tl.load(beta + (b * T + t) * H + h, mask=tm, other=0.0).to(tl.float32)
    E = tl.where(m, tl.exp(G), 0.0)
    lam = tl.where(last, tl.exp(GC - G), 0.0)
    ctile = (pid_bh.to(tl.int64) * NT + n) * C * C + oc[:, None] * C + oc[None, :]
    dP = tl.load(dyu_s + ctile)
    dAb = tl.load(dab_s + ctile)
    K = _ld(k, b, h, start, 0, T, H, DK, C, DK)
    Q = _ld(q, b, h, start, 0, T, H, DK, C, DK)
    dQ = tl.dot(dP, K, input_precision=PREC)
    dK = tl.dot(dAb, K, input_precision=PREC) + tl.dot(tl.trans(dAb), K, input_precision=PREC)
    dK += tl.dot(tl.trans(dP), Q, input_precision=PREC)
    Tinv = tl.load(tinv + ctile)
    cbase = (pid_bh.to(tl.int64) * NT + n) * DK * DV
    ZS = tl.zeros([C, DK], dtype=tl.float32)
    dY_QS = tl.zeros([C], dtype=tl.float32)  # sum_v dY (Q S) = rowsum(Q * dY S^T), for dG through E
    lam_dlam = tl.zeros([C], dtype=tl.float32)  # lam sum_v (K dS_out) U = rowsum(K * lam U dS_out^T)
    S_dS = tl.zeros([DK], dtype=tl.float32)
    for j in range(DV // BV):
        stile = (j * BV + tl.arange(0, BV))[None, :] * DK + ok[:, None]
        S = tl.load(ckpt + cbase + stile)
        dSo = tl.load(dckpt + cbase + stile)
        U = _ld(u, b, h, start, j * BV, T, H, DV, C, BV)
        dU = _ld(du, b, h, start, j * BV, T, H, DV, C, BV)
        dY = _ld(dy, b, h, start, j * BV, T, H, DV, C, BV)
        dYS = tl.dot(dY, tl.trans(S), input_precision=PREC)
        dQ += E[:, None] * dYS
        Z = tl.dot(tl.trans(Tinv), dU, input_precision=PREC)
        ZS += tl.dot(Z, tl.trans(S), input_precision=PREC)
        UdS = tl.dot(lam[:, None] * U, tl.trans(dSo), input_precision=PREC)
        dK += UdS
        if HAS_G:
            dY_QS += tl.sum(Q * dYS, 1)
            lam_dlam += tl.sum(K * UdS, 1)
            S_dS += tl.sum(S * dSo, 1)
    _st(dq, dQ.to(dq.dtype.element_ty), b, h, start, 0, T, H, DK, C, DK)
    ZS = tl.where(m[:, None], ZS, 0.0)
    ZSK = tl.sum(ZS * K, 1)
    eG = tl.exp(G)
    dbe = tl.load(dbe_f + (b * T + t) * H + h, mask=tm, other=0.0) - eG * ZSK
    tl.store(dbeta + (b * T + t) * H + h, dbe.to(dbeta.dtype.element_ty), mask=tm)
    dK -= (be * eG)[:, None] * ZS
    _st(dk, dK.to(dk.dtype.element_ty), b, h, start, 0, T, H, DK, C, DK)
    if HAS_G:
        dG = tl.load(dg_f + (b * T + t) * H + h, mask=tm, other=0.0) + E * dY_QS - be * eG * ZSK - lam_dlam
        at_end = t == tl.minimum(start + C, T) - 1
        dG += tl.where(at_end, g * tl.exp(GC) * tl.sum(S_dS, 0) + tl.sum(lam_dlam, 0), 0.0)
        dgs = tl.sum(tl.where(oc[None, :] >= oc[:, None], dG[None, :], 0.0), 1)
        tl.store(dg + (b * T + t) * H + h, dgs.to(dg.dtype.element_ty), mask=tm)


def pick_bv(dk: int, dv: int, c: int = 16) -> int:
    """Value block: the grid of the two sequential passes and the inner loop of the chunk-parallel kernels."""
    return min(dv, 32 if c <= 32 else 16)


def pick_warps(dk: int, bv: int, c: int, precision: str = "tf32", sequential: bool = False,
               gated: bool = False) -> int:
    """Warps per program, chosen from the sm_80/sm_90 compile sweep (cuda/NOTES.md): fewest without spills.

    Exact fp32 ("ieee") products are FMA loops that hold whole operand rows/columns per thread, so
    they take 8 warps except in the small sequential passes. Gated delta's kernels carry the decays and
    dqk three more accumulators: 8 warps (4 spill once or more at d = 32 or 64)."""
    if c > 32 or gated:
        return 8
    if precision == "ieee":
        return 8 if (not sequential or dk * c >= 1024) else 4
    return 8 if (c == 32 and not sequential) else 4


def pick_stages(c: int) -> int:
    return 3 if c <= 32 else 2


DEFAULT_CHUNK = 16  # C=64 still spills in some builds (cuda/NOTES.md)


class ChunkDeltaRule(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, beta, gk, w0, done, chunk_size, precision, bv):
        B, T, H, DK = q.shape
        DV = v.shape[-1]
        dev = q.device
        nv, C = DV // bv, chunk_size
        NT = triton.cdiv(T, C)
        f32 = dict(device=dev, dtype=torch.float32)
        cseg = torch.cumsum(done.to(torch.int32), 1).to(torch.int32).contiguous()
        tinv = torch.empty(B * H, NT, C, C, **f32)
        wm = torch.empty(B, T, H, DK, **f32)
        u = torch.empty(B, T, H, DV, **f32)  # Uv from the pre-pass, overwritten with U by the state pass
        has_g = gk is not None
        gk = gk if has_g else beta  # a placeholder pointer, never read
        cx = dict(DK=DK, DV=DV, BV=bv, C=C, PREC=precision, HAS_G=has_g)
        launch = dict(num_warps=pick_warps(DK, bv, C, precision, gated=has_g), num_stages=pick_stages(C))
        seq = dict(launch, num_warps=pick_warps(DK, bv, C, precision, sequential=True, gated=has_g))
        _chunk_prep_kernel[(NT, B * H)](k, v, beta, gk, cseg, tinv, wm, u, T, H, **cx, **launch)
        wT = torch.empty(B, H, DV, DK, **f32)
        ckpt = torch.empty(B, H, NT, DV, DK, **f32)
        has_w0 = w0 is not None
        _chunk_fwd_kernel[(nv, B * H)](
            k, gk, cseg, w0 if has_w0 else wT, wm, u, wT, ckpt, T, H, **cx, HAS_W0=has_w0, **seq,
        )
        y = torch.empty(B, T, H, DV, device=dev, dtype=q.dtype)
        _chunk_out_kernel[(NT, B * H)](q, k, gk, cseg, ckpt, u, y, T, H, **cx, **launch)
        ctx.cfg = (C, precision, bv, has_w0, None if w0 is None else w0.dtype, has_g)
        ctx.save_for_backward(q, k, v, beta, gk, cseg, tinv, wm, ckpt, u)
        state_dtype = q.dtype if w0 is None else w0.dtype
        return y, (wT if state_dtype == torch.float32 else wT.to(state_dtype))

    @staticmethod
    def backward(ctx, dy, dwT):
        q, k, v, beta, gk, cseg, tinv, wm, ckpt, u = ctx.saved_tensors
        C, precision, bv, has_w0, w0_dtype, has_g = ctx.cfg
        B, T, H, DK = q.shape
        DV = v.shape[-1]
        dev = q.device
        nv = DV // bv
        NT = triton.cdiv(T, C)
        f32 = dict(device=dev, dtype=torch.float32)
        dy = torch.zeros(B, T, H, DV, device=dev, dtype=q.dtype) if dy is None else dy.contiguous()
        has_dwT = dwT is not None
        dw0 = torch.empty(B, H, DV, DK, **f32)
        dwT = dwT.float().contiguous() if has_dwT else dw0
        dckpt = torch.empty(B, H, NT, DV, DK, **f32)
        du = torch.empty(B, T, H, DV, **f32)
        cx = dict(DK=DK, DV=DV, BV=bv, C=C, PREC=precision, HAS_G=has_g)
        launch = dict(num_warps=pick_warps(DK, bv, C, precision, gated=has_g), num_stages=pick_stages(C))
        seq = dict(launch, num_warps=pick_warps(DK, bv, C, precision, sequential=True, gated=has_g))
        _chunk_bwd_prep_kernel[(NT, B * H)](q, k, gk, cseg, dy, du, T, H, **cx, **launch)
        _chunk_bwd_kernel[(nv, B * H)](
            q, k, gk, cseg, wm, dy, dwT, dckpt, du, dw0, T, H, **cx, HAS_DWT=has_dwT, **seq,
        )
        dv, dbeta = torch.empty_like(v), torch.empty_like(beta)
        dyu_s, dab_s = torch.empty(B * H, NT, C, C, **f32), torch.empty(B * H, NT, C, C, **f32)
        dbe_f = torch.empty(B, T, H, **f32)
        dg_f = torch.empty(B, T, H, **f32) if has_g else dbe_f
        _chunk_bwd_wy_kernel[(NT, B * H)](
            q, k, v, beta, gk, cseg, tinv, u, du, dy, dv, dbe_f, dg_f, dyu_s, dab_s, T, H, **cx, **launch,
        )
        dq, dk = torch.empty_like(q), torch.empty_like(k)
        dg = torch.empty_like(gk) if has_g else dbeta
        _chunk_bwd_dqk_kernel[(NT, B * H)](
            q, k, beta, gk, cseg, tinv, ckpt, dckpt, u, du, dy, dyu_s, dab_s, dbe_f, dg_f, dq, dk, dbeta, dg,
            T, H, **cx, **launch,
        )
        return (dq, dk, dv, dbeta, dg if has_g else None, dw0.to(w0_dtype) if has_w0 else None,
                None, None, None, None)


def chunk_delta_rule(q, k, v, beta, initial_state=None, done=None, chunk_size=DEFAULT_CHUNK, precision=None,
                     block_v=None, g=None):
    """Chunked (UT-transform) delta rule over a batch-major sequence; with ``g`` [B,T,H], Gated DeltaNet.

    Args as :func:`fastnet.kernels.fused_recurrent_fast_weight` with rule="delta" (or "gated_delta" with
    its log-decay ``g``); resets in ``done`` may fall anywhere (handled with segment masks).
    ``chunk_size`` in {16, 32, 64} (default 16); ``precision``: "ieee" (exact fp32 products) or "tf32"
    (tensor cores); default "ieee" for fp32 inputs and "tf32" for bf16 inputs.
    Returns (y [B,T,H,dv], final state [B,H,dv,dk]).
    """
    if chunk_size not in (16, 32, 64):
        raise ValueError(f"chunk_size must be 16, 32 or 64, got {chunk_size}")
    if precision is None:
        precision = "ieee" if q.dtype == torch.float32 else "tf32"
    if precision not in ("ieee", "tf32"):
        raise ValueError(f"precision must be 'ieee' or 'tf32', got {precision!r}")
    done, initial_state, bv = check_sequence_args(
        q, k, v, beta, done, initial_state, block_v, lambda: pick_bv(q.shape[-1], v.shape[-1], chunk_size))
    if g is not None:
        if g.shape != beta.shape:
            raise ValueError(f"g must be [B,T,H]={list(beta.shape)}, got {list(g.shape)}")
        check_dtype("g", g)
        g = g.contiguous()
    return ChunkDeltaRule.apply(q.contiguous(), k.contiguous(), v.contiguous(), beta.contiguous(), g,
                                initial_state, done, chunk_size, precision, bv)


def compile_specs(d, KernelSpec, sig, chunk_size=DEFAULT_CHUNK, precision=None, dtype="fp32"):
    """The chunked kernels at dk = dv = d, for the delta rule and for Gated DeltaNet (HAS_G). Forward:
    prep (T^{-1}, Wm, Uv), state pass, output; backward: prep (intra-chunk dU), state-gradient pass,
    wy (dv, intra-chunk dq/dk/dbeta/dG), dqk (state terms, dg). precision defaults as in chunk_delta_rule:
    "ieee" for fp32 inputs, "tf32" for bf16."""
    if precision is None:
        precision = "ieee" if dtype == "fp32" else "tf32"
    x = f"*{dtype}"
    bv = pick_bv(d, d, chunk_size)
    ns = pick_stages(chunk_size)
    tail = "T:i32,H:i32,DK:constexpr,DV:constexpr,BV:constexpr,C:constexpr"
    specs = []
    for has_g, kind in ((False, "delta"), (True, "gated_delta")):
        lab = f"d={d} C={chunk_size} BV={bv} {precision} {dtype}"
        cx = dict(DK=d, DV=d, BV=bv, C=chunk_size, PREC=precision, HAS_G=has_g)
        w = pick_warps(d, bv, chunk_size, precision, gated=has_g)
        ws = pick_warps(d, bv, chunk_size, precision, sequential=True, gated=has_g)
        end = "PREC:constexpr,HAS_G:constexpr"
        specs += [
            KernelSpec(f"chunk_{kind}_prep", _chunk_prep_kernel,
                       sig(f"k:{x},v:{x},beta:{x},gk:{x},cseg:*i32,tinv:*fp32,wm:*fp32,uv:*fp32,{tail},{end}"),
                       dict(cx), w, lab, ns),
            KernelSpec(f"chunk_{kind}_fwd", _chunk_fwd_kernel,
                       sig(f"k:{x},gk:{x},cseg:*i32,w0:*fp32,wm:*fp32,u:*fp32,wT:*fp32,ckpt:*fp32,{tail},"
                           f"HAS_W0:constexpr,{end}"),
                       dict(cx, HAS_W0=True), ws, lab, ns),
            KernelSpec(f"chunk_{kind}_out", _chunk_out_kernel,
                       sig(f"q:{x},k:{x},gk:{x},cseg:*i32,ckpt:*fp32,u:*fp32,y:{x},{tail},{end}"),
                       dict(cx), w, lab, ns),
            KernelSpec(f"chunk_{kind}_bwd_prep", _chunk_bwd_prep_kernel,
                       sig(f"q:{x},k:{x},gk:{x},cseg:*i32,dy:{x},du:*fp32,{tail},{end}"),
                       dict(cx), w, lab, ns),
            KernelSpec(f"chunk_{kind}_bwd", _chunk_bwd_kernel,
                       sig(f"q:{x},k:{x},gk:{x},cseg:*i32,wm:*fp32,dy:{x},dwT:*fp32,dckpt:*fp32,du:*fp32,dw0:*fp32,"
                           f"{tail},HAS_DWT:constexpr,{end}"),
                       dict(cx, HAS_DWT=True), ws, lab, ns),
            KernelSpec(f"chunk_{kind}_bwd_wy", _chunk_bwd_wy_kernel,
                       sig(f"q:{x},k:{x},v:{x},beta:{x},gk:{x},cseg:*i32,tinv:*fp32,u:*fp32,du:*fp32,dy:{x},"
                           f"dv:{x},dbe_f:*fp32,dg_f:*fp32,dyu_s:*fp32,dab_s:*fp32,{tail},{end}"),
                       dict(cx), w, lab, ns),
            KernelSpec(f"chunk_{kind}_bwd_dqk", _chunk_bwd_dqk_kernel,
                       sig(f"q:{x},k:{x},beta:{x},gk:{x},cseg:*i32,tinv:*fp32,ckpt:*fp32,dckpt:*fp32,u:*fp32,"
                           f"du:*fp32,dy:{x},dyu_s:*fp32,dab_s:*fp32,dbe_f:*fp32,dg_f:*fp32,dq:{x},dk:{x},dbeta:{x},"
                           f"dg:{x},{tail},{end}"),
                       dict(cx), w, lab, ns),
        ]
    return specs
