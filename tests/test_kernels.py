"""Triton kernels vs the PyTorch references (CPU, Triton interpreter when there is no GPU).

Run: TRITON_INTERPRET=1 python -m pytest tests/test_kernels.py -x -q
"""
from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")

from fastnet import kernels  # noqa: E402
from fastnet.rules import fast_weight_sequence  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
TOL = 1e-5


def rel(a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    assert torch.isfinite(a).all()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def make_done(B, T, gen):
    """Resets inside the sequence, at different times per batch element (never all-false)."""
    done = torch.zeros(B, T, dtype=torch.bool)
    for b in range(B):
        ts = torch.randperm(T - 1, generator=gen)[: 1 + b % 2] + 1
        done[b, ts] = True
    done[B - 1, 0] = True  # a reset at t=0 too: W0 gets no gradient there
    return done


def leafs(*xs):
    return [x.detach().clone().to(DEV).requires_grad_(True) for x in xs]


def check_grads(outs_k, outs_r, ins_k, ins_r, names, gen, tol=TOL):
    cot = [torch.randn(o.shape, generator=gen, dtype=torch.float64) for o in outs_r]
    lk = sum((o.double().cpu() * c).sum() for o, c in zip(outs_k, cot))
    lr = sum((o.double() * c).sum() for o, c in zip(outs_r, cot))
    gk = torch.autograd.grad(lk, ins_k, allow_unused=True)
    gr = torch.autograd.grad(lr, ins_r, allow_unused=True)
    for n, a, b in zip(names, gk, gr):
        if b is None:
            assert a is None or a.abs().max() == 0, n
            continue
        assert a is not None, f"no gradient for {n}"
        e = rel(a, b)
        assert e < tol, f"grad {n}: rel err {e:.2e}"


# ----------------------------------------------------------------------------- sum/delta/gated
@pytest.mark.parametrize("rule", ["sum", "delta", "gated"])
@pytest.mark.parametrize("dk,dv,T,bv", [(16, 16, 7, None), (32, 16, 9, None), (32, 32, 6, 16)])
def test_fused_recurrent_matches_reference(rule, dk, dv, T, bv):
    gen = torch.Generator().manual_seed(hash((rule, dk, dv, T)) % 2**31)
    B, H = 2, 2
    q = torch.randn(B, T, H, dk, generator=gen).softmax(-1)
    k = torch.randn(B, T, H, dk, generator=gen).softmax(-1)
    v = torch.randn(B, T, H, dv, generator=gen)
    beta = torch.rand(B, T, H, generator=gen)
    W0 = torch.randn(B, H, dv, dk, generator=gen) * 0.5
    done = make_done(B, T, gen)
    ins_k = leafs(q, k, v, beta, W0)
    ins_r = [x.detach().double().clone().requires_grad_(True) for x in (q, k, v, beta, W0)]
    kw = {} if bv is None else {"block_v": bv}
    y, WT = kernels.fused_recurrent_fast_weight(*ins_k[:4], ins_k[4], done.to(DEV), rule, **kw)
    qr, kr, vr, br, W0r = ins_r
    yr, WTr = fast_weight_sequence(
        rule, qr.transpose(0, 1), kr.transpose(0, 1), vr.transpose(0, 1), br.transpose(0, 1), done.t(), W0r
    )
    yr = yr.transpose(0, 1)
    assert y.shape == yr.shape and WT.shape == WTr.shape
    assert rel(y, yr) < TOL and rel(WT, WTr) < TOL
    check_grads([y, WT], [yr, WTr], ins_k, ins_r, ["q", "k", "v", "beta", "W0"], gen)
