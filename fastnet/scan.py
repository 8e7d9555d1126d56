"""The diagonal linear recurrence h_t = a_t ⊙ h_{t-1} + u_t over a sequence, as a chunked scan.

This is the recurrence of the LRU (Orvieto et al. 2023, Eq. 7 with a diagonal Λ) and of S5; an
episode reset is a_t = 0 (nothing of h_{t-1} passes). :func:`linear_scan` splits T steps into
about √T chunks of about √T steps: one loop over the positions within a chunk runs every chunk
at once (each chunk's states from zero, and the products of its a's), one loop over the chunks
carries the state from chunk to chunk, and one tensor op adds each carried state, decayed, to
its chunk. That is about 2√T small loops instead of T (16 for T = 64), with O(T) work.

The backward pass is the same recurrence run backwards in time (δ_t = g_t + a*_{t+1} ⊙ δ_{t+1},
the conjugate for complex a), so it is a second chunked scan, without autograd's graph of the
forward loops. :func:`linear_scan_reference` is the step loop they are tested against.

Shapes: a, u [T, ...] of one shape and dtype (real or complex), h0 [...]; the result is h
[T, ...] (h_t for every step; the last is the state to carry on).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor


def _chunked_scan(a: Tensor, u: Tensor, h0: Tensor) -> Tensor:
    """The recurrence from ``h0``, without autograd (see the module docstring)."""
    T, shape = u.shape[0], u.shape[1:]
    size = math.isqrt(T - 1) + 1  # ⌈√T⌉
    chunks = -(-T // size)
    pad = chunks * size - T  # the padding steps come after the last and change nothing before them
    if pad:
        a, u = torch.cat([a, a.new_ones(pad, *shape)]), torch.cat([u, u.new_zeros(pad, *shape)])
    a, h = a.reshape(chunks, size, *shape), u.reshape(chunks, size, *shape).clone()
    decays = a.clone()  # decays[c, j]: the product of a over chunk c's steps 0..j
    for j in range(1, size):
        h[:, j] += a[:, j] * h[:, j - 1]
        decays[:, j] *= decays[:, j - 1]
    starts, carry = [], h0
    for c in range(chunks):
        starts.append(carry)
        carry = decays[c, -1] * carry + h[c, -1]
    h += decays * torch.stack(starts).unsqueeze(1)
    return h.view(chunks * size, *shape)[:T]


class _LinearScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a: Tensor, u: Tensor, h0: Tensor) -> Tensor:
        h = _chunked_scan(a, u, h0)
        ctx.save_for_backward(a, h, h0)
        return h

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        a, h, h0 = ctx.saved_tensors
        # δ_t = g_t + a*_{t+1} δ_{t+1}: the forward scan over reversed time, from δ_T = 0
        next_a = torch.cat([a[1:].conj(), a.new_zeros(1, *a.shape[1:])])
        delta = _chunked_scan(next_a.flip(0), grad_h.flip(0), torch.zeros_like(h0)).flip(0)
        previous_h = torch.cat([h0.unsqueeze(0), h[:-1]])
        return delta * previous_h.conj(), delta, delta[0] * a[0].conj()


def linear_scan(a: Tensor, u: Tensor, h0: Tensor) -> Tensor:
    """h_t = a_t ⊙ h_{t-1} + u_t for t = 0..T-1 from h_{-1} = ``h0``, by the chunked scan."""
    if a.shape != u.shape or a.dtype != u.dtype or h0.shape != u.shape[1:]:
        raise ValueError(f"a and u must share one shape and dtype, h0 their step's shape; got a {tuple(a.shape)} "
                         f"{a.dtype}, u {tuple(u.shape)} {u.dtype}, h0 {tuple(h0.shape)}")
    return _LinearScan.apply(a, u, h0.to(u.dtype))


def linear_scan_reference(a: Tensor, u: Tensor, h0: Tensor) -> Tensor:
    """The same recurrence as a step loop."""
    h, out = h0, []
    for a_t, u_t in zip(a.unbind(0), u.unbind(0)):
        h = a_t * h + u_t
        out.append(h)
    return torch.stack(out)
