"""One command for a machine with a GPU: every fastnet Triton kernel against its PyTorch reference on
the device, then forward+backward timings against the reference and against fla (flash-linear-attention,
when it imports).

    python cuda/smoke.py [--dtype bf16|fp32] [--quick]

1. The self-check of ``kernels=auto`` (``fastnet.kernels.cases``): each kernel in fp32 on a tiny
   input, outputs and every input gradient against the fp64 reference.
2. At training sizes (RL: B=32, T=64, H=4, d=32; chunked kernels: B=4, T=2048, H=4, d=64, with resets
   at rate 1%): the same comparison in fp32 on the device (relative error < 1e-3), then the time of
   forward+backward (median, ``triton.testing.do_bench``) of the kernel in ``--dtype``, of the reference
   (fp32, on the GPU) and of fla's matching op (no resets: fla has no done mask; its state is [K, V] and
   it scales q by 1/sqrt(d) unless told scale=1).
3. Server mode on the device (``server_mode``): the inference loop with 2 units per env worker,
   on the device's stream and on a side stream, acts exactly as a sequential rollout of each
   unit's envs does (every unit's unrolls and the core state at their starts), over a few
   hundred batches, with the (unchanged) weights published after each; then a maze training
   run of 300 updates in server mode.

Exit status 1 if any check fails. Needs CUDA.
"""
from __future__ import annotations

import argparse

import torch

from fastnet.kernels.benchmark import time_forward_backward

RL, LONG = (32, 64, 4, 32), (4, 2048, 4, 64)
CHECK_TOL = 1e-3


def fla_ops() -> dict:
    """fla's ops matching ours, as functions of our batch-major inputs (q, k, v, beta, W0[, g])."""
    try:
        from fla.ops.delta_rule import chunk_delta_rule, fused_recurrent_delta_rule
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
    except Exception as e:  # noqa: BLE001
        print(f"fla not available ({type(e).__name__}: {e}); timing without it")
        return {}
    kw = lambda W0: dict(scale=1.0, initial_state=W0.transpose(-1, -2).float(), output_final_state=True)  # noqa: E731
    return {
        ("fused_recurrent", "delta"): lambda q, k, v, b, W0: fused_recurrent_delta_rule(q, k, v, b, **kw(W0)),
        ("fused_recurrent", "gated_delta"): lambda q, k, v, b, W0, g: fused_recurrent_gated_delta_rule(
            q, k, v, g=g, beta=b, **kw(W0)),
        ("chunk", "delta"): lambda q, k, v, b, W0: chunk_delta_rule(q, k, v, b, **kw(W0)),
        ("chunk", "gated_delta"): lambda q, k, v, b, W0, g: chunk_gated_delta_rule(q, k, v, g, b, **kw(W0)),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"], help="inputs of the timed kernels")
    ap.add_argument("--quick", action="store_true", help="the self-check and the RL size only")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("cuda/smoke.py: needs CUDA, and torch.cuda.is_available() is False")
    from fastnet.kernels.cases import CASES, check, outputs_and_grads, relative_errors

    device, dtype = torch.device("cuda"), dict(bf16=torch.bfloat16, fp32=torch.float32)[a.dtype]
    failed = 0
    print("self-check (fp32, tiny input, outputs and input gradients vs the fp64 reference):")
    for op in CASES:
        why = check(op, device)
        failed += why is not None
        print(f"  {op:<16} {'ok' if why is None else 'FAILED: ' + why}")
    fla = fla_ops()
    rows = []
    for op, variants in CASES.items():
        B, T, H, d = LONG if op == "chunk" else RL
        if a.quick and op == "chunk":
            continue
        for variant, case in variants.items():
            gen = torch.Generator().manual_seed(0)
            inputs = [x.to(device) for x in case.inputs(B, T, H, d, gen)]
            done = (torch.rand(B, T, generator=gen) < 0.01).to(device)
            got = outputs_and_grads(case.kernel, inputs, done)
            err = max(relative_errors(got, outputs_and_grads(case.reference, [x.double() for x in inputs], done)))
            failed += not err < CHECK_TOL
            leaves = [x.to(dtype).requires_grad_(True) for x in inputs]
            ms = {"kernel": time_forward_backward(lambda *xs, f=case.kernel, d=done: f(*xs, d), leaves)[0]}
            ms["reference"] = time_forward_backward(lambda *xs, f=case.reference, d=done: f(*xs, d),
                                    [x.float().requires_grad_(True) for x in inputs])[0]
            if (op, variant) in fla:
                ms["fla"] = time_forward_backward(fla[(op, variant)], leaves)[0]
            rows.append((op, variant, (B, T, H, d), err, ms))
    print(f"\n{'op':<16} {'variant':<12} {'B,T,H,d':<16} {'rel err':>8} {'kernel ms':>10} {'ref ms':>9} "
          f"{'fla ms':>8} {'vs ref':>7} {'vs fla':>7}")
    for op, variant, shape, err, ms in rows:
        fla_ms = ms.get("fla", float("nan"))
        print(f"{op:<16} {variant:<12} {','.join(map(str, shape)):<16} {err:>8.1e} {ms['kernel']:>10.3f} "
              f"{ms['reference']:>9.2f} {fla_ms:>8.3f} {ms['reference'] / ms['kernel']:>7.1f} "
              f"{fla_ms / ms['kernel']:>7.2f}{'' if err < CHECK_TOL else '  FAILED'}")
    failed += server_mode(device, quick=a.quick)
    print(f"\n{'all checks passed' if not failed else f'{failed} check(s) FAILED'}")
    return int(bool(failed))


def sequential_rollout(model: torch.nn.Module, env: object, steps: int, device: torch.device) -> tuple[dict, list]:
    """The argmax rollout of ``env`` one step at a time: the rows (the transport's layout) and the
    core state before each row."""
    n = env.num_envs
    row = {"obs": torch.from_numpy(env.reset()).to(device), "reward": torch.zeros(n, device=device),
           "done": torch.ones(n, dtype=torch.bool, device=device),
           "action": torch.zeros(n, dtype=torch.int64, device=device)}
    state = model.initial_state(n, device)
    rows, states = [], []
    for _ in range(steps):
        rows.append(row)
        states.append(state)
        action, _, state = model.act(row["obs"], row["reward"], row["action"], row["done"], state, sample=False)
        obs, reward, done, _ = env.step(action.cpu().numpy())
        row = {"obs": torch.from_numpy(obs).to(device), "reward": torch.from_numpy(reward).to(device),
               "done": torch.from_numpy(done).to(device), "action": action}
    return {k: torch.stack([r[k] for r in rows]) for k in rows[0]}, states


def server_mode(device: torch.device, quick: bool = False) -> int:
    """Step 3 of the module docstring; returns the number of failed checks."""
    import envs
    from agents.acting.inference import InferenceServer, split_seed
    from agents.acting.transport import ActorConfig, EnvSetup, ServerConfig
    from agents.learning.learner import train
    from agents.network import AgentNet
    from launch import maze

    failed = 0
    workers, splits, e, T, batches = 2, 2, 4, 8, 50 if quick else 300
    probe = envs.make("gym", num_envs=1, id="CartPole-v1")
    torch.manual_seed(0)
    model = AgentNet(tuple(probe.observation_shape), probe.num_actions, "lstm", {"hidden_size": 32}).to(device)
    with torch.no_grad():
        model.policy.weight.mul_(30)  # decisive argmax actions
    model.eval()
    for side_stream in (False, True):
        server = InferenceServer(
            model, envs=EnvSetup("gym", {"id": "CartPole-v1"}, [10 + w for w in range(workers)],
                                 tuple(probe.observation_shape), torch.float32),
            actor=ActorConfig(num_actors=workers, envs_per_actor=e * splits, unroll_length=T,
                              server=ServerConfig(worker_splits=splits, side_stream=side_stream)),
            batch_size=e * 2, device=device, sample=False)
        units = workers * splits
        count = [0] * units
        references = [sequential_rollout(model, envs.make("gym", num_envs=e, seed=split_seed(10 + u // splits,
                                                                                     u % splits), id="CartPole-v1"),
                                         (batches + 2) * T, device) for u in range(units)]
        mismatches = 0
        with server:
            for _ in range(batches):
                batch = {key: value.to(device) for key, value in server.get_batch().items()}  # as the learner
                server.publish_weights(model)  # the same weights: runs the side stream's weight events
                for g in range(batch["env_slot"].shape[0] // e):
                    unit = int(batch["env_slot"][g * e]) // e
                    rows, states = references[unit]
                    k, cols = count[unit], slice(g * e, (g + 1) * e)
                    span = slice(k * T, k * T + T + 1)
                    same = all(torch.equal(batch[key][:, cols], rows[key][span]) for key in ("obs", "done", "action"))
                    same = same and all(torch.allclose(batch[f"state_{i}"][cols], s, atol=1e-4)
                                        for i, s in enumerate(states[k * T]))
                    mismatches += not same
                    count[unit] += 1
        ok = mismatches == 0 and min(count) > 0
        failed += not ok
        print(f"server mode ({'side stream' if side_stream else 'one stream'}): {sum(count)} unrolls of "
              f"{units} units vs their sequential rollouts: {'ok' if ok else f'{mismatches} differ: FAILED'}")
    import tempfile

    with tempfile.TemporaryDirectory() as run_dir:
        updates = 60 if quick else 300
        flags = ["--core", "lstm", "--device", str(device), "--actor.inference", "server", "--run_dir", run_dir,
                 "--log.tensorboard", "false"]
        cfg = maze.load(flags)
        cfg.run.total_steps = updates * cfg.learner.batch_size * cfg.actor.unroll_length
        summary = train(cfg)
        ok = summary["updates"] == updates
        failed += not ok
        print(f"server-mode maze training: {summary['updates']} updates, {summary['sps']:,.0f} SPS, mean return "
              f"{summary['mean_return']:.1f}: {'ok' if ok else 'FAILED'}")
    return failed


if __name__ == "__main__":
    raise SystemExit(main())
