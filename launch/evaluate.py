"""Score Atari checkpoints as Tables 9 and 10 do: 5 runs x 30 episodes, mean ± std of the 5 run means.

    python launch/evaluate.py runs/atari-Pong-delta                 # its milestone checkpoints (50M, 200M)
    python launch/evaluate.py runs/atari-*-* --steps 50000000 200000000 --out runs/eval
    python launch/evaluate.py runs/atari-Pong-lstm/checkpoint.pt --sample   # sample instead of argmax
    python launch/evaluate.py runs/memory/minigrid/MemoryS7-lstm --sample --memory no_core_state

Each argument is a checkpoint file or a run directory; a directory stands for its milestone
checkpoints ``checkpoint-<step>.pt`` (with ``--steps``: the first at each step or within 1% past
it), or for its latest ``checkpoint.pt`` if it has none. Every checkpoint is scored in
``--runs`` (5) independent runs of ``--episodes`` (30) whole games each, with the env options it
was trained with (the emulator's 108,000-frame limit and no other time limit), except that
Atari always plays the papers' sticky actions, 0.25 (``--sticky_action_prob``). Actions are
sampled from the policy, which is what it learned to play, except on Atari, where they are its
argmax, as the papers' code (torchbeast's test mode) plays; ``--sample`` and ``--argmax``
choose for every env. Run r of a checkpoint plays ``--envs_per_run`` games at once (default: all of its
episodes), seeded with ``seed + r * envs_per_run + i``; each env contributes its first
``episodes / envs_per_run`` whole games, so short games are not favoured. An env that has played
them is not stepped again, and the policy acts for the others in one batch: a game that stalls
(an argmax policy that never ends it) is played to the frame cap, as the papers play it, and
costs only itself. A line on stderr says every 10 s how many games each checkpoint has finished.

Reported per checkpoint: the 5 run means, their mean and their standard deviation (numpy's
``std``, ddof 0; ``--ddof 1`` for the sample std). The (checkpoint, run) jobs run in parallel
over ``--workers`` processes (default: all cores); where they would leave workers idle or
unevenly loaded (one run on 2 cores, 5 runs on 2), each run's games are split into consecutive
parts played by different workers, the fewest that share the work evenly. A game's seed and
score do not depend on the split; with ``--sample`` a part after the first draws from a stream
of its own. Writes ``OUT/evaluation.json`` (every
episode's score and length), ``OUT/evaluation.csv`` (a row per checkpoint) and
``OUT/evaluation.md``: one table per step in Table 9/10's
layout (rows games, columns cores), each cell ours with the paper's figure beside it where the
paper has one (50M: Table 9, 200M: Table 10). An Atari game's mean has its human-normalised score
beside it (``envs.atari_scores``); a core scored on all five Atari-5 games (BattleZone,
DoubleDunk, NameThisGame, Phoenix, Qbert) at a step gets Atari-5's estimate of its median
human-normalised score over the 57 games under the table.

``--memory`` ablates the agent's memory, to tell a policy that remembers from one that reacts:
``no_core_state`` zeroes the core state before every step (the previous action and reward are
still given), ``none`` takes those away too (every step is played as an episode's first).
"""
from __future__ import annotations

import glob
import itertools
import json
import math
import multiprocessing as mp
import os
import re
import sys
import time
from typing import Any, Callable, Literal

import numpy as np

from agents.atari_tables import PAPER_SCORES, STEP_TOLERANCE, TABLE_COLUMNS, TABLE_OF_STEP, format_mean_std, paper_step
from agents.errors import ConfigError, UsageError, UserError
from agents.tables import markdown_table

_MILESTONE = re.compile(r"checkpoint-(\d+)\.pt$")


# ---------------------------------------------------------------- the protocol, for any policy


def play(games: list[Any], policy: Any, episodes_per_game: int,
         on_game_over: Callable[[], None] = lambda: None) -> tuple[list[list[float]], list[list[int]]]:
    """Play each of ``games`` (envs of one game each: ``num_envs`` 1) until it has finished
    ``episodes_per_game`` episodes. A game that has is not stepped again, and the policy acts
    for the games still playing, in one batch: a game stalled at the frame cap costs only itself.

    ``policy(obs, prev_reward, prev_action, done, rows) -> actions`` sees what an actor sees
    (``done`` set on each first step of an episode, the start included) for the games ``rows``
    (indices into ``games``, in order), a row each. A policy with ``env_actions``
    (:class:`ModelPolicy`) steps the games with ``policy.env_actions(actions)`` (a Box space's
    clipped draws) and starts from its ``first_action``. ``on_game_over()`` is called as each game
    finishes its episodes. Returns per game the scores and lengths of its episodes.
    """
    n = len(games)
    scores: list[list[float]] = [[] for _ in range(n)]
    lengths: list[list[int]] = [[] for _ in range(n)]
    obs = np.concatenate([game.reset() for game in games])
    to_env = getattr(policy, "env_actions", lambda a: a)
    reward, done = np.zeros(n, np.float32), np.ones(n, bool)
    action = getattr(policy, "first_action", np.zeros(n, np.int64))
    rows = np.arange(n)
    while rows.size:
        action = np.asarray(policy(obs, reward, action, done, rows))
        env_action = to_env(action)
        steps = step_each([games[i] for i in rows], [env_action[k:k + 1] for k in range(rows.size)])
        obs, reward, done = (np.concatenate([step[j] for step in steps]) for j in range(3))
        playing = np.ones(rows.size, bool)
        for k in np.flatnonzero(done):
            i, info = rows[k], steps[k][3]
            scores[i].append(float(info["episode_return"][0]))
            lengths[i].append(int(info["episode_length"][0]))
            if len(scores[i]) == episodes_per_game:
                playing[k] = False
                on_game_over()
        if not playing.all():
            rows, obs, reward, action, done = (x[playing] for x in (rows, obs, reward, action, done))
    return scores, lengths


def step_each(games: list[Any], actions: list[np.ndarray]) -> list[tuple]:
    """``game.step(action)`` for each game; games that can be stepped in halves (Atari's
    ``send``/``recv``) are all sent their actions before any is waited on, so their emulators
    play the step at once rather than one after another."""
    for game, action in zip(games, actions):
        if hasattr(game, "send"):
            game.send(action)
    return [game.recv() if hasattr(game, "send") else game.step(action) for game, action in zip(games, actions)]


def run_one(make_env: Callable[[int, int], Any], make_policy: Callable[[int], Any], run: int, episodes: int,
            envs_per_run: int | None, seed: int, on_game_over: Callable[[], None] = lambda: None, *,
            games: range | None = None) -> dict[str, list]:
    """Run ``run`` of the protocol: ``envs_per_run`` games, game i ``make_env(1, seed + run *
    envs_per_run + i)``, play ``episodes`` whole episodes with ``make_policy(run)``, ``episodes /
    envs_per_run`` each (:func:`play`); with ``games``, only the run's games i in that range (a part
    of the run, for one worker). Returns ``{"scores": [...], "lengths": [...]}``, game by game."""
    n = envs_per_run or episodes
    if episodes % n:
        raise ValueError(f"episodes ({episodes}) must be a multiple of envs_per_run ({n})")
    played: list[Any] = []
    try:
        for i in range(n) if games is None else games:
            played.append(make_env(1, seed + run * n + i))
        scores, lengths = play(played, make_policy(run), episodes // n, on_game_over)
    finally:
        for game in played:
            game.close()
    return {"scores": [s for per_env in scores for s in per_env],
            "lengths": [x for per_env in lengths for x in per_env]}


def parts_per_run(jobs: int, workers: int, games: int) -> int:
    """Into how many parts each of ``jobs`` runs of ``games`` games is split so that ``workers``
    processes share the work evenly: the fewest that make the parts a multiple of the workers
    (1 run on 2 workers: 2 parts; 5 runs on 2 workers: 10 parts, 5 each), at most a game a part."""
    return min(games, workers // math.gcd(jobs, workers))


def split_runs(games: int, parts: int) -> list[range]:
    """A run's ``games`` games in ``parts`` consecutive ranges whose sizes differ by at most one."""
    bounds = [games * k // parts for k in range(parts + 1)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:])]


def summarize(runs: list[dict[str, list]], ddof: int = 0) -> dict[str, Any]:
    """Mean and std (``ddof``) of the per-run mean scores, as Tables 9 and 10 report."""
    run_means = [float(np.mean(r["scores"])) for r in runs]
    return {"run_means": run_means, "mean": float(np.mean(run_means)),
            "std": float(np.std(run_means, ddof=ddof)) if len(run_means) > ddof else float("nan"),
            "episodes": sum(len(r["scores"]) for r in runs), "runs": len(runs)}


# ---------------------------------------------------------------- checkpoints


MEMORY_ABLATIONS = ("full", "no_core_state", "none")


def act_on_rows(model: Any, state: tuple, rows: np.ndarray, inputs: list, **act: Any) -> tuple[Any, Any, tuple]:
    """``model.act(*inputs, ...)`` for the envs ``rows`` (sorted) of a batch whose core ``state``
    holds every env's (batch first). Returns those envs' actions and logits, and the batch's state
    with their rows stepped and the others' as they were."""
    import torch

    if not state or rows.size == state[0].shape[0]:  # every env: the state as it is
        return model.act(*inputs, state, **act)
    index = torch.from_numpy(rows).to(state[0].device)
    chosen, logits, mine = model.act(*inputs, tuple(s[index] for s in state), **act)
    return chosen, logits, tuple(whole.index_copy(0, index, part) for whole, part in zip(state, mine))


class ModelPolicy:
    """An AgentNet stepped one step at a time (on ``device``) for the games :func:`play` names;
    the policy's mode (the argmax, or a Gaussian's mean) or samples.

    ``memory``: ``full``; ``no_core_state``, the core state zeroed before every step;
    ``none``, every step played as an episode's first (the state, previous action and reward
    zeroed by the net's reset at ``done``).
    """

    def __init__(self, model: Any, *, num_envs: int, sample: bool = False, seed: int = 0, device: str = "cpu",
                 memory: str = "full"):
        import torch

        if memory not in MEMORY_ABLATIONS:
            raise ConfigError(f"memory: {memory!r} is not one of {', '.join(MEMORY_ABLATIONS)}")
        self.torch, self.device, self.sample, self.memory = torch, torch.device(device), sample, memory
        self.model = model.eval().to(self.device)
        self.num_envs = num_envs
        self.state = self.model.initial_state(num_envs, self.device)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        actions = self.model.action_space
        self.first_action = torch.zeros((num_envs, *actions.action_shape), dtype=actions.action_dtype).numpy()

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        """What the env is stepped with (:meth:`agents.network.AgentNet.env_actions`)."""
        return self.model.env_actions(self.torch.from_numpy(actions)).numpy()

    def __call__(self, obs: np.ndarray, reward: np.ndarray, action: np.ndarray, done: np.ndarray,
                 rows: np.ndarray) -> np.ndarray:
        if self.memory == "no_core_state":
            self.state = self.model.initial_state(self.num_envs, self.device)
        elif self.memory == "none":
            done = np.ones_like(done)
        inputs = [self.torch.from_numpy(x).to(self.device) for x in (obs, reward, action, done)]
        chosen, _, self.state = act_on_rows(self.model, self.state, rows, inputs, sample=self.sample,
                                            generator=self.generator)
        return chosen.cpu().numpy()


def expand_targets(targets: list[str], steps: list[int] | None = None) -> list[str]:
    """Checkpoint files for the command-line arguments (see the module docstring)."""
    paths: list[str] = []
    for target in targets:
        if os.path.isfile(target):
            paths.append(target)
            continue
        if not os.path.isdir(target):
            raise UserError(f"no such checkpoint or run directory: {target}")
        milestones = sorted((int(m.group(1)), p) for p in glob.glob(os.path.join(target, "checkpoint-*.pt"))
                            if (m := _MILESTONE.search(p)))
        if steps:  # a milestone is saved at the first update that reaches it, so at or just past it
            for step in steps:
                at = [p for s, p in milestones if step <= s <= step * (1 + STEP_TOLERANCE)]
                if not at:
                    print(f"warning: {target} has no checkpoint at step {step:,} (or within {STEP_TOLERANCE:.0%} "
                          f"past it); its milestones: {', '.join(f'{s:,}' for s, _ in milestones) or 'none'}",
                          file=sys.stderr)
                elif at[0] not in paths:
                    paths.append(at[0])
        elif milestones:
            paths += [p for _, p in milestones]
        elif os.path.isfile(os.path.join(target, "checkpoint.pt")):
            paths.append(os.path.join(target, "checkpoint.pt"))
        else:
            raise UserError(f"{target} holds no checkpoint")
    unique: dict[tuple[int, int], str] = {}  # each file once (a milestone is a hard link of a checkpoint.pt)
    for path, stat in zip(paths, map(os.stat, paths)):
        unique.setdefault((stat.st_dev, stat.st_ino), path)
    paths = list(unique.values())
    if not paths:  # every target asked for --steps it has no milestone at
        raise UsageError(f"no checkpoint at --steps {' '.join(map(str, steps or []))} in {', '.join(targets)}; "
                         "leave --steps out to score each run's milestones, or its checkpoint.pt if it has none")
    return paths


def load_agent(path: str) -> tuple[Any, Any, dict[str, Any]]:
    """(model on the CPU, TrainConfig, counters) of a checkpoint written by agents.learning.learner."""

    import envs
    from agents.config import options
    from agents.learning.checkpoint import read_checkpoint
    from agents.run_config import build_model, config_from_dict

    payload = read_checkpoint(path)
    cfg = config_from_dict(payload["config"], path)
    env_spec = envs.spec(cfg.env.name, **options(cfg.env))
    model = build_model(cfg, env_spec.observation_shape, env_spec.action_sizes, action_dim=env_spec.action_dim)
    model.load_state_dict(payload["model"])
    return model.eval(), cfg, payload["counters"]


def describe(path: str) -> dict[str, Any]:
    from agents.learning.checkpoint import read_checkpoint

    payload = read_checkpoint(path)
    if "env" not in (payload.get("config") or {}):
        raise UsageError(f"{path} is not an RL checkpoint (launch/supervised.py's, say): evaluate.py plays RL "
                         "agents; a supervised run reports its test score itself")
    env, core = payload["config"]["env"], payload["config"]["core"]
    game = env.get("game", env.get("id", env["name"]))  # Atari's game, or a gym env's id
    return {"checkpoint": os.path.abspath(path), "env": env["name"], "game": game, "core": core["name"],
            "step": int(payload["counters"]["step"])}


_MODELS: dict[str, Any] = {}
_GAMES_OVER: Any = None  # a pool worker's queue to the parent: the checkpoint of each game that ends


def _report_games_to(games_over: Any) -> None:
    """A pool worker's initializer: report each finished game on ``games_over``."""
    global _GAMES_OVER
    _GAMES_OVER = games_over


class Progress:
    """The run-level progress line: games finished per checkpoint, at most every ``every_s`` seconds."""

    def __init__(self, games: dict[str, int], every_s: float = 10.0):
        self.games, self.done = games, dict.fromkeys(games, 0)
        self.start = self.last = time.time()
        self.every_s = every_s

    def game_over(self, checkpoint: str) -> None:
        self.done[checkpoint] += 1
        if time.time() - self.last >= self.every_s:
            self.last = time.time()
            parts = ", ".join(f"{os.path.relpath(c)} {self.done[c]}/{n}" for c, n in self.games.items())
            print(f"games played: {parts} ({(self.last - self.start) / 60:.1f} min)", file=sys.stderr, flush=True)


def evaluate_job(job: dict[str, Any], on_game_over: Callable[[], None] | None = None) -> dict[str, Any]:
    """One run of one checkpoint (a pool task); each finished game is reported to
    ``on_game_over()``, or in a pool worker to the parent's queue."""
    import torch

    import envs
    from agents.config import options as env_options
    from envs.video import RecordedGame

    torch.set_num_threads(1)
    path = job["checkpoint"]
    if path not in _MODELS:
        _MODELS[path] = load_agent(path)
    model, cfg, _ = _MODELS[path]
    options = {**env_options(cfg.env), **job["env_overrides"]}
    if cfg.env.name == "atari":  # one emulator thread per worker process
        options["num_threads"] = options.get("num_threads") or 1

    def make_env(num_envs: int, seed: int) -> Any:
        game = seed - job["seed"]  # run * envs_per_run + i: the game's number over the checkpoint's runs
        if not job["video"] or job["video_games"] is not None and game >= job["video_games"]:
            return envs.make(cfg.env.name, num_envs=num_envs, seed=seed, **options)
        os.makedirs(job["video"], exist_ok=True)
        screen = {"rgb_frames": True} if cfg.env.name == "atari" else {}
        return RecordedGame(envs.make(cfg.env.name, num_envs=num_envs, seed=seed, **{**options, **screen}),
                            os.path.join(job["video"], f"game{game:03d}.mp4"))

    first, stop = job["games"]
    # run r samples from seed + r; a part of a run split over workers from a stream of its own
    policy_seed = job["seed"] + job["run"] if first == 0 else int(
        np.random.SeedSequence([job["seed"] + job["run"], first]).generate_state(1)[0])

    def make_policy(run: int) -> ModelPolicy:
        return ModelPolicy(model, num_envs=stop - first, sample=job["sample"], seed=policy_seed,
                           device=job["device"], memory=job["memory"])

    if on_game_over is None:
        on_game_over = (lambda: _GAMES_OVER.put(job["checkpoint"])) if _GAMES_OVER is not None else (lambda: None)
    start = time.time()
    result = run_one(make_env, make_policy, job["run"], job["episodes"], job["envs_per_run"], job["seed"],
                     on_game_over, games=range(first, stop))
    return {**job, **result, "seconds": time.time() - start}


def samples_actions(env_name: str, sample: bool | None) -> bool:
    """Whether a checkpoint of ``env_name`` is played with sampled actions: ``sample`` if given;
    otherwise argmax on Atari (the papers' protocol) and samples everywhere else (a stochastic
    policy's mode is not the policy: on the maze it can walk into a wall forever)."""
    return env_name != "atari" if sample is None else sample


def evaluate(paths: list[str], args: Any) -> list[dict[str, Any]]:
    """Score every checkpoint in ``paths`` under the command line's ``args`` (:func:`load`: runs,
    episodes, sampling, workers, ...); one result dict per checkpoint (see :func:`summarize`)."""
    import envs

    overrides = {} if args.max_episode_frames is None else {"max_episode_frames": args.max_episode_frames}

    def played(env: str) -> dict[str, Any]:
        """The env options evaluation sets: on Atari the papers' sticky actions, whatever the
        checkpoint trained with."""
        return {**overrides, **({"sticky_action_prob": args.sticky_action_prob} if env == "atari" else {})}

    infos = [describe(p) for p in paths]
    if args.video and (silent := sorted({i["env"] for i in infos if not hasattr(envs.env_class(i["env"]), "render")})):
        raise UsageError(f"--video: the {', '.join(silent)} env cannot draw its games (Atari and the maze can)")
    games = args.envs_per_run or args.episodes  # per run
    workers = max(1, args.workers or os.cpu_count() or 1)
    parts = split_runs(games, parts_per_run(len(infos) * args.runs, workers, games))
    jobs = [{"checkpoint": info["checkpoint"], "run": r, "games": (part.start, part.stop), "episodes": args.episodes,
             "envs_per_run": args.envs_per_run, "sample": samples_actions(info["env"], args.sample),
             "seed": args.seed, "env_overrides": played(info["env"]), "device": args.device, "memory": args.memory,
             "video": args.video and os.path.join(args.video, f"{info['game']}-{info['core']}-{info['step']}"),
             "video_games": args.video_games}
            for info in infos for r in range(args.runs) for part in parts]
    workers = min(workers, len(jobs))
    progress = Progress({info["checkpoint"]: args.runs * games for info in infos})
    done_jobs: list[dict[str, Any]] = []
    if workers == 1:
        for job in jobs:
            done_jobs.append(evaluate_job(job, lambda c=job["checkpoint"]: progress.game_over(c)))
            _report(done_jobs[-1], len(done_jobs), len(jobs))
    else:
        ctx = mp.get_context("spawn")
        games_over = ctx.SimpleQueue()
        with ctx.Pool(workers, initializer=_report_games_to, initargs=(games_over,)) as pool:
            results = pool.imap_unordered(evaluate_job, jobs)
            while len(done_jobs) < len(jobs):
                try:
                    done_jobs.append(results.next(timeout=1.0))
                    _report(done_jobs[-1], len(done_jobs), len(jobs))
                except mp.TimeoutError:
                    pass
                while not games_over.empty():
                    progress.game_over(games_over.get())
    results = []
    for info in infos:
        per_run = []
        for r in range(args.runs):  # a run's parts, game by game
            parts_played = sorted((j for j in done_jobs if j["checkpoint"] == info["checkpoint"] and j["run"] == r),
                                  key=lambda j: j["games"])
            per_run.append({"run": r, "scores": [s for j in parts_played for s in j["scores"]],
                            "lengths": [x for j in parts_played for x in j["lengths"]]})
        policy = "sample" if samples_actions(info["env"], args.sample) else "argmax"
        results.append({**info, "policy": policy, "memory": args.memory, "seed": args.seed,
                        "env_overrides": played(info["env"]), "ddof": args.ddof, **summarize(per_run, args.ddof),
                        "per_run": per_run})
    return results


def _report(job: dict[str, Any], k: int, total: int) -> None:
    first, stop = job["games"]
    part = "" if first == 0 and stop == (job["envs_per_run"] or job["episodes"]) else f" games {first}-{stop - 1}"
    print(f"[{k}/{total}] {os.path.relpath(job['checkpoint'])} run {job['run']}{part}: "
          f"mean {np.mean(job['scores']):.1f} over {len(job['scores'])} episodes ({job['seconds']:.0f}s)",
          file=sys.stderr, flush=True)


# ---------------------------------------------------------------- tables


def human_normalized_mean(result: dict[str, Any]) -> float | None:
    """The human-normalised score of an Atari result's mean (``envs.atari_scores``), or None for a
    result of another env or of a game outside the 57."""
    from envs.atari_scores import REFERENCE_SCORES, human_normalized

    if result.get("env") != "atari" or result["game"] not in REFERENCE_SCORES:
        return None
    return human_normalized(result["game"], result["mean"])


def markdown(results: list[dict[str, Any]]) -> str:
    """One table per step, rows games (the tables' order first), columns cores (the tables' order first).

    Atari results of the 57 games have their mean's human-normalised score beside it; a core with
    one such result for each of the five Atari-5 games at a step gets Atari-5's estimate of its
    median over the 57 games (Aitchison, Sweetser and Hutter 2023) on a line under the table."""
    from envs.atari import PAPER_GAMES
    from envs.atari_scores import ATARI5_WEIGHTS, atari5_median

    def step_key(r: dict[str, Any]) -> int:
        return paper_step(r["step"]) or r["step"]

    def mean_text(r: dict[str, Any]) -> str:
        normalized = human_normalized_mean(r)
        return format_mean_std(r["mean"], r["std"]) + ("" if normalized is None else f" [{normalized:.0%}]")

    lines: list[str] = []
    for step in sorted({step_key(r) for r in results}):
        group = [r for r in results if step_key(r) == step]
        paper = PAPER_SCORES.get(step, {})
        label = (f"{step // 1_000_000}M steps" if step % 1_000_000 == 0 else f"{step:,} steps") \
            + (f" ({TABLE_OF_STEP[step]})" if step in TABLE_OF_STEP else "")
        policy = ", ".join(sorted({f"{r['policy']} actions" + ("" if r.get("memory", "full") == "full"
                                                                 else f", memory {r['memory']}") for r in group}))
        runs = ", ".join(sorted({f"{r['runs']} runs x {r['episodes'] // max(r['runs'], 1)} episodes" for r in group}))
        notes = (["the paper's figure in parentheses"] if paper else []) \
            + (["the mean's human-normalised score in square brackets (0% random play, 100% the human tester)"]
               if any(human_normalized_mean(r) is not None for r in group) else [])
        lines += [f"### {label}", "",
                  f"Mean ± std of the per-run mean scores ({runs}, {policy})" + "".join(f"; {n}" for n in notes) + ".",
                  ""]
        cores = [c for c in TABLE_COLUMNS if any(r["core"] == c for r in group)]
        cores += sorted({r["core"] for r in group} - set(cores))
        games = [g for g in PAPER_GAMES if any(r["game"] == g for r in group)]
        games += sorted({r["game"] for r in group} - set(games))

        def cell(game: str, core: str, group: list[dict[str, Any]] = group, paper: dict[str, Any] = paper) -> str:
            mine = [r for r in group if r["game"] == game and r["core"] == core]
            text = "; ".join(map(mean_text, mine)) or "—"
            if core in paper.get(game, {}):
                text += " ({})".format(format_mean_std(*paper[game][core]))
            return text

        row_name = "Game" if all(r.get("env", "atari") == "atari" for r in group) else "Env"
        lines += markdown_table([row_name, *(TABLE_COLUMNS.get(c, c) for c in cores)],
                                ([game, *(cell(game, core) for core in cores)] for game in games))
        estimates = []
        for core in cores:
            five = [r for r in group if r["core"] == core and r["game"] in ATARI5_WEIGHTS
                    and human_normalized_mean(r) is not None]
            if sorted(r["game"] for r in five) == sorted(ATARI5_WEIGHTS):
                median = atari5_median({r["game"]: human_normalized_mean(r) for r in five})
                estimates.append(f"{TABLE_COLUMNS.get(core, core)} {median:.0%}")
        if estimates:
            lines += ["", "Atari-5 estimate of the median human-normalised score over the 57 games (Aitchison, "
                      "Sweetser and Hutter 2023), from the five games' means: " + ", ".join(estimates) + "."]
        lines.append("")
    return "\n".join(lines)


CSV_FIELDS = ("checkpoint", "env", "game", "core", "step", "policy", "memory", "runs", "episodes", "mean", "std")


def write_outputs(results: list[dict[str, Any]], out_dir: str) -> None:
    """``evaluation.json`` (every episode), and ``evaluation.csv`` and ``.md`` (a row per checkpoint)."""
    from agents.files import atomic_write_text
    from agents.tables import write_results

    os.makedirs(out_dir, exist_ok=True)
    json_path = os.path.join(out_dir, "evaluation.json")
    atomic_write_text(json_path, json.dumps({"results": results}, indent=1))
    write_results(out_dir, "evaluation", rows=results, fields=CSV_FIELDS, markdown=markdown(results))
    print(f"wrote {json_path}")


def make_parser() -> Any:
    """The command line (jsonargparse's parser: every option shows its type and default)."""
    from jsonargparse import ArgumentParser

    p = ArgumentParser(prog="launch/evaluate.py", description=__doc__.split("\n")[0], exit_on_error=False)
    p.add_argument("targets", nargs="*", metavar="RUN_OR_CHECKPOINT", help="Checkpoint files or run directories.")
    p.add_argument("--steps", type=int, nargs="+", default=None,
                   help="Milestone steps to take from run directories (default: all of their milestones).")
    p.add_argument("--runs", type=int, default=5, help="Independent runs per checkpoint (> 0).")
    p.add_argument("--episodes", type=int, default=30, help="Whole games per run (> 0).")
    p.add_argument("--envs_per_run", type=int, default=None,
                   help="Games played at once per run; must divide --episodes (default: all of them).")
    policy = p.add_mutually_exclusive_group()
    policy.add_argument("--sample", action="store_const", const=True, dest="sample", default=None,
                        help="Sample actions from the policy (the default, except on Atari).")
    policy.add_argument("--argmax", action="store_const", const=False, dest="sample",
                        help="Play the policy's most likely action (the default on Atari, as the papers do).")
    p.add_argument("--memory", type=Literal[MEMORY_ABLATIONS], default="full",
                   help="Memory ablation: full; no_core_state (the core state zeroed before every step); "
                        "none (the previous action and reward zeroed too).")
    p.add_argument("--workers", type=int, default=None, help="Parallel processes, > 0 (default: all cores).")
    p.add_argument("--seed", type=int, default=0,
                   help="Seed of the envs (run r plays seeds seed + r * envs_per_run + i) and of sampling.")
    p.add_argument("--device", type=str, default="cpu", help="Where the policy runs (cuda: one context per worker).")
    p.add_argument("--ddof", type=Literal[0, 1], default=0,
                   help="Std of the run means: 0 population (numpy's default), 1 sample.")
    p.add_argument("--sticky_action_prob", type=float, default=0.25,
                   help="Atari: probability of repeating the previous action in evaluation; the papers' 0.25 "
                        "whatever the checkpoint trained with (a run of --env.sticky_action_prob 0, say).")
    p.add_argument("--max_episode_frames", type=int, default=None,
                   help="Override the env's frame limit, for quick checks (the protocol keeps 108000).")
    p.add_argument("--out", type=str, default="runs/eval", help="Directory for evaluation.json, .csv and .md.")
    p.add_argument("--video", type=str, default=None, metavar="DIR",
                   help="Write each game as an MP4: DIR/<game>-<core>-<step>/game<k>.mp4 (Atari's RGB screen, "
                        "the maze's grid).")
    p.add_argument("--video_games", type=int, default=None,
                   help="With --video: only each checkpoint's first N games (run 0's first, then run 1's, ...).")
    p.add_argument("--debug", action="store_true", help="Show the full traceback of an error.")
    return p


def load(argv: list[str]) -> Any:
    """The parsed command line (ConfigError for bad input)."""
    from argparse import ArgumentError

    from agents.config import flag_value
    from agents.learning.training import resolve_device

    parser = make_parser()
    known = {s for action in parser._actions for s in action.option_strings}
    for arg in argv:  # what the parser would report in its own words, checked here
        if arg.startswith("--") and arg.partition("=")[0] not in known:
            raise ConfigError(f"unknown option {arg.partition('=')[0]}; valid options: "
                              f"{', '.join(sorted(s for s in known if s.startswith('--')))}")
    for name, allowed in (("memory", MEMORY_ABLATIONS), ("ddof", ("0", "1"))):
        if (value := flag_value(argv, name)) is not None and value not in allowed:
            raise ConfigError(f"--{name}: expected one of {', '.join(allowed)}; got {value!r}")
    numbers = {**dict.fromkeys(("--steps", "--runs", "--episodes", "--envs_per_run", "--workers", "--seed",
                                "--max_episode_frames", "--video_games"), int), "--sticky_action_prob": float}
    for i, arg in enumerate(argv):  # every value of every number option (--steps takes several), typed
        flag, eq, text = arg.partition("=")
        if tp := numbers.get(flag):
            after = itertools.takewhile(lambda a: not a.startswith("--"), argv[i + 1:])
            for value in [text] if eq else list(after)[:None if flag == "--steps" else 1]:
                try:
                    tp(value)
                except ValueError:
                    raise ConfigError(f"{flag}: expected {'an integer' if tp is int else 'a number'}, got {value!r}") \
                        from None
    try:
        args = parser.parse_args(argv)
    except ArgumentError as e:
        raise ConfigError(" ".join(str(e).split())) from None  # the parser's message, on one line
    if not args.targets:
        raise ConfigError("missing RUN_OR_CHECKPOINT: give checkpoint files or run directories")
    for name in ("runs", "episodes", "envs_per_run", "workers", "max_episode_frames", "steps", "video_games"):
        values = getattr(args, name)
        for value in values if isinstance(values, list) else [values]:
            if value is not None and value <= 0:
                raise ConfigError(f"--{name}: must be > 0, got {value}")
    if args.video_games is not None and args.video is None:
        raise ConfigError("--video_games: give --video DIR too")
    if args.envs_per_run and args.episodes % args.envs_per_run:
        raise ConfigError(f"--envs_per_run: {args.envs_per_run} must divide --episodes ({args.episodes})")
    args.device = str(resolve_device(args.device, flag="--device"))
    existing = os.path.abspath(args.out)  # checked before any game is played: the results need a place
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"--out: cannot write the results under {args.out}: {existing} is "
                          f"{'not a directory' if not os.path.isdir(existing) else 'not writable'}")
    return args


def run(argv: list[str]) -> list[dict[str, Any]]:
    cfg = load(argv)
    results = evaluate(expand_targets(cfg.targets, cfg.steps), cfg)
    write_outputs(results, cfg.out)
    return results


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    from agents.errors import exit_on_error

    argv = sys.argv[1:] if argv is None else argv
    return exit_on_error(lambda: run(argv), debug="--debug" in argv or None)


if __name__ == "__main__":
    main()
