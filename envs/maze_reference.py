"""Plain-Python single maze: the independent reference for tests and ``bench.py maze``."""
from __future__ import annotations

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


class PyMaze:
    """One maze in plain Python without numpy, written from the rules in the ``envs.maze``
    docstring (Miconi et al. 2018; ``rules="miconi2018"`` follows ``maze/maze.py`` of
    uber-research/differentiable-plasticity at 66cdef7, lines 296-381).

    The baseline of ``bench.py maze`` and the tests' independent reference. It follows
    the random-stream protocol in the ``envs.maze`` docstring, so ``PyMaze(seed=s, index=i)``
    replays env i of ``envs.make("maze", N, seed=s)``; ``step`` auto-resets the same way and
    returns ``(obs, reward, done, episode_return, episode_length)``.
    """

    def __init__(self, size: int = 9, episode_length: int = 250, seed: int = 0, index: int = 0,
                 rules: str = "default") -> None:
        self.size, self.episode_length, self.miconi = size, episode_length, rules == "miconi2018"
        self.centre = (size // 2, size // 2)
        self.wall = [[r in (0, size - 1) or c in (0, size - 1) or (r % 2 == 0 and c % 2 == 0)
                      for c in range(size)] for r in range(size)]
        self.wall[self.centre[0]][self.centre[1]] = False
        self.free = [(r, c) for r in range(size) for c in range(size) if not self.wall[r][c]]
        self.state = _mix((_mix(seed) + _GOLDEN * (index + 1)) & _MASK)
        self.reset()

    def _free_cell_except(self, cell: tuple[int, int] | None) -> tuple[int, int]:
        """A uniformly random free cell other than ``cell`` (any free cell if ``cell`` is None)."""
        cells = [f for f in self.free if f != cell]
        self.state = (self.state + _GOLDEN) & _MASK
        return cells[((_mix(self.state) >> 32) * len(cells)) >> 32]

    def reset(self) -> list[float]:
        self.agent = self.centre
        self.goal = self._free_cell_except(None if self.miconi else self.centre)
        self.t, self.ret, self.last_reward = 0, 0.0, 0.0
        return self.observation()

    def observation(self) -> list[float]:
        r, c = self.agent
        window = [1.0 if self.wall[r + dr][c + dc] else 0.0 for dr in (-1, 0, 1) for dc in (-1, 0, 1)]
        if self.miconi:
            return window + [self.last_reward, float(self.t), 1.0]
        return window + [self.t / self.episode_length]

    def step(self, action: int) -> tuple[list[float], float, bool, float, int]:
        dr, dc = ((-1, 0), (1, 0), (0, -1), (0, 1))[action]
        target = (self.agent[0] + dr, self.agent[1] + dc)
        reward = 0.0
        if self.wall[target[0]][target[1]]:
            reward = -0.1
        else:
            self.agent = target
        if self.agent == self.goal:
            reward += 10.0
            self.agent = self._free_cell_except(None if self.miconi else self.goal)
        self.t += 1
        self.ret += reward
        self.last_reward = reward
        episode_return, episode_length = self.ret, self.t
        done = self.t == self.episode_length
        obs = self.reset() if done else self.observation()
        return obs, reward, done, episode_return, episode_length
