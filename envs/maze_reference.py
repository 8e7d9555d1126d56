"""Plain-Python single maze: the independent reference for tests and ``bench.py maze``."""
from __future__ import annotations

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
