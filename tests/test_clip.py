"""launch/clip.py: a GIF cut from an MP4, read back frame by frame."""
from __future__ import annotations

import imageio
import imageio.v3 as iio
import numpy as np
import pytest

from agents.errors import UsageError, UserError
from launch import clip


def _video(path, n=30, fps=10):
    """An MP4 whose frame i is grey level 8 * i, with a white square at column 2 * i."""
    writer = imageio.get_writer(path, format="FFMPEG", fps=fps, codec="libx264", macro_block_size=2,
                                ffmpeg_log_level="error")
    for i in range(n):
        frame = np.full((48, 80, 3), 8 * i, np.uint8)
        frame[10:20, 2 * i:2 * i + 10] = 255
        writer.append_data(frame)
    writer.close()


def test_the_clip_holds_the_frames_of_its_window(tmp_path):
    """30 frames at 10/s; from 1.0 s for 1.0 s every 2nd: frames 10, 12, 14, 16, 18, at 200 ms each."""
    _video(tmp_path / "g.mp4")
    assert clip.clip(str(tmp_path / "g.mp4"), str(tmp_path / "g.gif"), start_s=1.0, seconds=1.0, every=2) == 5
    gif = iio.imread(tmp_path / "g.gif", index=None)
    assert gif.shape[:3] == (5, 48, 80)
    for frame, i in zip(gif[..., :3].astype(int), (10, 12, 14, 16, 18)):
        assert abs(np.median(frame[30:]) - 8 * i) <= 3  # the grey level says which frame it is
        assert frame[15, 2 * i + 5].min() >= 240 and frame[15, 2 * i - 5].max() < 200  # the square moved there
    meta = iio.immeta(tmp_path / "g.gif", index=0)
    assert meta["duration"] == 200 and meta["loop"] == 0


def test_a_window_past_the_end_is_cut_to_the_video(tmp_path):
    _video(tmp_path / "g.mp4")
    assert clip.clip(str(tmp_path / "g.mp4"), str(tmp_path / "g.gif"), start_s=2.5, seconds=10.0) == 5


def test_bad_clips_are_one_line(tmp_path):
    _video(tmp_path / "g.mp4")
    with pytest.raises(UsageError, match=r"--start 4.0: .* lasts 3.0 s \(30 frames at 10/s\)"):
        clip.clip(str(tmp_path / "g.mp4"), str(tmp_path / "g.gif"), start_s=4.0, seconds=1.0)
    with pytest.raises(UsageError, match="--every >= 1"):
        clip.clip(str(tmp_path / "g.mp4"), str(tmp_path / "g.gif"), start_s=0.0, seconds=1.0, every=0)
    with pytest.raises(UserError, match="cannot read the video"):
        clip.clip(str(tmp_path / "none.mp4"), str(tmp_path / "g.gif"), start_s=0.0, seconds=1.0)
    assert not (tmp_path / "g.gif").exists()
