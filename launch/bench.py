"""Benchmarks that print ratios measured side by side in one run (these machines are noisy).

    python launch/bench.py cores     # forward+backward time and memory per core, as ratios to lstm
    python launch/bench.py maze      # env-steps/s of the batched Numba maze vs plain Python, N = 1 .. 16384
    python launch/bench.py atari     # actor-side steps/s (env + policy) vs raw AtariVectorEnv, same N
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import os
import random
import statistics
import tempfile
import time

import torch

from envs.maze_reference import PyMaze
from fastnet import CORES, make_core


def _release_freed_memory() -> None:
    """Hand freed heap pages back to the OS (glibc), so that one core's large autograd graph
    does not stay resident while the next core runs (the long shape needs 5-12 GB per core)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def _saved_bytes(fn) -> int:
    """Bytes autograd keeps for the backward pass of ``fn()`` (activation memory)."""
    sizes = []

    def pack(t):
        sizes.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()  # the graph is freed on return
    return sum(sizes)


def _forward_backward(cores: dict, x: torch.Tensor, done: torch.Tensor, name: str) -> None:
    """One forward and backward pass of ``cores[name]`` on x [T,B,D] from the initial state."""
    core = cores[name]
    y, state, aux = core(x, core.initial_state(x.shape[1], x.device), done)
    (y.square().mean() + sum(aux.values(), torch.zeros((), device=x.device))).backward()
    del y, state, aux
    _release_freed_memory()


def _step_batched(env, actions: list, j: int) -> None:
    env.step(actions[j % len(actions)])


def _step_python(mazes: list, actions: list, j: int) -> None:
    for maze, a in zip(mazes, actions[j % len(actions)]):
        maze.step(a)


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
    names = list(args.cores or CORES)
    if "lstm" not in names:
        names.insert(0, "lstm")
    for T, B in args.shapes:
        cores, times, mem = {}, {n: [] for n in names}, {}
        for name in names:
            torch.manual_seed(0)
            cores[name] = make_core(name, args.input_size).to(device)
        x = torch.randn(T, B, args.input_size, device=device, requires_grad=True)
        done = torch.zeros(T, B, dtype=torch.bool, device=device)

        step = functools.partial(_forward_backward, cores, x, done)

        for name in names:  # warm-up and memory
            core = cores[name]
            if device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                step(name)
                torch.cuda.synchronize()
                mem[name] = torch.cuda.max_memory_allocated()
            else:
                mem[name] = _saved_bytes(functools.partial(core, x, core.initial_state(B, device), done))
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
        fast = _best_rate(functools.partial(_step_batched, env, actions), n, max(16, min(args.steps // n, 20_000)))
        mazes = [PyMaze(args.size, args.episode_length, seed=0, index=i) for i in range(n)]
        py_actions = [random.Random(i).choices(range(4), k=n) for i in range(16)]

        slow = _best_rate(functools.partial(_step_python, mazes, py_actions), n, max(1, args.py_steps // n))
        print(f"{n:>6} {fast:>14.3e} {slow:>15.3e} {fast / slow:>8.1f}")


def bench_atari(args: argparse.Namespace) -> None:
    """Actor-side steps/s (env + policy, no learner) against raw ``AtariVectorEnv`` at the same N.

    * raw: ale-py's ``AtariVectorEnv`` with the same preprocessing, stepping random actions;
    * env: ``envs.make("atari")`` (the wrapper the actors use), random actions;
    * actor <core>: what one actor process of agents/actor.py does per step: the agent's forward
      on the CPU (1 torch thread, as the actors run) for all N envs, a sampled action, the env
      step, and the copy into a T+1 rollout buffer;
    * pool <core> (AxN/A): the real ``agents.actor.ActorPool`` with A processes (``--pool``,
      default: one per core) of N/A envs each, unrolls of ``--unroll`` steps handed to a
      consumer that only frees them: the training system's actor side without the learner.

    The envs use ``--threads`` C++ threads (default: all cores this process may use).
    Repetitions are interleaved (round robin) and the medians are compared, so slow drifts of a
    shared machine hit every mode alike.
    """
    import numpy as np
    from ale_py.vector_env import AtariVectorEnv

    import envs
    from agents.network import AgentNet
    from envs.atari import rom_id

    n, threads = args.num_envs, args.threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(1)  # as in agents/actor.py; more threads fight the env's threads for the cores
    args.pool = args.pool if args.pool is not None else threads
    if args.pool and n % args.pool:
        raise SystemExit(f"--num-envs ({n}) must be a multiple of --pool ({args.pool})")
    rng = np.random.default_rng(0)
    raw = AtariVectorEnv(rom_id(args.game), n, num_threads=threads, repeat_action_probability=0.25, frameskip=4,
                         maxpool=True, noop_max=30, stack_num=4, img_height=84, img_width=84, grayscale=True,
                         episodic_life=False, reward_clipping=False, use_fire_reset=False, autoreset_mode="SameStep")
    raw.reset(seed=0)
    env = envs.make("atari", num_envs=n, seed=0, game=args.game, num_threads=threads)
    env.reset()
    num_actions = env.num_actions
    random_actions = [rng.integers(0, num_actions, n) for _ in range(64)]
    T = args.unroll

    def timed(step) -> float:
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            step(calls)
            calls += 1
        return n * calls / (time.perf_counter() - start)

    modes = {"raw AtariVectorEnv": lambda: timed(lambda j: raw.step(random_actions[j % 64])),
             "env (envs.atari)": lambda: timed(lambda j: env.step(random_actions[j % 64]))}
    models = {}
    for core in args.cores:
        torch.manual_seed(0)
        models[core] = AgentNet((4, 84, 84), num_actions, core, {}, stem="resnet", reward_clip=1.0,
                                prev_action=False).eval()

        def actor_mode(core: str = core) -> float:
            model = models[core]
            obs_buf = torch.zeros((T + 1, n, 4, 84, 84), dtype=torch.uint8)
            cur = {"obs": torch.from_numpy(env.reset()), "reward": torch.zeros(n),
                   "action": torch.zeros(n, dtype=torch.int64), "done": torch.ones(n, dtype=torch.bool),
                   "state": model.initial_state(n)}

            def step(j: int) -> None:
                action, _, cur["state"] = model.act(cur["obs"], cur["reward"], cur["action"], cur["done"], cur["state"])
                obs, reward, done, _ = env.step(action.numpy())
                cur.update(obs=torch.from_numpy(obs), reward=torch.from_numpy(reward),
                           done=torch.from_numpy(done), action=action)
                obs_buf[j % (T + 1)] = cur["obs"]

            return timed(step)

        modes[f"actor {core}"] = actor_mode
    rates: dict[str, list[float]] = {m: [] for m in modes}
    for mode in modes:  # warm-up
        args_seconds, args.seconds = args.seconds, min(1.0, args.seconds)
        modes[mode]()
        args.seconds = args_seconds
    for _ in range(args.reps):
        for mode, run in modes.items():
            rates[mode].append(run())
    raw.close()
    env.close()
    med = {m: statistics.median(r) for m, r in rates.items()}
    for core in args.cores if args.pool else []:  # one longer timing each: pools start slowly
        med[f"pool {core} ({args.pool}x{n // args.pool})"] = _pool_rate(args, models[core], n)
    base = med["raw AtariVectorEnv"]
    print(f"{args.game}, N = {n} envs, {threads} threads, median of {args.reps} x {args.seconds:g} s, "
          f"torch {torch.__version__}, {os.cpu_count()} cpus")
    print(f"{'mode':<28}{'steps/s':>10}{'vs raw':>8}")
    for mode, rate in med.items():
        print(f"{mode:<28}{rate:>10.0f}{rate / base:>8.2f}")
    per_step = threads / base * 1e3
    for core in args.cores:
        policy = 1e3 / med[f"actor {core}"] - 1e3 / med["env (envs.atari)"]  # the policy runs on one core
        print(f"cost per env-step, in core-ms: emulation {per_step:.2f}, policy {core} {policy:.2f} "
              f"-> env + policy can reach at most {per_step / (per_step + max(policy, 0.0)):.2f} of raw on this CPU")
    best = max(r for m, r in med.items() if m.startswith(("actor", "pool"))) / base
    print(f"bar (actor-side >= 0.70 of raw): {'PASS' if best >= 0.7 else 'FAIL'} (best {best:.2f})")


def _pool_rate(args: argparse.Namespace, model: torch.nn.Module, n: int) -> float:
    """Env-steps/s of ``ActorPool`` (``args.pool`` processes, n envs in all) with a no-op learner,
    timed over ``seconds * reps`` from the moment the pool is warm and its queue drained to the
    arrival of the last batch."""
    from agents.actor import ActorPool

    per_actor = n // args.pool
    model.share_memory()
    seeds = list(range(args.pool))
    pool = ActorPool(model, "atari", {"game": args.game, "num_threads": 1}, args.pool, per_actor, args.pool_unroll, 1,
                     (4, 84, 84), torch.uint8, seeds)
    with pool:
        for _ in range(args.pool):  # every actor has started and filled one unroll
            pool.get_batch()
        while not pool.full_queue.empty():  # drain what was made while we waited
            pool.get_batch()
        batches, start = 0, time.perf_counter()
        while time.perf_counter() - start < args.seconds * args.reps:
            pool.get_batch()
            batches += 1
            last = time.perf_counter()
    return batches * args.pool_unroll * per_actor / (last - start)


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
    atari = sub.add_parser("atari", help="actor-side steps/s (env + policy) vs raw AtariVectorEnv, same N")
    atari.add_argument("--game", default="Pong")
    atari.add_argument("--num-envs", type=int, default=48, help="envs (default 48, the papers' actors)")
    atari.add_argument("--cores", nargs="+", default=["lstm", "delta"], choices=list(CORES))
    atari.add_argument("--threads", type=int, default=0, help="cores for env threads and torch (default: all)")
    atari.add_argument("--seconds", type=float, default=4.0, help="length of one timing")
    atari.add_argument("--reps", type=int, default=3)
    atari.add_argument("--unroll", type=int, default=50, help="rollout buffer length of the actor mode")
    atari.add_argument("--pool-unroll", type=int, default=10,
                       help="unroll length in the pool (short: batches arrive often enough to time)")
    atari.add_argument("--pool", type=int, default=None, metavar="A",
                       help="also time agents.actor.ActorPool with A actor processes (default: one per core; 0: skip)")
    atari.set_defaults(run=bench_atari)
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
