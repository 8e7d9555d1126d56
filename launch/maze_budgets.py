"""The main job at every budget (issue 75): train ``launch/maze.py --core lstm`` for each budget and
seed, each run stopped at its budget (so each has its own lr schedule), and print the mean return
(last 100 episodes) at 186K, 300K, 500K, 1M, 2M, 5M, 10M and 20M steps, per run and as medians.

    python launch/maze_budgets.py              # the report: fresh seeds 500-504 at 500K and 2M, 500-501 at 20M
    python launch/maze_budgets.py --table      # the table again, from the runs' logs.csv
    python launch/maze_budgets.py --budgets 2000000 --seeds 10 11 12 --name unroll10 --pin 1 \\
        -- --actor.unroll_length 10            # a screen: training seeds, flags after --, one core

A run whose ``logs.csv`` already reaches its budget is not run again (delete its directory to redo
it). Runs go one at a time; on the 2-core machine nothing else should run beside them.
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import subprocess
import sys

POINTS = (186_000, 300_000, 500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000, 20_000_000)
# the report (issue 75): the main job's budget, 2M and the README's default 20M, on seeds that chose nothing
REPORT = {500_000: (500, 501, 502, 503, 504), 2_000_000: (500, 501, 502, 503, 504), 20_000_000: (500, 501)}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_curve(path: str) -> list[tuple[int, float]]:
    """(step, mean_return) of each row of a run's ``logs.csv`` that has a mean return."""
    with open(path, newline="") as f:
        rows = [(int(r["step"]), float(r["mean_return"])) for r in csv.DictReader(f)]
    return [(s, r) for s, r in rows if not math.isnan(r)]


def return_at(curve: list[tuple[int, float]], point: int, budget: int) -> float | None:
    """The mean return of the first row at or past ``point`` (the last row for the budget itself);
    None for a point past the budget or not reached."""
    if point > budget:
        return None
    for step, value in curve:
        if step >= point:
            return value
    if curve and point == budget and curve[-1][0] >= budget - 1_000:  # the last update may stop just short
        return curve[-1][1]
    return None


def run_dir(out: str, name: str, budget: int, seed: int) -> str:
    return os.path.join(out, name, f"{budget}", f"seed{seed}")


def complete(path: str, budget: int) -> bool:
    logs = os.path.join(path, "logs.csv")
    if not os.path.exists(logs):
        return False
    curve = read_curve(logs)
    return bool(curve) and curve[-1][0] >= budget - 1_000


def train(path: str, budget: int, seed: int, flags: list[str], pin: str | None) -> None:
    command = [sys.executable, os.path.join(ROOT, "launch", "maze.py"), "--core", "lstm",
               "--total_steps", str(budget), "--seed", str(seed), "--run.run_dir", path,
               "--run.resume", "false", "--log.tensorboard", "false", *flags]
    env = dict(os.environ)
    if pin is not None:
        command = ["taskset", "-c", pin, *command]
        env["OMP_NUM_THREADS"] = "1"
    print(" ".join(command), flush=True)
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)


def table(out: str, name: str, plan: dict[int, tuple[int, ...]]) -> str:
    """Markdown: a row per run and a row of medians per budget, the points up to each budget."""
    head = "| budget | seed | " + " | ".join(f"{p / 1e6:g}M" if p >= 1e6 else f"{p // 1000}K" for p in POINTS) + " |"
    lines = [head, "| " + " | ".join("---" for _ in range(len(POINTS) + 2)) + " |"]
    for budget, seeds in plan.items():
        per_point: dict[int, list[float]] = {p: [] for p in POINTS}
        for seed in seeds:
            logs = os.path.join(run_dir(out, name, budget, seed), "logs.csv")
            curve = read_curve(logs) if os.path.exists(logs) else []
            cells = []
            for p in POINTS:
                value = return_at(curve, p, budget)
                if value is not None:
                    per_point[p].append(value)
                cells.append("" if value is None else f"{value:.1f}")
            lines.append(f"| {budget:,} | {seed} | " + " | ".join(cells) + " |")
        medians = [f"**{statistics.median(v):.1f}**" if len(v) == len(seeds) else "" for v in per_point.values()]
        lines.append(f"| {budget:,} | median of {len(seeds)} | " + " | ".join(medians) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    flags = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budgets", type=int, nargs="+", help="run.total_steps of the runs (default: the report's)")
    p.add_argument("--seeds", type=int, nargs="+", help="seeds of every budget (default: the report's)")
    p.add_argument("--name", default="defaults", help="a name for this setting: its runs go to OUT/NAME/")
    p.add_argument("--out", default="runs/maze_budgets", help="where the runs go")
    p.add_argument("--pin", help="run each training under taskset -c PIN with OMP_NUM_THREADS=1")
    p.add_argument("--table", action="store_true", help="only print the table from the runs already there")
    args = p.parse_args(argv)
    budgets = args.budgets or list(REPORT)
    plan = {b: tuple(args.seeds) if args.seeds else REPORT.get(b, REPORT[2_000_000]) for b in budgets}
    if not args.table:
        for budget, seeds in plan.items():
            for seed in seeds:
                path = run_dir(args.out, args.name, budget, seed)
                if not complete(path, budget):
                    train(path, budget, seed, flags, args.pin)
    print(f"\n{args.name}{' (' + ' '.join(flags) + ')' if flags else ''}: mean return (last 100 episodes)\n")
    print(table(args.out, args.name, plan))


if __name__ == "__main__":
    main()
