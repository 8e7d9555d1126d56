"""A short looping GIF cut from a game's MP4 (``launch/evaluate.py --video``), for a README or a page.

    python launch/clip.py runs/video/Pong-ff-2500608/game000.mp4 docs/atari_pong_cpu.gif --start 30 --seconds 8

The frames from ``--start`` seconds for ``--seconds`` seconds of the video's time, every
``--every``-th of them (a smaller file at a lower frame rate), written by imageio's pillow plugin
at the video's pace and looping forever. The MP4 is read by imageio's ffmpeg plugin, as it was written.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from agents.errors import UsageError, UserError, exit_on_error
from agents.files import atomic_write


def read_window(path: str, start_s: float, stop_s: float) -> tuple[list[np.ndarray], float, int]:
    """The frames of the MP4 ``path`` from ``start_s`` to ``stop_s`` seconds (uint8 ``[H, W, 3]``
    each), its frames per second, and how many frames were decoded: decoding stops at the window's
    end (a stalled game's video holds 27,001 frames)."""
    import imageio

    try:
        reader = imageio.get_reader(path, format="FFMPEG")
    except Exception as e:  # the file is input: a missing or broken one is one line
        raise UserError(f"cannot read the video {path}: {type(e).__name__}: {e}".splitlines()[0]) from None
    try:
        fps = float(reader.get_meta_data()["fps"])
        first, stop = round(start_s * fps), round(stop_s * fps)
        frames, decoded = [], 0
        for frame in reader:  # len(reader) is inf: count while reading
            if decoded >= stop:
                break
            if decoded >= first:
                frames.append(frame)
            decoded += 1
        return frames, fps, decoded
    finally:
        reader.close()


def clip(video: str, gif: str, *, start_s: float, seconds: float, every: int = 1) -> int:
    """Write frames ``[start_s, start_s + seconds)`` of ``video``, every ``every``-th, to the
    looping GIF ``gif`` (atomically); returns how many frames it holds."""
    if start_s < 0 or seconds <= 0 or every < 1:
        raise UsageError(f"--start must be >= 0, --seconds > 0 and --every >= 1 (got {start_s}, {seconds}, {every})")
    frames, fps, decoded = read_window(video, start_s, start_s + seconds)
    if not frames:
        raise UsageError(f"--start {start_s}: {video} lasts {decoded / fps:.1f} s ({decoded} frames at {fps:g}/s)")
    import imageio.v3 as iio

    kept = np.stack(frames[::every])
    atomic_write(gif, lambda f: iio.imwrite(f, kept, extension=".gif", duration=1000.0 * every / fps, loop=0),
                 "the GIF")
    return len(kept)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="launch/clip.py", description=__doc__.split("\n")[0])
    parser.add_argument("video", help="an MP4 that launch/evaluate.py --video wrote")
    parser.add_argument("gif", help="the GIF to write")
    parser.add_argument("--start", type=float, default=0.0, help="where the clip starts, in seconds of the video")
    parser.add_argument("--seconds", type=float, default=8.0, help="how long it lasts, in seconds of the video")
    parser.add_argument("--every", type=int, default=1, help="keep every N-th frame (a smaller file)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)

    def run() -> None:
        n = clip(args.video, args.gif, start_s=args.start, seconds=args.seconds, every=args.every)
        print(f"wrote {args.gif}: {n} frames", flush=True)

    exit_on_error(run)


if __name__ == "__main__":
    main()
