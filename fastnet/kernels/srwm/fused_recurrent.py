"""Fused recurrent Triton kernel for the self-referential weight matrix, forward and backward.

Irie, Schlag, Csordás & Schmidhuber (2022), Eqs. 5-8 (see ``naive.py`` beside this file). One
program owns one (b, h) matrix W [3d+4, d], held in registers in fp32 with its rows padded to a
power of two RP (the padding rows are zero and stay zero): grid (B*H,). The state passed in and out
is D = W - W0; a reset loads W0.

Row vectors (indexed by the RP rows: o, v - v̄, u) and column vectors (indexed by the d columns: x,
φ(k), φ(q)) live in different index spaces; k and q move from rows d..2d-1 and 2d..3d-1 of o to
columns (and their gradients back) through a small per-program scratch buffer in memory, which
keeps [RP, d] index tiles out of the registers.

Forward saves per step the row vectors u_t (the write's value factor) and v_t - v̄_t, φ(k_t), φ(q_t)
and the four rates σ(β_t). Backward walks back in time and undoes each write, W_{t-1} = W_t - u_t ⊗ φ(k_t);
at a reset it rebuilds the pre-reset state by replaying the segment's writes (as in
``fast_weight/fused_recurrent.py``). Extra memory: O(B·T·H·d) vectors.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fastnet.kernels._common import check_device, check_dtype, check_head_size, seg_start
from fastnet.kernels.fast_weight.fused_recurrent import _state_before_reset
from fastnet.kernels.recurrent_cores.fused_recurrent import _softmax, pick_warps
from fastnet.kernels.srwm.naive import NUM_RATES, srwm_rows


@triton.jit
def _program(H, D: tl.constexpr, RP: tl.constexpr):
    """Program id = b*H + h, b, h, the RP row and D column indices, the [RP, D] tile, its state base."""
    pid = tl.program_id(0)
    rows = tl.arange(0, RP)
    cols = tl.arange(0, D)
    return pid, pid // H, pid % H, rows, cols, rows[:, None] * D + cols[None, :], pid.to(tl.int64) * RP * D


@triton.jit
def _rates(sg, base, rows, D: tl.constexpr):
    """The learning rate of each row, σ(β_i) for row group i = min(row // D, 3), from the saved σ(β) [4]."""
    group = tl.minimum(rows // D, 3)
    rate = tl.zeros([rows.shape[0]], dtype=tl.float32)
    for i in tl.static_range(4):
        rate = tl.where(group == i, tl.load(sg + base * 4 + i), rate)
    return rate, group


@triton.jit
def _srwm_fwd_kernel(x, w0, d0, done, y, dT, us, diffs, ks, qs, sg, obuf, T, H, D: tl.constexpr, RP: tl.constexpr):
    pid, b, h, rows, cols, tile, sbase = _program(H, D, RP)
    W0 = w0 + h * RP * D + tile
    W = tl.load(W0) + tl.load(d0 + sbase + tile).to(tl.float32)
    ob = obuf + pid.to(tl.int64) * RP
    for t in range(T):
        base = ((b * T + t) * H + h).to(tl.int64)
        if tl.load(done + b * T + t) != 0:
            W = tl.load(W0)
        o = tl.sum(W * tl.load(x + base * D + cols).to(tl.float32)[None, :], axis=1)  # Eq. 5
        tl.store(y + base * D + rows, o.to(y.dtype.element_ty), mask=rows < D)
        tl.store(ob + rows, o)  # through memory: k and q move from o's rows to columns
        tl.debug_barrier()
        pk = _softmax(tl.load(ob + D + cols))
        pq = _softmax(tl.load(ob + 2 * D + cols))
        for i in tl.static_range(4):
            tl.store(sg + base * 4 + i, tl.sigmoid(tl.load(ob + 3 * D + i)))
        tl.debug_barrier()
        rate, group = _rates(sg, base, rows, D)
        diff = tl.sum(W * (pq - pk)[None, :], axis=1)  # v - v̄, Eqs. 6-7
        u = rate * diff  # Eq. 8
        tl.store(us + base * RP + rows, u)
        tl.store(diffs + base * RP + rows, diff)
        tl.store(ks + base * D + cols, pk)
        tl.store(qs + base * D + cols, pq)
        W += u[:, None] * pk[None, :]
    tl.store(dT + sbase + tile, W - tl.load(W0))


@triton.jit
def _srwm_bwd_kernel(
    x, w0, d0, done, seg, dT, us, diffs, ks, qs, sg, dy, ddT, dx, dw0, dd0, dbuf,
    T, H, D: tl.constexpr, RP: tl.constexpr, HAS_DDT: tl.constexpr,
):
    pid, b, h, rows, cols, tile, sbase = _program(H, D, RP)
    W0 = w0 + h * RP * D + tile
    W = tl.load(W0) + tl.load(dT + sbase + tile)
    if HAS_DDT:
        G = tl.load(ddT + sbase + tile)
    else:
        G = tl.zeros([RP, D], dtype=tl.float32)
    # this program's part of dW0 (summed over b on the host) accumulates in memory, at each reset and at
    # the start, from -dD_T (the output D_T = W_T - W0): a third register tile would spill at d = 64
    tl.store(dw0 + sbase + tile, -G)
    db = dbuf + pid.to(tl.int64) * 2 * D
    for i in range(T):
        t = T - 1 - i
        base = ((b * T + t) * H + h).to(tl.int64)
        pk = tl.load(ks + base * D + cols)
        pq = tl.load(qs + base * D + cols)
        u = tl.load(us + base * RP + rows)
        diff = tl.load(diffs + base * RP + rows)
        rate, group = _rates(sg, base, rows, D)
        W = W - u[:, None] * pk[None, :]  # W_{t-1} (after the reset)
        # back through W_t = W + (rate (W φ(q) - W φ(k))) ⊗ φ(k)
        du = tl.sum(G * pk[None, :], axis=1)
        dpk = tl.sum(G * u[:, None], axis=0)
        ddiff = du * rate
        dpq = tl.sum(W * ddiff[:, None], axis=0)
        dpk -= dpq
        drate = du * diff
        # do = dL/d(W x): dy on the y rows, the softmax backward of dφ(k), dφ(q) on the k, q rows
        # (through memory, from columns to rows) and σ'(β) times the rate gradient on the β rows
        tl.store(db + cols, pk * (dpk - tl.sum(pk * dpk, axis=0)))
        tl.store(db + D + cols, pq * (dpq - tl.sum(pq * dpq, axis=0)))
        tl.debug_barrier()
        kq = (rows >= D) & (rows < 3 * D)
        do = tl.load(dy + base * D + rows, mask=rows < D, other=0.0).to(tl.float32)
        do += tl.load(db + tl.where(kq, rows - D, 0), mask=kq, other=0.0)
        tl.debug_barrier()
        for g in tl.static_range(4):
            s = tl.load(sg + base * 4 + g)
            do += tl.where(rows == 3 * D + g, tl.sum(tl.where(group == g, drate, 0.0), axis=0) * s * (1.0 - s), 0.0)
        xt = tl.load(x + base * D + cols).to(tl.float32)
        tl.store(dx + base * D + cols, tl.sum(W * do[:, None], axis=0).to(dx.dtype.element_ty))
        G += ddiff[:, None] * (pq - pk)[None, :] + do[:, None] * xt[None, :]
        if tl.load(done + b * T + t) != 0:
            # W_{t-1} was W0: its gradient goes to W0, none flows further back; rebuild the state
            # before the reset from the writes since the previous reset (or D0)
            tl.store(dw0 + sbase + tile, tl.load(dw0 + sbase + tile) + G)
            G = G * 0.0
            W = tl.load(W0) + _state_before_reset(d0 + sbase + tile, True, us, ks, done, seg, b, h, t, T, H,
                                                  RP, D, rows, cols)
    tl.store(dd0 + sbase + tile, G)
    tl.store(dw0 + sbase + tile, tl.load(dw0 + sbase + tile) + G)


class FusedSRWM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, W0, done, D0):
        B, T, H, D = x.shape
        R, RP = srwm_rows(D), triton.next_power_of_2(srwm_rows(D))
        f32 = dict(device=x.device, dtype=torch.float32)
        w0 = torch.nn.functional.pad(W0.float(), (0, 0, 0, RP - R)).contiguous()
        d0 = torch.nn.functional.pad(D0.float(), (0, 0, 0, RP - R)).contiguous()
        done8 = done.to(torch.int8).contiguous()
        y = torch.empty(B, T, H, D, device=x.device, dtype=x.dtype)
        dT = torch.empty(B, H, RP, D, **f32)
        us, diffs = torch.empty(B, T, H, RP, **f32), torch.empty(B, T, H, RP, **f32)
        ks, qs, sg = torch.empty(B, T, H, D, **f32), torch.empty(B, T, H, D, **f32), torch.empty(B, T, H, 4, **f32)
        obuf = torch.empty(B * H, RP, **f32)
        _srwm_fwd_kernel[(B * H,)](x, w0, d0, done8, y, dT, us, diffs, ks, qs, sg, obuf, T, H, D=D, RP=RP,
                                   num_warps=pick_warps(RP * D))
        ctx.save_for_backward(x, w0, d0, done8, dT, us, diffs, ks, qs, sg)
        ctx.dtypes = (W0.dtype, D0.dtype)
        return y, dT[:, :, :R].to(D0.dtype)

    @staticmethod
    def backward(ctx, dy, ddT):
        x, w0, d0, done8, dT, us, diffs, ks, qs, sg = ctx.saved_tensors
        B, T, H, D = x.shape
        R, RP = srwm_rows(D), w0.shape[1]
        f32 = dict(device=x.device, dtype=torch.float32)
        dy = torch.zeros_like(x) if dy is None else dy.contiguous()
        has_ddT = ddT is not None
        ddT = torch.nn.functional.pad(ddT.float(), (0, 0, 0, RP - R)).contiguous() if has_ddT else dT
        dx = torch.empty_like(x)
        dw0, dd0 = torch.empty(B, H, RP, D, **f32), torch.empty(B, H, RP, D, **f32)
        dbuf = torch.empty(B * H, 2 * D, **f32)
        _srwm_bwd_kernel[(B * H,)](x, w0, d0, done8, seg_start(done8.bool()), dT, us, diffs, ks, qs, sg, dy, ddT,
                                   dx, dw0, dd0, dbuf, T, H, D=D, RP=RP, HAS_DDT=has_ddT,
                                   num_warps=pick_warps(2 * RP * D))
        w0_dtype, d0_dtype = ctx.dtypes
        return dx, dw0[:, :, :R].sum(0).to(w0_dtype), None, dd0[:, :, :R].to(d0_dtype)


def fused_recurrent_srwm(x, W0, done=None, D0=None):
    """The self-referential weight matrix over a batch-major sequence (see ``naive.srwm_reference``).

    Args:
        x: [B,T,H,d] (d in 16, 32, 64, 128), fp32 or bf16; W0: [H,3d+4,d], the learned initial matrix;
        done: [B,T] bool or None; where set, W resets to W0 before that step;
        D0: [B,H,3d+4,d], the carried state W - W0 (zeros if None).
    Returns:
        y [B,T,H,d] (dtype of x) and D_T [B,H,3d+4,d] (dtype of D0, or of x). Differentiable in x, W0, D0.
    """
    if x.dim() != 4:
        raise ValueError(f"x must be [B,T,H,d], got {list(x.shape)}")
    B, T, H, D = x.shape
    check_head_size("d", D)
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
    """The forward and backward kernels at head size d."""
    rp = triton.next_power_of_2(srwm_rows(d))
    x = f"*{dtype}"
    lab = f"d={d} rows={srwm_rows(d)}->{rp} {dtype}"
    return [
        KernelSpec("srwm_fwd", _srwm_fwd_kernel,
                   sig(f"x:{x},w0:*fp32,d0:*fp32,done:*i8,y:{x},dT:*fp32,us:*fp32,diffs:*fp32,ks:*fp32,qs:*fp32,"
                       "sg:*fp32,obuf:*fp32,T:i32,H:i32,D:constexpr,RP:constexpr"),
                   dict(D=d, RP=rp), pick_warps(rp * d), lab),
        KernelSpec("srwm_bwd", _srwm_bwd_kernel,
                   sig(f"x:{x},w0:*fp32,d0:*fp32,done:*i8,seg:*i32,dT:*fp32,us:*fp32,diffs:*fp32,ks:*fp32,qs:*fp32,"
                       f"sg:*fp32,dy:{x},ddT:*fp32,dx:{x},dw0:*fp32,dd0:*fp32,dbuf:*fp32,T:i32,H:i32,D:constexpr,"
                       "RP:constexpr,HAS_DDT:constexpr"),
                   dict(D=d, RP=rp, HAS_DDT=True), pick_warps(2 * rp * d), lab),
    ]
