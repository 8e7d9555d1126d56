"""Fused recurrent Triton kernels for the Recurrent Delta Net (``rec_delta``) and the Delta
RNN (``delta_rnn``), forward and backward (autograd Functions).

The output y_{t-1} feeds the next step through all value rows, so one program owns the
whole state of one (b, h): grid (B*H,). Fast weights stay in registers in fp32.

Backward walks back in time and undoes each delta write (W' = W - u k^T) from the saved
per-step write factors u; at a reset it rebuilds the pre-reset state by replaying the
segment's writes (as in :mod:`fused_recurrent`). Extra memory is O(B*T*H*d) vectors only.

rec_delta: the kernel returns the gradients of the pre-activations (= d aq, d ak, d av, d ab)
and the gradient into y_{t-1}; the slow matrices' gradients dRq = sum_{b,t} d aq_t tanh(y_{t-1})^T
(etc.) are then one batched matmul on the host.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fastnet.kernels._common import check_device, check_dtype, check_head_size, seg_start
from fastnet.kernels.fast_weight.fused_recurrent import _state_before_reset


def pick_warps(n_elems: int) -> int:
    """Warps so that the fp32 tiles held in registers are ~<= 64 per thread."""
    w = 4
    while n_elems // (32 * w) > 64 and w < 16:
        w *= 2
    return w


@triton.jit
def _tanh(x):
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0


@triton.jit
def _softmax(x):
    e = tl.exp(x - tl.max(x, axis=0))
    return e / tl.sum(e, axis=0)


@triton.jit
def _delta_bwd(W, G, k, v, beta, u):
    """Back through W = W' + u k^T, u = beta (v - W' k); W is post-write. Returns W', G', dk, dv, dbeta."""
    W = W - u[:, None] * k[None, :]
    Gk = tl.sum(G * k[None, :], axis=1)
    bGk = beta * Gk
    dbeta = tl.sum(Gk * (v - tl.sum(W * k[None, :], axis=1)), axis=0)
    dk = tl.sum(G * u[:, None], axis=0) - tl.sum(W * bGk[:, None], axis=0)
    G = G - bGk[:, None] * k[None, :]
    return W, G, dk, bGk, dbeta


# ------------------------------------------------------------------------------ rec_delta
@triton.jit
def _rec_delta_fwd_kernel(
    aq, ak, av, ab, Rq, Rk, Rv, rb, done, w0, y0,
    y, wT, qs, ks, vs, bs, us,
    T, H, D: tl.constexpr,
):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    rows = tl.arange(0, D)
    cols = tl.arange(0, D)
    tile = rows[:, None] * D + cols[None, :]
    sb = pid.to(tl.int64) * D * D
    W = tl.load(w0 + sb + tile).to(tl.float32)
    Mq = tl.load(Rq + h * D * D + tile).to(tl.float32)
    Mk = tl.load(Rk + h * D * D + tile).to(tl.float32)
    Mv = tl.load(Rv + h * D * D + tile).to(tl.float32)
    mb = tl.load(rb + h * D + cols).to(tl.float32)
    yp = tl.load(y0 + pid.to(tl.int64) * D + rows).to(tl.float32)
    for t in range(T):
        base = ((b * T + t) * H + h).to(tl.int64)
        keep = 1.0 - tl.load(done + b * T + t).to(tl.float32)
        W = W * keep
        hc = _tanh(yp * keep)
        q = _softmax(tl.load(aq + base * D + rows).to(tl.float32) + tl.sum(Mq * hc[None, :], axis=1))
        k = _softmax(tl.load(ak + base * D + rows).to(tl.float32) + tl.sum(Mk * hc[None, :], axis=1))
        v = tl.load(av + base * D + rows).to(tl.float32) + tl.sum(Mv * hc[None, :], axis=1)
        beta = tl.sigmoid(tl.load(ab + base).to(tl.float32) + tl.sum(mb * hc, axis=0))
        u = beta * (v - tl.sum(W * k[None, :], axis=1))
        W += u[:, None] * k[None, :]
        yp = tl.sum(W * q[None, :], axis=1)
        tl.store(y + base * D + rows, yp.to(y.dtype.element_ty))
        tl.store(qs + base * D + rows, q)
        tl.store(ks + base * D + rows, k)
        tl.store(vs + base * D + rows, v)
        tl.store(us + base * D + rows, u)
        tl.store(bs + base, beta)
    tl.store(wT + sb + tile, W)


@triton.jit
def _rec_delta_bwd_kernel(
    Rq, Rk, Rv, rb, done, seg, w0, y0, y, wT, qs, ks, vs, bs, us, dy, dwT,
    daq, dak, dav, dab, dw0, dy0,
    T, H, D: tl.constexpr, HAS_DWT: tl.constexpr,
):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    rows = tl.arange(0, D)
    cols = tl.arange(0, D)
    tile = rows[:, None] * D + cols[None, :]
    sb = pid.to(tl.int64) * D * D
    W = tl.load(wT + sb + tile)
    if HAS_DWT:
        G = tl.load(dwT + sb + tile).to(tl.float32)
    else:
        G = tl.zeros([D, D], dtype=tl.float32)
    Mq = tl.load(Rq + h * D * D + tile).to(tl.float32)
    Mk = tl.load(Rk + h * D * D + tile).to(tl.float32)
    Mv = tl.load(Rv + h * D * D + tile).to(tl.float32)
    mb = tl.load(rb + h * D + cols).to(tl.float32)
    gy = tl.zeros([D], dtype=tl.float32)
    for i in range(T):
        t = T - 1 - i
        base = ((b * T + t) * H + h).to(tl.int64)
        dt = tl.load(done + b * T + t)
        keep = 1.0 - dt.to(tl.float32)
        q = tl.load(qs + base * D + cols)
        k = tl.load(ks + base * D + cols)
        v = tl.load(vs + base * D + rows)
        u = tl.load(us + base * D + rows)
        beta = tl.load(bs + base)
        dyt = tl.load(dy + base * D + rows).to(tl.float32) + gy
        G += dyt[:, None] * q[None, :]
        dq = tl.sum(W * dyt[:, None], axis=0)
        W, G, dk, dv, dbeta = _delta_bwd(W, G, k, v, beta, u)
        dpq = q * (dq - tl.sum(dq * q, axis=0))
        dpk = k * (dk - tl.sum(dk * k, axis=0))
        dpb = dbeta * beta * (1.0 - beta)
        tl.store(daq + base * D + cols, dpq)
        tl.store(dak + base * D + cols, dpk)
        tl.store(dav + base * D + rows, dv)
        tl.store(dab + base, dpb)
        dh = (tl.sum(Mq * dpq[:, None], axis=0) + tl.sum(Mk * dpk[:, None], axis=0)
              + tl.sum(Mv * dv[:, None], axis=0) + mb * dpb)
        if t > 0:
            yprev = tl.load(y + (base - H) * D + cols).to(tl.float32)
        else:
            yprev = tl.load(y0 + pid.to(tl.int64) * D + cols).to(tl.float32)
        hc = _tanh(yprev * keep)
        gy = dh * (1.0 - hc * hc) * keep
        if dt != 0:
            G = G * 0.0
            W = _state_before_reset(w0 + sb + tile, True, us, ks, done, seg, b, h, t, T, H, D, D, rows, cols)
    tl.store(dw0 + sb + tile, G)
    tl.store(dy0 + pid.to(tl.int64) * D + rows, gy)


class FusedRecDelta(torch.autograd.Function):
    @staticmethod
    def forward(ctx, aq, ak, av, ab, Rq, Rk, Rv, rb, done, W0, y0):
        B, T, H, D = aq.shape
        dev = aq.device
        f32 = dict(device=dev, dtype=torch.float32)
        y = torch.empty(B, T, H, D, device=dev, dtype=aq.dtype)
        wT = torch.empty(B, H, D, D, **f32)
        qs, ks, vs, us = (torch.empty(B, T, H, D, **f32) for _ in range(4))
        bs = torch.empty(B, T, H, **f32)
        done8 = done.to(torch.int8).contiguous()
        _rec_delta_fwd_kernel[(B * H,)](
            aq, ak, av, ab, Rq, Rk, Rv, rb, done8, W0, y0, y, wT, qs, ks, vs, bs, us,
            T, H, D=D, num_warps=pick_warps(4 * D * D),
        )
        ctx.save_for_backward(Rq, Rk, Rv, rb, done8, W0, y0, y, wT, qs, ks, vs, bs, us)
        ctx.dtypes = (aq.dtype, ak.dtype, av.dtype, ab.dtype, W0.dtype, y0.dtype)
        return y, wT.to(W0.dtype), y[:, -1].clone()

    @staticmethod
    def backward(ctx, dy, dwT, dyT):
        Rq, Rk, Rv, rb, done8, W0, y0, y, wT, qs, ks, vs, bs, us = ctx.saved_tensors
        B, T, H, D = y.shape
        dev = y.device
        f32 = dict(device=dev, dtype=torch.float32)
        dy = torch.zeros(B, T, H, D, **f32) if dy is None else dy.float().clone()
        if dyT is not None:
            dy[:, -1] += dyT.float()
        has_dwT = dwT is not None
        dwT = dwT.float().contiguous() if has_dwT else wT
        daq, dak, dav = (torch.empty(B, T, H, D, **f32) for _ in range(3))
        dab = torch.empty(B, T, H, **f32)
        dw0 = torch.empty(B, H, D, D, **f32)
        dy0 = torch.empty(B, H, D, **f32)
        _rec_delta_bwd_kernel[(B * H,)](
            Rq, Rk, Rv, rb, done8, seg_start(done8.bool()), W0, y0, y, wT, qs, ks, vs, bs, us, dy, dwT,
            daq, dak, dav, dab, dw0, dy0, T, H, D=D, HAS_DWT=has_dwT, num_warps=pick_warps(5 * D * D),
        )
        # slow recurrent matrices: one batched product over (b, t)
        yprev = torch.cat([y0.unsqueeze(1).float(), y[:, :-1].float()], 1) * (~done8.bool()).float()[:, :, None, None]
        hs = torch.tanh(yprev)
        dRq = torch.einsum("bthi,bthj->hij", daq, hs).to(Rq.dtype)
        dRk = torch.einsum("bthi,bthj->hij", dak, hs).to(Rk.dtype)
        dRv = torch.einsum("bthi,bthj->hij", dav, hs).to(Rv.dtype)
        drb = torch.einsum("bth,bthj->hj", dab, hs).to(rb.dtype)
        ta, tk, tv, tb, tw, ty = ctx.dtypes
        return (daq.to(ta), dak.to(tk), dav.to(tv), dab.to(tb), dRq, dRk, dRv, drb, None, dw0.to(tw), dy0.to(ty))


# ------------------------------------------------------------------------------ delta_rnn
@triton.jit
def _delta_rnn_fwd_kernel(
    q, k, v, beta, kr, vr, beta_r, done, w0, r0, y0,
    y, wT, rT, uw, ur,
    T, H, DK: tl.constexpr, DV: tl.constexpr,
):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    rows = tl.arange(0, DV)
    ck = tl.arange(0, DK)
    cv = tl.arange(0, DV)
    wtile = rows[:, None] * DK + ck[None, :]
    rtile = rows[:, None] * DV + cv[None, :]
    W = tl.load(w0 + pid.to(tl.int64) * DV * DK + wtile).to(tl.float32)
    R = tl.load(r0 + pid.to(tl.int64) * DV * DV + rtile).to(tl.float32)
    yp = tl.load(y0 + pid.to(tl.int64) * DV + rows).to(tl.float32)
    for t in range(T):
        base = ((b * T + t) * H + h).to(tl.int64)
        keep = 1.0 - tl.load(done + b * T + t).to(tl.float32)
        W = W * keep
        R = R * keep
        s = _softmax(yp * keep)
        kt = tl.load(k + base * DK + ck).to(tl.float32)
        qt = tl.load(q + base * DK + ck).to(tl.float32)
        vt = tl.load(v + base * DV + rows).to(tl.float32)
        bt = tl.load(beta + base).to(tl.float32)
        krt = tl.load(kr + base * DV + cv).to(tl.float32)
        vrt = tl.load(vr + base * DV + rows).to(tl.float32)
        brt = tl.load(beta_r + base).to(tl.float32)
        u = bt * (vt - tl.sum(W * kt[None, :], axis=1))
        W += u[:, None] * kt[None, :]
        ru = brt * (vrt - tl.sum(R * krt[None, :], axis=1))
        R += ru[:, None] * krt[None, :]
        yp = tl.sum(W * qt[None, :], axis=1) + tl.sum(R * s[None, :], axis=1)
        tl.store(y + base * DV + rows, yp.to(y.dtype.element_ty))
        tl.store(uw + base * DV + rows, u)
        tl.store(ur + base * DV + rows, ru)
    tl.store(wT + pid.to(tl.int64) * DV * DK + wtile, W)
    tl.store(rT + pid.to(tl.int64) * DV * DV + rtile, R)


@triton.jit
def _delta_rnn_bwd_kernel(
    q, k, v, beta, kr, vr, beta_r, done, seg, w0, r0, y0, y, wT, rT, uw, ur, dy, dwT, drT,
    dq, dk, dv, dbeta, dkr, dvr, dbeta_r, dw0, dr0, dy0,
    T, H, DK: tl.constexpr, DV: tl.constexpr, HAS_DWT: tl.constexpr, HAS_DRT: tl.constexpr,
):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    rows = tl.arange(0, DV)
    ck = tl.arange(0, DK)
    cv = tl.arange(0, DV)
    wtile = rows[:, None] * DK + ck[None, :]
    rtile = rows[:, None] * DV + cv[None, :]
    wb = pid.to(tl.int64) * DV * DK
    rbs = pid.to(tl.int64) * DV * DV
    W = tl.load(wT + wb + wtile)
    R = tl.load(rT + rbs + rtile)
    if HAS_DWT:
        GW = tl.load(dwT + wb + wtile).to(tl.float32)
    else:
        GW = tl.zeros([DV, DK], dtype=tl.float32)
    if HAS_DRT:
        GR = tl.load(drT + rbs + rtile).to(tl.float32)
    else:
        GR = tl.zeros([DV, DV], dtype=tl.float32)
    gy = tl.zeros([DV], dtype=tl.float32)
    for i in range(T):
        t = T - 1 - i
        base = ((b * T + t) * H + h).to(tl.int64)
        dt = tl.load(done + b * T + t)
        keep = 1.0 - dt.to(tl.float32)
        kt = tl.load(k + base * DK + ck).to(tl.float32)
        qt = tl.load(q + base * DK + ck).to(tl.float32)
        vt = tl.load(v + base * DV + rows).to(tl.float32)
        bt = tl.load(beta + base).to(tl.float32)
        krt = tl.load(kr + base * DV + cv).to(tl.float32)
        vrt = tl.load(vr + base * DV + rows).to(tl.float32)
        brt = tl.load(beta_r + base).to(tl.float32)
        u = tl.load(uw + base * DV + rows)
        ru = tl.load(ur + base * DV + rows)
        if t > 0:
            yprev = tl.load(y + (base - H) * DV + cv).to(tl.float32)
        else:
            yprev = tl.load(y0 + pid.to(tl.int64) * DV + cv).to(tl.float32)
        s = _softmax(yprev * keep)
        dyt = tl.load(dy + base * DV + rows).to(tl.float32) + gy
        GW += dyt[:, None] * qt[None, :]
        GR += dyt[:, None] * s[None, :]
        tl.store(dq + base * DK + ck, tl.sum(W * dyt[:, None], axis=0).to(dq.dtype.element_ty))
        ds = tl.sum(R * dyt[:, None], axis=0)
        gy = s * (ds - tl.sum(ds * s, axis=0)) * keep
        W, GW, dkt, dvt, dbt = _delta_bwd(W, GW, kt, vt, bt, u)
        R, GR, dkrt, dvrt, dbrt = _delta_bwd(R, GR, krt, vrt, brt, ru)
        tl.store(dk + base * DK + ck, dkt.to(dk.dtype.element_ty))
        tl.store(dv + base * DV + rows, dvt.to(dv.dtype.element_ty))
        tl.store(dbeta + base, dbt.to(dbeta.dtype.element_ty))
        tl.store(dkr + base * DV + cv, dkrt.to(dkr.dtype.element_ty))
        tl.store(dvr + base * DV + rows, dvrt.to(dvr.dtype.element_ty))
        tl.store(dbeta_r + base, dbrt.to(dbeta_r.dtype.element_ty))
        if dt != 0:
            GW = GW * 0.0
            GR = GR * 0.0
            W = _state_before_reset(w0 + wb + wtile, True, uw, k, done, seg, b, h, t, T, H, DV, DK, rows, ck)
            R = _state_before_reset(r0 + rbs + rtile, True, ur, kr, done, seg, b, h, t, T, H, DV, DV, rows, cv)
    tl.store(dw0 + wb + wtile, GW)
    tl.store(dr0 + rbs + rtile, GR)
    tl.store(dy0 + pid.to(tl.int64) * DV + rows, gy)


class FusedDeltaRNN(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, beta, kr, vr, beta_r, done, W0, R0, y0):
        B, T, H, DK = q.shape
        DV = v.shape[-1]
        dev = q.device
        f32 = dict(device=dev, dtype=torch.float32)
        y = torch.empty(B, T, H, DV, device=dev, dtype=q.dtype)
        wT = torch.empty(B, H, DV, DK, **f32)
        rT = torch.empty(B, H, DV, DV, **f32)
        uw, ur = torch.empty(B, T, H, DV, **f32), torch.empty(B, T, H, DV, **f32)
        done8 = done.to(torch.int8).contiguous()
        _delta_rnn_fwd_kernel[(B * H,)](
            q, k, v, beta, kr, vr, beta_r, done8, W0, R0, y0, y, wT, rT, uw, ur,
            T, H, DK=DK, DV=DV, num_warps=pick_warps(DV * DK + DV * DV),
        )
        ctx.save_for_backward(q, k, v, beta, kr, vr, beta_r, done8, W0, R0, y0, y, wT, rT, uw, ur)
        return y, wT.to(W0.dtype), rT.to(R0.dtype), y[:, -1].clone()

    @staticmethod
    def backward(ctx, dy, dwT, drT, dyT):
        q, k, v, beta, kr, vr, beta_r, done8, W0, R0, y0, y, wT, rT, uw, ur = ctx.saved_tensors
        B, T, H, DK = q.shape
        DV = v.shape[-1]
        f32 = dict(device=q.device, dtype=torch.float32)
        dy = torch.zeros(B, T, H, DV, **f32) if dy is None else dy.float().clone()
        if dyT is not None:
            dy[:, -1] += dyT.float()
        has_dwT, has_drT = dwT is not None, drT is not None
        dwT = dwT.float().contiguous() if has_dwT else wT
        drT = drT.float().contiguous() if has_drT else rT
        grads = [torch.empty_like(x) for x in (q, k, v, beta, kr, vr, beta_r)]
        dw0, dr0 = torch.empty(B, H, DV, DK, **f32), torch.empty(B, H, DV, DV, **f32)
        dy0 = torch.empty(B, H, DV, **f32)
        _delta_rnn_bwd_kernel[(B * H,)](
            q, k, v, beta, kr, vr, beta_r, done8, seg_start(done8.bool()), W0, R0, y0, y, wT, rT, uw, ur,
            dy, dwT, drT, *grads, dw0, dr0, dy0,
            T, H, DK=DK, DV=DV, HAS_DWT=has_dwT, HAS_DRT=has_drT,
            num_warps=pick_warps(2 * (DV * DK + DV * DV)),
        )
        return (*grads, None, dw0.to(W0.dtype), dr0.to(R0.dtype), dy0.to(y0.dtype))


# ------------------------------------------------------------------------------ entry points
def _prep(done, B, T, dev):
    if done is None:
        return torch.zeros(B, T, dtype=torch.bool, device=dev)
    if tuple(done.shape) != (B, T):
        raise ValueError(f"done must be [B,T]={[B, T]}, got {list(done.shape)}")
    return done


def _expect(name, x, shape):
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {list(shape)}, got {list(x.shape)}")
    check_dtype(name, x)
    return x.contiguous()


def fused_recurrent_rec_delta(aq, ak, av, ab, Rq, Rk, Rv, rb, done=None, W0=None, y0=None):
    """Recurrent Delta Net over a batch-major sequence (see fastnet.recurrent.rec_delta_step).

    aq, ak, av: [B,T,H,d]; ab: [B,T,H]; Rq, Rk, Rv: [H,d,d]; rb: [H,d]; done: [B,T] bool;
    W0: [B,H,d,d]; y0: [B,H,d] (zeros if None). Returns (y [B,T,H,d], W_T, y_T).
    Differentiable in every tensor argument except done.
    """
    if aq.dim() != 4:
        raise ValueError(f"aq must be [B,T,H,d], got {list(aq.shape)}")
    B, T, H, D = aq.shape
    check_head_size("d", D)
    aq = _expect("aq", aq, (B, T, H, D))
    ak, av = _expect("ak", ak, (B, T, H, D)), _expect("av", av, (B, T, H, D))
    ab = _expect("ab", ab, (B, T, H))
    Rq, Rk, Rv = (_expect(n, x, (H, D, D)) for n, x in (("Rq", Rq), ("Rk", Rk), ("Rv", Rv)))
    rb = _expect("rb", rb, (H, D))
    W0 = aq.new_zeros(B, H, D, D) if W0 is None else _expect("W0", W0, (B, H, D, D))
    y0 = aq.new_zeros(B, H, D) if y0 is None else _expect("y0", y0, (B, H, D))
    done = _prep(done, B, T, aq.device)
    check_device(aq, ak, av, ab, Rq, Rk, Rv, rb, done, W0, y0)
    return FusedRecDelta.apply(aq, ak, av, ab, Rq, Rk, Rv, rb, done, W0, y0)


def fused_recurrent_delta_rnn(q, k, v, beta, kr, vr, beta_r, done=None, W0=None, R0=None, y0=None):
    """Delta RNN (Version B) over a batch-major sequence (see fastnet.recurrent.delta_rnn_step).

    q, k: [B,T,H,dk] (softmax-ed); v, kr, vr: [B,T,H,dv] (kr softmax-ed); beta, beta_r: [B,T,H];
    done: [B,T] bool; W0: [B,H,dv,dk]; R0: [B,H,dv,dv]; y0: [B,H,dv] (zeros if None).
    Returns (y [B,T,H,dv], W_T, R_T, y_T). Differentiable in every tensor argument except done.
    """
    if q.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, v must be [B,T,H,d], got {list(q.shape)}, {list(v.shape)}")
    B, T, H, DK = q.shape
    DV = v.shape[-1]
    check_head_size("dk", DK)
    check_head_size("dv", DV)
    q, k = _expect("q", q, (B, T, H, DK)), _expect("k", k, (B, T, H, DK))
    v, kr, vr = (_expect(n, x, (B, T, H, DV)) for n, x in (("v", v), ("kr", kr), ("vr", vr)))
    beta, beta_r = _expect("beta", beta, (B, T, H)), _expect("beta_r", beta_r, (B, T, H))
    W0 = q.new_zeros(B, H, DV, DK) if W0 is None else _expect("W0", W0, (B, H, DV, DK))
    R0 = q.new_zeros(B, H, DV, DV) if R0 is None else _expect("R0", R0, (B, H, DV, DV))
    y0 = q.new_zeros(B, H, DV) if y0 is None else _expect("y0", y0, (B, H, DV))
    done = _prep(done, B, T, q.device)
    check_device(q, k, v, beta, kr, vr, beta_r, done, W0, R0, y0)
    return FusedDeltaRNN.apply(q, k, v, beta, kr, vr, beta_r, done, W0, R0, y0)


def compile_specs(d, KernelSpec, sig):
    x = "*fp32"
    lab = f"d={d} fp32"
    return [
        KernelSpec(
            "rec_delta_fwd", _rec_delta_fwd_kernel,
            sig(f"aq:{x},ak:{x},av:{x},ab:{x},Rq:{x},Rk:{x},Rv:{x},rb:{x},done:*i8,w0:{x},y0:{x},"
                "y:*fp32,wT:*fp32,qs:*fp32,ks:*fp32,vs:*fp32,bs:*fp32,us:*fp32,T:i32,H:i32,D:constexpr"),
            dict(D=d), pick_warps(4 * d * d), lab,
        ),
        KernelSpec(
            "rec_delta_bwd", _rec_delta_bwd_kernel,
            sig(f"Rq:{x},Rk:{x},Rv:{x},rb:{x},done:*i8,seg:*i32,w0:{x},y0:{x},y:{x},wT:*fp32,qs:*fp32,ks:*fp32,"
                "vs:*fp32,bs:*fp32,us:*fp32,dy:*fp32,dwT:*fp32,daq:*fp32,dak:*fp32,dav:*fp32,dab:*fp32,"
                "dw0:*fp32,dy0:*fp32,T:i32,H:i32,D:constexpr,HAS_DWT:constexpr"),
            dict(D=d, HAS_DWT=True), pick_warps(5 * d * d), lab,
        ),
        KernelSpec(
            "delta_rnn_fwd", _delta_rnn_fwd_kernel,
            sig(f"q:{x},k:{x},v:{x},beta:{x},kr:{x},vr:{x},beta_r:{x},done:*i8,w0:{x},r0:{x},y0:{x},"
                "y:*fp32,wT:*fp32,rT:*fp32,uw:*fp32,ur:*fp32,T:i32,H:i32,DK:constexpr,DV:constexpr"),
            dict(DK=d, DV=d), pick_warps(2 * d * d), lab,
        ),
        KernelSpec(
            "delta_rnn_bwd", _delta_rnn_bwd_kernel,
            sig(f"q:{x},k:{x},v:{x},beta:{x},kr:{x},vr:{x},beta_r:{x},done:*i8,seg:*i32,w0:{x},r0:{x},y0:{x},"
                f"y:{x},wT:*fp32,rT:*fp32,uw:*fp32,ur:*fp32,dy:*fp32,dwT:*fp32,drT:*fp32,"
                f"dq:{x},dk:{x},dv:{x},dbeta:{x},dkr:{x},dvr:{x},dbeta_r:{x},dw0:*fp32,dr0:*fp32,dy0:*fp32,"
                "T:i32,H:i32,DK:constexpr,DV:constexpr,HAS_DWT:constexpr,HAS_DRT:constexpr"),
            dict(DK=d, DV=d, HAS_DWT=True, HAS_DRT=True), pick_warps(4 * d * d), lab,
        ),
    ]
