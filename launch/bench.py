"""Benchmarks that print ratios measured side by side in one run.

    python launch/bench.py cores     # forward+backward time and peak memory per core, as ratios to lstm
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
