"""Learning curves from one or more runs' CSV logs.

    python launch/plot.py runs/maze-lstm runs/maze-delta -o maze.png
    python launch/plot.py runs/maze-* --metric sps --metric loss -o maze-sps.png

Each argument is a run directory (holding ``logs.csv``) or a CSV file; the legend shows the
run directory's name. One panel per ``--metric`` (default ``mean_return``), x axis = steps.
Without ``-o`` the figure goes to ``curves.png`` in the first run's directory.
"""
from __future__ import annotations

import argparse
import itertools
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from agents.learning.logger import check_metrics, read_run_log


def plot(runs: list[str], metrics: list[str], output: str, title: str | None = None, dpi: int = 120) -> None:
    """Draw ``metrics`` against ``step`` for every run into the PNG ``output``. A metric that no
    run logged is a :class:`UsageError` naming the columns there are."""
    logs = [read_run_log(run) for run in runs]
    check_metrics(metrics, [rows for _, rows in logs])
    outside = len(runs) > 6  # a long legend goes right of the axes, off the curves
    fig, axes = plt.subplots(1, len(metrics), figsize=(6 * len(metrics) + 3 * outside, 4), squeeze=False)
    colors = plt.get_cmap("tab10" if len(runs) <= 10 else "tab20").colors  # one colour per run
    for color, (label, rows) in zip(itertools.cycle(colors), logs):
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
    fig.savefig(output, dpi=dpi)
    plt.close(fig)


def default_output(run: str) -> str:
    """``curves.png`` in the run's directory (beside the CSV file, for a CSV file)."""
    return os.path.join(run if os.path.isdir(run) else os.path.dirname(run), "curves.png")


def main(argv: list[str] | None = None) -> None:
    from agents.errors import exit_on_error

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run directories or CSV files")
    parser.add_argument("--metric", action="append", help="column to plot (repeatable; default mean_return)")
    parser.add_argument("-o", "--output", help="the PNG to write (default: curves.png in the first run's directory)")
    parser.add_argument("--title", help="the figure's title")
    parser.add_argument("--dpi", type=int, default=120, help="resolution of the PNG (default 120)")
    args = parser.parse_args(argv)
    output = args.output or default_output(args.runs[0])
    exit_on_error(lambda: plot(args.runs, args.metric or ["mean_return"], output, args.title, args.dpi))
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
