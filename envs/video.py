"""Games as videos: an env of one game whose every frame goes to an MP4 file (``launch/evaluate.py
--video``), written by imageio's ffmpeg plugin (H.264, from the registry's ``imageio[ffmpeg]``).

The frames are the env's own picture, ``render(0, "rgb_array")``: Atari's emulator screen, 210 x
160 RGB (the env option ``rgb_frames``), not the 84 x 84 grey input; the maze's grid, 16 pixels a
cell. One frame after the reset and one after each step, at the env's ``render_fps``.
"""
from __future__ import annotations

from typing import Any

import numpy as np


class RecordedGame:
    """``game`` (a batched env of one game, ``num_envs`` 1), its frames written to ``path``."""

    def __init__(self, game: Any, path: str):
        import imageio

        self.game, self.path = game, path
        # macro_block_size 2: H.264 wants even sides, and 210 x 160 and the maze's are
        self.writer = imageio.get_writer(path, format="FFMPEG", fps=game.render_fps, codec="libx264",
                                         macro_block_size=2, ffmpeg_log_level="error")

    def reset(self) -> np.ndarray:
        obs = self.game.reset()
        self.writer.append_data(self.game.render(0, "rgb_array"))
        return obs

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        out = self.game.step(actions)
        self.writer.append_data(self.game.render(0, "rgb_array"))
        return out

    def close(self) -> None:
        try:
            self.writer.close()
        finally:
            self.game.close()
