"""Build a memory core by name: ``make_core(name, input_size, **cfg)``.

Every core is an ``nn.Module`` with

* a ``Config`` dataclass (class attribute) listing its options and defaults,
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
import typing
from typing import Any

from torch import nn

CORES: dict[str, str] = {
    "ff": "fastnet.cores:FeedForwardCore",
    "lstm": "fastnet.cores:LSTMCore",
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
    if name not in CORES:
        raise ValueError(f"unknown core {name!r}; valid cores: {', '.join(CORES)}")
    module, cls = CORES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def build_config(config_cls: type, options: dict[str, Any], what: str) -> Any:
    """Instantiate dataclass ``config_cls`` from ``options``, checking names and types.

    Unknown keys and values of the wrong type raise ``ValueError`` naming the valid
    options. ints are accepted where floats are expected. A field whose type is a
    ``typing.Literal`` also checks the value against the listed choices.
    """
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    for key, value in options.items():
        if key not in fields:
            valid = ", ".join(f"{n}: {_type_name(hints[n])}" for n in fields)
            raise ValueError(f"unknown option {key!r} for {what}; valid options: {valid}")
        _check_type(key, value, hints[key], what)
    return config_cls(**options)


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _check_type(key: str, value: Any, tp: Any, what: str) -> None:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ValueError(f"option {key}={value!r} for {what}: choose one of {list(choices)}")
        return
    if origin is typing.Union:  # Optional[X]
        if value is None and type(None) in typing.get_args(tp):
            return
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    ok = isinstance(value, tp) and not (tp in (int, float) and isinstance(value, bool))
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise ValueError(
            f"option {key} for {what} must be {_type_name(tp)}, got {type(value).__name__} {value!r}"
        )


def make_core(name: str, input_size: int, **cfg: Any) -> nn.Module:
    """Build the core ``name`` reading ``input_size`` features, with options ``cfg``."""
    cls = core_class(name)
    if not isinstance(input_size, int) or input_size <= 0:
        raise ValueError(f"input_size must be a positive int, got {input_size!r}")
    config = build_config(cls.Config, cfg, f"core {name!r}")
    return cls(input_size, config)
