"""``launch/bench.py peers --env atari:<Game>`` (issue 73): DeltaBeast on atari_cpu.yaml beside SB3's
PPO at RL Zoo's Atari settings; the peer's frames and rewards against our env's, and a tiny run."""
from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest

import envs
from agents.errors import UsageError
from envs.atari import Atari
from launch import peers


def test_atari_pong_parses_and_runs_atari_cpu_beside_ppo_by_default():
    parser = argparse.ArgumentParser()
    peers.add_parser(parser.add_subparsers())
    args = parser.parse_args(["peers", "--env", "atari:Pong"])
    assert args.env == "atari:Pong" and args.algos is None
    assert peers.default_algos(args.env, args.observe) == ("deltabeast", "ppo")
    core = peers.default_core(args.env)
    config = peers.deltabeast_config(args.env, core=core, seed=0, steps=None, flags=[], run_dir="unused")
    assert core == "ff" and config.core.name == "ff" and config.network.stem == "nature"  # atari_cpu.yaml's
    assert config.env.game == "Pong" and config.env.sticky_action_prob == 0.25 and config.run.total_steps == 2_500_000


def test_recurrent_ppo_is_refused_on_atari():
    args = argparse.Namespace(env="atari:Pong", core=None, steps=1000, seeds=[0], algos=["recurrent_ppo"],
                              out="unused", plot=None, table=False, docs=False, flags=[], observe="all")
    with pytest.raises(UsageError, match="Atari's peer is SB3's PPO"):
        peers.bench_peers(args)


def test_the_ppo_settings_are_rl_zoos_atari_entry():
    """rl-baselines3-zoo's hyperparams/ppo.yml, ``atari:`` (its env_wrapper AtariWrapper and n_timesteps
    1e7 aside), and SB3's PPO defaults for the three it leaves out; "lin_" decays linearly to 0."""
    assert peers.ATARI_PPO == {"policy": "CnnPolicy", "n_envs": 8, "frame_stack": 4, "n_steps": 128, "n_epochs": 4,
                               "batch_size": 256, "learning_rate": "lin_2.5e-4", "clip_range": "lin_0.1",
                               "vf_coef": 0.5, "ent_coef": 0.01, "gamma": 0.99, "gae_lambda": 0.95,
                               "max_grad_norm": 0.5}
    pytest.importorskip("stable_baselines3")
    import inspect

    from stable_baselines3 import PPO

    defaults = inspect.signature(PPO).parameters
    assert all(defaults[key].default == peers.ATARI_PPO[key] for key in ("gamma", "gae_lambda", "max_grad_norm"))
    lr, clip = peers.rl_zoo_value("lin_2.5e-4"), peers.rl_zoo_value("lin_0.1")
    assert [lr(r) for r in (1.0, 0.5, 0.0)] == [2.5e-4, 1.25e-4, 0.0]
    assert [clip(r) for r in (1.0, 0.5, 0.0)] == [0.1, 0.05, 0.0]
    assert peers.rl_zoo_value(256) == 256 and peers.rl_zoo_value("CnnPolicy") == "CnnPolicy"


def test_the_peers_frames_and_rewards_are_ours_but_the_first_stacks_padding():
    """Both envs deterministic (sticky actions 0, no no-ops), 200 steps of Pong with one fixed action
    sequence: the peer's observations (its VecFrameStack over Gymnasium's AtariPreprocessing) equal
    ours bit for bit, except in the first 3 of the game, where the 3, 2 and 1 oldest frames of the
    stack are black in the peer's and the game's first frame in ours (make_atari_env's docstring).
    The rewards it learns from are the signs of ours, and those its Monitor records (the curve's)
    are ours."""
    pytest.importorskip("cv2", reason="Gymnasium's AtariPreprocessing resizes with OpenCV")
    pytest.importorskip("stable_baselines3")
    config = Atari.Config(game="Pong", sticky_action_prob=0.0, noop_max=0)
    peer = peers.atari_vec_env(config, num_envs=1)
    ours = envs.make("atari", num_envs=1, seed=3, **vars(config))
    peer.seed(3)
    theirs, mine = peer.reset().transpose(0, 3, 1, 2), ours.reset()  # (1, 84, 84, 4) -> (1, 4, 84, 84)
    first = mine[0, -1].copy()
    rng = np.random.default_rng(0)
    rewards, learned = [], []
    try:
        for step in range(201):
            assert theirs.shape == mine.shape == (1, 4, 84, 84) and theirs.dtype == np.uint8
            padded = max(0, 3 - step)  # the stack's oldest frames that precede the game
            np.testing.assert_array_equal(theirs[0, padded:], mine[0, padded:], err_msg=f"step {step}")
            assert not theirs[0, :padded].any(), step
            assert (mine[0, :padded] == first).all(), step
            if padded:  # how they differ: Pong's first frame has no black pixel, so every pixel of those frames
                differ = theirs != mine
                assert differ.mean() == padded / 4
                assert np.abs(theirs.astype(int) - mine).max() == first.max() == 179
            if step == 200:
                break
            action = int(rng.integers(ours.num_actions))
            observation, reward, done, _ = peer.step(np.array([action]))
            theirs = observation.transpose(0, 3, 1, 2)
            mine, our_reward, our_done, _ = ours.step(np.array([action]))
            assert not done[0] and not our_done[0]
            rewards.append(float(our_reward[0]))
            learned.append(float(reward[0]))
        monitor = peer.venv.envs[0].env
        assert monitor.rewards == rewards  # the raw rewards of the game so far
        assert learned == np.sign(rewards).tolist()
        assert np.count_nonzero(rewards) >= 2  # points were scored: the comparison saw rewards
    finally:
        peer.close()
        ours.close()


def test_a_tiny_ppo_run_on_atari_writes_raw_whole_game_scores(tmp_path):
    """2,048 steps of SB3's PPO at RL Zoo's settings (two updates of 8 envs x 128 steps); games cut at
    1,000 frames (--env.max_episode_frames, which the peer's env takes from DeltaBeast's config), so
    each of the 8 envs finishes one, ~250 steps in."""
    pytest.importorskip("cv2", reason="Gymnasium's AtariPreprocessing resizes with OpenCV")
    pytest.importorskip("stable_baselines3")
    out = str(tmp_path / "peers")
    args = argparse.Namespace(env="atari:Pong", core=None, steps=2048, seeds=[0], algos=["ppo"], out=out, plot=None,
                              table=False, docs=False, flags=["--env.max_episode_frames", "1000"], observe="all")
    peers.bench_peers(args)
    with open(peers.result_path(out, "atari:Pong", "ppo", 0)) as f:
        saved = json.load(f)
    assert saved["env"] == "atari:Pong" and saved["algo"] == "ppo" and saved["steps"] == 2048
    assert len(saved["curve"]) == 8
    assert all(8 * 240 <= step <= 2048 for step, _ in saved["curve"])
    assert all(-21 <= value <= 21 and math.isfinite(value) for _, value in saved["curve"])
    assert saved["wall_s"] > 0
    walls = saved["curve_wall_s"]  # when each game ended, for the table's equal-wall columns
    assert len(walls) == 8 and walls == sorted(walls) and 0 < walls[0] and walls[-1] <= saved["wall_s"]


@pytest.mark.slow
def test_a_tiny_deltabeast_run_on_atari_trains_atari_cpu_yaml(tmp_path):
    """launch/atari.py's config on atari_cpu.yaml, made tiny by --flags, writes its curve of whole games
    (cut at 400 frames: ~100 steps)."""
    out = str(tmp_path / "peers")
    flags = ["--actor.num_actors", "1", "--actor.envs_per_actor", "4", "--actor.unroll_length", "16",
             "--learner.batch_size", "4", "--learner.minibatches", "2", "--run.num_threads", "1",
             "--env.max_episode_frames", "400", "--env.num_threads", "1", "--log.print_every_s", "1000"]
    args = argparse.Namespace(env="atari:Pong", core=None, steps=1024, seeds=[0], algos=["deltabeast"], out=out,
                              plot=None, table=False, docs=False, flags=flags, observe="all")
    peers.bench_peers(args)
    with open(peers.result_path(out, "atari:Pong", "deltabeast", 0, "ff")) as f:
        saved = json.load(f)
    assert saved["curve"] and saved["curve"][-1][0] == 1024
    assert len(saved["curve_wall_s"]) == len(saved["curve"]) and saved["curve_wall_s"][-1] <= saved["wall_s"]
    assert all(-21 <= value <= 21 for _, value in saved["curve"])


def test_the_atari_table_gives_returns_at_equal_steps_and_at_equal_wall_time(tmp_path):
    """By hand: DeltaBeast's run reaches 2.5M steps in 50 minutes, the peer's 1M in 100 (stopped
    there). At equal steps the peer has nothing past 1M; at equal wall time DeltaBeast has nothing
    past its 50 minutes (45 min: its point at 40 min), the peer's 135-min cell is empty, and at 90
    min the peer stands at its 80-min point. Steps/s: 2.5M / 3,000 s and 1M / 6,000 s."""
    m = 60
    ours = {"env": "atari:Pong", "algo": "deltabeast", "seed": 0, "core": "ff", "steps": 2_500_000,
            "wall_s": 50 * m, "curve": [[500_000, -20.0], [1_000_000, -15.0], [2_000_000, 5.0], [2_500_000, 12.0]],
            "curve_wall_s": [10 * m, 20 * m, 40 * m, 50 * m]}
    peer = {"env": "atari:Pong", "algo": "ppo", "seed": 0, "steps": 1_000_000, "wall_s": 100 * m,
            "curve": [[400_000, -21.0], [800_000, -18.0], [1_000_000, -16.5]],
            "curve_wall_s": [40 * m, 80 * m, 100 * m]}
    results = {"atari:Pong": {"deltabeast": [ours], "ppo": [peer]}}
    lines = peers.atari_table(results).splitlines()
    assert lines[0] == ("| env | algorithm | seeds | at 0.5M steps | at 1M steps | at 1.5M steps | at 2M steps | "
                        "at 2.5M steps | at 15 min | at 30 min | at 45 min | at 90 min | at 135 min | steps/s | "
                        "wall time |")
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    assert cells[0] == ["atari:Pong", "deltabeast (ff)", "0", "-20.0", "-15.0", "-15.0", "5.0", "12.0",
                        "-20.0", "-15.0", "5.0", "—", "—", "833", "50 min"]
    assert cells[1] == ["atari:Pong", "ppo", "0", "-21.0", "-16.5", "—", "—", "—",
                        "—", "—", "-21.0", "-18.0", "—", "167", "100 min"]
    peers.plot_curves(results, str(tmp_path / "pong.png"))  # a panel against steps and one against minutes
    assert (tmp_path / "pong.png").stat().st_size > 0
