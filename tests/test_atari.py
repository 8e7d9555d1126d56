"""Atari (issue 7): the batched ale-py env, the ResNet agent's size, reward clipping, the
launcher and an end-to-end run (train, resume, evaluate)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import envs
from agents import nature_cnn
from agents.network import AgentNet, ResNetNetworkConfig, make_stem
from launch import atari

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_config(argv):
    """launch/atari.py's resolved TrainConfig for ``argv``."""
    return atari.load(argv)


# ---------------------------------------------------------------- the env


@pytest.mark.parametrize("game,num_actions", [("Pong", 6), ("Breakout", 4), ("SpaceInvaders", 6),
                                              ("MsPacman", 9), ("Seaquest", 18), ("Qbert", 6)])
def test_shapes_dtypes_and_minimal_action_sets(game, num_actions):
    env = envs.make("atari", num_envs=3, seed=1, game=game)
    try:
        assert env.num_actions == num_actions
        assert env.observation_shape == (4, 84, 84) and env.observation_dtype == np.uint8
        obs = env.reset()
        assert obs.shape == (3, 4, 84, 84) and obs.dtype == np.uint8
        kept = obs.copy()
        obs2, reward, done, info = env.step(np.arange(3) % num_actions)
        assert obs2.shape == (3, 4, 84, 84) and obs2.dtype == np.uint8
        assert reward.shape == (3,) and reward.dtype == np.float32
        assert done.shape == (3,) and done.dtype == np.bool_
        assert info["episode_return"].dtype == np.float32 and info["episode_length"].dtype == np.int32
        assert (info["episode_length"] == 1).all()
        np.testing.assert_array_equal(obs, kept)  # returned arrays are not overwritten by later steps
        # the stack holds 4 consecutive frames: after a step the old newest frame moved down by one
        np.testing.assert_array_equal(obs2[:, 2], obs[:, 3])
    finally:
        env.close()


def test_game_names_and_unknown_game():
    from envs.atari import PAPER_GAMES, available_games, canonical_name

    assert len(PAPER_GAMES) == 20 and set(PAPER_GAMES) <= set(available_games())
    for name in ("MsPacman", "ms_pacman", "mspacman", "ALE/MsPacman-v5", "MsPacmanNoFrameskip-v4"):
        assert canonical_name(name) == "MsPacman"
    with pytest.raises(ValueError) as err:
        envs.make("atari", num_envs=1, game="NotAGame")
    for game in list(PAPER_GAMES) + ["Breakout", "Tetris"]:
        assert game in str(err.value)
    with pytest.raises(ValueError, match="valid options"):
        envs.make("atari", num_envs=1, game="Pong", frameskip=4)
    with pytest.raises(ValueError, match="actions must be"):
        env = envs.make("atari", num_envs=2, game="Pong")
        try:
            env.reset()
            env.step(np.array([0, 6]))
        finally:
            env.close()


def test_results_out_of_env_order_are_an_error():
    """ale-py sends action i to the i-th env of its last result: a permuted result would
    misroute every action, so it must stop the run."""
    env = envs.make("atari", num_envs=2, game="Pong")
    try:
        env.reset()
        ale_recv = env._env.recv

        def permuted_recv():
            obs, reward, terminated, truncated, info = ale_recv()
            return obs, reward, terminated, truncated, {**info, "env_id": info["env_id"][::-1]}

        env._env.recv = permuted_recv
        with pytest.raises(RuntimeError, match=r"order \[1, 0\]"):
            env.step(np.array([0, 1]))
    finally:
        env.close()


def test_whole_game_return_across_lives_and_raw_rewards():
    """A random player of Breakout loses 5 lives per game: ``done`` only at game over, and the
    reported return / length are the sums over the whole game of the raw per-step rewards."""
    n = 4
    env = envs.make("atari", num_envs=n, seed=3, game="Breakout")
    rng = np.random.default_rng(0)
    env.reset()
    running, steps = np.zeros(n), np.zeros(n, int)
    life_losses_within_games, finished = 0, []
    lives = None
    try:
        while len(finished) < 6:
            obs, reward, done, info = env.step(rng.integers(0, env.num_actions, n))
            running += reward
            steps += 1
            if lives is not None:
                life_losses_within_games += int(((info["lives"] < lives) & ~done).sum())
            lives = info["lives"]
            for i in np.flatnonzero(done):
                assert info["episode_return"][i] == pytest.approx(running[i])
                assert info["episode_length"][i] == steps[i]
                finished.append(running[i])
                running[i], steps[i] = 0, 0
            assert (info["episode_return"][~done] == running[~done].astype(np.float32)).all()
    finally:
        env.close()
    assert life_losses_within_games >= 4 * len(finished) - 4 * n  # lives were lost without ending the game
    assert max(finished) > 0


def test_raw_scores_not_clipped_in_env():
    env = envs.make("atari", num_envs=4, seed=0, game="SpaceInvaders")
    rng = np.random.default_rng(0)
    env.reset()
    rewards = []
    try:
        for _ in range(300):
            rewards.append(env.step(rng.integers(0, env.num_actions, 4))[1])
    finally:
        env.close()
    assert np.max(rewards) >= 5  # Space Invaders scores 5..30 per alien: unclipped


# ---------------------------------------------------------------- the agent


def gymnasium_reference(game, seed):
    """The independent reference: ale-py's single env at frame skip 1 (no sticky actions), under
    Gymnasium's own AtariPreprocessing (frame skip 4 with max-pooling, 84x84 grey, no no-ops) and
    FrameStackObservation(4)."""
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    env = gym.make(f"ALE/{game}-v5", frameskip=1, repeat_action_probability=0.0, full_action_space=False,
                   max_num_frames_per_episode=108_000)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=0, frame_skip=4, screen_size=84, terminal_on_life_loss=False,
                                          grayscale_obs=True, scale_obs=False)
    env = gym.wrappers.FrameStackObservation(env, 4)
    return env


def test_a_game_starts_after_0_to_noop_max_no_op_frames():
    """The protocol's "up to 30 no-ops at reset" (envs/atari.py): with noop_max 2, games start at
    emulator frames 0, 1 and 2 (these 8 seeds draw each; ale-py itself draws 0..noop_max - 1 no-ops)."""
    with envs.make("atari", num_envs=8, seed=0, game="Pong", noop_max=2, num_threads=1) as env:
        _, info = env._env.reset(seed=np.arange(8))
    assert sorted(set(info["episode_frame_number"].tolist())) == [0, 1, 2]
    with envs.make("atari", num_envs=4, seed=0, game="Pong", noop_max=0, num_threads=1) as env:
        _, info = env._env.reset(seed=np.arange(4))
    assert info["episode_frame_number"].tolist() == [0] * 4


@pytest.mark.parametrize("game", ["Pong", "Breakout"])
def test_frames_rewards_and_game_ends_equal_gymnasiums_preprocessing(game):
    """Same ROM, seed and random actions, sticky actions 0 and no-ops 0: every observation (the
    first ones of each game included), reward and game end equals the Gymnasium reference's, bit
    for bit, over two whole games of random play (Pong: ~900 steps each, Breakout: ~200)."""
    pytest.importorskip("cv2", reason="Gymnasium's AtariPreprocessing resizes with OpenCV")
    ref = gymnasium_reference(game, seed=3)
    ours = envs.make("atari", num_envs=1, seed=3, game=game, sticky_action_prob=0.0, noop_max=0)
    want, _ = ref.reset(seed=3)
    got = ours.reset()
    np.testing.assert_array_equal(got[0], want)
    rng = np.random.default_rng(0)
    games, steps = [], 0
    while len(games) < 2:
        assert steps < 5000, "no game ended"
        action = int(rng.integers(ours.num_actions))
        got, reward, done, info = ours.step(np.array([action]))
        want, want_reward, terminated, truncated, _ = ref.step(action)
        steps += 1
        assert reward[0] == want_reward and done[0] == (terminated or truncated), steps
        if done[0]:  # ours has reset at once (the new game's first frame); the reference resets now
            games.append(float(info["episode_return"][0]))
            want, _ = ref.reset(seed=3)
        np.testing.assert_array_equal(got[0], want, err_msg=f"step {steps}")
    assert all(np.isfinite(games))
    ours.close()
    ref.close()


PAPER_PARAMS = {"ff": 1.1e6, "lstm": 1.6e6, "linear": 1.5e6, "delta": 1.5e6, "rec_delta": 1.5e6, "delta_rnn": 1.6e6}


def test_resnet_stem_shapes():
    stem = make_stem("resnet", (4, 84, 84))
    assert stem.flat_size == 3872 and stem.output_size == 256
    out = stem(torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8))
    assert out.shape == (2, 256) and (out >= 0).all()
    assert sum(p.numel() for p in stem.parameters()) == 97_744 + 3872 * 256 + 256


def test_nature_stem_shapes_and_parameters_by_hand():
    """Mnih et al. 2015: conv 32x8x8/4 (84 -> 20), 64x4x4/2 (20 -> 9), 64x3x3/1 (9 -> 7), Linear(3136 -> 512)."""
    stem = make_stem("nature", (4, 84, 84))
    assert stem.flat_size == 64 * 7 * 7 == 3136 and stem.output_size == 512
    convs = [m for m in stem.convs if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [(32, (8, 8), (4, 4)), (64, (4, 4), (2, 2)),
                                                                         (64, (3, 3), (1, 1))]
    by_hand = (4 * 8 * 8 * 32 + 32) + (32 * 4 * 4 * 64 + 64) + (64 * 3 * 3 * 64 + 64) + (3136 * 512 + 512)
    assert sum(p.numel() for p in stem.parameters()) == by_hand == 1_684_128
    frames = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    out = stem(frames)
    assert out.shape == (3, 512) and (out >= 0).all()
    torch.testing.assert_close(out, stem(frames.float() / 255.0))  # uint8 is scaled by 1/255
    for layer in [*convs, stem.fc]:  # CleanRL's init: orthogonal rows (or columns) of norm sqrt(2), zero bias
        w = layer.weight.flatten(1)
        gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
        torch.testing.assert_close(gram, 2 * torch.eye(len(gram)), atol=1e-4, rtol=0)
        assert not layer.bias.any()
    with pytest.raises(ValueError, match="at least 36x36"):
        make_stem("nature", (4, 30, 30))
    with pytest.raises(ValueError, match="unknown option 'channels' for stem 'nature'"):
        make_stem("nature", (4, 84, 84), channels=[16])


def test_shallow_stem_shapes_and_parameters_by_hand():
    """IMPALA's shallow net (Espeholt et al. 2018, Fig. 3): conv 16x8x8/4 (84 -> 20), 32x4x4/2 (20 -> 9),
    Linear(2592 -> 256), a third of the Nature stem's multiply-adds."""
    stem = make_stem("shallow", (4, 84, 84))
    assert stem.flat_size == 32 * 9 * 9 == 2592 and stem.output_size == 256
    convs = [m for m in stem.convs if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [(16, (8, 8), (4, 4)), (32, (4, 4), (2, 2))]
    by_hand = (4 * 8 * 8 * 16 + 16) + (16 * 4 * 4 * 32 + 32) + (2592 * 256 + 256)
    assert sum(p.numel() for p in stem.parameters()) == by_hand == 676_144
    macs = 20 * 20 * 16 * (4 * 8 * 8) + 9 * 9 * 32 * (16 * 4 * 4) + 2592 * 256
    nature_macs = 20 * 20 * 32 * (4 * 8 * 8) + 9 * 9 * 64 * (32 * 4 * 4) + 7 * 7 * 64 * (64 * 3 * 3) + 3136 * 512
    assert (macs, nature_macs) == (2_965_504, 9_342_976)
    frames = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    out = stem(frames)
    assert out.shape == (3, 256) and (out >= 0).all()
    torch.testing.assert_close(out, stem(frames.float() / 255.0))
    assert (make_stem("nature", (4, 84, 84)).min_size(), stem.min_size()) == (36, 20)
    make_stem("shallow", (4, 20, 20))  # the smallest frame: 20 -> 4 -> 1
    with pytest.raises(ValueError, match="the shallow stem needs frames of at least 20x20"):
        make_stem("shallow", (4, 19, 30))
    shallow = load_config(["--network.stem", "shallow", "--network.bf16", "true"])
    assert shallow.network.stem_options() == {"output_size": 256, "bf16": True}


def test_image_input_is_the_scaled_frames_converted_once():
    """The stems' input: float32 frames / 255 bit for bit, and in bfloat16 what autocast would cast
    them to (one rounding), in the NHWC layout; float frames pass unscaled."""
    from agents.resnet import image_input

    frames = torch.arange(256, dtype=torch.uint8).repeat(4 * 21 * 21 // 256 + 1)[:4 * 21 * 21].view(1, 4, 21, 21)
    frames = torch.cat([frames, frames.flip(-1)])
    want = frames.float() / 255.0
    for dtype in (torch.float32, torch.bfloat16):
        got = image_input(frames, dtype)
        assert got.dtype == dtype and got.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(got, want.to(dtype))
    assert torch.equal(image_input(want, torch.float32), want)


def test_nature_stem_in_bfloat16_is_the_float32_stem_to_bfloat16_precision():
    """network.bf16: the same weights give float32 features within bfloat16's rounding (8 bits of
    mantissa), not bit-equal (the products did run in bfloat16), and float32 gradients."""
    torch.manual_seed(0)
    full = make_stem("nature", (4, 84, 84))
    half = make_stem("nature", (4, 84, 84), bf16=True)
    half.load_state_dict(full.state_dict())
    frames = torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8)
    want, got = full(frames), half(frames)
    assert got.dtype == torch.float32 and not torch.equal(got, want)
    assert (got - want).norm() <= 0.02 * want.norm()
    got.sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in half.parameters())


@pytest.mark.parametrize("has_bf16", [False, True])
def test_nature_stem_bf16_auto_runs_bfloat16_only_where_the_cpu_has_it(has_bf16, monkeypatch):
    """network.bf16 auto: the bfloat16 stem's numbers on a CPU with bfloat16 instructions, the
    float32 stem's elsewhere (the two differ: the test above)."""
    monkeypatch.setattr(nature_cnn, "cpu_has_bf16", lambda: has_bf16)
    torch.manual_seed(0)
    stems = {bf16: make_stem("nature", (4, 84, 84), bf16=bf16) for bf16 in (False, True, "auto")}
    for stem in stems.values():
        stem.load_state_dict(stems[False].state_dict())
    frames = torch.randint(0, 256, (4, 4, 84, 84), dtype=torch.uint8)
    assert torch.equal(stems["auto"](frames), stems[has_bf16](frames))
    assert load_config(["--network.stem", "nature", "--network.bf16", "auto"]).network.bf16 == "auto"


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="reads Linux's CPU flags")
def test_cpu_has_bf16_agrees_with_the_kernels_cpu_flags():
    flags = {f for line in open("/proc/cpuinfo") if line.startswith("flags") for f in line.split(":")[1].split()}
    nature_cnn.cpu_has_bf16.cache_clear()
    assert nature_cnn.cpu_has_bf16() == bool(flags & {"avx512_bf16", "amx_bf16", "amx_tile"})


@pytest.mark.parametrize("prev_action,num_actions", [(False, 6), (True, 18)])
@pytest.mark.parametrize("core", list(PAPER_PARAMS))
def test_parameter_counts_match_the_papers(core, prev_action, num_actions):
    """Whole agent (stem + core + heads), with the Atari config's input [features; clipped reward]
    (prev_action False) and also with the one-hot previous action of 18 actions added."""
    model = AgentNet((4, 84, 84), num_actions, core, {},
                     network=ResNetNetworkConfig(reward_clip=1.0, prev_action=prev_action))
    count = sum(p.numel() for p in model.parameters())
    assert abs(count - PAPER_PARAMS[core]) <= 0.05 * PAPER_PARAMS[core], (core, count)


def test_reward_clipping_happens_only_in_the_learner():
    """The Atari config clips to ±1 for the core input and the loss; the buffers keep raw rewards."""
    from agents.learning.learner import compute_loss
    cfg = load_config(["--core", "ff"])
    assert cfg.network.reward_clip == 1.0
    torch.manual_seed(0)
    model = AgentNet((4, 84, 84), 6, "ff", {}, network=ResNetNetworkConfig(reward_clip=1.0, prev_action=False))
    T, B = 5, 2
    batch = {"obs": torch.randint(0, 256, (T + 1, B, 4, 84, 84), dtype=torch.uint8),
             "done": torch.zeros(T + 1, B, dtype=torch.bool), "action": torch.randint(0, 6, (T + 1, B)),
             "logits": torch.randn(T + 1, B, 6), "final_value": torch.zeros(T + 1, B)}
    raw = dict(batch, reward=torch.tensor([[0.0, 0.0], [30.0, -5.0], [1.0, 0.5], [200.0, 0.0], [0.0, -1.0],
                                           [7.0, 0.0]]))
    clipped = dict(batch, reward=raw["reward"].clamp(-1, 1))
    loss_raw, _ = compute_loss(model, raw, cfg)
    loss_clipped, _ = compute_loss(model, clipped, cfg)
    assert loss_raw.item() == pytest.approx(loss_clipped.item(), rel=1e-6)
    cfg.network.reward_clip = None
    assert compute_loss(model, raw, cfg)[0].item() != pytest.approx(loss_clipped.item(), rel=1e-3)


def test_launcher_config_is_the_papers():
    cfg = load_config(["--game", "SpaceInvaders", "--core", "lstm"])
    assert cfg.env.name == "atari" and cfg.env.game == "SpaceInvaders"
    assert cfg.env.sticky_action_prob == 0.25 and cfg.env.noop_max == 30
    assert (cfg.actor.num_actors, cfg.actor.envs_per_actor, cfg.actor.unroll_length) == (48, 1, 50)
    assert cfg.learner.batch_size == 32 and cfg.loss.discount == 0.99
    assert (cfg.loss.entropy_cost, cfg.loss.baseline_cost) == (0.01, 0.5)
    o = cfg.optim
    assert (o.name, o.lr, o.eps, o.alpha, o.momentum, o.grad_clip, o.lr_decay) == \
        ("rmsprop", 6e-4, 0.01, 0.99, 0, 40, True)
    assert cfg.checkpoint.milestones == [50_000_000, 200_000_000] and cfg.run.total_steps == 200_000_000
    assert cfg.run.device == "auto" and cfg.core.hidden_size == 256
    assert cfg.run.run_dir == "runs/atari-{game}-{core}" and cfg.resolved_run_dir() == "runs/atari-SpaceInvaders-lstm"
    assert (cfg.network.stem, cfg.network.reward_clip, cfg.network.prev_action) == ("resnet", 1.0, False)


def test_cpu_recipe_loads_and_its_batches_add_up():
    """launch/configs/atari_cpu.yaml: the Nature stem and CleanRL's ppo_atari numbers, with 16 envs x 64
    steps = 1,024 steps a batch in 4 x 4 minibatches of 4 whole trajectories (256 steps), CleanRL's
    gradient clip of 0.5 on a mean loss as 0.5 x 256 on our summed one, one batch's buffers, and the
    papers' protocol (sticky actions 0.25)."""
    from agents.run_config import check_config

    cfg = load_config(["--config", os.path.join(ROOT, "launch", "configs", "atari_cpu.yaml")])
    check_config(cfg)
    assert (cfg.network.stem, cfg.network.output_size, cfg.core.name, cfg.run.device) == ("nature", 512, "ff", "cpu")
    a, lc, loss, o = cfg.actor, cfg.learner, cfg.loss, cfg.optim
    envs_total = a.num_actors * a.envs_per_actor
    assert envs_total == 16 and a.unroll_length == 64 and a.inference == "actor"
    assert lc.batch_size == envs_total and lc.batch_size % a.envs_per_actor == 0  # a batch: one unroll of each env
    assert a.num_buffers == lc.batch_size // a.envs_per_actor == 2  # the policy lag: one batch at most
    steps_per_batch = lc.batch_size * a.unroll_length
    trajectories_per_minibatch, rest = divmod(lc.batch_size, lc.minibatches)
    assert steps_per_batch == 1024 and (lc.epochs, lc.minibatches) == (4, 4) and rest == 0
    minibatch_steps = trajectories_per_minibatch * a.unroll_length
    assert minibatch_steps == 256 and o.grad_clip == 0.5 * minibatch_steps
    assert (loss.clip, loss.advantages, loss.gae_lambda, loss.discount, loss.entropy_cost, loss.baseline_cost) == \
        (0.1, "gae", 0.95, 0.99, 0.01, 0.5)
    assert loss.normalize_advantages and (o.name, o.lr, o.eps, o.lr_decay) == ("adam", 2.5e-4, 1e-5, False)
    assert cfg.network.bf16 == "auto"  # bfloat16 where the CPU has its instructions
    assert cfg.env.sticky_action_prob == 0.25 and cfg.env.noop_max == 30  # the papers' protocol, as evaluated
    assert loss.advantage_statistics == "batch"  # recipe v6
    assert cfg.run.total_steps == 2_500_000 and cfg.checkpoint.milestones == [1_000_000, 2_500_000]
    model = AgentNet((4, 84, 84), 6, cfg.core.name, {}, network=cfg.network)
    assert model.stem.output_size == 512


def test_stem_is_chosen_by_name_and_saved_configs_read_back():
    from agents.config import to_dict
    from agents.errors import ConfigError
    from agents.run_config import config_from_dict

    nature = load_config(["--network.stem", "nature", "--network.output_size", "256"])
    assert (nature.network.stem, nature.network.output_size) == ("nature", 256)
    assert nature.network.stem_options() == {"output_size": 256, "bf16": False}
    assert config_from_dict(to_dict(nature), "test") == nature
    resnet = load_config([])
    assert resnet.network.stem_options() == {"channels": [16, 32, 32], "num_blocks": 2, "output_size": 256}
    old = to_dict(resnet)
    del old["network"]["stem"]  # a checkpoint from before network.stem was selectable
    assert config_from_dict(old, "test") == resnet
    with pytest.raises(ConfigError, match="unknown stem 'vgg'; valid stems: resnet, nature, shallow"):
        load_config(["--network.stem", "vgg"])
    with pytest.raises(ConfigError, match="num_blocks"):
        load_config(["--network.stem", "nature", "--network.num_blocks", "3"])


# ---------------------------------------------------------------- end to end


def _read_json(path):
    with open(path) as f:
        return json.load(f)


def _run(args, timeout=240):
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


@pytest.mark.parametrize("core", [pytest.param("lstm", marks=pytest.mark.slow), "delta"])  # ~22 s each
def test_end_to_end_train_resume_evaluate(core, tmp_path):
    """2 actors, batches of 2 unrolls of 10 on Pong (games cut at 160 frames): a milestone and a
    latest checkpoint are written, the same command resumes, and evaluate.py scores the milestone."""
    run_dir = str(tmp_path / "run")
    common = ["launch/atari.py", "--game", "Pong", "--core", core, "--num_actors", "2", "--learner.batch_size", "2",
              "--actor.unroll_length", "10", "--run_dir", run_dir, "--device", "cpu", "--log.tensorboard", "false",
              "--env.max_episode_frames", "160", "--checkpoint.milestones", "[60]"]
    _run(common + ["--total_steps", "100"])
    assert sorted(f for f in os.listdir(run_dir) if f.endswith(".pt")) == ["checkpoint-60.pt", "checkpoint.prev1.pt",
                                                                           "checkpoint.pt"]
    assert torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)["counters"]["step"] == 100
    out = _run(common + ["--total_steps", "120"])
    assert "resuming from" in out and "at step 100" in out
    assert torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)["counters"]["step"] == 120

    out_dir = str(tmp_path / "eval")
    _run(["launch/evaluate.py", run_dir, "--runs", "2", "--episodes", "2", "--max_episode_frames", "120",
          "--workers", "2", "--out", out_dir])
    results = _read_json(os.path.join(out_dir, "evaluation.json"))["results"]
    assert len(results) == 1
    r = results[0]
    assert (r["game"], r["core"], r["step"], r["runs"], r["episodes"]) == ("Pong", core, 60, 2, 4)
    assert [len(x["scores"]) for x in r["per_run"]] == [2, 2] and all(
        length == 30 for x in r["per_run"] for length in x["lengths"])
    with open(os.path.join(out_dir, "evaluation.md")) as f:
        table = f.read()
    assert "| Game |" in table and "| Pong |" in table


@pytest.mark.slow
def test_cpu_recipe_trains_checkpoints_and_evaluates_on_pong(tmp_path):
    """20K steps of launch/configs/atari_cpu.yaml on Pong (the Nature stem, PPO's epochs and
    minibatches, two actor processes): a milestone and the latest checkpoint, a log whose games
    ended, and evaluate.py scoring the milestone in Table 9/10's layout."""
    run_dir, out_dir = str(tmp_path / "run"), str(tmp_path / "eval")
    _run(["launch/atari.py", "--config", "launch/configs/atari_cpu.yaml", "--run_dir", run_dir, "--total_steps",
          "20000", "--checkpoint.milestones", "[10000]", "--log.tensorboard", "false"], timeout=1800)
    assert sorted(f for f in os.listdir(run_dir) if f.endswith(".pt")) == ["checkpoint-10240.pt", "checkpoint.prev1.pt",
                                                                           "checkpoint.pt"]
    assert torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)["counters"]["step"] == 20 * 1024
    with open(os.path.join(run_dir, "logs.csv")) as f:
        rows = f.read().splitlines()
    header = rows[0].split(",")
    last = dict(zip(header, rows[-1].split(",")))
    assert len(rows) - 1 == 20 and -21 <= float(last["mean_return"]) <= 21  # one row per batch of 1,024 steps
    _run(["launch/evaluate.py", run_dir, "--runs", "1", "--episodes", "2", "--max_episode_frames", "4000",
          "--workers", "2", "--out", out_dir])
    (result,) = _read_json(os.path.join(out_dir, "evaluation.json"))["results"]
    assert (result["game"], result["core"], result["step"], result["runs"], result["episodes"]) == ("Pong", "ff", 10240,
                                                                                                 1, 2)
    assert all(-21 <= score <= 21 for score in result["per_run"][0]["scores"])
