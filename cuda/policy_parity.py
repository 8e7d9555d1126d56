"""GPU workbench: does a checkpoint's policy act on the GPU as it does on the CPU?

The eleventh Pong run (2026-11-28) reached +2.8 in training, with actions sampled by the
inference server on the GPU. Its checkpoint, played on the CPU, scored +0.5 and +1.7 with argmax
actions but -10.2 with sampled ones (30 games), and every CPU path agreed: launch/evaluate.py,
the inference server run on the CPU, a plain loop. Resumed on the CPU with learning on, the
same weights made -1.4 over their first 48 games: the moving policy of training outplays the
frozen snapshot. Whether the GPU adds to the rest of the gap is what this checks.

This plays whole games of the checkpoint on ``--device`` with sampled actions, as the server
does, in launch/evaluate.py's game loop, and records every step's inputs and logits. Then it
replays those inputs step by step, the core state carried, on the CPU (float32, the PyTorch
reference kernels), then on ``--device`` with TF32 off and the reference kernels, then on
``--device`` as played (a control: it must match). Per variant and stretch of time: the mean
KL(played || replayed), the largest logit gap and how often the argmax agrees. It also prints
the mean score of the games played, and whether the sampler took the most likely action as
often as its probability says.

    python cuda/policy_parity.py atari_checkpoint.pt --device cuda --envs 16

Runs on the CPU too (``--device cpu``: every variant is then the CPU's).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import envs
from agents.config import options
from fastnet.kernels import kernel_mode, set_kernel_mode
from launch.evaluate import act_on_rows, load_agent, play


class RecordingPolicy:
    """A policy for :func:`launch.evaluate.play` (the protocol's own game loop): sampled actions from
    ``model`` on ``device``, as the inference server acts, keeping every step's ``records``
    (inputs (obs, prev_reward, prev_action, done) on the CPU, logits [n,A] on the CPU, actions [n],
    and the games they are for: ``rows`` [n], those still playing)."""

    def __init__(self, model, *, num_envs: int, device: torch.device, seed: int):
        self.model, self.device = model, device
        self.state = model.initial_state(num_envs, device)
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.records: list = []

    def __call__(self, obs: np.ndarray, reward: np.ndarray, action: np.ndarray, done: np.ndarray,
                 rows: np.ndarray) -> np.ndarray:
        # copies (np.array): an env may reuse its arrays
        inputs = tuple(torch.from_numpy(np.array(x)) for x in (obs, reward, action, done))
        chosen, logits, self.state = act_on_rows(self.model, self.state, rows, [x.to(self.device) for x in inputs],
                                                 sample=True, generator=self.generator)
        chosen = chosen.cpu()
        self.records.append((inputs, logits.float().cpu(), chosen, rows.copy()))
        return chosen.numpy()


def played_by(records: list, games: int) -> list[torch.Tensor]:
    """The recorded logits of games ``0 .. games-1``, at each step where one of them played."""
    return [logits[rows < games] for _, logits, _, rows in records if (rows < games).any()]


def replay(model, records: list, *, games: int, device: torch.device) -> list[torch.Tensor]:
    """The logits of ``model`` on ``device`` for the recorded inputs of games ``0 .. games-1``, one
    step at a time with the core state carried (argmax actions: nothing is sampled)."""
    state = model.initial_state(games, device)
    out = []
    for inputs, _, _, rows in records:
        if (mine := rows < games).any():
            _, logits, state = act_on_rows(model, state, rows[mine], [x[mine].to(device) for x in inputs],
                                           sample=False)
            out.append(logits.float().cpu())
    return out


def compare(played: list[torch.Tensor], replayed: list[torch.Tensor], bins: int) -> list[tuple]:
    """Per stretch of time (``bins`` of them): (first step, mean KL(played || replayed) in nats,
    largest |logit gap|, share of steps whose argmax agrees)."""
    rows = []
    for chunk in np.array_split(np.arange(len(played)), bins):
        played_logits, replayed_logits = (torch.cat([logits[t] for t in chunk]) for logits in (played, replayed))
        p, q = played_logits.log_softmax(-1), replayed_logits.log_softmax(-1)
        kl = (p.exp() * (p - q)).sum(-1).mean().item()
        gap = (played_logits - replayed_logits).abs().max().item()
        agree = (p.argmax(-1) == q.argmax(-1)).float().mean().item()
        rows.append((int(chunk[0]), kl, gap, agree))
    return rows


def on_device_without_tf32(model, records, *, games: int, device: torch.device) -> list[torch.Tensor]:
    """:func:`replay` on ``device`` with TF32 off (cuDNN and matmuls) and the reference kernels."""
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32, kernel_mode())
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    set_kernel_mode("reference")
    try:
        return replay(model, records, games=games, device=device)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved[:2]
        set_kernel_mode(saved[2])


def main(argv: list[str] | None = None) -> dict[str, list]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--envs", type=int, default=16, help="games played at once")
    ap.add_argument("--games", type=int, default=1, help="whole games each env plays")
    ap.add_argument("--replay-envs", type=int, default=8, help="how many of the games each variant replays")
    ap.add_argument("--bins", type=int, default=6, help="stretches of time the comparison is reported in")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    model, cfg, counters = load_agent(args.checkpoint)
    games = [envs.make(cfg.env.name, num_envs=1, seed=args.seed + i, **options(cfg.env)) for i in range(args.envs)]
    start = time.time()
    policy = RecordingPolicy(model.to(device), num_envs=args.envs, device=device, seed=args.seed)
    try:
        scores, _ = play(games, policy, args.games)
    finally:
        for game in games:
            game.close()
    records, scores = policy.records, [s for per_env in scores for s in per_env]
    print(f"{cfg.env.name} {getattr(cfg.env, 'game', '')}, core {cfg.core.name}, step {counters['step']:,}: "
          f"{len(scores)} games on {device} ({len(records)} steps of up to {args.envs} games, "
          f"{time.time() - start:.0f} s), "
          f"sampled actions: mean score {np.mean(scores):.2f}")
    logits = torch.cat([r[1] for r in records])
    chosen = torch.cat([r[2] for r in records])
    print(f"the sampler: the most likely action taken at {(chosen == logits.argmax(-1)).float().mean():.3f} of the "
          f"steps, its mean probability {logits.softmax(-1).max(-1).values.mean():.3f} (they match if it is unbiased)")
    replayed = min(args.replay_envs, args.envs)
    played = played_by(records, replayed)
    variants = {  # the CPU first: the comparison the workbench is for
        "cpu, float32, reference kernels": lambda: replay(model.cpu(), records, games=replayed,
                                                          device=torch.device("cpu")),
        f"{device}, no TF32, reference kernels": lambda: on_device_without_tf32(model.to(device), records,
                                                                              games=replayed, device=device),
        f"{device}, as played (control)": lambda: replay(model.to(device), records, games=replayed, device=device),
    }
    report = {}
    for name, run in variants.items():
        start = time.time()
        report[name] = compare(played, run(), args.bins)
        print(f"\nreplayed on {name} ({replayed} games, {time.time() - start:.0f} s)")
        print(f"{'from step':>9} {'KL (nats)':>11} {'max |dlogit|':>13} {'argmax agrees':>14}")
        for first, kl, gap, agree in report[name]:
            print(f"{first:>9} {kl:>11.2e} {gap:>13.2e} {agree:>14.3f}")
    return report


if __name__ == "__main__":
    main()
