"""Build a memory core by name: ``make_core(name, input_size, **cfg)``.

Every core is an ``nn.Module`` with

* a ``Config`` dataclass (class attribute) listing its options and defaults, each field
  followed by a one-line docstring (the command line's ``--help`` shows it),
* ``__init__(input_size: int, config: Config)``,
* ``output_size: int``,
* ``initial_state(batch_size, device) -> tuple[Tensor, ...]``: every tensor has
  the batch on dim 0, and an all-zero state is the state at an episode start,
* ``forward(x[T,B,D], state, done[T,B]) -> (y[T,B,D_out], state, aux)``:
  where ``done[t, b]`` is true the state of element b is zeroed *before* step t
  (see :func:`fastnet.state.reset_state`); ``aux`` maps names to auxiliary losses.
  (``srwm`` keeps W - W_0 as its state, so a zeroed state means its learned W_0.)

Cores are registered as import paths so that importing the registry stays cheap.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from torch import nn

from fastnet.options import check_choice, check_options

CORES: dict[str, str] = {
    "ff": "fastnet.cores:FeedForwardCore",
    "lstm": "fastnet.cores:LSTMCore",
    "gru": "fastnet.cores:GRUCore",
    "lru": "fastnet.lru:LRUCore",
    "linear": "fastnet.cores:LinearTransformerCore",
    "delta": "fastnet.cores:DeltaNetCore",
    "rec_delta": "fastnet.cores:RecurrentDeltaNetCore",
    "delta_rnn": "fastnet.cores:DeltaRNNCore",
    "delta_lstm": "fastnet.cores:DeltaLSTMCore",
    "gated_delta": "fastnet.cores:GatedDeltaNetCore",
    "delta_product": "fastnet.cores:DeltaProductCore",
    "srwm": "fastnet.cores:SRWMCore",
    "mnm_g": "fastnet.mnm:MNMGCore",
    "mnm_p": "fastnet.mnm:MNMPCore",
}


def core_class(name: str) -> type[nn.Module]:
    """The class registered under ``name``; ValueError lists the valid names."""
    check_choice(name, CORES, kind="core")
    module, cls = CORES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def make_core(name: str, input_size: int, **cfg: Any) -> nn.Module:
    """Build the core ``name`` reading ``input_size`` features, with options ``cfg``."""
    cls = core_class(name)
    if not isinstance(input_size, int) or input_size <= 0:
        raise ValueError(f"input_size must be a positive int, got {input_size!r}")
    check_options(cfg, (f.name for f in dataclasses.fields(cls.Config)), kind="core", name=name)
    return cls(input_size, cls.Config(**cfg))
