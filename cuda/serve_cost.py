"""GPU workbench: what one round of the inference server costs on the server's side alone.

The server of ``agents.acting.inference`` is built for Atari (or the maze) with the zero-cost policy
of ``launch/bench.py inference`` (uniform random actions, no network), but its env workers are
never started: the loop's ``_serve`` is called directly on every unit's slot, all in one batch
as if all were ready (or ``--units-per-batch`` at a time, as staggered workers arrive), and each
full batch is handed straight back. What is timed is the serve function's own
host and device work per batch (the unroll rows, the copies to and from ``--device``, the
action handover), without env stepping, pipes or waiting for workers; ``--profile`` adds
cProfile's top functions. Beside ``bench.py inference``'s zero-cost rate it tells whether the
server itself or the round trip to the workers bounds it.

    python cuda/serve_cost.py --device cuda --num-actors 12 --envs-per-actor 4 [--profile]
    python cuda/serve_cost.py --device cuda --splits 2 --units-per-batch 4   # small batches

Runs on the CPU too (``--device cpu``).
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np
import torch

import envs
from agents.acting.inference import InferenceServer
from agents.acting.transport import EnvSetup
from agents.config import options
from launch import atari, maze
from launch.bench import UniformPolicy


def serve_round(server: InferenceServer, units_per_batch: int = 0) -> None:
    """Every unit served once, in batches of ``units_per_batch`` units (0: one batch of all, as
    when every worker is ready at once), then back to the loop's state before it: full batches
    released, the actions' handover drained (no worker reads them)."""
    units = list(range(server.num_units))
    step = units_per_batch or len(units)
    for first in range(0, len(units), step):
        server._serve(units[first:first + step], [])
    while not server.full.empty():
        b, _ = server.full.get()
        server.free_groups.extend((b, g) for g in range(server.groups_per_batch))
    for handover in server.acted:
        while not handover.empty():
            handover.get(0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", choices=["atari", "maze"], default="atari")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--num-actors", type=int, default=12, help="env workers (never started)")
    ap.add_argument("--envs-per-actor", type=int, default=4)
    ap.add_argument("--splits", type=int, default=1, help="actor.server.worker_splits")
    ap.add_argument("--batch-size", type=int, default=0,
                    help="learner.batch_size (0: one worker's envs, so each batch holds one unit; atari.yaml's is 32)")
    ap.add_argument("--units-per-batch", type=int, default=0,
                    help="units served per batch (0: all; fewer: the small batches of staggered workers)")
    ap.add_argument("--rounds", type=int, default=2000, help="timed rounds (each serves every unit once)")
    ap.add_argument("--profile", action="store_true", help="also print cProfile's top functions")
    a = ap.parse_args()
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("cuda/serve_cost.py: --device cuda needs CUDA; use --device cpu")
    torch.set_num_threads(1)
    flags = ["--num_actors", str(a.num_actors), "--actor.envs_per_actor", str(a.envs_per_actor),
             "--actor.server.worker_splits", str(a.splits), "--actor.unroll_length", "20",
             "--learner.batch_size", str(a.batch_size or a.envs_per_actor)]
    cfg = atari.load(flags + ["--game", "Pong"]) if a.env == "atari" else maze.load(flags)
    spec = envs.spec(cfg.env.name, **options(cfg.env))
    obs_dtype = torch.from_numpy(np.zeros(0, spec.observation_dtype)).dtype
    setup = EnvSetup(cfg.env.name, options(cfg.env), list(range(a.num_actors)), spec.observation_shape, obs_dtype)
    device = torch.device(a.device)
    server = InferenceServer(UniformPolicy(spec.action_sizes[0]).to(device), envs=setup, actor=cfg.actor,
                             batch_size=cfg.learner.batch_size, device=device)
    num_envs = a.num_actors * a.envs_per_actor
    with torch.no_grad():
        for _ in range(100):  # warm-up
            serve_round(server, a.units_per_batch)
        start = time.perf_counter()
        for _ in range(a.rounds):
            serve_round(server, a.units_per_batch)
        seconds = (time.perf_counter() - start) / a.rounds
        batch = a.units_per_batch or server.num_units
        print(f"{a.env}, {a.num_actors} x {a.envs_per_actor} envs, {a.splits} split(s), {batch} units per batch, "
              f"zero-cost policy on {device}: {seconds * 1e3:.3f} ms to serve all {num_envs} envs once (at most "
              f"{num_envs / seconds:,.0f} env steps/s from the server alone)")
        if a.profile:
            profiler = cProfile.Profile()
            profiler.runcall(lambda: [serve_round(server, a.units_per_batch) for _ in range(500)])
            pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    server.close()


if __name__ == "__main__":
    main()
