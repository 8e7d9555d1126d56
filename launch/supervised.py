"""Train a core on a supervised benchmark: ``python launch/supervised.py --task retrieval2 --core delta``.

Defaults come from ``launch/configs/supervised.yaml``: the top-level keys, then
``task_defaults[task]``, then ``core_defaults[core]`` (which the task's entry may extend),
then the command line (``--key value`` for any unique key, ``--set section.key=value``).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agents.config import parse_config  # noqa: E402
from agents.supervised import Config, train  # noqa: E402

DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "supervised.yaml")


def _flatten(prefix: str, value, out: list[str]) -> list[str]:
    """``{"optim": {"lr": 1}}`` -> ``["--set", "optim.lr=1"]`` (one flag per leaf)."""
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else k, v, out)
    else:
        out += ["--set", f"{prefix}={_yaml_inline(value)}"]
    return out


def _yaml_inline(value) -> str:
    import yaml
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def load_config(argv: list[str]) -> Config:
    """Parse the YAML + overrides, then re-parse with the chosen core's defaults placed before
    the command line so that explicit flags still win."""
    cfg = parse_config(Config, argv, DEFAULT_CONFIG, variants=("task", "task_defaults"))
    core_defaults = cfg.core_defaults.get(cfg.core, {})
    if not core_defaults:
        return cfg
    return parse_config(Config, _flatten("", core_defaults, []) + argv, DEFAULT_CONFIG,
                        variants=("task", "task_defaults"))


def main(argv: list[str] | None = None) -> dict:
    return train(load_config(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
