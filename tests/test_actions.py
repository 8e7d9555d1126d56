"""The factorised categorical policy of MultiDiscrete spaces (agents/actions.py): log-probs and
entropies against a float64 hand sum, the action index against numpy's mixed radix, sampling
against the softmax, step mode equal to sequence mode, and tiny runs on POPGym's MultiDiscrete envs."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

from agents.actions import CategoricalActions
from agents.learning.losses import LossConfig, Unrolls, actor_critic_losses
from agents.network import AgentNet
from launch import evaluate, train

SIZES = (3, 4, 2)


def test_log_prob_and_entropy_are_sums_over_the_components_by_hand():
    torch.manual_seed(0)
    space = CategoricalActions(SIZES)
    logits = torch.randn(5, 2, sum(SIZES), dtype=torch.float64)
    actions = torch.randint(0, math.prod(SIZES), (5, 2))
    want_log_prob, want_entropy = np.zeros((5, 2)), 0.0
    for t in range(5):
        for b in range(2):
            rest, parts = int(actions[t, b]), []
            for n in reversed(SIZES):
                parts.insert(0, rest % n)
                rest //= n
            start = 0
            for n, a in zip(SIZES, parts):
                z = logits[t, b, start:start + n].numpy()
                p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
                want_log_prob[t, b] += math.log(p[a])
                want_entropy -= float((p * np.log(p)).sum())
                start += n
    np.testing.assert_allclose(space.log_prob(logits, actions).numpy(), want_log_prob, rtol=1e-12)
    assert space.entropy_sum(logits).item() == pytest.approx(want_entropy, rel=1e-12)
    terms, _ = actor_critic_losses(Unrolls(logits, logits, actions, torch.zeros(5, 2, dtype=torch.float64),
                                           torch.full((5, 2), 0.9, dtype=torch.float64),
                                           torch.zeros(5, 2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64),
                                           action_space=space), LossConfig())
    assert terms["entropy"].item() == pytest.approx(want_entropy, rel=1e-12)


def test_the_action_index_is_numpys_mixed_radix_and_one_hots_sit_side_by_side():
    space = CategoricalActions(SIZES)
    grid = np.stack(np.meshgrid(*[np.arange(n) for n in SIZES], indexing="ij"), -1).reshape(-1, len(SIZES))
    index = np.ravel_multi_index(grid.T, SIZES)
    assert torch.equal(space.index(torch.from_numpy(grid)), torch.from_numpy(index))
    assert torch.equal(space.components(torch.from_numpy(index)), torch.from_numpy(grid))
    one_hot = space.one_hot(torch.tensor([np.ravel_multi_index((2, 1, 1), SIZES)]))
    assert one_hot.tolist() == [[0, 0, 1, 0, 1, 0, 0, 0, 1]]
    assert (space.num_actions, space.num_logits) == (24, 9)


def test_sampling_draws_each_component_from_its_softmax_and_the_mode_is_each_argmax():
    space = CategoricalActions((3, 2))
    logits = torch.tensor([[0.0, 1.0, 2.0, 0.5, -0.5]]).expand(20_000, 5)
    parts = space.components(space.sample(logits, torch.Generator().manual_seed(0)))
    for k, (chunk, n) in enumerate(zip(logits[0].split((3, 2)), (3, 2))):
        freq = torch.bincount(parts[:, k], minlength=n).double() / len(parts)
        torch.testing.assert_close(freq, torch.softmax(chunk.double(), 0), atol=0.015, rtol=0)
    assert space.mode(logits[:1]).item() == 2 * 2 + 0


def test_a_multidiscrete_policy_acts_in_step_mode_as_in_sequence_mode():
    torch.manual_seed(0)
    model = AgentNet((6,), SIZES, "lstm", {"hidden_size": 16}).eval()
    T, B = 7, 3
    obs, reward = torch.randn(T, B, 6), torch.randn(T, B)
    action, done = torch.randint(0, 24, (T, B)), torch.rand(T, B) < 0.3
    logits_seq, _, _, _ = model(obs, reward, action, done, model.initial_state(B))
    state, logits_step = model.initial_state(B), []
    for t in range(T):
        _, logits, state = model.act(obs[t], reward[t], action[t], done[t], state)
        logits_step.append(logits)
    assert logits_seq.shape == (T, B, 9)
    torch.testing.assert_close(torch.stack(logits_step), logits_seq, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("env_id,sizes,mode", [("popgym:popgym-MineSweeperEasy-v0", (4, 4), "actor"),
                                               ("popgym:popgym-MineSweeperEasy-v0", (4, 4), "server"),
                                               ("popgym:popgym-BattleshipEasy-v0", (8, 8), "actor")])
def test_popgyms_multidiscrete_envs_train_resume_and_evaluate(env_id, sizes, mode, tmp_path, capsys):
    pytest.importorskip("popgym")
    run_dir = str(tmp_path / "run")
    flags = ["--env.id", env_id, "--run_dir", run_dir, "--num_actors", "1", "--actor.envs_per_actor", "4",
             "--learner.batch_size", "4", "--actor.unroll_length", "5", "--log.tensorboard", "false",
             "--core.hidden_size", "16", "--actor.inference", mode]
    assert train.main([*flags, "--total_steps", "100"])["step"] == 100
    assert train.main([*flags, "--total_steps", "200"])["step"] == 200 and "resuming" in capsys.readouterr().out
    checkpoint = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    assert checkpoint["model"]["policy.weight"].shape[0] == sum(sizes)
    results = evaluate.run([run_dir + "/checkpoint.pt", "--runs", "1", "--episodes", "2", "--workers", "1",
                            "--sample", "--out", str(tmp_path / "eval")])
    assert len(results) == 1 and math.isfinite(results[0]["mean"])
