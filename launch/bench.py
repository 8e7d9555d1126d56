"""Benchmarks that print ratios measured side by side in one run (these machines are noisy).

    python launch/bench.py cores     # forward+backward time and memory per core, as ratios to lstm
    python launch/bench.py maze      # env-steps/s of the batched Numba maze vs plain Python, N = 1 .. 16384
    python launch/bench.py atari     # actor-side steps/s (env + policy) vs raw AtariVectorEnv, same N
    python launch/bench.py inference --env maze    # raw envs, actor mode, server mode, zero-cost server
    python launch/bench.py backends --env maze     # end-to-end training SPS: local backend vs Ray
    python launch/bench.py training --env atari --flags --config launch/configs/atari_cpu.yaml
                                                   # end-to-end training SPS vs raw envs, and its parts
    python launch/bench.py peers --env maze        # returns at equal steps beside sb3-contrib's RecurrentPPO
    python launch/bench.py peers --env atari:Pong  # atari_cpu.yaml beside SB3's PPO at RL Zoo's Atari settings
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import math
import os
import random
import statistics
import tempfile
import time
from typing import Any, Callable

import numpy as np
import torch

from agents.actions import CategoricalActions
from envs.maze_reference import PyMaze
from fastnet import CORES, make_core
from launch import peers


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
    * actor <core>: what one actor process of agents/acting/actor.py does per step: the agent's forward
      on the CPU (1 torch thread, as the actors run) for all N envs, a sampled action, the env
      step, and the copy into a T+1 rollout buffer;
    * pool <core> (AxN/A): the real ``agents.acting.actor.ActorPool`` with A processes (``--pool``,
      default: one per core) of N/A envs each, unrolls of ``--unroll`` steps handed to a
      consumer that only frees them: the training system's actor side without the learner.

    The envs use ``--threads`` C++ threads (default: all cores this process may use).
    Repetitions are interleaved (round robin) and the medians are compared, so slow drifts of a
    shared machine hit every mode alike.
    """
    import numpy as np
    from ale_py.vector_env import AtariVectorEnv

    import envs
    from agents.network import AgentNet, ResNetNetworkConfig
    from envs.atari import rom_id

    n, threads = args.num_envs, args.threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(1)  # as in agents/acting/actor.py; more threads fight the env's threads for the cores
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
        models[core] = AgentNet((4, 84, 84), num_actions, core, {},
                                network=ResNetNetworkConfig(reward_clip=1.0, prev_action=False)).eval()

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
    """Env-steps/s of ``ActorPool`` (``args.pool`` processes, n envs in all) with a no-op learner
    (:func:`_transport_rate` over ``seconds * reps``)."""
    from agents.acting.actor import ActorPool
    from agents.acting.transport import ActorConfig, EnvSetup

    per_actor = n // args.pool
    model.share_memory()
    seeds = list(range(args.pool))
    pool = ActorPool(model, envs=EnvSetup("atari", {"game": args.game, "num_threads": 1}, seeds, (4, 84, 84),
                                          torch.uint8),
                     actor=ActorConfig(num_actors=args.pool, envs_per_actor=per_actor, unroll_length=args.pool_unroll),
                     unrolls_per_batch=1)
    return _transport_rate(pool, args.pool_unroll * per_actor, args.seconds * args.reps)


INFERENCE_MODES = ("actor", "server", "zero-cost")  # what bench inference times beside the raw envs


class UniformPolicy(torch.nn.Module):
    """The zero-cost policy of the inference benchmark: uniform random actions, no network, no state."""

    def __init__(self, num_actions: int):
        super().__init__()
        self.num_actions = self.num_logits = num_actions  # one Discrete space: a logit per action
        self.action_space = CategoricalActions((num_actions,))
        self.return_stats = None  # no reward scaling

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> tuple:
        return ()

    def env_actions(self, actions: torch.Tensor) -> torch.Tensor:
        return actions

    def act(self, obs: torch.Tensor, prev_reward: torch.Tensor, prev_action: torch.Tensor, done: torch.Tensor,
            state: tuple, sample: bool = True, generator: torch.Generator | None = None) -> tuple:
        n = obs.shape[0]
        action = torch.randint(self.num_actions, (n,), device=obs.device, generator=generator)
        return action, torch.zeros(n, self.num_actions, device=obs.device), ()


def _raw_worker(env_name: str, env_options: dict, num_envs: int, seed: int, seconds: float, out) -> None:
    """Step ``num_envs`` envs with uniform random actions for ``seconds``; send the steps taken."""
    import numpy as np

    import envs

    env = envs.make(env_name, num_envs=num_envs, seed=seed, **env_options)
    env.reset()
    rng = np.random.default_rng(seed)
    actions = [rng.integers(0, env.num_actions, num_envs) for _ in range(64)]
    for j in range(64):  # warm-up
        env.step(actions[j])
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(actions[calls % 64])
        calls += 1
    out.send(num_envs * calls / (time.perf_counter() - start))
    env.close()


def _raw_rate(env_name: str, env_options: dict, workers: int, num_envs: int, seconds: float) -> float:
    """Env-steps/s of ``workers`` processes stepping their envs with random actions: no policy, no transport."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    pipes = [ctx.Pipe(duplex=False) for _ in range(workers)]
    procs = [ctx.Process(target=_raw_worker, args=(env_name, env_options, num_envs, i, seconds, pipes[i][1]))
             for i in range(workers)]
    for p in procs:
        p.start()
    rates = [pipe[0].recv() for pipe in pipes]
    for p in procs:
        p.join()
    return sum(rates)


def _transport_rate(transport, steps_per_batch: int, seconds: float) -> float:
    """Env-steps/s delivered by ``transport`` to a learner that only takes batches, after 1 s of warm-up."""
    with transport:
        start = time.perf_counter()
        while time.perf_counter() - start < 1.0:
            transport.get_batch()
        batches, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            transport.get_batch()
            batches += 1
        return batches * steps_per_batch / (time.perf_counter() - start)


def bench_inference(args: argparse.Namespace) -> None:
    """Env-steps/s of the acting side (no learner), and its fraction of the raw envs, side by side:

    * raw: ``--num-actors`` processes stepping their envs with random actions (no policy, no transport);
    * actor mode: :class:`agents.acting.actor.ActorPool`, each process running a CPU copy of the policy;
    * server mode: :class:`agents.acting.inference.InferenceServer`, the policy batched on ``--device``,
      with each of ``--splits`` (actor.server.worker_splits: units per worker that take turns) and each of
      ``--wait-ms`` (actor.server.max_wait_ms: how long a batch waits for more units);
    * server, zero-cost policy: the same with uniform random actions and no network, which
      isolates what the transport itself costs.

    ``--modes`` picks which of the last three to time. The policy is the entry point's network and
    core at its defaults (``launch/configs``) with ``--flags`` over them, in one torch thread per
    actor process; the server's policy takes ``--threads`` torch threads.
    Repetitions are interleaved (round robin) and medians compared.
    """
    import envs
    from agents.acting.transport import EnvSetup
    from agents.config import options
    from agents.learning.learner import make_transport
    from agents.learning.training import resolve_device
    from agents.run_config import build_model
    from launch import atari, maze

    flags = ["--core", args.core, "--num_actors", str(args.num_actors), "--actor.envs_per_actor",
             str(args.envs_per_actor), "--learner.batch_size", str(args.envs_per_actor), "--actor.unroll_length",
             str(args.unroll), "--device", args.device]
    flags += args.flags
    cfg = maze.load(flags) if args.env == "maze" else atari.load(flags + ["--game", args.game])
    device = resolve_device(cfg.run.device)
    torch.set_num_threads(args.threads)
    env_options = options(cfg.env)
    env_spec = envs.spec(cfg.env.name, **env_options)
    obs_shape, (num_actions,) = env_spec.observation_shape, env_spec.action_sizes  # the maze's and Atari's: Discrete
    obs_dtype = torch.from_numpy(np.zeros(0, env_spec.observation_dtype)).dtype
    model = build_model(cfg, obs_shape, num_actions).to(device)
    W, E, T = args.num_actors, args.envs_per_actor, args.unroll
    seeds = list(range(W))

    def transport(inference: str, policy: torch.nn.Module, splits: int = 1, wait_ms: float = 0.0) -> float:
        cfg.actor.inference, cfg.actor.server.worker_splits, cfg.actor.server.max_wait_ms = inference, splits, wait_ms
        setup = EnvSetup(cfg.env.name, env_options, seeds, obs_shape, obs_dtype)
        return _transport_rate(make_transport(cfg, policy, device=device, envs=setup, seed=0), T * E, args.seconds)

    def label(k: int, wait_ms: float) -> str:
        return f"{k} split{'s' * (k > 1)}" + (f", wait {wait_ms:g} ms" if len(waits) > 1 else "")

    zero_cost = UniformPolicy(num_actions).to(device)
    waits = args.wait_ms or [cfg.actor.server.max_wait_ms]
    servers = [(k, w) for k in args.splits for w in waits]
    modes = {"raw envs": lambda: _raw_rate(cfg.env.name, env_options, W, E, args.seconds)}
    if "actor" in args.modes:
        modes["actor mode"] = lambda: transport("actor", model)
    if "server" in args.modes:
        modes.update({f"server mode, {label(k, w)}": functools.partial(transport, "server", model, k, w)
                      for k, w in servers})
    if "zero-cost" in args.modes:
        modes.update({f"server, zero-cost, {label(k, w)}": functools.partial(transport, "server", zero_cost, k, w)
                      for k, w in servers})
    rates: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(args.reps):
        for mode, run in modes.items():
            rates[mode].append(run())
    med = {m: statistics.median(r) for m, r in rates.items()}
    print(f"{args.env}{' ' + args.game if args.env == 'atari' else ''}, core {args.core}, {W} processes x {E} envs, "
          f"unroll {T}, policy on {device}, median of {args.reps} x {args.seconds:g} s, {os.cpu_count()} cpus")
    actor = med.get("actor mode", math.nan)
    print(f"{'mode':<40}{'steps/s':>10}{'vs raw':>8}{'vs actor':>9}")
    for mode, rate in med.items():
        print(f"{mode:<40}{rate:>10.0f}{rate / med['raw envs']:>8.2f}{rate / actor:>9.2f}")


def bench_backends(args: argparse.Namespace) -> None:
    """End-to-end training steps/s of the same run on the local backend and on Ray, side by side:
    repetitions alternate local and ray runs of ``--steps`` steps each (fresh run directories),
    and the medians of the runs' final SPS are compared. Ray is a local one with every CPU here,
    or (``--fake-nodes K``) a ``ray.cluster_utils.Cluster`` of K nodes on this machine, which
    spreads the hosts over K raylets as a real cluster would."""
    import ray

    from agents.learning.learner import train
    from launch import atari, maze

    cluster = None
    if args.fake_nodes:
        from ray.cluster_utils import Cluster

        cpus = os.cpu_count() or 2
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": cpus, "include_dashboard": False})
        for _ in range(args.fake_nodes - 1):
            cluster.add_node(num_cpus=cpus)
        ray.init(address=cluster.address, configure_logging=False, log_to_driver=False)
    else:
        ray.init(include_dashboard=False, configure_logging=False, log_to_driver=False)
    load = maze.load if args.env == "maze" else atari.load
    extra = ["--game", args.game] if args.env == "atari" else []
    sps: dict[str, list[float]] = {"local": [], "ray": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for backend in sps:
                cfg = load(["--core", args.core, "--total_steps", str(args.steps), "--run_dir", f"{tmp}/{backend}{rep}",
                            "--actor.backend", backend, "--log.tensorboard", "false", "--log.print_every_s", "1e9",
                            *extra, *args.flags])
                sps[backend].append(train(cfg)["sps"])
    ray.shutdown()
    if cluster is not None:
        cluster.shutdown()
    med = {b: statistics.median(r) for b, r in sps.items()}
    where = f"fake {args.fake_nodes}-node cluster" if args.fake_nodes else "local Ray"
    env = f"{args.env} {args.game}" if args.env == "atari" else args.env
    print(f"{env}, core {args.core}, {args.steps:,} steps per run, median of {args.reps}, Ray: {where}, "
          f"{os.cpu_count()} cpus")
    for backend, runs in sps.items():
        print(f"{backend:<8}{med[backend]:>10.0f} steps/s  (runs: {', '.join(f'{r:.0f}' for r in runs)})")
    print(f"ray / local: {med['ray'] / med['local']:.2f}")


def bench_training(args: argparse.Namespace) -> None:
    """End-to-end training steps/s of an entry point's run beside its raw envs, side by side, and
    what each part of a step costs.

    * raw envs: ``actor.num_actors`` processes of ``actor.envs_per_actor`` envs each, stepped with
      random actions (the run's own layout, no policy, no learner);
    * training: the run itself for ``--steps`` steps (fresh run directory each time), its SPS from
      the first update to the end. Repetitions alternate the two, and medians are compared.

    The parts, each timed alone in this process, in core-ms per env step: the env (one process
    of the run's envs on one thread), acting (the policy's forward on one actor's envs, 1 torch thread, as an
    actor runs it) and learning (``learn_from_batch`` on one batch of the run's shape: every
    epoch and minibatch, in ``run.num_threads`` threads). Their sum bounds what the machine's
    cores can train; what end to end loses beyond it is transport, copies and waiting.
    """
    import envs
    from agents.config import options
    from agents.learning.learner import learn_from_batch, train
    from agents.learning.training import Trainer
    from agents.run_config import build_model
    from launch import atari, maze

    load = maze.load if args.env == "maze" else atari.load
    extra = ["--game", args.game] if args.env == "atari" else []
    quiet = ["--log.tensorboard", "false", "--log.print_every_s", "1e9", "--total_steps", str(args.steps)]
    rates: dict[str, list[float]] = {"raw envs": [], "training": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            cfg = load([*extra, *args.flags, *quiet, "--run_dir", f"{tmp}/run{rep}"])
            a = cfg.actor
            rates["raw envs"].append(_raw_rate(cfg.env.name, options(cfg.env), a.num_actors, a.envs_per_actor,
                                               args.seconds))
            rates["training"].append(train(cfg)["sps"])
        med = {m: statistics.median(r) for m, r in rates.items()}
        print(f"{cfg.env.name}{' ' + args.game if args.env == 'atari' else ''}, core {cfg.core.name}, "
              f"{a.num_actors} x {a.envs_per_actor} envs, {args.steps:,} training steps per run, median of "
              f"{args.reps}, {os.cpu_count()} cpus")
        for mode, runs in rates.items():
            print(f"{mode:<12}{med[mode]:>10.0f} steps/s  (runs: {', '.join(f'{r:.0f}' for r in runs)})")
        print(f"training / raw envs: {med['training'] / med['raw envs']:.2f}")

        one_thread = {**options(cfg.env), **({"num_threads": 1} if "num_threads" in options(cfg.env) else {})}
        probe = envs.make(cfg.env.name, num_envs=a.envs_per_actor, seed=0, **one_thread)
        obs = torch.from_numpy(probe.reset())
        env_ms = 1000.0 / _raw_rate(cfg.env.name, one_thread, 1, a.envs_per_actor, args.seconds)  # on one core
        learn_threads = cfg.run.num_threads or torch.get_num_threads()
        model = build_model(cfg, tuple(probe.observation_shape), envs.action_sizes(probe),
                            action_dim=getattr(probe, "action_dim", 0))
        E, T, N = a.envs_per_actor, a.unroll_length, cfg.learner.batch_size
        actions = model.action_space
        torch.set_num_threads(1)
        state, zeros = model.initial_state(E), torch.zeros(E)
        no_action = torch.zeros((E, *actions.action_shape), dtype=actions.action_dtype)
        act = lambda: model.act(obs, zeros, no_action, zeros.bool(), state)  # noqa: E731
        act_ms = _median_ms(act, args.reps * 10) / E
        torch.set_num_threads(learn_threads)
        big = obs[torch.randint(0, E, (T + 1, N))]
        batch = {"obs": big, "reward": torch.randn(T + 1, N).sign(), "done": torch.rand(T + 1, N) < 0.01,
                 "action": (torch.randn(T + 1, N, *actions.action_shape) if actions.continuous
                            else torch.randint(0, actions.num_actions, (T + 1, N))),
                 "final_value": torch.zeros(T + 1, N),
                 "logits": torch.randn(T + 1, N, model.num_logits),
                 **{f"state_{i}": s.expand(N, *s.shape[1:]).clone() for i, s in enumerate(model.initial_state(1))}}
        trainer = Trainer(model, cfg.optim, total_updates=1e9, run_dir=f"{tmp}/parts", config=cfg, keep=1)
        generator = torch.Generator().manual_seed(0)
        learn_ms = _median_ms(lambda: learn_from_batch(trainer, model, batch, cfg, generator), args.reps) / (T * N)
        learn_ms *= learn_threads  # core-ms
        probe.close()
    total = env_ms + act_ms + learn_ms
    print(f"core-ms per env step: env {env_ms:.3f}, act {act_ms:.3f}, learn {learn_ms:.3f} "
          f"({cfg.learner.epochs} epochs x {cfg.learner.minibatches} minibatches); sum {total:.3f}, so "
          f"{os.cpu_count()} cores train at most {1000 * (os.cpu_count() or 1) / total:.0f} steps/s")


def _median_ms(fn: Callable[[], Any], reps: int) -> float:
    """Median wall time of ``fn()`` in ms, after one warm-up call."""
    fn()
    times = []
    for _ in range(max(reps, 3)):
        start = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def _add_run_choice(parser: argparse.ArgumentParser) -> None:
    """--env, --game and --core: the training run a benchmark builds from the entry point's config."""
    parser.add_argument("--env", choices=["maze", "atari"], default="maze")
    parser.add_argument("--game", default="Pong", help="Atari game (--env atari)")
    parser.add_argument("--core", default="lstm", choices=list(CORES))


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
                       help="also time the actor pool with A processes (default: one per core; 0: skip)")
    atari.set_defaults(run=bench_atari)
    inference = sub.add_parser("inference", help="acting-side steps/s: raw envs, actor mode, server mode, zero-cost")
    _add_run_choice(inference)
    inference.add_argument("--num-actors", type=int, default=2, help="actor or env worker processes")
    inference.add_argument("--envs-per-actor", type=int, default=64)
    inference.add_argument("--unroll", type=int, default=20)
    inference.add_argument("--device", default="auto", help="where server mode runs the policy (auto: cuda if any)")
    inference.add_argument("--seconds", type=float, default=4.0, help="length of one timing")
    inference.add_argument("--reps", type=int, default=3)
    inference.add_argument("--threads", type=int, default=1,
                           help="torch threads of the server's policy on the CPU (the learner's process)")
    inference.add_argument("--splits", type=int, nargs="+", default=[1, 2],
                           help="server mode with each of these actor.server.worker_splits")
    inference.add_argument("--wait-ms", type=float, nargs="+", default=None,
                           help="server mode with each of these actor.server.max_wait_ms (default: the config's)")
    inference.add_argument("--modes", nargs="+", choices=INFERENCE_MODES, default=list(INFERENCE_MODES),
                           help="what to time (default: all; raw envs are always timed, as the reference)")
    inference.add_argument("--flags", nargs=argparse.REMAINDER, default=[],
                           help="more flags for the entry point's config, e.g. --flags --env.num_threads 1 (last)")
    inference.set_defaults(run=bench_inference)
    backends = sub.add_parser("backends", help="end-to-end training SPS: local backend vs Ray, side by side")
    _add_run_choice(backends)
    backends.add_argument("--steps", type=int, default=1_000_000, help="steps per training run")
    backends.add_argument("--reps", type=int, default=3)
    backends.add_argument("--fake-nodes", type=int, default=0, help="K > 0: Ray on a fake K-node cluster")
    backends.add_argument("--flags", nargs=argparse.REMAINDER, default=[],
                          help="more flags for both runs, e.g. --flags --num_actors 4 (last)")
    backends.set_defaults(run=bench_backends)
    training = sub.add_parser("training", help="end-to-end training SPS vs the raw envs, and each part's cost")
    training.add_argument("--env", choices=["maze", "atari"], default="atari")
    training.add_argument("--game", default="Pong", help="Atari game (--env atari)")
    training.add_argument("--steps", type=int, default=100_000, help="steps per training run")
    training.add_argument("--seconds", type=float, default=8.0, help="length of one timing of the raw envs")
    training.add_argument("--reps", type=int, default=2)
    training.add_argument("--flags", nargs=argparse.REMAINDER, default=[],
                          help="flags for the run, e.g. --flags --config launch/configs/atari_cpu.yaml (last)")
    training.set_defaults(run=bench_training)
    peers.add_parser(sub)
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
