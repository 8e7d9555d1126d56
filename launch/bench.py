"""Benchmarks that print ratios measured side by side in one run (these machines are noisy).

    python launch/bench.py cores     # forward+backward time and memory per core, as ratios to lstm
    python launch/bench.py maze      # env-steps/s of the batched Numba maze vs plain Python, N = 1 .. 16384
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from envs.maze_reference import PyMaze  # noqa: E402
from fastnet import CORES, make_core  # noqa: E402


def _saved_bytes(fn) -> int:
    """Bytes autograd keeps for the backward pass of ``fn()`` (activation memory)."""
    sizes = []

    def pack(t):
        sizes.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return sum(sizes), out


def bench_cores(args: argparse.Namespace) -> None:
    """Forward+backward time and memory of every core at the RL and the long shape.

    Repetitions are interleaved over the cores (round robin), and each core's median is
    divided by lstm's, so slow drifts of the machine hit every core alike. Memory is what
    autograd saves for backward (on CUDA: peak allocated).
    """
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda was asked for, but torch.cuda.is_available() is False")
    torch.set_num_threads(args.threads)
    names = [n for n in (args.cores or CORES) if not (n.startswith("mnm") and not _importable("fastnet.mnm"))]
    if "lstm" not in names:
        names.insert(0, "lstm")
    for T, B in args.shapes:
        cores, times, mem = {}, {n: [] for n in names}, {}
        for name in names:
            torch.manual_seed(0)
            cores[name] = make_core(name, args.input_size).to(device)
        x = torch.randn(T, B, args.input_size, device=device, requires_grad=True)
        done = torch.zeros(T, B, dtype=torch.bool, device=device)

        def step(name: str) -> None:
            core = cores[name]
            y, state, aux = core(x, core.initial_state(B, device), done)
            (y.square().mean() + sum(aux.values(), torch.zeros((), device=device))).backward()

        for name in names:  # warm-up and memory
            core = cores[name]
            if device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                step(name)
                torch.cuda.synchronize()
                mem[name] = torch.cuda.max_memory_allocated()
            else:
                saved, (y, _, aux) = _saved_bytes(lambda: core(x, core.initial_state(B, device), done))
                mem[name] = saved
                step(name)
        for _ in range(args.reps):
            for name in names:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                step(name)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times[name].append(time.perf_counter() - start)
        med = {n: statistics.median(times[n]) for n in names}
        print(f"\ncores, forward+backward, T={T} B={B} input={args.input_size} device={device} "
              f"threads={args.threads} reps={args.reps}")
        print(f"{'core':<12}{'params':>10}{'ms':>10}{'time/lstm':>11}{'mem MB':>10}{'mem/lstm':>10}")
        for n in names:
            params = sum(p.numel() for p in cores[n].parameters())
            print(f"{n:<12}{params:>10,}{1e3 * med[n]:>10.1f}{med[n] / med['lstm']:>11.2f}"
                  f"{mem[n] / 2**20:>10.1f}{mem[n] / mem['lstm']:>10.2f}")


def _best_rate(step, num_envs: int, calls: int, repeats: int = 3) -> float:
    """Env-steps/s of ``calls`` calls of ``step(j)`` stepping ``num_envs`` envs, best of ``repeats``."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for j in range(calls):
            step(j)
        best = min(best, time.perf_counter() - start)
    return num_envs * calls / best


def bench_maze(args: argparse.Namespace) -> None:
    """Batched Numba maze vs ``PyMaze`` looped over N envs, on one pinned core."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp()  # empty cache: time a real compile
    import numpy as np

    import envs

    start = time.perf_counter()
    env = envs.make("maze", num_envs=1, seed=0)
    env.reset()
    env.step(np.zeros(1, np.int64))
    print(f"numba compile (make + reset + first step, empty cache): {time.perf_counter() - start:.2f} s")
    print(f"{'N':>6} {'numba steps/s':>14} {'python steps/s':>15} {'speedup':>8}")
    rng = np.random.default_rng(0)
    for n in args.num_envs:
        env = envs.make("maze", num_envs=n, seed=0, size=args.size, episode_length=args.episode_length)
        env.reset()
        actions = [rng.integers(0, 4, n) for _ in range(16)]
        fast = _best_rate(lambda j: env.step(actions[j % 16]), n, max(16, min(args.steps // n, 20_000)))
        mazes = [PyMaze(args.size, args.episode_length, seed=0, index=i) for i in range(n)]
        py_actions = [random.Random(i).choices(range(4), k=n) for i in range(16)]

        def py_step(j: int) -> None:
            for maze, a in zip(mazes, py_actions[j % 16]):
                maze.step(a)

        slow = _best_rate(py_step, n, max(1, args.py_steps // n))
        print(f"{n:>6} {fast:>14.3e} {slow:>15.3e} {fast / slow:>8.1f}")


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _shape(text: str) -> tuple[int, int]:
    T, B = text.lower().split("x")
    return int(T), int(B)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    cores = sub.add_parser("cores", help="forward+backward time and memory of every core, ratios to lstm")
    cores.add_argument("--cores", nargs="*", choices=list(CORES), help="subset of cores (default: all)")
    cores.add_argument("--shapes", nargs="*", type=_shape, default=[(50, 32), (1024, 8)],
                       help="TxB shapes (default: 50x32, the RL learner shape, and 1024x8)")
    cores.add_argument("--input_size", type=int, default=128)
    cores.add_argument("--reps", type=int, default=5)
    cores.add_argument("--threads", type=int, default=1, help="torch threads (1 keeps small ops stable)")
    cores.add_argument("--device", default="cpu")
    cores.set_defaults(run=bench_cores)
    maze = sub.add_parser("maze", help="env-steps/s of the batched maze vs plain Python")
    maze.add_argument("--num-envs", type=int, nargs="+", default=[1, 64, 1024, 16384])
    maze.add_argument("--size", type=int, default=9)
    maze.add_argument("--episode-length", type=int, default=250)
    maze.add_argument("--steps", type=int, default=4_000_000, help="env-steps per timing of the batched env")
    maze.add_argument("--py-steps", type=int, default=100_000, help="env-steps per timing of the Python env")
    maze.set_defaults(run=bench_maze)
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
