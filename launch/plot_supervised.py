"""Plots for the supervised reproductions, from run directories written by launch/supervised.py.

Learning curves (valid loss against step)::

    python launch/plot_supervised.py curves --out docs/retrieval_setting2.png \\
        "ours (delta, DPFP-1, sum norm)=runs/setting2/delta_dpfp_sumnorm" "sum rule=runs/setting2/sum_rule_dpfp"

``--metric valid/seq_acc --x time`` plots another logged column against wall-clock minutes.

Capacity (final = best valid loss of each run against its number of keys S; each label takes
a glob of run directories)::

    python launch/plot_supervised.py capacity --out docs/retrieval_setting1.png "DPFP-1=runs/setting1/dpfp_S*"
"""
from __future__ import annotations

import argparse
import glob
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import yaml

from agents.errors import UsageError
from agents.learning.logger import check_metrics, read_run_log


def _pairs(specs: list[str]) -> list[tuple[str, str]]:
    out = []
    for spec in specs:
        label, eq, path = spec.rpartition("=")
        if not eq:
            raise UsageError(f"expected LABEL=PATH, got {spec!r}")
        out.append((label, path))
    return out


def curves(args) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    logs = [(label, read_run_log(run)[1]) for label, run in _pairs(args.runs)]
    check_metrics([args.metric], [rows for _, rows in logs])
    for label, rows in logs:
        rows = [r for r in rows if r.get(args.metric) == r.get(args.metric)]
        xs = [r["step"] if args.x == "step" else r["time"] / 60 for r in rows]
        ax.plot(xs, [r[args.metric] for r in rows], label=label)
    ax.set_xlabel("training step" if args.x == "step" else "wall-clock minutes")
    ax.set_ylabel(args.metric)
    ax.set_yscale("log" if args.logy else "linear")
    ax.set_title(args.title)
    if args.ymax is not None:
        ax.set_ylim(top=args.ymax)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=args.dpi)
    print(f"wrote {args.out}")


def capacity(args) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, pattern in _pairs(args.runs):
        points = []
        matches = sorted(glob.glob(pattern))
        if not matches:
            raise UsageError(f"{label}={pattern}: matches no run directory")
        for run in matches:
            results = os.path.join(run, "results.json")
            if not os.path.exists(results):
                continue
            with open(results) as f:
                res = json.load(f)
            with open(os.path.join(run, "config.yaml")) as f:
                S = yaml.safe_load(f)["task"]["num_keys"]
            points.append((S, res["valid"]["loss"]))
            print(f"{label}\tS={S}\tfinal valid loss {res['valid']['loss']:.4g}\tsteps {res['steps']}\t"
                  f"stop {res['stop_reason']}")
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], "o-", label=label)
    for x, style in ((64, ":"), (128, "--")):
        ax.axvline(x, color="grey", ls=style, lw=0.8)
    ax.set_xlabel("number of unique keys S (= sequence length L)")
    ax.set_ylabel("final evaluation loss")
    ax.set_yscale("log" if args.logy else "linear")
    ax.set_title(args.title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=args.dpi)
    print(f"wrote {args.out}")


def main(argv=None) -> None:
    from agents.errors import exit_on_error

    p = argparse.ArgumentParser(description=__doc__.replace("``", "").replace("::", ":"),  # plain text, not reST
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=["curves", "capacity"])
    p.add_argument("runs", nargs="+", help="LABEL=RUN_DIR (curves) or LABEL=GLOB (capacity)")
    p.add_argument("--out", required=True)
    p.add_argument("--metric", default="valid/loss")
    p.add_argument("--x", choices=["step", "time"], default="step", help="curves: the x axis")
    p.add_argument("--title", default="")
    p.add_argument("--logy", action="store_true")
    p.add_argument("--dpi", type=int, default=100)
    p.add_argument("--ymax", type=float, default=None, help="clip the y axis (diverged runs)")
    args = p.parse_args(argv)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    exit_on_error(lambda: (curves if args.kind == "curves" else capacity)(args))


if __name__ == "__main__":
    main()
