"""Fused recurrent Triton kernel for the self-referential weight matrix, forward and backward.

Irie, Schlag, Csordás & Schmidhuber (2022), Eqs. 5-8 (see ``pytorch.py`` beside this file). One
program owns one (b, h) matrix W [3d+4, d], held in registers in fp32 as four tiles: the y, k and q
rows ([d, d] each) and the β rows ([4, d]), so there are no padding rows; grid (B*H,). The state
passed in and out is D = W - W0; a reset loads W0.

Row vectors (indexed by a tile's rows: W x, v - v̄, u) and column vectors (indexed by the d columns:
x, φ(k), φ(q)) live in different index spaces; k and q move from the k and q tiles' rows to columns
(and their gradients back) through a small per-program scratch buffer in memory, which keeps
[rows, d] index tiles out of the registers.

Forward saves per step the row vectors u_t (the write's value factor) and v_t - v̄_t, φ(k_t), φ(q_t)
and the four rates σ(β_t). Backward walks back in time and undoes each write, W_{t-1} = W_t - u_t ⊗ φ(k_t),
in two passes: the y rows first (their gradient needs nothing from the other rows), then the k, q and β
rows, coupled through the softmaxes, with the y rows' per-step parts from the first pass;
at a reset it rebuilds the pre-reset state by replaying the segment's writes (as in
``fast_weight/fused_recurrent.py``). Extra memory: O(B·T·H·d) vectors.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fastnet.kernels._common import SRWM_HEAD_SIZES, check_device, check_dtype, check_head_size, seg_start
from fastnet.kernels.fast_weight.fused_recurrent import _state_before_reset
from fastnet.kernels.recurrent_cores.fused_recurrent import _softmax, pick_warps
from fastnet.kernels.srwm.pytorch import srwm_rows


@triton.jit
def _offsets(D: tl.constexpr):
    """Row indices of the y, k, q (d each) and β (4) rows, the columns, and the four [rows, d] tiles."""
    r = tl.arange(0, D)
    cols = tl.arange(0, D)
    ry, rk, rq, rb = r, D + r, 2 * D + r, 3 * D + tl.arange(0, 4)
    return (ry, rk, rq, rb, cols, ry[:, None] * D + cols[None, :], rk[:, None] * D + cols[None, :],
            rq[:, None] * D + cols[None, :], rb[:, None] * D + cols[None, :])


@triton.jit
def _program(w0, H, D: tl.constexpr):
    """This program's (b, h), its head's W0 and the offset of its [3d+4, d] matrices in per-(b, h) buffers."""
    pid = tl.program_id(0)
    return pid, pid // H, pid % H, w0 + (pid % H) * (3 * D + 4) * D, pid.to(tl.int64) * (3 * D + 4) * D


@triton.jit
def _pick(v, i):
    """Element i of a 4-vector, as a scalar."""
    return tl.sum(tl.where(tl.arange(0, 4) == i, v, 0.0), axis=0)


@triton.jit
def _srwm_fwd_kernel(x, w0, d0, done, y, dT, us, diffs, ks, qs, sg, obuf, T, H, D: tl.constexpr):
    pid, b, h, w, sbase = _program(w0, H, D)
    R: tl.constexpr = 3 * D + 4
    ry, rk, rq, rb, cols, ty, tk, tq, tb = _offsets(D)
    sb = d0 + sbase
    Wy = tl.load(w + ty) + tl.load(sb + ty).to(tl.float32)
    Wk = tl.load(w + tk) + tl.load(sb + tk).to(tl.float32)
    Wq = tl.load(w + tq) + tl.load(sb + tq).to(tl.float32)
    Wb = tl.load(w + tb) + tl.load(sb + tb).to(tl.float32)
    ob = obuf + pid.to(tl.int64) * 2 * D
    for t in range(T):
        base = ((b * T + t) * H + h).to(tl.int64)
        if tl.load(done + b * T + t) != 0:
            Wy, Wk, Wq, Wb = tl.load(w + ty), tl.load(w + tk), tl.load(w + tq), tl.load(w + tb)
        xt = tl.load(x + base * D + cols).to(tl.float32)[None, :]
        tl.store(y + base * D + ry, tl.sum(Wy * xt, axis=1).to(y.dtype.element_ty))  # Eq. 5
        # through memory: k and q move from row to column space
        tl.store(ob + ry, tl.sum(Wk * xt, axis=1))
        tl.store(ob + D + ry, tl.sum(Wq * xt, axis=1))
        rate = tl.sigmoid(tl.sum(Wb * xt, axis=1))
        tl.debug_barrier()
        pk = _softmax(tl.load(ob + cols))
        pq = _softmax(tl.load(ob + D + cols))
        tl.debug_barrier()
        tl.store(sg + base * 4 + tl.arange(0, 4), rate)
        c = (pq - pk)[None, :]  # v - v̄ = W (φ(q) - φ(k)), Eqs. 6-7; u = σ(β) (v - v̄), Eq. 8
        dy_, dk_ = tl.sum(Wy * c, axis=1), tl.sum(Wk * c, axis=1)
        dq_, db_ = tl.sum(Wq * c, axis=1), tl.sum(Wb * c, axis=1)
        uy, uk, uq, ub = _pick(rate, 0) * dy_, _pick(rate, 1) * dk_, _pick(rate, 2) * dq_, _pick(rate, 3) * db_
        tl.store(diffs + base * R + ry, dy_)
        tl.store(diffs + base * R + rk, dk_)
        tl.store(diffs + base * R + rq, dq_)
        tl.store(diffs + base * R + rb, db_)
        tl.store(us + base * R + ry, uy)
        tl.store(us + base * R + rk, uk)
        tl.store(us + base * R + rq, uq)
        tl.store(us + base * R + rb, ub)
        tl.store(ks + base * D + cols, pk)
        tl.store(qs + base * D + cols, pq)
        Wy += uy[:, None] * pk[None, :]
        Wk += uk[:, None] * pk[None, :]
        Wq += uq[:, None] * pk[None, :]
        Wb += ub[:, None] * pk[None, :]
    out = dT + sbase
    tl.store(out + ty, Wy - tl.load(w + ty))
    tl.store(out + tk, Wk - tl.load(w + tk))
    tl.store(out + tq, Wq - tl.load(w + tq))
    tl.store(out + tb, Wb - tl.load(w + tb))


@triton.jit
def _tile_bwd(W, G, u, diff, rate, pk, pq):
    """Back through one row group's W_t = W + (rate diff) ⊗ φ(k), diff = W (φ(q) - φ(k)), after the undo
    (W is W_{t-1}): returns dL/d(rate) (summed over the rows), d diff times rate, and the group's parts of
    dφ(k) (from the outer product) and dφ(q) (from diff)."""
    du = tl.sum(G * pk[None, :], axis=1)
    ddiff = du * rate
    return tl.sum(du * diff, axis=0), ddiff, tl.sum(G * u[:, None], axis=0), tl.sum(W * ddiff[:, None], axis=0)


@triton.jit
def _tile_start(w, dT, ddT, gw, t_off, HAS_DDT: tl.constexpr):
    """A row group's W_T = W0 + D_T and its gradient dL/dW_T (dL/dD_T, or 0); the program's part of dW0
    starts as -dD_T (the output D_T = W_T - W0) and gathers the gradient at each reset and at the start."""
    W = tl.load(w + t_off) + tl.load(dT + t_off)
    if HAS_DDT:
        G = tl.load(ddT + t_off)
    else:
        G = W * 0.0
    tl.store(gw + t_off, -G)
    return W, G


@triton.jit
def _tile_at_reset(w, sd, gw, G, t_off, us, ks, done, seg, b, h, t, T, H, R: tl.constexpr, D: tl.constexpr,
                   rows, cols):
    """At a reset before step t, W_{t-1} was W0: the row group's gradient goes to W0 and none flows further
    back. Returns the state before the reset, rebuilt from the writes since the previous reset (or D0)."""
    tl.store(gw + t_off, tl.load(gw + t_off) + G)
    return tl.load(w + t_off) + _state_before_reset(sd + t_off, True, us, ks, done, seg, b, h, t, T, H, R, D, rows,
                                                    cols)


@triton.jit
def _srwm_bwd_y_kernel(
    x, w0, d0, done, seg, dT, us, diffs, ks, qs, sg, dy, ddT, dw0, dd0, parts,
    T, H, D: tl.constexpr, HAS_DDT: tl.constexpr,
):
    """Backward, pass 1: the y rows. Their gradient needs nothing from the other rows (dy is given), so
    they go first, alone, and leave per step their parts of dφ(k), dφ(q), dx and of the y rate's gradient
    in ``parts`` ([.., 3d+4]: dφ(k), dφ(q), dx, then the rate's gradient). Splitting the rows between two
    passes halves the tiles each program holds, which keeps d = 64 out of local memory."""
    pid, b, h, w, sbase = _program(w0, H, D)
    R: tl.constexpr = 3 * D + 4
    ry, rk, rq, rb, cols, ty, tk, tq, tb = _offsets(D)
    gw = dw0 + sbase
    Wy, Gy = _tile_start(w, dT + sbase, ddT + sbase, gw, ty, HAS_DDT)
    for i in range(T):
        t = T - 1 - i
        base = ((b * T + t) * H + h).to(tl.int64)
        pk = tl.load(ks + base * D + cols)
        pq = tl.load(qs + base * D + cols)
        ry_ = _pick(tl.load(sg + base * 4 + tl.arange(0, 4)), 0)
        fy = tl.load(diffs + base * R + ry)
        uy = ry_ * fy
        Wy -= uy[:, None] * pk[None, :]  # W_{t-1} (after the reset)
        dry, ddy, dpk, dpq = _tile_bwd(Wy, Gy, uy, fy, ry_, pk, pq)
        do_y = tl.load(dy + base * D + ry).to(tl.float32)
        part = parts + base * R
        tl.store(part + cols, dpk - dpq)  # diff = W φ(q) - W φ(k)
        tl.store(part + D + cols, dpq)
        tl.store(part + 2 * D + cols, tl.sum(Wy * do_y[:, None], axis=0))
        tl.store(part + 3 * D + tl.arange(0, 4), tl.where(tl.arange(0, 4) == 0, dry, 0.0))
        xt = tl.load(x + base * D + cols).to(tl.float32)
        Gy += ddy[:, None] * (pq - pk)[None, :] + do_y[:, None] * xt[None, :]
        if tl.load(done + b * T + t) != 0:
            Wy = _tile_at_reset(w, d0 + sbase, gw, Gy, ty, us, ks, done, seg, b, h, t, T, H, R, D, ry, cols)
            Gy = Gy * 0.0
    tl.store(dd0 + sbase + ty, Gy)
    tl.store(gw + ty, tl.load(gw + ty) + Gy)


@triton.jit
def _srwm_bwd_kernel(
    x, w0, d0, done, seg, dT, us, diffs, ks, qs, sg, ddT, dx, dw0, dd0, dbuf, parts,
    T, H, D: tl.constexpr, HAS_DDT: tl.constexpr,
):
    """Backward, pass 2: the k, q and β rows, which are coupled through the softmaxes of k and q; the y
    rows' parts come from pass 1."""
    pid, b, h, w, sbase = _program(w0, H, D)
    R: tl.constexpr = 3 * D + 4
    ry, rk, rq, rb, cols, ty, tk, tq, tb = _offsets(D)
    gw = dw0 + sbase
    Wk, Gk = _tile_start(w, dT + sbase, ddT + sbase, gw, tk, HAS_DDT)
    Wq, Gq = _tile_start(w, dT + sbase, ddT + sbase, gw, tq, HAS_DDT)
    Wb, Gb = _tile_start(w, dT + sbase, ddT + sbase, gw, tb, HAS_DDT)
    db = dbuf + pid.to(tl.int64) * 2 * D
    for i in range(T):
        t = T - 1 - i
        base = ((b * T + t) * H + h).to(tl.int64)
        pk = tl.load(ks + base * D + cols)
        pq = tl.load(qs + base * D + cols)
        rate = tl.load(sg + base * 4 + tl.arange(0, 4))
        rk_, rq_, rb_ = _pick(rate, 1), _pick(rate, 2), _pick(rate, 3)
        fk, fq, fb = tl.load(diffs + base * R + rk), tl.load(diffs + base * R + rq), tl.load(diffs + base * R + rb)
        uk, uq, ub = rk_ * fk, rq_ * fq, rb_ * fb
        Wk -= uk[:, None] * pk[None, :]  # W_{t-1} (after the reset)
        Wq -= uq[:, None] * pk[None, :]
        Wb -= ub[:, None] * pk[None, :]
        part = parts + base * R
        dpk, dpq = tl.load(part + cols), tl.load(part + D + cols)
        drk, ddk, dpk_, dpq_ = _tile_bwd(Wk, Gk, uk, fk, rk_, pk, pq)
        dpk += dpk_ - dpq_  # diff = W φ(q) - W φ(k)
        dpq += dpq_
        drq, ddq, dpk_, dpq_ = _tile_bwd(Wq, Gq, uq, fq, rq_, pk, pq)
        dpk += dpk_ - dpq_
        dpq += dpq_
        drb, ddb, dpk_, dpq_ = _tile_bwd(Wb, Gb, ub, fb, rb_, pk, pq)
        dpk += dpk_ - dpq_
        dpq += dpq_
        # do = dL/d(W x) per row group: the softmax backward of dφ(k), dφ(q) (through memory, from
        # column to row space); σ'(β) times each rate's gradient on the β rows
        tl.store(db + cols, pk * (dpk - tl.sum(pk * dpk, axis=0)))
        tl.store(db + D + cols, pq * (dpq - tl.sum(pq * dpq, axis=0)))
        tl.debug_barrier()
        do_k = tl.load(db + ry)
        do_q = tl.load(db + D + ry)
        tl.debug_barrier()
        drate = tl.load(part + 3 * D + tl.arange(0, 4))  # the y rate's, from pass 1
        drate = tl.where(tl.arange(0, 4) == 1, drk, tl.where(tl.arange(0, 4) == 2, drq,
                                                             tl.where(tl.arange(0, 4) == 3, drb, drate)))
        do_b = drate * rate * (1.0 - rate)
        xt = tl.load(x + base * D + cols).to(tl.float32)
        dxt = (tl.load(part + 2 * D + cols) + tl.sum(Wk * do_k[:, None], axis=0)
               + tl.sum(Wq * do_q[:, None], axis=0) + tl.sum(Wb * do_b[:, None], axis=0))
        tl.store(dx + base * D + cols, dxt.to(dx.dtype.element_ty))
        c = (pq - pk)[None, :]
        Gk += ddk[:, None] * c + do_k[:, None] * xt[None, :]
        Gq += ddq[:, None] * c + do_q[:, None] * xt[None, :]
        Gb += ddb[:, None] * c + do_b[:, None] * xt[None, :]
        if tl.load(done + b * T + t) != 0:
            sd = d0 + sbase
            Wk = _tile_at_reset(w, sd, gw, Gk, tk, us, ks, done, seg, b, h, t, T, H, R, D, rk, cols)
            Wq = _tile_at_reset(w, sd, gw, Gq, tq, us, ks, done, seg, b, h, t, T, H, R, D, rq, cols)
            Wb = _tile_at_reset(w, sd, gw, Gb, tb, us, ks, done, seg, b, h, t, T, H, R, D, rb, cols)
            Gk, Gq, Gb = Gk * 0.0, Gq * 0.0, Gb * 0.0
    out = dd0 + sbase
    tl.store(out + tk, Gk)
    tl.store(out + tq, Gq)
    tl.store(out + tb, Gb)
    tl.store(gw + tk, tl.load(gw + tk) + Gk)
    tl.store(gw + tq, tl.load(gw + tq) + Gq)
    tl.store(gw + tb, tl.load(gw + tb) + Gb)


# Warps of the two backward passes per head size, (y rows, k/q/β rows), read off cuda/compile_check.py:
# the first setting with no spills on sm_80 and sm_90, fp32 and bf16. At d = 64 the second pass holds
# 2 (2d + 4) d fp32 values and needs 8 warps of up to 255 registers (16 warps cap a thread at 128 and spill);
# at d = 16, 4 warps leave one stray spill that 2 do not.
BWD_WARPS = {16: (2, 2), 32: (4, 4), 64: (4, 8)}


class FusedSRWM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, W0, done, D0):
        B, T, H, D = x.shape
        R = srwm_rows(D)
        f32 = dict(device=x.device, dtype=torch.float32)
        w0, d0 = W0.float().contiguous(), D0.contiguous()
        done8 = done.to(torch.int8).contiguous()
        y = torch.empty(B, T, H, D, device=x.device, dtype=x.dtype)
        dT = torch.empty(B, H, R, D, **f32)
        us, diffs = torch.empty(B, T, H, R, **f32), torch.empty(B, T, H, R, **f32)
        ks, qs, sg = torch.empty(B, T, H, D, **f32), torch.empty(B, T, H, D, **f32), torch.empty(B, T, H, 4, **f32)
        obuf = torch.empty(B * H, 2 * D, **f32)
        _srwm_fwd_kernel[(B * H,)](x, w0, d0, done8, y, dT, us, diffs, ks, qs, sg, obuf, T, H, D=D,
                                   num_warps=pick_warps(R * D))
        ctx.save_for_backward(x, w0, d0, done8, dT, us, diffs, ks, qs, sg)
        ctx.dtypes = (W0.dtype, D0.dtype)
        return y, dT.to(D0.dtype)

    @staticmethod
    def backward(ctx, dy, ddT):
        x, w0, d0, done8, dT, us, diffs, ks, qs, sg = ctx.saved_tensors
        B, T, H, D = x.shape
        f32 = dict(device=x.device, dtype=torch.float32)
        dy = torch.zeros_like(x) if dy is None else dy.contiguous()
        has_ddT = ddT is not None
        ddT = ddT.float().contiguous() if has_ddT else dT
        dx = torch.empty_like(x)
        dw0, dd0 = torch.empty_like(dT), torch.empty_like(dT)
        dbuf = torch.empty(B * H, 2 * D, **f32)
        parts = torch.empty(B, T, H, srwm_rows(D), **f32)
        seg = seg_start(done8.bool())
        _srwm_bwd_y_kernel[(B * H,)](x, w0, d0, done8, seg, dT, us, diffs, ks, qs, sg, dy, ddT, dw0, dd0, parts,
                                     T, H, D=D, HAS_DDT=has_ddT, num_warps=BWD_WARPS[D][0])
        _srwm_bwd_kernel[(B * H,)](x, w0, d0, done8, seg, dT, us, diffs, ks, qs, sg, ddT, dx, dw0, dd0, dbuf, parts,
                                   T, H, D=D, HAS_DDT=has_ddT, num_warps=BWD_WARPS[D][1])
        w0_dtype, d0_dtype = ctx.dtypes
        return dx, dw0.sum(0).to(w0_dtype), None, dd0.to(d0_dtype)


def fused_recurrent_srwm(x: torch.Tensor, W0: torch.Tensor, done: torch.Tensor | None = None,
                         D0: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The self-referential weight matrix over a batch-major sequence (see ``pytorch.srwm_reference``).

    Args:
        x: [B,T,H,d] (d in 16, 32, 64: see ``SRWM_HEAD_SIZES``), fp32 or bf16;
        W0: [H,3d+4,d], the learned initial matrix;
        done: [B,T] bool or None; where set, W resets to W0 before that step;
        D0: [B,H,3d+4,d], the carried state W - W0 (zeros if None).
    Returns:
        y [B,T,H,d] (dtype of x) and D_T [B,H,3d+4,d] (dtype of D0, or of x). Differentiable in x, W0, D0.
    """
    if x.dim() != 4:
        raise ValueError(f"x must be [B,T,H,d], got {list(x.shape)}")
    B, T, H, D = x.shape
    check_head_size("d", D, SRWM_HEAD_SIZES)
    R = srwm_rows(D)
    for name, t, shape in (("x", x, (B, T, H, D)), ("W0", W0, (H, R, D)), ("D0", D0, (B, H, R, D))):
        if t is None:
            continue
        check_dtype(name, t)
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {list(shape)}, got {list(t.shape)}")
    D0 = x.new_zeros(B, H, R, D) if D0 is None else D0
    done = torch.zeros(B, T, dtype=torch.bool, device=x.device) if done is None else done
    if tuple(done.shape) != (B, T):
        raise ValueError(f"done must be [B,T]={[B, T]}, got {list(done.shape)}")
    check_device(x, W0, D0, done)
    return FusedSRWM.apply(x.contiguous(), W0, done, D0)


def compile_specs(d, KernelSpec, sig, dtype="fp32"):
    """The forward and backward kernels at head size d (none outside SRWM_HEAD_SIZES)."""
    if d not in SRWM_HEAD_SIZES:
        return []
    x = f"*{dtype}"
    lab = f"d={d} rows={srwm_rows(d)} {dtype}"
    return [
        KernelSpec("srwm_fwd", _srwm_fwd_kernel,
                   sig(f"x:{x},w0:*fp32,d0:{x},done:*i8,y:{x},dT:*fp32,us:*fp32,diffs:*fp32,ks:*fp32,qs:*fp32,"
                       "sg:*fp32,obuf:*fp32,T:i32,H:i32,D:constexpr"),
                   dict(D=d), pick_warps(srwm_rows(d) * d), lab),
        KernelSpec("srwm_bwd_y", _srwm_bwd_y_kernel,
                   sig(f"x:{x},w0:*fp32,d0:{x},done:*i8,seg:*i32,dT:*fp32,us:*fp32,diffs:*fp32,ks:*fp32,qs:*fp32,"
                       f"sg:*fp32,dy:{x},ddT:*fp32,dw0:*fp32,dd0:*fp32,parts:*fp32,T:i32,H:i32,D:constexpr,"
                       "HAS_DDT:constexpr"),
                   dict(D=d, HAS_DDT=True), BWD_WARPS[d][0], lab),
        KernelSpec("srwm_bwd", _srwm_bwd_kernel,
                   sig(f"x:{x},w0:*fp32,d0:{x},done:*i8,seg:*i32,dT:*fp32,us:*fp32,diffs:*fp32,ks:*fp32,qs:*fp32,"
                       f"sg:*fp32,ddT:*fp32,dx:{x},dw0:*fp32,dd0:*fp32,dbuf:*fp32,parts:*fp32,T:i32,H:i32,"
                       "D:constexpr,HAS_DDT:constexpr"),
                   dict(D=d, HAS_DDT=True), BWD_WARPS[d][1], lab),
    ]
