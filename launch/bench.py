"""Benchmarks that print ratios measured side by side in one run.

    python launch/bench.py cores     # forward+backward time and peak memory per core, as ratios to lstm
    python launch/bench.py maze      # env-steps/s of the batched Numba maze vs plain Python, N = 1 .. 16384
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---------------------------------------------------------------- maze

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


class PyMaze:
    """One maze in plain Python, written from ENVS.md (Miconi et al. 2018) without numpy.

    The baseline of ``bench.py maze`` and the tests' independent reference. It follows
    the random-stream protocol in the ``envs.maze`` docstring, so ``PyMaze(seed=s, index=i)``
    replays env i of ``envs.make("maze", N, seed=s)``; ``step`` auto-resets the same way and
    returns ``(obs, reward, done, episode_return, episode_length)``.
    """

    def __init__(self, size: int = 9, episode_length: int = 250, seed: int = 0, index: int = 0) -> None:
        self.size, self.episode_length = size, episode_length
        self.centre = (size // 2, size // 2)
        self.wall = [[r in (0, size - 1) or c in (0, size - 1) or (r % 2 == 0 and c % 2 == 0)
                      for c in range(size)] for r in range(size)]
        self.wall[self.centre[0]][self.centre[1]] = False
        self.free = [(r, c) for r in range(size) for c in range(size) if not self.wall[r][c]]
        self.state = _mix((_mix(seed) + _GOLDEN * (index + 1)) & _MASK)
        self.reset()

    def _free_cell_except(self, cell: tuple[int, int]) -> tuple[int, int]:
        self.state = (self.state + _GOLDEN) & _MASK
        k = ((_mix(self.state) >> 32) * (len(self.free) - 1)) >> 32
        return [f for f in self.free if f != cell][k]

    def reset(self) -> list[float]:
        self.agent, self.goal = self.centre, self._free_cell_except(self.centre)
        self.t, self.ret = 0, 0.0
        return self.observation()

    def observation(self) -> list[float]:
        r, c = self.agent
        window = [1.0 if self.wall[r + dr][c + dc] else 0.0 for dr in (-1, 0, 1) for dc in (-1, 0, 1)]
        return window + [self.t / self.episode_length]

    def step(self, action: int) -> tuple[list[float], float, bool, float, int]:
        dr, dc = ((-1, 0), (1, 0), (0, -1), (0, 1))[action]
        target = (self.agent[0] + dr, self.agent[1] + dc)
        if self.wall[target[0]][target[1]]:
            reward = -0.1
        elif target == self.goal:
            reward = 10.0
            self.agent = self._free_cell_except(self.goal)
        else:
            reward = 0.0
            self.agent = target
        self.t += 1
        self.ret += reward
        episode_return, episode_length = self.ret, self.t
        done = self.t == self.episode_length
        obs = self.reset() if done else self.observation()
        return obs, reward, done, episode_return, episode_length


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("maze", help="env-steps/s of the batched maze vs plain Python")
    p.add_argument("--num-envs", type=int, nargs="+", default=[1, 64, 1024, 16384])
    p.add_argument("--size", type=int, default=9)
    p.add_argument("--episode-length", type=int, default=250)
    p.add_argument("--steps", type=int, default=4_000_000, help="env-steps per timing of the batched env")
    p.add_argument("--py-steps", type=int, default=100_000, help="env-steps per timing of the Python env")
    p.set_defaults(run=bench_maze)
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
