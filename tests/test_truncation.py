"""Time limits are not terminations (Pardo et al. 2018, "Time limits in reinforcement learning"):
the envs report a cut episode and its last observation, every transport carries the acting
policy's value of that observation, and the learner's targets bootstrap from it, while a
termination's target stops at its reward."""
from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch

import envs
from agents.acting.actor import EnvRunner, create_buffers
from agents.acting.inference import InferenceServer
from agents.acting.transport import ActorConfig, EnvSetup
from agents.learning.learner import unrolls_of
from agents.learning.losses import actor_critic_losses
from launch.maze import load
from tests.test_inference import _policy

pytestmark = pytest.mark.usefixtures("one_torch_thread")

GAMMA = 0.9
CUT = {"id": "CartPole-v1", "max_episode_steps": 4}  # cut after 4 steps; the policy below keeps the pole up that long


def _targets_by_hand(rewards, done, truncated, final_value, values, bootstrap, lam):
    """Float64 loop: the λ-return targets of a T-step unroll per column, where a step that ends an
    episode has discount 0 and, if the episode was cut, gains γ·V(x_final)."""
    T, N = rewards.shape
    targets = np.zeros((T, N))
    for n in range(N):
        next_value, next_target = bootstrap[n], bootstrap[n]
        for t in reversed(range(T)):
            r = rewards[t, n] + (GAMMA * final_value[t, n] if truncated[t, n] else 0.0)
            g = 0.0 if done[t, n] else GAMMA
            targets[t, n] = r + g * ((1 - lam) * next_value + lam * next_target)
            next_value, next_target = values[t, n], targets[t, n]
    return targets


@pytest.mark.parametrize("estimator,lam", [("vtrace", 1.0), ("gae", 0.0), ("gae", 0.95)])
def test_targets_bootstrap_a_truncation_and_stop_at_a_termination(estimator, lam):
    """A 3-step unroll, three columns in one batch: a time limit cuts column 0's episode at its
    second step, column 1's episode terminates there, and column 2 has a termination then a cut.
    On-policy (behaviour = target logits), V-trace's targets are the λ = 1 returns."""
    T, N, A = 3, 3, 2
    rewards = np.array([[1.0, 1.0, 2.0], [3.0, 3.0, 0.5], [0.0, 0.0, 4.0]])  # r_1..r_T
    done = np.array([[0, 0, 1], [1, 1, 0], [0, 0, 1]], bool)  # done_1..done_T: step t+1 starts an episode
    truncated = np.array([[0, 0, 0], [1, 0, 0], [0, 0, 1]], bool)
    final_value = np.where(truncated, np.array([[0.0, 0.0, 0.0], [5.0, 5.0, 0.0], [0.0, 0.0, -2.0]]), 0.0)
    values = np.array([[0.5, 0.5, 1.5], [0.2, 0.2, -1.0], [0.7, 0.7, 0.3]])
    bootstrap = np.array([10.0, 10.0, 6.0])
    want = _targets_by_hand(rewards, done, truncated, final_value, values, bootstrap, lam)

    flags = ["--loss.discount", str(GAMMA), "--loss.popart", "false", "--loss.advantages", estimator,
             "--loss.gae_lambda", str(lam)] + (["--loss.clip", "0.2"] if estimator == "gae" else [])
    cfg = load(flags)
    logits = torch.randn(T + 1, N, A, dtype=torch.float64)
    pad = np.zeros((1, N))
    batch = {"reward": torch.tensor(np.concatenate([pad, rewards])), "done": torch.tensor(np.concatenate([pad, done]),
                                                                                       dtype=torch.bool),
             "final_value": torch.tensor(np.concatenate([pad, final_value])),
             "action": torch.randint(0, A, (T + 1, N)), "logits": torch.cat([logits[:1], logits[:-1]])}
    baseline = torch.tensor(np.concatenate([values, bootstrap[None]]))
    _, targets = actor_critic_losses(unrolls_of(logits, baseline, batch, cfg, None), cfg.loss)
    np.testing.assert_allclose(targets.numpy(), want, rtol=1e-6)  # the discounts are float32
    no_cut = _targets_by_hand(rewards, done, np.zeros_like(truncated), final_value, values, bootstrap, lam)
    assert not np.allclose(want[:, [0, 2]], no_cut[:, [0, 2]]) and np.allclose(want[:, 1], no_cut[:, 1])


def test_the_gym_adapter_reports_a_cut_and_its_last_observation_as_gymnasium_does():
    """CartPole cut after 4 steps: step 4 is done and truncated, and final_obs is what a plain
    Gymnasium env (same seed, same actions) returned at its 4th step; a fall is done, not truncated."""
    env = envs.make("gym", num_envs=2, seed=3, **CUT)
    env.reset()
    plain = gymnasium.make("CartPole-v1", max_episode_steps=4)
    plain.reset(seed=3)
    for t in range(4):
        obs, _, done, info = env.step(np.zeros(2, np.int64))
        want, _, terminated, cut, _ = plain.step(0)
        assert done.tolist() == [t == 3] * 2 and info["truncated"].tolist() == [t == 3] * 2
    assert not terminated and cut
    np.testing.assert_array_equal(info["final_obs"][0], want)
    assert not np.array_equal(obs[0], want)  # the observation is the new episode's
    fall = envs.make("gym", num_envs=1, seed=3, id="CartPole-v1")
    fall.reset()
    for _ in range(100):
        _, _, done, info = fall.step(np.zeros(1, np.int64))
        if done[0]:
            break
    assert done[0] and not info["truncated"][0] and "final_obs" not in info


def test_atari_reports_the_frame_limit_as_a_cut_with_its_last_frame_stack():
    """A game cut by max_episode_frames (40 frames: 10 steps) is truncated; its last stack is
    the stack before it shifted by one new frame, and the returned observation starts a new game."""
    pytest.importorskip("ale_py")
    env = envs.make("atari", num_envs=2, seed=0, game="Pong", max_episode_frames=40, noop_max=0,
                    sticky_action_prob=0.0)
    obs = env.reset()
    for t in range(10):
        previous = obs
        obs, _, done, info = env.step(np.zeros(2, np.int64))
        assert done.tolist() == [t == 9] * 2 and info["truncated"].tolist() == [t == 9] * 2
    np.testing.assert_array_equal(info["final_obs"][:, :-1], previous[:, 1:])
    assert not np.array_equal(info["final_obs"], obs)
    env.close()


def _sequence_value(model, episode):
    """V of the episode's last observation by the core in sequence mode over the whole episode
    from its initial state: the reference for a value computed step by step at acting time."""
    obs, reward, action = (torch.stack(episode[k])[:, None] for k in ("obs", "reward", "action"))
    done = torch.zeros(len(obs), 1, dtype=torch.bool)
    done[0] = True
    with torch.no_grad():
        return model(obs, reward, action, done, model.initial_state(1))[1][-1, 0]


@pytest.mark.parametrize("core", ["ff", "lstm"])
def test_actor_mode_stores_the_value_of_a_cut_episodes_last_observation(core):
    """EnvRunner's ``final_value`` at the cut step is V(x_final) as the core gives it in sequence
    mode over the episode ending in x_final (with the reward received and the action taken
    there); 0 at every other step."""
    model = _policy(core, "gym", CUT)
    with torch.no_grad():  # the other action first: the step into the cut then takes action 1, not the default 0
        model.policy.weight.neg_()
        model.policy.bias.neg_()
    env = envs.make("gym", num_envs=1, seed=1, **CUT)
    runner = EnvRunner(env, model, torch.tensor(0))
    out = {k: v[0] for k, v in create_buffers(1, 9, 1, env.observation_shape, torch.float32, model,
                                              model.initial_state(1)).items()}
    torch.manual_seed(0)
    runner.unroll(out)
    assert out["action"][4, 0] == 1
    plain = envs.make("gym", num_envs=1, seed=1, id="CartPole-v1")  # the same episode, uncut
    episode = {"obs": [torch.from_numpy(plain.reset()[0])], "reward": [torch.tensor(0.0)],
               "action": [torch.tensor(0)]}
    for t in range(1, 5):
        obs, reward, _, _ = plain.step(out["action"][t].numpy())
        episode["obs"].append(torch.from_numpy(obs[0]))
        episode["reward"].append(torch.from_numpy(reward)[0])
        episode["action"].append(out["action"][t, 0])
    assert out["done"][:, 0].tolist() == [True, False, False, False, True, False, False, False, True, False]
    want = _sequence_value(model, episode)
    assert out["final_value"][4, 0].item() == pytest.approx(want.item(), rel=1e-5, abs=1e-6) and want != 0
    assert not out["final_value"][[0, 1, 2, 3, 5, 6, 7], 0].any()


def test_server_mode_stores_the_values_that_a_sequential_rollout_computes():
    """Server mode (slots, state table, previous actions) gives the final values of a plain
    single-process argmax rollout of the same envs, with its cuts every 4 steps."""
    model = _policy("lstm", "gym", CUT)
    T, E = 3, 2
    probe = envs.make("gym", num_envs=1, **CUT)
    server = InferenceServer(model, envs=EnvSetup("gym", CUT, [10], tuple(probe.observation_shape), torch.float32),
                             actor=ActorConfig(num_actors=1, envs_per_actor=E, unroll_length=T), batch_size=E,
                             device=torch.device("cpu"), sample=False)
    env = envs.make("gym", num_envs=E, seed=10, **CUT)
    obs, reward, action = torch.from_numpy(env.reset()), torch.zeros(E), torch.zeros(E, dtype=torch.int64)
    done, state, want = torch.ones(E, dtype=torch.bool), model.initial_state(E), [torch.zeros(E)]
    for _ in range(4 * T):
        action, _, state_after = model.act(obs, reward, action, done, state, sample=False)
        obs, reward, done, info = env.step(action.numpy())
        obs, reward, done = torch.from_numpy(obs), torch.from_numpy(reward), torch.from_numpy(done)
        cut = torch.from_numpy(info["truncated"])
        want.append(torch.where(cut, model.final_values(torch.from_numpy(info["final_obs"]), reward, action,
                                                        state_after), 0.0) if cut.any() else torch.zeros(E))
        state = state_after
    want = torch.stack(want)
    assert (want != 0).sum() >= 2 * E
    with server:
        got = [server.get_batch()["final_value"].clone() for _ in range(4)]
    for k, unroll in enumerate(got):
        torch.testing.assert_close(unroll, want[k * T:k * T + T + 1], rtol=1e-5, atol=1e-6)
