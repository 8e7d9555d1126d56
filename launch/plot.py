"""Learning curves from one or more runs' CSV logs.

    python launch/plot.py runs/maze-lstm runs/maze-delta -o maze.png
    python launch/plot.py runs/maze-* --metric sps --metric loss -o maze-sps.png

Each argument is a run directory (holding ``logs.csv``) or a CSV file; the legend shows the
run directory's name. One panel per ``--metric`` (default ``mean_return``), x axis = steps.
"""
from __future__ import annotations

import argparse
import itertools
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from agents.learning.logger import CSV_NAME, read_csv


def plot(runs: list[str], metrics: list[str], output: str, title: str | None = None) -> None:
    """Draw ``metrics`` against ``step`` for every run into the PNG ``output``."""
    outside = len(runs) > 6  # a long legend goes right of the axes, off the curves
    fig, axes = plt.subplots(1, len(metrics), figsize=(6 * len(metrics) + 3 * outside, 4), squeeze=False)
    colors = plt.get_cmap("tab10" if len(runs) <= 10 else "tab20").colors  # one colour per run
    for color, run in zip(itertools.cycle(colors), runs):
        path = os.path.join(run, CSV_NAME) if os.path.isdir(run) else run
        label = os.path.basename(os.path.dirname(path) if path.endswith(CSV_NAME) else path)
        rows = read_csv(path)
        for ax, metric in zip(axes[0], metrics):
            points = [(r["step"], r[metric]) for r in rows if not math.isnan(r.get(metric, math.nan))]
            if points:
                ax.plot(*zip(*points), label=label, color=color)
    for ax, metric in zip(axes[0], metrics):
        ax.set_xlabel("environment steps")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend(**({"loc": "center left", "bbox_to_anchor": (1, 0.5), "fontsize": "small"} if outside else {}))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run directories or CSV files")
    parser.add_argument("--metric", action="append", help="column to plot (repeatable; default mean_return)")
    parser.add_argument("-o", "--output", default="curves.png")
    parser.add_argument("--title")
    args = parser.parse_args(argv)
    plot(args.runs, args.metric or ["mean_return"], args.output, args.title)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
