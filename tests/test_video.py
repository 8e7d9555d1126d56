"""envs/video.py and launch/evaluate.py --video: games written as MP4 files, read back."""
from __future__ import annotations

import imageio
import numpy as np
import pytest

import envs
from envs.video import RecordedGame
from launch import evaluate


def _read(path):
    reader = imageio.get_reader(path, format="FFMPEG")
    try:
        return np.stack([frame for frame in reader]), reader.get_meta_data()["fps"]  # len() is inf
    finally:
        reader.close()


def _play_recorded(game, path, policy):
    """One whole game through evaluate.play; returns its length and the frames render gave."""
    shown = []
    recorded = RecordedGame(game, str(path))
    render = game.render
    game.render = lambda *a: shown.append(render(*a).copy()) or shown[-1]
    _, lengths = evaluate.play([recorded], policy, 1)
    recorded.close()
    return lengths[0][0], np.stack(shown)


def test_an_atari_game_comes_back_as_the_emulators_screens(tmp_path):
    """Space Invaders, 100 steps (a 400-frame cap): 101 frames of 210 x 160 RGB at 15 frames/s,
    each close to the screen render gave at that step (H.264 is lossy)."""
    game = envs.make("atari", num_envs=1, seed=3, game="SpaceInvaders", max_episode_frames=400, rgb_frames=True)
    length, shown = _play_recorded(game, tmp_path / "g.mp4", lambda obs, r, a, d, rows: np.array([1] * len(rows)))
    frames, fps = _read(tmp_path / "g.mp4")
    assert length == 100 and frames.shape == (101, 210, 160, 3) and fps == 15
    assert np.abs(frames.astype(int) - shown.astype(int)).mean() < 4.0
    assert len({f.tobytes() for f in shown}) > 50  # the screen moves: not one frame repeated


def test_a_maze_episode_comes_back_as_its_grid(tmp_path):
    game = envs.make("maze", num_envs=1, seed=0, episode_length=30)
    length, shown = _play_recorded(game, tmp_path / "m.mp4", lambda obs, r, a, d, rows: np.array([3] * len(rows)))
    frames, fps = _read(tmp_path / "m.mp4")
    assert length == 30 and frames.shape == (31, 144, 144, 3) and fps == 4
    assert np.abs(frames.astype(int) - shown.astype(int)).mean() < 4.0


def test_the_screens_emulator_plays_the_same_game_with_sticky_actions():
    """rgb_frames adds a second emulator: the same observations, rewards and ends as without it
    over whole games with sticky actions and no-ops (Atari.step checks the two every step)."""
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 6, size=(1500, 2))
    runs = []
    for rgb in (False, True):
        env = envs.make("atari", num_envs=2, seed=11, game="SpaceInvaders", max_episode_frames=2000, rgb_frames=rgb)
        out = [env.reset()]
        for a in actions:
            obs, reward, done, _ = env.step(a)
            out += [obs, reward, done]
        env.close()
        runs.append(out)
    assert sum(int(x.sum()) for x in runs[0][3::3]) >= 3  # games ended: the resets are covered
    assert all(np.array_equal(a, b) for a, b in zip(*runs))


def test_render_without_rgb_frames_says_what_to_set():
    env = envs.make("atari", num_envs=1, seed=0, game="Pong")
    env.reset()
    with pytest.raises(ValueError, match="rgb_frames"):
        env.render()
    env.close()


def test_video_flags_are_checked(tmp_path, monkeypatch):
    with pytest.raises(evaluate.ConfigError, match="--video_games: give --video"):
        evaluate.load(["x.pt", "--video_games", "2"])
    with pytest.raises(evaluate.ConfigError, match="--video_games: must be > 0"):
        evaluate.load(["x.pt", "--video", str(tmp_path), "--video_games", "0"])
    monkeypatch.setattr(evaluate, "describe", lambda path: {"checkpoint": path, "env": "gym", "game": "CartPole-v1",
                                                             "core": "lstm", "step": 0})
    args = evaluate.load(["x.pt", "--video", str(tmp_path)])
    with pytest.raises(evaluate.UsageError, match="--video: the gym env cannot draw its games"):
        evaluate.evaluate(["x.pt"], args)
