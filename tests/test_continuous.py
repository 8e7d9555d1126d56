"""Box actions end to end (agents/actions.py's GaussianActions, envs/gym_adapter.py's Box path,
agents/normalization.py): log-probs and entropies against float64 hand formulas, the env's
clipped action beside the stored draw, the losses on a continuous batch against a float64 loop,
the running statistics against numpy and through a kill and resume, tiny runs in actor mode,
server mode (and on Ray: tests/test_ray.py) that checkpoint, resume and evaluate, and the one-line refusals of the
spaces that have no policy. The maze's policy is checked bit for bit against outputs saved with
the code before Box actions (tests/data/maze_policy_reference.pt, :func:`maze_policy_outputs`)."""
from __future__ import annotations

import math
import os
import signal
import sys

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces

import envs
from agents.acting.actor import EnvRunner, create_buffers
from agents.actions import GaussianActions
from agents.learning.checkpoint import checkpoints, read_checkpoint
from agents.learning.learner import train
from agents.learning.logger import read_csv
from agents.learning.losses import MAX_LOG_RATIO, LossConfig, Unrolls, actor_critic_losses
from agents.network import AgentNet, MLPNetworkConfig
from agents.normalization import RunningNorm, discounted_returns
from launch import evaluate
from launch import train as train_launcher
from tests.test_maze_training import start_run
from tests.test_vtrace import vtrace_numpy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "launch", "train.py")
TINY = ["--env.id", "Pendulum-v1", "--env.max_episode_steps", "50", "--core", "lstm", "--core.hidden_size", "8",
        "--network.hidden_sizes", "[8]",
        "--num_actors", "2", "--actor.envs_per_actor", "4", "--actor.unroll_length", "8",
        "--learner.batch_size", "8", "--learner.minibatches", "1", "--log.tensorboard", "false",
        "--network.normalize_observations", "true", "--loss.scale_rewards", "true"]


def gaussian_by_hand(mean, log_std, u, squash):
    """log π(u) and the entropy of one diagonal Gaussian, a Python float64 loop over dimensions."""
    log_prob, entropy = 0.0, 0.0
    for m, s, x in zip(mean, log_std, u):
        sigma = math.exp(s)
        log_prob += -((x - m) ** 2) / (2 * sigma ** 2) - math.log(sigma * math.sqrt(2 * math.pi))
        if squash:
            log_prob -= math.log(1 - math.tanh(x) ** 2)
        entropy += 0.5 * math.log(2 * math.pi * math.e * sigma ** 2)
    return log_prob, entropy


@pytest.mark.parametrize("squash", [False, True])
def test_gaussian_log_prob_and_entropy_match_the_float64_formulas(squash):
    torch.manual_seed(0)
    actions = GaussianActions(3, squash=squash)
    logits = torch.randn(4, 2, 6, dtype=torch.float64)
    u = torch.randn(4, 2, 3, dtype=torch.float64) * 2
    want_log_prob, want_entropy = np.zeros((4, 2)), 0.0
    for t in range(4):
        for b in range(2):
            lp, h = gaussian_by_hand(logits[t, b, :3].tolist(), logits[t, b, 3:].tolist(), u[t, b].tolist(), squash)
            want_log_prob[t, b], want_entropy = lp, want_entropy + h
    np.testing.assert_allclose(actions.log_prob(logits, u).numpy(), want_log_prob, rtol=1e-12)
    assert actions.entropy_sum(logits).item() == pytest.approx(want_entropy, rel=1e-12)


def test_the_squashed_log_prob_stays_finite_where_tanh_rounds_to_one():
    """u = 30: tanh(u) is 1.0 in float32, so log(1 − tanh²) would be −inf; the softplus form is exact."""
    actions = GaussianActions(1, squash=True)
    log_prob = actions.log_prob(torch.tensor([[30.0, 0.0]]), torch.tensor([[30.0]]))
    want = -0.5 * math.log(2 * math.pi) - 2 * (math.log(2) - 30 - math.log1p(math.exp(-60)))
    assert log_prob.item() == pytest.approx(want, rel=1e-6)


def test_samples_have_the_policys_mean_and_std_and_the_mode_is_the_mean():
    actions = GaussianActions(2)
    logits = torch.tensor([[0.5, -1.0, math.log(0.3), math.log(2.0)]]).expand(20000, 4)
    draws = actions.sample(logits, torch.Generator().manual_seed(0))
    np.testing.assert_allclose(draws.mean(0).numpy(), [0.5, -1.0], atol=0.04)
    np.testing.assert_allclose(draws.std(0).numpy(), [0.3, 2.0], rtol=0.03)
    assert torch.equal(actions.mode(logits[:1]), torch.tensor([[0.5, -1.0]]))


class RecordingBoxEnv:
    """A batched env with 2-dim Box actions that records what it is stepped with; episodes of 3 steps."""

    def __init__(self, num_envs):
        self.num_envs, self.observation_shape, self.action_dim, self.action_sizes = num_envs, (3,), 2, ()
        self.received, self.t = [], 0

    def reset(self):
        return np.zeros((self.num_envs, 3), np.float32)

    def step(self, actions):
        self.received.append(np.array(actions))
        self.t += 1
        done = np.full(self.num_envs, self.t % 3 == 0)
        reward = np.arange(self.num_envs, dtype=np.float32) + self.t
        info = {"episode_return": np.zeros(self.num_envs, np.float32), "episode_length": np.zeros(self.num_envs)}
        return np.full((self.num_envs, 3), self.t, np.float32), reward, done, info


def box_model(return_discount=None, log_std_init=1.5, **network):
    torch.manual_seed(0)
    return AgentNet((3,), GaussianActions(2), "lstm", {"hidden_size": 8},
                    network=MLPNetworkConfig(hidden_sizes=[8], log_std_init=log_std_init, **network),
                    return_discount=return_discount)


def test_the_env_gets_the_clipped_action_and_the_buffer_keeps_the_draw():
    env, model = RecordingBoxEnv(4), box_model(return_discount=0.9)
    runner = EnvRunner(env, model, torch.tensor(0))
    out = {k: v[0] for k, v in create_buffers(1, 6, 4, (3,), torch.float32, model, model.initial_state(4)).items()}
    runner.unroll(out)
    stored = out["action"][1:]
    assert stored.dtype == torch.float32 and stored.shape == (6, 4, 2)
    assert (stored.abs() > 1).any() and (stored.abs() < 1).any()  # σ = e^1.5: draws on both sides of the bounds
    np.testing.assert_array_equal(np.stack(env.received), stored.clamp(-1, 1).numpy())
    # the behaviour log-prob is the draw's, not the clipped action's
    logits = out["logits"][1:]
    assert not torch.allclose(model.action_space.log_prob(logits, stored),
                              model.action_space.log_prob(logits, stored.clamp(-1, 1)))
    # each step records each env's discounted return so far, restarting after an episode's first step
    rewards, dones, want = out["reward"].numpy(), out["done"].numpy(), np.zeros(4)
    for t in range(1, 7):
        want = rewards[t] + 0.9 * want * (1 - dones[t - 1])
        np.testing.assert_allclose(out["discounted_return"][t].numpy(), want, rtol=1e-6)


def test_the_gym_adapter_maps_minus_one_to_one_onto_the_bounds():
    """Pendulum's torque is in [−2, 2]: 0.25 is a torque of 0.5, and 3 is clipped to 2."""
    ours = envs.make("gym", num_envs=2, seed=5, id="Pendulum-v1")
    theirs = gymnasium.make_vec("Pendulum-v1", num_envs=2, vectorization_mode="sync")
    np.testing.assert_array_equal(ours.reset(), theirs.reset(seed=[5, 6])[0])
    for unit, torque in (([0.25], [0.5]), ([3.0], [2.0]), ([-1.0], [-2.0])):
        obs, reward, _, _ = ours.step(np.array([unit, unit]))
        want_obs, want_reward, *_ = theirs.step(np.array([torque, torque], np.float32))
        np.testing.assert_array_equal(obs, want_obs)
        np.testing.assert_array_equal(reward, np.float32(want_reward))
    with pytest.raises(ValueError, match="float array of shape"):
        ours.step(np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="finite"):
        ours.step(np.full((2, 1), np.nan))


def test_the_losses_on_a_continuous_batch_match_a_float64_loop():
    """V-trace targets, IMPALA's policy gradient and PPO's clipped surrogate from log-probs worked
    by hand; a far-off action's log-ratio is clamped before its exp."""
    torch.manual_seed(1)
    T, B, D = 5, 3, 2
    actions = GaussianActions(D)
    target, behaviour = torch.randn(T, B, 2 * D, dtype=torch.float64), torch.randn(T, B, 2 * D, dtype=torch.float64)
    u = torch.randn(T, B, D, dtype=torch.float64)
    u[2, 1] = torch.tensor([40.0, -40.0])  # far off under the behaviour policy's σ: log ρ past the clamp
    rewards, values = torch.randn(T, B, dtype=torch.float64), torch.randn(T, B, dtype=torch.float64)
    discounts, bootstrap = torch.full((T, B), 0.9, dtype=torch.float64), torch.randn(B, dtype=torch.float64)
    log_pi, log_mu = np.zeros((T, B)), np.zeros((T, B))
    for t in range(T):
        for b in range(B):
            log_pi[t, b] = gaussian_by_hand(target[t, b, :D].tolist(), target[t, b, D:].tolist(), u[t, b].tolist(),
                                            False)[0]
            log_mu[t, b] = gaussian_by_hand(behaviour[t, b, :D].tolist(), behaviour[t, b, D:].tolist(),
                                            u[t, b].tolist(), False)[0]
    log_rho = np.clip(log_pi - log_mu, -MAX_LOG_RATIO, MAX_LOG_RATIO)
    assert abs(log_pi[2, 1] - log_mu[2, 1]) > MAX_LOG_RATIO  # the clamp is exercised
    vs, pg_adv = vtrace_numpy(log_rho, discounts.numpy(), rewards.numpy(), values.numpy(), bootstrap.numpy(), 1.0, 1.0)
    unrolls = Unrolls(target, behaviour, u, rewards, discounts, values, bootstrap, actions)
    terms, targets = actor_critic_losses(unrolls, LossConfig())
    np.testing.assert_allclose(targets.numpy(), vs, rtol=1e-10)
    assert terms["pg_loss"].item() == pytest.approx(-(log_pi * pg_adv).sum(), rel=1e-10)
    clipped_terms, _ = actor_critic_losses(unrolls, LossConfig(clip=0.2))
    targets_next = np.concatenate([vs[1:], bootstrap.numpy()[None]])
    advantages = rewards.numpy() + discounts.numpy() * targets_next - values.numpy()
    ratio = np.exp(log_rho)
    want = -np.minimum(ratio * advantages, np.clip(ratio, 0.8, 1.2) * advantages).sum()
    assert math.isfinite(clipped_terms["pg_loss"].item())
    assert clipped_terms["pg_loss"].item() == pytest.approx(want, rel=1e-10)
    entropy = sum(gaussian_by_hand([0.0] * D, target[t, b, D:].tolist(), [0.0] * D, False)[1]
                  for t in range(T) for b in range(B))
    assert terms["entropy"].item() == pytest.approx(entropy, rel=1e-12)


def test_running_norm_matches_numpy_over_several_batches():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, (n, 4)) for n in (5, 17, 1, 40)]
    norm = RunningNorm((4,))
    for x in batches:
        norm.update(torch.from_numpy(x))
    seen = np.concatenate(batches)
    # the statistics start as a prior of weight 1e-4 samples (mean 0, variance 1): all samples pooled with it
    n, prior = len(seen), 1e-4
    mean = seen.sum(0) / (n + prior)
    var = (prior * (0 - mean) ** 2 + prior * 1.0 + ((seen - mean) ** 2).sum(0)) / (n + prior)
    np.testing.assert_allclose(norm.mean.numpy(), mean, rtol=1e-12)
    np.testing.assert_allclose(norm.var.numpy(), var, rtol=1e-12)
    np.testing.assert_allclose(norm.mean.numpy(), seen.mean(0), rtol=1e-5)
    x = torch.from_numpy(rng.normal(3.0, 2.0, (3, 4)))
    want = np.clip((x.numpy() - mean) / np.sqrt(var + 1e-8), -10, 10)
    np.testing.assert_allclose(norm(x).numpy(), want, rtol=1e-4)
    assert torch.equal(RunningNorm((4,))(x), x.float())  # no statistics yet: the identity


def test_discounted_returns_restart_after_an_episodes_first_step():
    g = discounted_returns(torch.tensor([2.0, 2.0]), torch.tensor([1.0, 1.0]), torch.tensor([False, True]), 0.5)
    assert g.tolist() == [2.0, 1.0]


@pytest.mark.parametrize("mode,squash", [("actor", False), ("server", True),
                                         pytest.param("actor", True, marks=pytest.mark.slow),
                                         pytest.param("server", False, marks=pytest.mark.slow)])
def test_a_box_action_run_checkpoints_resumes_and_evaluates(mode, squash, tmp_path, capsys):
    run_dir = str(tmp_path / "run")
    flags = [*TINY, "--run_dir", run_dir, "--actor.inference", mode, "--network.squash_actions", str(squash).lower()]
    first = train_launcher.main([*flags, "--total_steps", "640"])
    assert first["step"] == 640 and first["episodes"] == 8  # 80 steps in each of 8 envs: one 50-step episode
    payload = read_checkpoint(checkpoints(run_dir)[0])
    assert payload["model"]["log_std"].shape == (1,) and payload["model"]["obs_norm.count"] > 600
    second = train_launcher.main([*flags, "--total_steps", "1280"])
    assert second["step"] == 1280 and second["episodes"] > 0
    assert "resuming from" in capsys.readouterr().out
    assert all(math.isfinite(r["loss"]) for r in read_csv(os.path.join(run_dir, "logs.csv")))
    out = str(tmp_path / "eval")
    evaluate.main([run_dir, "--runs", "2", "--episodes", "2", "--workers", "1", "--out", out])
    table = open(os.path.join(out, "evaluation.md")).read()
    assert "Pendulum-v1" in table


def test_the_observation_statistics_survive_a_kill_and_resume_exactly(tmp_path):
    """SIGKILL mid-run, then resume: the model starts from the checkpoint's statistics, bit for bit,
    and the next batch adds its samples to them (a restart would count from zero)."""
    run_dir = str(tmp_path / "killed")
    argv = [sys.executable, TRAIN, *TINY, "--run_dir", run_dir, "--total_steps", "10000000",
            "--checkpoint.milestones", "[256]"]
    proc = start_run(argv, run_dir, tmp_path, rows=6)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    saved = read_checkpoint(checkpoints(run_dir)[0])
    step = saved["counters"]["step"]
    seen = {}
    result = train(train_launcher.load([*TINY, "--run_dir", run_dir, "--total_steps", str(step + 64)]),
                   on_update=lambda s, m: seen.setdefault("step", s))
    assert result["step"] == step + 64
    resumed = read_checkpoint(checkpoints(run_dir)[0])["model"]
    assert resumed["obs_norm.count"].item() == saved["model"]["obs_norm.count"].item() + 64
    # the merge of the saved statistics with one batch moves the mean by at most the batch's share
    share = 64 / resumed["obs_norm.count"].item()
    moved = (resumed["obs_norm.mean"] - saved["model"]["obs_norm.mean"]).abs()
    assert (moved <= share * 20).all() and not torch.equal(resumed["obs_norm.mean"], saved["model"]["obs_norm.mean"])


def test_loading_a_checkpoint_restores_the_statistics_bit_for_bit(tmp_path):
    run_dir = str(tmp_path / "run")
    train_launcher.main([*TINY, "--run_dir", run_dir, "--total_steps", "320"])
    path = checkpoints(run_dir)[0]
    model, _, _ = evaluate.load_agent(path)
    saved = read_checkpoint(path)["model"]
    for key in ("obs_norm.mean", "obs_norm.var", "obs_norm.count", "return_stats.var"):
        assert torch.equal(model.state_dict()[key], saved[key])


class TupleActions(gymnasium.Env):
    observation_space = spaces.Box(-1, 1, (2,), np.float32)

    def __init__(self, action_space=None):
        self.action_space = action_space or spaces.Tuple((spaces.Discrete(2), spaces.Box(-1, 1, (1,))))

    def reset(self, *, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


for _name, _space in (("Tuple", None), ("Dict", "dict"), ("Unbounded", "inf")):
    gymnasium.register(f"DeltaBeastTest/{_name}Actions-v0", entry_point=TupleActions, kwargs={"action_space": {
        None: None, "dict": spaces.Dict({"a": spaces.Discrete(2)}),
        "inf": spaces.Box(-np.inf, np.inf, (2,), np.float32)}[_space]})


@pytest.mark.parametrize("name, match", [("Tuple", "mixed Tuple and Dict"), ("Dict", "mixed Tuple and Dict"),
                                         ("Unbounded", "infinite bound")])
def test_spaces_without_a_policy_are_refused_in_one_line(name, match, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train_launcher.main(["--env.id", f"DeltaBeastTest/{name}Actions-v0", "--run_dir", "/nonexistent/x"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert match in err and len(err.splitlines()) == 1


def maze_policy_outputs() -> dict[str, torch.Tensor]:
    """A maze policy's logits, values, log-probs and sampled actions for a fixed seed and input (the
    reference file was written by this function at commit 1a49a8f, before Box actions)."""
    torch.manual_seed(0)
    model = AgentNet((10,), 4, "lstm", {"hidden_size": 32}, network=MLPNetworkConfig(activation="tanh"),
                     popart={"step": 0.003})
    g = torch.Generator().manual_seed(1)
    T, B = 6, 5
    obs = torch.randint(0, 2, (T + 1, B, 10), generator=g).float()
    reward = torch.randn(T + 1, B, generator=g)
    action = torch.randint(0, 4, (T + 1, B), generator=g)
    done = torch.rand(T + 1, B, generator=g) < 0.2
    state = model.initial_state(B)
    logits, baseline, _, _ = model(obs, reward, action, done, state)
    u = Unrolls(logits[:-1], logits[:-1] + 0.1, action[1:], reward[1:], torch.full((T, B), 0.9), baseline[:-1],
                baseline[-1])
    log_pi, log_rho = u.log_probs()
    acted, act_logits, _ = model.act(obs[0], reward[0], action[0], done[0], state,
                                     generator=torch.Generator().manual_seed(2))
    return {"logits": logits, "baseline": baseline, "log_pi": log_pi, "log_rho": log_rho, "acted": acted,
            "act_logits": act_logits}


def test_the_maze_policy_is_what_it_was_before_box_actions():
    """The same sampled actions, and logits, values and log-probs within a few float32 ulps of the
    file written before Box actions. Not bit for bit: the file was written on one CPU, and BLAS and
    oneDNN pick kernels per instruction set, so another machine's sums round differently (1e-8 to
    1.2e-7 on CI's); a change to the discrete path moves these by 1e-3 or more. Run on one machine,
    commit 1a49a8f's code and today's give equal logits, values and log-probs (2026-12-02). Since
    issue 75 the actors' one-step call runs torch.lstm_cell, not nn.LSTM's oneDNN call (1.6x faster
    per actor step)."""
    want = torch.load(os.path.join(ROOT, "tests", "data", "maze_policy_reference.pt"), weights_only=True)
    got = maze_policy_outputs()
    assert want.keys() == got.keys()
    assert torch.equal(got["acted"], want["acted"])
    for key in want.keys() - {"acted"}:
        torch.testing.assert_close(got[key], want[key], rtol=1e-6, atol=1e-6, msg=key)


def test_train_py_takes_the_continuous_preset_for_box_actions_only(capsys):
    """launch/train.py merges train.yaml's presets.actions.continuous when the env's actions are a
    Box space; flags still override it, and --print_config shows it."""
    box, discrete = train_launcher.load(["--env.id", "Pendulum-v1"]), train_launcher.load(["--env.id", "CartPole-v1"])
    assert box.network.normalize_observations and not discrete.network.normalize_observations
    assert box.network.separate_critic and not discrete.network.separate_critic
    assert (box.loss.entropy_cost, discrete.loss.entropy_cost) == (0.0, 0.01)
    flagged = train_launcher.load(["--env.id", "Pendulum-v1", "--network.normalize_observations", "false"])
    assert not flagged.network.normalize_observations
    with pytest.raises(SystemExit):
        train_launcher.load(["--env.id", "Pendulum-v1", "--print_config"])
    assert "normalize_observations: true" in capsys.readouterr().out
    # an env that cannot be made is the run's to report, in its words, not the preset's
    assert not train_launcher.load(["--env.id", "NoSuchEnv-v0"]).network.normalize_observations


def test_the_continuous_preset_chooses_lstm_below_the_flags_and_a_config_file(tmp_path):
    """presets.actions.continuous names the core (lstm, with presets.core.lstm's 128 units) for Box
    actions only; --core and a --config file's core.name choose another, with that core's preset."""
    box, discrete = train_launcher.load(["--env.id", "Pendulum-v1"]), train_launcher.load(["--env.id", "CartPole-v1"])
    assert (box.core.name, box.core.hidden_size) == ("lstm", 128)
    assert discrete.core.name == "delta_product"
    flagged = train_launcher.load(["--env.id", "Pendulum-v1", "--core", "gru"])
    assert (flagged.core.name, flagged.core.hidden_size, flagged.learner.epochs) == ("gru", 128, 10)
    (tmp_path / "mine.yaml").write_text("core: {name: delta}\n")
    filed = train_launcher.load(["--env.id", "Pendulum-v1", "--config", str(tmp_path / "mine.yaml")])
    assert (filed.core.name, filed.core.num_heads, filed.learner.epochs) == ("delta", 4, 10)


@pytest.mark.parametrize("splits", [1, 2])
def test_the_servers_batches_record_each_envs_discounted_return(splits):
    """Server mode's ``discounted_return``: along each trajectory G_t = r_t + γ G_{t−1} (1 − done_{t−1}),
    over several batches (so across unroll boundaries and with units taking turns)."""
    from agents.acting.inference import InferenceServer
    from agents.acting.transport import ActorConfig, EnvSetup, ServerConfig

    options = {"id": "Pendulum-v1", "max_episode_steps": 7}
    setup = EnvSetup("gym", options, [3, 4], (3,), torch.float32)
    actor = ActorConfig(num_actors=2, envs_per_actor=4, unroll_length=5, server=ServerConfig(worker_splits=splits))
    model = AgentNet((3,), GaussianActions(1), "lstm", {"hidden_size": 8}, network=MLPNetworkConfig(hidden_sizes=[8]),
                     return_discount=0.5)
    checked = 0
    with InferenceServer(model, envs=setup, actor=actor, batch_size=4, device=torch.device("cpu")) as server:
        for _ in range(6):
            batch = server.get_batch()
            g, r, d = batch["discounted_return"], batch["reward"], batch["done"]
            for t in range(1, g.shape[0]):
                torch.testing.assert_close(g[t], r[t] + 0.5 * g[t - 1] * (~d[t - 1]).float())
                checked += 1
            assert (g != 0).any()
    assert checked == 6 * 5
