"""Tests of the gridworld maze (Miconi et al. 2018; ``rules="miconi2018"`` against
``maze/maze.py`` of uber-research/differentiable-plasticity at 66cdef7).

References are derived independently of ``envs.maze``: the layout from the drawing below
(``maze.py`` lines 264-269), windows by hand, expected returns by exact dynamic programming
over the maze's Markov chain, and trajectories from the plain-Python ``PyMaze`` in
``envs/maze_reference.py``.
"""
from __future__ import annotations

from collections import deque

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs
from envs.maze import Maze, MazeEnv, MazeVectorEnv
from envs.maze_reference import PyMaze

DRAWING = """\
#########
#.......#
#.#.#.#.#
#.......#
#.#...#.#
#.......#
#.#.#.#.#
#.......#
#########"""
MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))  # up, down, left, right
UP, DOWN, LEFT, RIGHT = range(4)


def wall_map(size: int) -> list[list[bool]]:
    """The layout rules written out: border, pillars at even-even, centre free."""
    w = [[r in (0, size - 1) or c in (0, size - 1) or (r % 2 == 0 and c % 2 == 0) for c in range(size)]
         for r in range(size)]
    w[size // 2][size // 2] = False
    return w


def free_cells(size: int) -> list[tuple[int, int]]:
    w = wall_map(size)
    return [(r, c) for r in range(size) for c in range(size) if not w[r][c]]


def place(env: Maze, i: int, agent: tuple[int, int], goal: tuple[int, int]) -> None:
    env._agent[i] = agent[0] * env.size + agent[1]
    env._goal[i] = goal[0] * env.size + goal[1]


def distances(size: int, goal: tuple[int, int]) -> dict[tuple[int, int], int]:
    """BFS distances to ``goal`` over free cells."""
    w, d, queue = wall_map(size), {goal: 0}, deque([goal])
    while queue:
        x = queue.popleft()
        for dr, dc in MOVES:
            y = (x[0] + dr, x[1] + dc)
            if not w[y[0]][y[1]] and y not in d:
                d[y] = d[x] + 1
                queue.append(y)
    return d


# ---------------------------------------------------------------- layout


def test_layout_matches_drawing() -> None:
    env = envs.make("maze", num_envs=1)
    assert "\n".join("".join("#" if w else "." for w in row) for row in env.walls) == DRAWING
    assert (~env.walls).sum() == 41 == DRAWING.count(".")
    assert not env.walls[4, 4]


@pytest.mark.parametrize("size", [5, 7, 11, 13])
def test_layout_other_sizes(size: int) -> None:
    env = envs.make("maze", num_envs=1, size=size)
    assert env.walls.tolist() == wall_map(size)
    assert not env.walls[size // 2, size // 2]
    pillars = ((size - 3) // 2) ** 2 - ((size // 2) % 2 == 0)
    assert (~env.walls).sum() == (size - 2) ** 2 - pillars


# ---------------------------------------------------------------- interface


def test_interface_shapes_and_fresh_arrays() -> None:
    env = envs.make("maze", num_envs=3, seed=1, size=9, episode_length=250)
    assert (env.num_envs, env.observation_shape, env.num_actions) == (3, (10,), 4)
    assert env.observation_dtype == np.float32
    obs = env.reset()
    assert obs.shape == (3, 10) and obs.dtype == np.float32
    assert (obs == 0).all()  # centre window is all free, t = 0
    assert (env.agent == 4).all() and not (env.goal == 4).all(axis=1).any()
    first = env.step(np.array([UP, DOWN, LEFT]))
    kept = [first[0].copy(), first[1].copy(), first[2].copy(), {k: v.copy() for k, v in first[3].items()}]
    obs, reward, done, info = env.step(np.array([RIGHT, RIGHT, RIGHT], np.int32))
    assert obs.dtype == np.float32 and reward.dtype == np.float32 and done.dtype == bool
    assert info["episode_return"].dtype == np.float32 and info["episode_length"].dtype == np.int32
    np.testing.assert_array_equal(first[0], kept[0])
    np.testing.assert_array_equal(first[1], kept[1])
    np.testing.assert_array_equal(first[3]["episode_length"], kept[3]["episode_length"])
    env.close()


# ---------------------------------------------------------------- hand-worked dynamics


@pytest.mark.parametrize("agent, action, window", [
    ((1, 1), UP, [1, 1, 1, 1, 0, 0, 1, 0, 1]),
    ((1, 7), UP, [1, 1, 1, 0, 0, 1, 1, 0, 1]),
    ((7, 1), DOWN, [1, 0, 1, 1, 0, 0, 1, 1, 1]),
    ((7, 7), DOWN, [1, 0, 1, 0, 0, 1, 1, 1, 1]),
    ((1, 2), DOWN, [1, 1, 1, 0, 0, 0, 0, 1, 0]),  # pillar (2, 2) below
    ((3, 1), LEFT, [1, 0, 1, 1, 0, 0, 1, 0, 1]),
])
def test_wall_bump(agent: tuple[int, int], action: int, window: list[int]) -> None:
    env = envs.make("maze", num_envs=1)
    env.reset()
    place(env, 0, agent, goal=(5, 5))
    obs, reward, done, info = env.step(np.array([action]))
    assert reward[0] == np.float32(-0.1)
    assert tuple(env.agent[0]) == agent
    assert obs[0, :9].tolist() == window
    assert obs[0, 9] == np.float32(1 / 250)
    assert info["episode_return"][0] == np.float32(-0.1) and info["episode_length"][0] == 1


@pytest.mark.parametrize("start, action, end, window", [
    ((4, 4), UP, (3, 4), [0, 1, 0, 0, 0, 0, 0, 0, 0]),
    ((4, 4), LEFT, (4, 3), [0, 0, 0, 1, 0, 0, 0, 0, 0]),
    ((4, 4), RIGHT, (4, 5), [0, 0, 0, 0, 0, 1, 0, 0, 0]),
    ((3, 4), DOWN, (4, 4), [0, 0, 0, 0, 0, 0, 0, 0, 0]),
    ((1, 2), RIGHT, (1, 3), [1, 1, 1, 0, 0, 0, 1, 0, 1]),
])
def test_free_move(start: tuple[int, int], action: int, end: tuple[int, int], window: list[int]) -> None:
    env = envs.make("maze", num_envs=1)
    env.reset()
    place(env, 0, start, goal=(7, 7))
    obs, reward, _, _ = env.step(np.array([action]))
    assert reward[0] == 0 and tuple(env.agent[0]) == end
    assert obs[0, :9].tolist() == window


def test_goal_reward_and_teleport() -> None:
    n, goal = 8000, (3, 5)
    env = envs.make("maze", num_envs=n, seed=3)
    env.reset()
    for i in range(n):
        place(env, i, (3, 4), goal)
    obs, reward, done, info = env.step(np.full(n, RIGHT))
    assert (reward == 10).all() and not done.any() and (info["episode_return"] == 10).all()
    assert (env.goal == goal).all()
    landed = [tuple(p) for p in env.agent]
    allowed = set(free_cells(9)) - {goal}
    assert set(landed) == allowed  # every free cell but the goal, and only those
    counts = np.array([landed.count(c) for c in sorted(allowed)])
    chi2 = ((counts - n / 40) ** 2 / (n / 40)).sum()
    assert chi2 < 80  # chi-square, 39 dof: P(chi2 > 80) < 1e-4 under uniformity
    walls = wall_map(9)
    for i in range(0, n, 97):
        r, c = env.agent[i]
        assert obs[i, :9].tolist() == [walls[r + dr][c + dc] for dr in (-1, 0, 1) for dc in (-1, 0, 1)]


def test_rewards_are_exactly_the_three_values() -> None:
    env = envs.make("maze", num_envs=512, seed=5)
    env.reset()
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(100):
        _, reward, _, _ = env.step(rng.integers(0, 4, 512))
        seen |= set(reward.tolist())
    assert seen == {0.0, float(np.float32(-0.1)), 10.0}


def test_time_feature_and_auto_reset() -> None:
    length, n = 7, 64
    env = envs.make("maze", num_envs=n, seed=11, episode_length=length)
    obs = env.reset()
    assert (obs[:, 9] == 0).all()
    rng = np.random.default_rng(1)
    total = np.zeros(n)
    for t in range(1, length + 1):
        goals = env.goal.copy()
        obs, reward, done, info = env.step(rng.integers(0, 4, n))
        total += reward.astype(np.float64)
        np.testing.assert_allclose(info["episode_return"], total, atol=1e-4)
        assert (info["episode_length"] == t).all()
        if t < length:
            assert not done.any() and (obs[:, 9] == np.float32(t / length)).all()
            assert (env.goal == goals).all()  # the goal stays put within an episode
    assert done.all()
    assert (obs == 0).all()  # first observation of the new episode: centre, t = 0
    assert (env.agent == 4).all() and not (env.goal == 4).all(axis=1).any()
    assert (env.goal != goals).any(axis=1).any()  # new goals were drawn
    obs, reward, done, info = env.step(np.full(n, UP))
    assert not done.any() and (info["episode_length"] == 1).all()
    np.testing.assert_array_equal(info["episode_return"], reward)
    assert (obs[:, 9] == np.float32(1 / length)).all()


# ---------------------------------------------------------------- Miconi's 2018 rules (maze.py at 66cdef7)


def miconi(n: int = 1, seed: int = 0, **options) -> Maze:
    env = envs.make("maze", num_envs=n, seed=seed, rules="miconi2018", **options)
    env.reset()
    return env


def test_miconi_observation() -> None:
    """Window, previous reward, raw step number, bias 1 (maze.py lines 331-338)."""
    env = envs.make("maze", num_envs=2, seed=0, rules="miconi2018", episode_length=5)
    assert env.observation_shape == (12,)
    assert env.reset().tolist() == [[0.0] * 9 + [0.0, 0.0, 1.0]] * 2
    place(env, 0, (1, 1), goal=(7, 7))
    place(env, 1, (4, 4), goal=(7, 7))
    obs, reward, _, _ = env.step(np.array([UP, UP]))
    assert reward.tolist() == [np.float32(-0.1), 0.0]
    assert obs[0].tolist() == [1, 1, 1, 1, 0, 0, 1, 0, 1, np.float32(-0.1), 1, 1]
    assert obs[1].tolist() == [0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1]
    for t in (2, 3, 4):
        obs, _, done, _ = env.step(np.array([RIGHT, RIGHT]))
        assert (obs[:, 10] == t).all() and not done.any()
    obs, _, done, info = env.step(np.array([LEFT, LEFT]))
    assert done.all() and (info["episode_length"] == 5).all()
    assert obs.tolist() == [[0.0] * 9 + [0.0, 0.0, 1.0]] * 2  # a new episode: no previous reward, step 0


def test_miconi_goal_on_centre() -> None:
    """The agent starts on a goal drawn on the centre; stepping off gives nothing, stepping
    back on collects it (the goal test runs only after a move, maze.py line 371)."""
    env = miconi()
    place(env, 0, (4, 4), goal=(4, 4))
    _, reward, _, _ = env.step(np.array([UP]))
    assert reward[0] == 0 and tuple(env.agent[0]) == (3, 4)
    obs, reward, _, info = env.step(np.array([DOWN]))
    assert reward[0] == 10 and info["episode_return"][0] == 10
    assert obs[0, 9] == 10 and obs[0, 10] == 2


def test_miconi_goals_cover_all_free_cells_centre_included() -> None:
    n = 8200
    env = miconi(n, seed=4)
    goals = [tuple(g) for g in env.goal]
    assert set(goals) == set(free_cells(9))
    counts = np.array([goals.count(c) for c in free_cells(9)])
    assert ((counts - n / 41) ** 2 / (n / 41)).sum() < 80  # chi-square, 40 dof: P(> 80) < 2e-4


def test_miconi_teleport_may_land_on_the_goal() -> None:
    n, goal = 8200, (3, 5)
    env = miconi(n, seed=3)
    for i in range(n):
        place(env, i, (3, 4), goal)
    env.step(np.full(n, RIGHT))
    landed = [tuple(p) for p in env.agent]
    assert set(landed) == set(free_cells(9))  # the goal included
    counts = np.array([landed.count(c) for c in free_cells(9)])
    assert ((counts - n / 41) ** 2 / (n / 41)).sum() < 80


@pytest.mark.parametrize("action, reward, end", [
    (UP, np.float32(9.9), None),  # wall check first (-0.1, stay), then the goal test on the same cell: +10
    (LEFT, np.float32(9.9), None),
    (RIGHT, 0.0, (1, 2)),  # stepping off the goal gives nothing
])
def test_miconi_standing_on_the_goal(action: int, reward: float, end: tuple[int, int] | None) -> None:
    """After a teleport onto the goal (placed here by hand on corner (1, 1))."""
    env = miconi(seed=5)
    place(env, 0, (1, 1), goal=(1, 1))
    obs, r, _, info = env.step(np.array([action]))
    assert r[0] == reward and info["episode_return"][0] == reward and obs[0, 9] == reward
    if end is not None:
        assert tuple(env.agent[0]) == end
        _, r, _, _ = env.step(np.array([LEFT]))
        assert r[0] == 10  # back onto it


def test_miconi_rewards() -> None:
    env = miconi(512, seed=5)
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(250):
        _, reward, _, _ = env.step(rng.integers(0, 4, 512))
        seen |= set(reward.tolist())
    assert seen == {0.0, float(np.float32(-0.1)), float(np.float32(9.9)), 10.0}


# ---------------------------------------------------------------- oracle and random policies


def oracle_expected_return(size: int, length: int) -> tuple[float, float]:
    """Exact mean return of the shortest-path oracle, and its mean steps per goal after the first find.

    With goal g, the first find takes d(centre, g) steps; after each find the agent lands
    uniformly on the other free cells x and needs d(x, g) more steps. f(n) is the expected
    number of further finds with n steps left.
    """
    free, centre = free_cells(size), (size // 2, size // 2)
    total, steps = 0.0, []
    goals = [g for g in free if g != centre]
    for g in goals:
        d = distances(size, g)
        others = [d[x] for x in free if x != g]
        f = [0.0] * (length + 1)
        for n in range(length + 1):
            f[n] = sum(1 + f[n - k] for k in others if k <= n) / len(others)
        total += 1 + f[length - d[centre]]
        steps.append(sum(others) / len(others))
    return 10 * total / len(goals), sum(steps) / len(steps)


def policy_expected_return(size: int, length: int, rules: str, probs) -> float:
    """Exact mean return of the policy ``probs(agent, goal) -> 4 action probabilities``:
    propagate the agent's distribution through the Markov chain of each goal.

    The chain follows Miconi's ``maze.py`` (66cdef7, lines 296-381) under ``miconi2018``:
    goals over all free cells, the wall check before the goal test, teleports onto any
    free cell; under ``default`` the goal avoids the centre and the teleport the goal.
    """
    free, centre, walls = free_cells(size), (size // 2, size // 2), wall_map(size)
    index = {x: i for i, x in enumerate(free)}
    miconi = rules == "miconi2018"
    goals = free if miconi else [g for g in free if g != centre]
    total = 0.0
    for g in goals:
        landing = np.array([1.0 if miconi or z != g else 0.0 for z in free])
        landing /= landing.sum()
        move, reward = np.zeros((len(free), len(free))), np.zeros(len(free))
        for x in free:
            for p, (dr, dc) in zip(probs(x, g), MOVES):
                y, r = (x[0] + dr, x[1] + dc), 0.0
                if walls[y[0]][y[1]]:
                    y, r = x, -0.1
                if y == g:
                    reward[index[x]] += p * (r + 10)
                    move[index[x]] += p * landing
                else:
                    reward[index[x]] += p * r
                    move[index[x], index[y]] += p
        dist = np.zeros(len(free))
        dist[index[centre]] = 1
        for _ in range(length):
            total += dist @ reward
            dist = dist @ move
    return total / len(goals)


def oracle_actions(size: int) -> np.ndarray:
    """action[agent r, c, goal r, c]: a step along a shortest path to the goal; on the goal
    itself a bump into a wall where there is one (it collects the goal under ``miconi2018``,
    9.9 in one step), else a step off it."""
    walls, action = wall_map(size), np.zeros((size,) * 4, np.int64)
    for g in free_cells(size):
        d = distances(size, g)
        for x in free_cells(size):
            steps = [(x[0] + dr, x[1] + dc) for dr, dc in MOVES]
            if x != g:
                action[x + g] = next(a for a, y in enumerate(steps) if d.get(y) == d[x] - 1)
            else:
                bumps = [a for a, y in enumerate(steps) if walls[y[0]][y[1]]]
                action[x + g] = bumps[0] if bumps else 0
    return action


def uniform(x: tuple[int, int], g: tuple[int, int]) -> list[float]:
    return [0.25] * 4


def episode_returns(env: Maze, policy, episodes_per_env: int) -> np.ndarray:
    env.reset()
    returns = []
    for _ in range(episodes_per_env * env.episode_length):
        _, _, done, info = env.step(policy(env))
        returns.append(info["episode_return"][done])
    return np.concatenate(returns).astype(np.float64)


def assert_mean_matches(returns: np.ndarray, expected: float) -> None:
    """Mean within 4 standard errors of the derived value (two-sided p ~ 6e-5)."""
    se = returns.std(ddof=1) / np.sqrt(len(returns))
    assert abs(returns.mean() - expected) < 4 * se, (returns.mean(), expected, se)


def test_oracle_closed_form_matches_markov_chain() -> None:
    """Two independent derivations of the default rules' oracle agree."""
    expected, steps_per_goal = oracle_expected_return(9, 250)
    assert round(steps_per_goal, 1) == 4.9
    action = oracle_actions(9)
    chain = policy_expected_return(9, 250, "default", lambda x, g: np.eye(4)[action[x + g]])
    assert abs(chain - expected) < 1e-9


# Expected returns per 250-step episode of a 9x9 maze, rounded to 2 decimals.
FIGURES = {"default": {"oracle": 520.40, "random": 8.72}, "miconi2018": {"oracle": 533.36, "random": 9.47}}


@pytest.mark.parametrize("rules", ["default", "miconi2018"])
def test_oracle_policy_expectation(rules: str) -> None:
    action = oracle_actions(9)
    expected = policy_expected_return(9, 250, rules, lambda x, g: np.eye(4)[action[x + g]])
    assert round(expected, 2) == FIGURES[rules]["oracle"]
    env = envs.make("maze", num_envs=2048, seed=7, rules=rules)
    returns = episode_returns(env, lambda e: action[(*e.agent.T, *e.goal.T)], episodes_per_env=2)
    assert len(returns) == 2 * 2048
    assert_mean_matches(returns, expected)


@pytest.mark.parametrize("rules", ["default", "miconi2018"])
def test_random_policy_expectation(rules: str) -> None:
    expected = policy_expected_return(9, 250, rules, uniform)
    assert round(expected, 2) == FIGURES[rules]["random"]
    rng = np.random.default_rng(3)
    env = envs.make("maze", num_envs=4096, seed=8, rules=rules)
    returns = episode_returns(env, lambda e: rng.integers(0, 4, e.num_envs), episodes_per_env=2)
    assert len(returns) == 2 * 4096
    assert_mean_matches(returns, expected)


# ---------------------------------------------------------------- batch, single and reference agree


@pytest.mark.parametrize("rules", ["default", "miconi2018"])
@pytest.mark.parametrize("size", [5, 9, 13])
def test_batch_matches_single_envs_and_python_reference(size: int, rules: str) -> None:
    n, length, seed, steps = 16, 20, 123, 70
    batch = envs.make("maze", num_envs=n, seed=seed, size=size, episode_length=length, rules=rules)
    vector = gymnasium.make_vec("DeltaBeast/Maze-v0", num_envs=n, size=size, episode_length=length, rules=rules)
    singles = [gymnasium.make("DeltaBeast/Maze-v0", size=size, episode_length=length, env_index=i, rules=rules)
               for i in range(n)]
    refs = [PyMaze(size, length, seed=seed, index=i, rules=rules) for i in range(n)]
    obs = batch.reset()
    np.testing.assert_array_equal(vector.reset(seed=seed)[0], obs)
    for i, single in enumerate(singles):
        np.testing.assert_array_equal(single.reset(seed=seed)[0], obs[i])
        np.testing.assert_array_equal(np.float32(refs[i].observation()), obs[i])
    rng = np.random.default_rng(size)
    resets = finds = 0
    for _ in range(steps):
        actions = rng.integers(0, 4, n)
        obs, reward, done, info = batch.step(actions)
        resets, finds = resets + done.sum(), finds + (reward > 9).sum()
        v_obs, v_reward, v_term, v_trunc, v_info = vector.step(actions)
        np.testing.assert_array_equal(v_obs, obs)
        np.testing.assert_array_equal(v_reward, reward)
        np.testing.assert_array_equal(v_term, done)
        assert not v_trunc.any()
        for i, (single, ref) in enumerate(zip(singles, refs)):
            s_obs, s_reward, s_term, s_trunc, s_info = single.step(actions[i])
            assert (s_reward, s_term, s_trunc) == (reward[i], done[i], False)
            assert s_info["episode_return"] == info["episode_return"][i]
            assert s_info["episode_length"] == info["episode_length"][i]
            if s_term:  # the single env shows the last observation; reset() gives the batch's
                assert s_obs[9] == 1 if rules == "default" else s_obs[10] == length
                np.testing.assert_array_equal(v_info["final_obs"][i], s_obs)
                s_obs, _ = single.reset()
            np.testing.assert_array_equal(s_obs, obs[i])
            r_obs, r_reward, r_done, r_return, r_length = ref.step(int(actions[i]))
            np.testing.assert_array_equal(np.float32(r_obs), obs[i])
            assert (np.float32(r_reward), r_done) == (reward[i], done[i])
            assert (np.float32(r_return), r_length) == (info["episode_return"][i], info["episode_length"][i])
    assert resets == 3 * n and finds > 0  # auto-resets and teleports were both exercised


def test_seeding() -> None:
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 4, (300, 64))

    def run(seed: int) -> np.ndarray:
        env = envs.make("maze", num_envs=64, seed=seed)
        trace = [env.reset()]
        for a in actions:
            trace.append(env.step(a)[0])
        return np.stack(trace)

    np.testing.assert_array_equal(run(1), run(1))
    assert not np.array_equal(run(1), run(2))
    env = envs.make("maze", num_envs=64, seed=1)
    env.reset()
    assert len({tuple(g) for g in env.goal}) > 20  # each env draws from its own stream


# ---------------------------------------------------------------- Gymnasium


@pytest.mark.parametrize("rules", ["default", "miconi2018"])
@pytest.mark.parametrize("render_mode", [None, "ansi", "rgb_array"])
def test_check_env(render_mode: str | None, rules: str) -> None:
    check_env(gymnasium.make("DeltaBeast/Maze-v0", render_mode=render_mode, rules=rules).unwrapped)


def test_render() -> None:
    env = MazeEnv(render_mode="ansi")
    env.reset(seed=0)
    env._maze._goal[0] = 1 * 9 + 7
    text = env.render()
    expected = [list(row) for row in DRAWING.splitlines()]
    expected[4][4], expected[1][7] = "A", "G"
    assert text.splitlines() == ["".join(row) for row in expected]
    image = MazeEnv(render_mode="rgb_array", size=7)
    image.reset(seed=0)
    frame = image.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[0] == frame.shape[1] and frame.shape[2] == 3
    frames = MazeVectorEnv(3, render_mode="ansi")
    frames.reset(seed=0)
    assert len(frames.render()) == 3 and all(f.count("A") == 1 for f in frames.render())


def test_registration() -> None:
    assert isinstance(gymnasium.make_vec("DeltaBeast/Maze-v0", num_envs=2), MazeVectorEnv)
    assert isinstance(gymnasium.make("DeltaBeast/Maze-v0").unwrapped, MazeEnv)


# ---------------------------------------------------------------- bad arguments


@pytest.mark.parametrize("kwargs, match", [
    (dict(name="atari2600"), "valid envs: maze"),
    (dict(sizee=9), "valid options: size, episode_length, rules"),
    (dict(size=9.0), "size must be an odd int >= 5, got 9.0"),
    (dict(size="9"), "size must be an odd int >= 5, got '9'"),
    (dict(size=True), "size must be an odd int >= 5, got True"),
    (dict(rules="miconi"), r"rules must be one of \('default', 'miconi2018'\), got 'miconi'"),
    (dict(size=8), "odd int >= 5"),
    (dict(size=3), "odd int >= 5"),
    (dict(episode_length=0), "episode_length must be an int >= 1"),
    (dict(num_envs=0), "num_envs must be an int >= 1"),
    (dict(num_envs=2.0), "num_envs must be an int >= 1"),
    (dict(seed=-1), "seed must be an int in"),
    (dict(seed=2**64), "seed must be an int in"),
])
def test_bad_arguments(kwargs: dict, match: str) -> None:
    args = dict(name="maze", num_envs=2) | kwargs
    with pytest.raises(ValueError, match=match):
        envs.make(**args)


@pytest.mark.parametrize("actions, match", [
    (np.array([0, 4]), r"actions must be in \{0, 1, 2, 3\}"),
    (np.array([-1, 0]), r"actions must be in \{0, 1, 2, 3\}"),
    (np.array([0, 1, 2]), r"shape \(2,\)"),
    (np.array([0.0, 1.0]), "int array"),
])
def test_bad_actions(actions: np.ndarray, match: str) -> None:
    env = envs.make("maze", num_envs=2)
    env.reset()
    with pytest.raises(ValueError, match=match):
        env.step(actions)


def test_bad_wrapper_arguments() -> None:
    with pytest.raises(ValueError, match="render_mode"):
        MazeEnv(render_mode="human")
    with pytest.raises(ValueError, match="env_index"):
        MazeEnv(env_index=-1)
    with pytest.raises(ValueError, match="2 seeds for 3 envs"):
        MazeVectorEnv(3).reset(seed=[1, 2])
    env = MazeEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="int array"):
        env.step(1.5)


def test_step_needs_a_reset_first_and_after_an_episode_ends() -> None:
    with pytest.raises(RuntimeError, match="reset"):  # before reset() no goal is placed
        Maze(2, seed=0).step(np.array([0, 0]))
    env = MazeEnv(episode_length=3)
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step(0)
    env.reset(seed=0)
    terminated = [env.step(0)[2] for _ in range(3)]
    assert terminated == [False, False, True]
    with pytest.raises(gymnasium.error.ResetNeeded):  # the time feature would leave [0, 1]
        env.step(0)
    env.reset()
    assert env.step(0)[0].shape == (10,)
