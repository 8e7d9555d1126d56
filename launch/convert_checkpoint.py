"""Convert a checkpoint that an older version wrote with more than plain data, so that it loads
as data only (``torch.load(..., weights_only=True)``, as every command reads checkpoints).

    python launch/convert_checkpoint.py runs/maze-lstm/checkpoint.pt
    python launch/convert_checkpoint.py old.pt --output new.pt

**Run it only on a file you trust.** To convert, this reads the file with the full unpickler,
which runs whatever code the file names: that is why no other command does. numpy arrays and
numbers become tensors and Python numbers, dataclasses and other objects with fields become
dicts; the result is checked to load as data only, then written atomically (over the input
unless ``--output`` is given).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any

import numpy as np
import torch

from agents.errors import CheckpointError, UserError, exit_on_error
from agents.files import atomic_save
from agents.learning.checkpoint import plain_data, read_checkpoint


def to_plain(value: Any) -> Any:
    """``value`` with numpy arrays and scalars, dataclasses and objects with a ``__dict__`` turned
    into tensors, numbers and dicts (recursively); everything else as it is."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    if isinstance(value, np.generic):
        return value.item()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        out = type(value)((k, to_plain(v)) for k, v in value.items())
        if hasattr(value, "_metadata"):
            out._metadata = value._metadata
        return out
    if isinstance(value, (list, tuple)):
        return type(value)(to_plain(v) for v in value)
    if isinstance(value, (torch.Tensor, str, bytes, bool, int, float)) or value is None:
        return value
    if hasattr(value, "__dict__"):
        return {k: to_plain(v) for k, v in vars(value).items()}
    return value


def convert(path: str, output: str) -> None:
    """Read ``path`` with the full unpickler, write its payload as plain data to ``output``, and
    check that it reads back as data only."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # the file is input: any failure is one line
        raise CheckpointError(f"cannot read {path}: {type(e).__name__}: {e}".splitlines()[0]) from None
    try:
        plain = plain_data(to_plain(payload))
    except TypeError as e:
        raise CheckpointError(f"cannot convert {path}: {e}") from None
    atomic_save(plain, output, "the converted checkpoint")
    read_checkpoint(output)  # loads as data only, or says why not
    print(f"wrote {output}: it loads as data only", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="launch/convert_checkpoint.py", description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint", help="the checkpoint to convert (only a file you trust: reading it runs code)")
    parser.add_argument("--output", help="where to write the converted checkpoint (default: over the input)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)

    def run() -> None:
        if not os.path.isfile(args.checkpoint):
            raise UserError(f"no such file: {args.checkpoint}")
        convert(args.checkpoint, args.output or args.checkpoint)

    exit_on_error(run)


if __name__ == "__main__":
    main()
