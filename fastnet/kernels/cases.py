"""Each Triton kernel paired with its PyTorch reference on generated inputs: the start-up self-check
of ``kernels=auto`` (see :mod:`fastnet.kernels.dispatch`) and ``cuda/smoke.py`` use them.

:data:`CASES` maps each op that a sequence function dispatches on ("fused_recurrent", "chunk",
"rec_delta", "delta_rnn", "srwm") to its variants, each an :class:`OpCase`: a kernel call and a
reference call on the same batch-major inputs, and a maker of those inputs at any size.
:func:`check` compares the outputs and the gradients of every input under a fixed random cotangent,
the kernel in fp32 on the device and the reference in fp64 on the CPU, on a tiny input (d = 16, a
reset in the middle of the sequence).
"""
from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor

import fastnet.kernels.ops as ops  # not ``from fastnet.kernels import ops``: the package imports dispatch, then us
from fastnet.kernels.fast_weight.pytorch import FastWeightSequence, householder_sequence
from fastnet.kernels.recurrent_cores.pytorch import delta_rnn_reference, rec_delta_reference
from fastnet.kernels.srwm.pytorch import srwm_reference, srwm_rows

SELF_CHECK_TOL = 1e-3  # relative error in fp32 on a tiny input; a broken kernel is off by O(1)


@dataclass
class OpCase:
    """kernel(*inputs, done) and reference(*inputs, done) with batch-major inputs and done [B,T]."""

    kernel: Callable[..., Sequence[Tensor]]
    reference: Callable[..., Sequence[Tensor]]
    inputs: Callable[[int, int, int, int, torch.Generator], list[Tensor]]  # (B, T, H, d, generator)
    steps: int = 5  # sequence length of the self-check


def _tm(x: Tensor) -> Tensor:
    return x.transpose(0, 1)


def _rand(gen: torch.Generator, *shape: int, kind: str = "normal") -> Tensor:
    x = torch.randn(*shape, generator=gen)
    return {"normal": x, "key": torch.nn.functional.normalize(x, dim=-1), "rate": torch.sigmoid(x),
            "decay": -torch.nn.functional.softplus(x), "small": 0.3 * x}[kind]


def _fast_weight_inputs(gated: bool) -> Callable[[int, int, int, int, torch.Generator], list[Tensor]]:
    """q, k (L2-normalised), v, beta, W0, and for gated delta the log-decay g."""
    def make(B: int, T: int, H: int, d: int, gen: torch.Generator) -> list[Tensor]:
        xs = [_rand(gen, B, T, H, d, kind="key"), _rand(gen, B, T, H, d, kind="key"), _rand(gen, B, T, H, d),
              _rand(gen, B, T, H, kind="rate"), _rand(gen, B, H, d, d, kind="small")]
        return xs + [_rand(gen, B, T, H, kind="decay")] if gated else xs
    return make


def _householder(q, k, v, beta, W0, g, done):
    y, W = householder_sequence(_tm(q), _tm(k).unsqueeze(3), _tm(v).unsqueeze(3), _tm(beta).unsqueeze(-1),
                                None if g is None else _tm(g), _tm(done).to(q.device), W0)
    return _tm(y), W


def _fast_weight_reference(rule: str) -> Callable[..., Sequence[Tensor]]:
    def reference(q, k, v, beta, W0, *rest):
        *g, done = rest
        if rule == "gated_delta":
            return _householder(q, k, v, beta, W0, g[0], done)
        y, W = FastWeightSequence.apply(rule, _tm(q), _tm(k), _tm(v), _tm(beta), _tm(done).to(q.device), W0,
                                        torch.ones_like(_tm(beta)))
        return _tm(y), W
    return reference


def _fused(rule: str) -> OpCase:
    def kernel(q, k, v, beta, W0, *rest):
        *g, done = rest
        return ops.fused_recurrent_fast_weight(q, k, v, beta, W0, done, rule, g=g[0] if g else None)
    return OpCase(kernel, _fast_weight_reference(rule), _fast_weight_inputs(rule == "gated_delta"))


def _chunk(gated: bool) -> OpCase:
    def kernel(q, k, v, beta, W0, *rest):
        *g, done = rest
        return ops.chunk_delta_rule(q, k, v, beta, W0, done, chunk_size=16, g=g[0] if g else None)
    return OpCase(kernel, _fast_weight_reference("gated_delta" if gated else "delta"), _fast_weight_inputs(gated),
                  steps=32)


def _rec_delta_inputs(B: int, T: int, H: int, d: int, gen: torch.Generator) -> list[Tensor]:
    """aq, ak, av, ab, Rq, Rk, Rv, rb, W0, y0."""
    return ([_rand(gen, B, T, H, d) for _ in range(3)] + [_rand(gen, B, T, H)]
            + [_rand(gen, H, d, d) / d ** 0.5 for _ in range(3)] + [_rand(gen, H, d) / d ** 0.5]
            + [_rand(gen, B, H, d, d, kind="small"), _rand(gen, B, H, d)])


def _rec_delta_reference(aq, ak, av, ab, Rq, Rk, Rv, rb, W0, y0, done):
    y, W, y_last = rec_delta_reference(_tm(aq), _tm(ak), _tm(av), _tm(ab), Rq, Rk, Rv, rb,
                                       _tm(done).to(aq.device), W0, y0)
    return _tm(y), W, y_last


def _delta_rnn_inputs(B: int, T: int, H: int, d: int, gen: torch.Generator) -> list[Tensor]:
    """q, k, v, beta, kr, vr, beta_r, W0, R0, y0."""
    kinds = ["key", "key", "normal", "rate", "key", "normal", "rate"]
    return ([_rand(gen, *((B, T, H) if kind == "rate" else (B, T, H, d)), kind=kind) for kind in kinds]
            + [_rand(gen, B, H, d, d, kind="small"), _rand(gen, B, H, d, d, kind="small"), _rand(gen, B, H, d)])


def _delta_rnn_reference(*args):
    *xs, done = args
    y, W, R, y_last = delta_rnn_reference(*[_tm(x) for x in xs[:7]], _tm(done).to(xs[0].device), *xs[7:])
    return _tm(y), W, R, y_last


def _srwm_inputs(B: int, T: int, H: int, d: int, gen: torch.Generator) -> list[Tensor]:
    """x, W0, D0."""
    return [_rand(gen, B, T, H, d), _rand(gen, H, srwm_rows(d), d) / d ** 0.5,
            0.1 * _rand(gen, B, H, srwm_rows(d), d)]


def _srwm_reference(x, W0, D0, done):
    y, D = srwm_reference(_tm(x), W0, _tm(done).to(x.device), D0)
    return _tm(y), D


CASES: dict[str, dict[str, OpCase]] = {
    "fused_recurrent": {rule: _fused(rule) for rule in ("sum", "delta", "gated", "gated_delta")},
    "chunk": {"delta": _chunk(False), "gated_delta": _chunk(True)},
    "rec_delta": {"rec_delta": OpCase(lambda *a: ops.fused_recurrent_rec_delta(*a[:8], a[10], a[8], a[9]),
                                      _rec_delta_reference, _rec_delta_inputs)},
    "delta_rnn": {"delta_rnn": OpCase(lambda *a: ops.fused_recurrent_delta_rnn(*a[:7], a[10], *a[7:10]),
                                      _delta_rnn_reference, _delta_rnn_inputs)},
    "srwm": {"srwm": OpCase(lambda x, W0, D0, done: ops.fused_recurrent_srwm(x, W0, done, D0),
                            _srwm_reference, _srwm_inputs)},
}


def reset_in_the_middle(B: int, T: int) -> Tensor:
    done = torch.zeros(B, T, dtype=torch.bool)
    done[:, T // 2] = True
    return done


def outputs_and_grads(fn: Callable[..., Sequence[Tensor]], inputs: list[Tensor], done: Tensor,
                      seed: int = 1) -> list[Tensor]:
    """fn's outputs, then the gradients of ``inputs`` (leaves made here) under a seeded random cotangent."""
    gen = torch.Generator().manual_seed(seed)
    leaves = [x.detach().clone().requires_grad_(True) for x in inputs]
    outs = list(fn(*leaves, done))
    loss = sum((o.double().cpu() * torch.randn(o.shape, generator=gen, dtype=torch.float64)).sum() for o in outs)
    return outs + list(torch.autograd.grad(loss, leaves))


def relative_errors(got: Sequence[Tensor], want: Sequence[Tensor]) -> list[float]:
    return [((a.detach().double().cpu() - b.detach().double().cpu()).norm()
             / b.detach().double().cpu().norm().clamp_min(1e-12)).item() for a, b in zip(got, want)]


def check(op: str, device: torch.device) -> str | None:
    """Run every variant of ``op`` on a tiny input: None if all match the reference, else the reason."""
    for variant, case in CASES[op].items():
        try:
            inputs = case.inputs(1, case.steps, 1, 16, torch.Generator().manual_seed(0))
            done = reset_in_the_middle(1, case.steps)
            got = outputs_and_grads(case.kernel, [x.to(device) for x in inputs], done.to(device))
        except Exception as e:  # noqa: BLE001 -- any failure (compile error, launch error) means: use the reference
            first_line = str(e).strip().splitlines()[0] if str(e).strip() else ""
            if not first_line:  # a bare ``assert``: name where it failed instead
                frame = traceback.extract_tb(e.__traceback__)[-1]
                first_line = f"at {os.path.basename(frame.filename)}:{frame.lineno} ({frame.line})"
            return f"{variant}: {type(e).__name__}: {first_line}"
        want = outputs_and_grads(case.reference, [x.double() for x in inputs], done)
        for i, err in enumerate(relative_errors(got, want)):
            if not err < SELF_CHECK_TOL:  # also catches NaN
                return f"{variant}: mismatch against the reference (tensor {i}: relative error {err:.2e})"
    return None
