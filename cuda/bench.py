"""GPU workbench: forward+backward time of each fastnet Triton kernel vs the PyTorch reference
(and flash-linear-attention's fused_recurrent_delta_rule / chunk_delta_rule when `fla` imports).

    python cuda/bench.py [--quick] [--dtype bf16|fp32] [--out results.json]

Prints tokens/s (B*T per second, forward+backward), peak memory and ratios. Needs CUDA.
Timing: triton.testing.do_bench (CUDA events, median of repetitions),
fresh random inputs (never zeros), a correctness check against fp64 before each timing.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

import torch

from fastnet.kernels.benchmark import time_forward_backward


def _inputs(B, T, H, d, dtype, dev, gen):
    q = torch.randn(B, T, H, d, device=dev, generator=gen).softmax(-1).to(dtype)
    k = torch.randn(B, T, H, d, device=dev, generator=gen).softmax(-1).to(dtype)
    v = torch.randn(B, T, H, d, device=dev, generator=gen).to(dtype)
    beta = torch.rand(B, T, H, device=dev, generator=gen).to(dtype)
    return [x.requires_grad_(True) for x in (q, k, v, beta)]


def _done(B, T, dev, gen, p):
    return torch.rand(B, T, device=dev, generator=gen) < p


def _candidates(W0: torch.Tensor, done: torch.Tensor, fla_fused: Any, fla_chunk: Any) -> dict[str, Any]:
    """The timed ops, each ``fn(q, k, v, beta)`` on one shape: our kernels, the PyTorch reference
    (T <= 1024) and fla's kernels when fla imports (without resets, which fla does not take)."""
    from fastnet import kernels
    from fastnet.rules import fast_weight_sequence

    T = done.shape[1]
    cands = {
        "fused_delta": lambda q, k, v, b: kernels.fused_recurrent_fast_weight(q, k, v, b, W0, done, "delta"),
        "fused_sum": lambda q, k, v, b: kernels.fused_recurrent_fast_weight(q, k, v, b, W0, done, "sum"),
        "fused_gated": lambda q, k, v, b: kernels.fused_recurrent_fast_weight(q, k, v, b, W0, done, "gated"),
        "chunk_delta": lambda q, k, v, b: kernels.chunk_delta_rule(q, k, v, b, W0, done),
    }
    if T <= 1024:
        cands["torch_ref_delta"] = lambda q, k, v, b: tuple(
            x.transpose(0, 1) if x.dim() == 4 and x.shape[0] == T else x
            for x in fast_weight_sequence("delta", *(t.transpose(0, 1).float() for t in (q, k, v, b)),
                                          done.t(), W0.float())
        )
    if fla_fused is not None and not done.any():
        # fla expects q, k, v [B,T,H,d], beta [B,T,H]; it L2-normalises nothing by default
        state = W0.transpose(-1, -2).float()
        cands["fla_fused_recurrent"] = lambda q, k, v, b: fla_fused(q, k, v, b, initial_state=state,
                                                                    output_final_state=True)
        cands["fla_chunk"] = lambda q, k, v, b: fla_chunk(q, k, v, b, initial_state=state, output_final_state=True)
    return cands


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("cuda/bench.py: CUDA requested but torch.cuda.is_available() is False (no GPU here)")
    from fastnet.rules import fast_weight_sequence

    try:
        from fla.ops.delta_rule import chunk_delta_rule as fla_chunk
        from fla.ops.delta_rule import fused_recurrent_delta_rule as fla_fused
    except Exception:  # noqa: BLE001
        fla_chunk = fla_fused = None
    dev, dtype = "cuda", dict(bf16=torch.bfloat16, fp32=torch.float32)[a.dtype]
    gen = torch.Generator(device=dev).manual_seed(0)
    shapes = [("rl", 32, 50, 4, 32)] + [(f"long{T}", max(1, 16384 // T), T, 4, d)
                                         for d in (64, 128) for T in (1024, 4096, 16384)]
    if a.quick:
        shapes = shapes[:2]
    rows = []
    for name, B, T, H, d in shapes:
        q, k, v, beta = _inputs(B, T, H, d, dtype, dev, gen)
        done = _done(B, T, dev, gen, 0.01 if name == "rl" else 0.0)
        W0 = torch.zeros(B, H, d, d, device=dev, dtype=dtype).requires_grad_(True)
        cands = _candidates(W0, done, fla_fused, fla_chunk)
        # correctness of the kernels against fp64 reference on this shape (small T only)
        if T <= 1024:
            yr, _ = fast_weight_sequence("delta", *(t.detach().transpose(0, 1).double().cpu() for t in (q, k, v, beta)),
                                         done.t().cpu(), W0.detach().double().cpu())
            for c in ("fused_delta", "chunk_delta"):
                y, _ = cands[c](q, k, v, beta)
                err = ((y.double().cpu() - yr.transpose(0, 1)).norm() / yr.norm()).item()
                print(f"check {name} {c}: rel err {err:.2e}")
        for cname, fn in cands.items():
            try:
                ms, mem = time_forward_backward(fn, [q, k, v, beta])
            except Exception as e:  # noqa: BLE001
                print(f"{name} {cname}: failed: {e}")
                continue
            rows.append(dict(shape=name, B=B, T=T, H=H, d=d, kernel=cname, ms=ms, tok_s=B * T / ms * 1e3, peak_mib=mem))
    print(f"\n{'shape':<10} {'B':>3} {'T':>6} {'d':>4} {'kernel':<22} {'ms':>9} {'Mtok/s':>8} {'peakMiB':>8} "
          f"{'vs ref':>7} {'vs fla':>7}")
    for r in rows:
        same = [x for x in rows if x["shape"] == r["shape"]]
        ref = next((x for x in same if x["kernel"] == "torch_ref_delta"), None)
        peer = "fla_chunk" if r["kernel"].startswith("chunk") else "fla_fused_recurrent"
        fla = next((x for x in same if x["kernel"] == peer), None)
        print(f"{r['shape']:<10} {r['B']:>3} {r['T']:>6} {r['d']:>4} {r['kernel']:<22} {r['ms']:>9.3f} "
              f"{r['tok_s'] / 1e6:>8.2f} {r['peak_mib']:>8.0f} "
              f"{(ref['ms'] / r['ms']) if ref else float('nan'):>7.2f} "
              f"{(fla['ms'] / r['ms']) if fla else float('nan'):>7.2f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
