"""The start-up self-check of ``kernels=auto`` (see :mod:`fastnet.kernels.dispatch`).

:data:`CASES` maps each op that a sequence function dispatches on to a function of the device
that runs that op's Triton kernels and their PyTorch references on a tiny fp32 input (d = 16, a
reset inside the sequence) and returns (kernel tensors, reference tensors): the outputs and the
gradients of every input under a fixed random cotangent.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor

from fastnet import kernels
from fastnet.kernels.fast_weight.naive import FastWeightSequence, householder_sequence
from fastnet.kernels.recurrent_cores.naive import delta_rnn_reference, rec_delta_reference
from fastnet.kernels.srwm.naive import srwm_reference, srwm_rows

B, T, H, D = 1, 5, 1, 16
Pair = tuple[list[Tensor], list[Tensor]]


def _tm(x: Tensor) -> Tensor:
    return x.transpose(0, 1)


def _compare(kernel: Callable[..., Sequence[Tensor]], reference: Callable[..., Sequence[Tensor]],
             inputs: list[Tensor], device: torch.device) -> Pair:
    """Outputs and input gradients of ``kernel`` (fp32 on ``device``) and ``reference`` (fp64 on the CPU)."""
    result = []
    for fn, dtype, dev in ((kernel, torch.float32, device), (reference, torch.float64, torch.device("cpu"))):
        gen = torch.Generator().manual_seed(1)
        leaves = [x.to(dev, dtype).requires_grad_(True) for x in inputs]
        outs = list(fn(*leaves))
        loss = sum((o.double().cpu() * torch.randn(o.shape, generator=gen, dtype=torch.float64)).sum() for o in outs)
        result.append(outs + list(torch.autograd.grad(loss, leaves)))
    return result[0], result[1]


def _random(*shape: int, gen: torch.Generator, kind: str = "normal") -> Tensor:
    x = torch.randn(*shape, generator=gen)
    return {"normal": x, "key": torch.nn.functional.normalize(x, dim=-1), "rate": torch.sigmoid(x),
            "decay": -torch.nn.functional.softplus(x)}[kind]


def _done(steps: int, device: torch.device) -> Tensor:
    done = torch.zeros(B, steps, dtype=torch.bool)
    done[0, steps // 2] = True
    return done.to(device)


def fused_recurrent_case(device: torch.device) -> Pair:
    """The fused recurrent kernel under all four rules (sum, delta, gated, gated_delta)."""
    gen = torch.Generator().manual_seed(0)
    done = _done(T, device)
    inputs = [_random(B, T, H, D, gen=gen, kind="key"), _random(B, T, H, D, gen=gen, kind="key"),
              _random(B, T, H, D, gen=gen), _random(B, T, H, gen=gen, kind="rate"),
              _random(B, H, D, D, gen=gen), _random(B, T, H, gen=gen, kind="decay")]
    got: list[Tensor] = []
    want: list[Tensor] = []
    for rule in ("sum", "delta", "gated", "gated_delta"):
        gated = rule == "gated_delta"

        def kernel(q, k, v, beta, W0, *g, rule=rule):
            return kernels.fused_recurrent_fast_weight(q, k, v, beta, W0, done, rule, g=g[0] if g else None)

        def reference(q, k, v, beta, W0, *g, rule=rule):
            d = _tm(done).cpu()
            if g:
                y, W = householder_sequence(_tm(q), _tm(k).unsqueeze(3), _tm(v).unsqueeze(3),
                                            _tm(beta).unsqueeze(-1), _tm(g[0]), d, W0)
            else:
                y, W = FastWeightSequence.apply(rule, _tm(q), _tm(k), _tm(v), _tm(beta), d, W0,
                                                torch.ones_like(_tm(beta)))
            return _tm(y), W

        a, b = _compare(kernel, reference, inputs[:5] + inputs[5:] * gated, device)
        got += a
        want += b
    return got, want


def chunk_case(device: torch.device) -> Pair:
    """The chunked kernels, delta and gated delta: 2 chunks of 16 with a reset inside the first."""
    gen = torch.Generator().manual_seed(0)
    steps = 32
    done = _done(steps, device)
    inputs = [_random(B, steps, H, D, gen=gen, kind="key"), _random(B, steps, H, D, gen=gen, kind="key"),
              _random(B, steps, H, D, gen=gen), _random(B, steps, H, gen=gen, kind="rate"),
              _random(B, H, D, D, gen=gen), _random(B, steps, H, gen=gen, kind="decay")]

    def reference(q, k, v, beta, W0, g):
        y, W = householder_sequence(_tm(q), _tm(k).unsqueeze(3), _tm(v).unsqueeze(3), _tm(beta).unsqueeze(-1),
                                    _tm(g), _tm(done).cpu(), W0)
        return _tm(y), W

    got, want = _compare(lambda *a: kernels.chunk_delta_rule(*a[:4], a[4], done, chunk_size=16, g=a[5]),
                         reference, inputs, device)
    got_delta, want_delta = _compare(lambda *a: kernels.chunk_delta_rule(*a[:4], a[4], done, chunk_size=16),
                                     lambda *a: reference(*a, torch.zeros_like(a[3])), inputs[:5], device)
    return got + got_delta, want + want_delta


def rec_delta_case(device: torch.device) -> Pair:
    gen = torch.Generator().manual_seed(0)
    done = _done(T, device)
    inputs = ([_random(B, T, H, D, gen=gen) for _ in range(3)] + [_random(B, T, H, gen=gen)]
              + [_random(H, D, D, gen=gen) / D ** 0.5 for _ in range(3)] + [_random(H, D, gen=gen) / D ** 0.5]
              + [_random(B, H, D, D, gen=gen) * 0.3, _random(B, H, D, gen=gen)])

    def reference(aq, ak, av, ab, Rq, Rk, Rv, rb, W0, y0):
        y, W, y_last = rec_delta_reference(_tm(aq), _tm(ak), _tm(av), _tm(ab), Rq, Rk, Rv, rb,
                                           _tm(done).cpu(), W0, y0)
        return _tm(y), W, y_last

    return _compare(lambda *a: kernels.fused_recurrent_rec_delta(*a[:8], done, a[8], a[9]), reference,
                    inputs, device)


def delta_rnn_case(device: torch.device) -> Pair:
    gen = torch.Generator().manual_seed(0)
    done = _done(T, device)
    seq = [("key", 4), ("key", 4), ("normal", 4), ("rate", 3), ("key", 4), ("normal", 4), ("rate", 3)]
    inputs = [_random(*(B, T, H, D)[:n], gen=gen, kind=kind) for kind, n in seq]
    inputs += [_random(B, H, D, D, gen=gen) * 0.3, _random(B, H, D, D, gen=gen) * 0.3, _random(B, H, D, gen=gen)]

    def reference(*a):
        y, W, R, y_last = delta_rnn_reference(*[_tm(x) for x in a[:7]], _tm(done).cpu(), *a[7:])
        return _tm(y), W, R, y_last

    return _compare(lambda *a: kernels.fused_recurrent_delta_rnn(*a[:7], done, *a[7:]), reference, inputs, device)


def srwm_case(device: torch.device) -> Pair:
    gen = torch.Generator().manual_seed(0)
    done = _done(T, device)
    inputs = [_random(B, T, H, D, gen=gen), _random(H, srwm_rows(D), D, gen=gen) / D ** 0.5,
              _random(B, H, srwm_rows(D), D, gen=gen) * 0.1]

    def reference(x, W0, D0):
        y, D_T = srwm_reference(_tm(x), W0, _tm(done).cpu(), D0)
        return _tm(y), D_T

    return _compare(lambda x, W0, D0: kernels.fused_recurrent_srwm(x, W0, done, D0), reference, inputs, device)


CASES: dict[str, Callable[[torch.device], Pair]] = {
    "fused_recurrent": fused_recurrent_case,
    "chunk": chunk_case,
    "rec_delta": rec_delta_case,
    "delta_rnn": delta_rnn_case,
    "srwm": srwm_case,
}
