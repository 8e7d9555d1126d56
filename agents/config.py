"""YAML configs as dataclasses, with command-line overrides.

A config schema is a dataclass whose fields are either scalars (top-level keys such as
``core`` or ``device``), free-form dicts (e.g. the core's options, checked later by whoever
consumes them) or *sections*: nested dataclasses, one per YAML mapping::

    @dataclass
    class Optim:
        lr: float = 6e-4

    @dataclass
    class Config:
        device: str = "cpu"
        optim: Optim = field(default_factory=Optim)

    cfg = parse_config(Config, ["--config", "maze.yaml", "--lr", "1e-3", "--set", "optim.lr=2e-3"])

Precedence, lowest first: dataclass defaults, the YAML file, the *variant* defaults picked
by a selector key (e.g. ``core_defaults[core]`` for the chosen ``--core``), then the command
line in the order given. On the command line

* ``--key value`` sets the field ``key`` wherever it is unique: a top-level scalar, or the
  one section holding a field of that name (``--lr 1e-3`` sets ``optim.lr``);
* ``--set path.to.key=value`` sets any field or dict entry by its dotted path.

Values are parsed with ``yaml.safe_load`` (``--set optim.lr=1e-3``, ``--set core.sizes=[1,2]``).
Malformed YAML, unknown keys and ill-typed values raise :class:`ConfigError` naming the file
or flag, the key, and the valid keys, before anything runs.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import types
import typing
from typing import Any, TypeVar

import yaml

from agents.checkpoint import atomic_write_text

C = TypeVar("C")


class ConfigError(ValueError):
    """A config file or command-line override that cannot be applied."""


def parse_config(schema: type[C], argv: list[str], default_path: str | None = None,
                 variants: tuple[str, str] | None = None) -> C:
    """Build ``schema`` from ``--config FILE`` (or ``default_path``) and the overrides in ``argv``.

    ``variants = (selector, table)`` names a top-level field (e.g. ``"core"``) and a dict field
    (e.g. ``"core_defaults"``) mapping each selector value to a nested dict of overrides that
    is applied after the YAML file and before the command line.
    """
    path, overrides = _split_argv(schema, argv, default_path)
    raw = load_yaml(path) if path else {}
    source = path or "defaults"
    for dotted, value, origin in overrides:  # first pass: the selector and the variant table
        if variants and (dotted == variants[0] or dotted.split(".")[0] == variants[1]):
            raw = _set_in_dict(raw, dotted.split("."), value)
    if variants:
        selector, table = variants
        chosen = raw.get(selector, _default_of(schema, selector))
        variant = (raw.get(table) or {}).get(chosen, {})
        if not isinstance(variant, dict):
            raise ConfigError(f"{source}: {table}.{chosen} must be a mapping, got {variant!r}")
        raw = deep_merge(raw, variant)
    config = build(schema, raw, source)
    for dotted, value, origin in overrides:
        config = set_path(config, dotted, value, origin)
    return config


def load_yaml(path: str) -> dict[str, Any]:
    """The mapping in the YAML file ``path``; ConfigError if missing, malformed or not a mapping."""
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} does not exist")
    with open(path) as f:
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: malformed YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys, got {type(data).__name__}")
    return data


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``update`` merged in, recursing into dicts present in both."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def build(schema: type[C], raw: dict[str, Any], source: str, prefix: str = "") -> C:
    """Instantiate ``schema`` from the nested dict ``raw``, checking every key and type."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: {prefix.rstrip('.') or 'config'} must be a mapping, got {raw!r}")
    fields, hints = _fields(schema)
    values = {}
    for key, value in raw.items():
        if key not in fields:
            raise ConfigError(f"{source}: unknown key {prefix + key!r}; valid keys: {_valid(schema, prefix)}")
        tp = hints[key]
        if _is_section(tp):
            values[key] = build(tp, value or {}, source, f"{prefix}{key}.")
        else:
            values[key] = check_type(value, tp, f"{source}: {prefix}{key}")
    return schema(**values)


def set_path(config: C, dotted: str, value: Any, origin: str) -> C:
    """A copy of ``config`` with the field or dict entry at ``dotted`` set to ``value``."""
    head, _, rest = dotted.partition(".")
    fields, hints = _fields(type(config))
    if head not in fields:
        raise ConfigError(f"{origin}: unknown key {dotted!r}; valid keys: {_valid(type(config), '')}")
    tp = hints[head]
    if _is_section(tp):
        if not rest:
            raise ConfigError(f"{origin}: {head!r} is a section; set one of its keys: {_valid(tp, head + '.')}")
        new = set_path(getattr(config, head), rest, value, origin)
    elif rest:
        current = getattr(config, head)
        if not isinstance(current, dict):
            raise ConfigError(f"{origin}: {head!r} is not a section or mapping, cannot set {dotted!r}")
        new = _set_in_dict(current, rest.split("."), value)
    else:
        new = check_type(value, tp, f"{origin}: {dotted}")
    return dataclasses.replace(config, **{head: new})


def to_dict(config: Any) -> dict[str, Any]:
    """The config as plain nested dicts (for YAML dumps and checkpoints)."""
    return dataclasses.asdict(config)


def save_yaml(config: Any, path: str) -> None:
    """Write the resolved config to ``path`` as YAML (atomically)."""
    atomic_write_text(path, yaml.safe_dump(to_dict(config), sort_keys=False))


def check_ranges(config: Any, positive: tuple[str, ...] = (), non_negative: tuple[str, ...] = ()) -> None:
    """ConfigError naming every dotted setting of ``config`` outside its range (None passes):
    settings that would otherwise hang a run (0 actors) or quietly spoil it (a negative clip)."""
    bad = []
    for key in positive + non_negative:
        value = config
        for name in key.split("."):
            value = getattr(value, name)
        strict = key in positive
        if value is not None and (value <= 0 if strict else value < 0):
            bad.append(f"{key} must be {'>' if strict else '>='} 0, got {value!r}")
    if bad:
        raise ConfigError("; ".join(bad))


def check_type(value: Any, tp: Any, where: str) -> Any:
    """``value`` if it has type ``tp``, else ConfigError. Ints and numeric strings ("1e-3")
    pass as floats and become floats.

    Understands bool/int/float/str, ``Literal``, ``Optional``, ``list[X]`` and ``dict[K, V]``.
    """
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where} must be one of {list(args)}, got {value!r}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return check_type(value, inner[0], where)
        for a in inner:
            try:
                return check_type(value, a, where)
            except ConfigError:
                pass
        raise ConfigError(f"{where} must be {_type_name(tp)}, got {type(value).__name__} {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {type(value).__name__} {value!r}")
        item = args[0] if args else Any
        return [check_type(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping, got {type(value).__name__} {value!r}")
        vt = args[1] if args else Any
        return {k: check_type(v, vt, f"{where}.{k}") for k, v in value.items()}
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):  # YAML 1.1 reads "1e-3" (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if isinstance(value, bool) and tp is not bool:
        raise ConfigError(f"{where} must be {_type_name(tp)}, got bool {value!r}")
    if not isinstance(value, tp):
        raise ConfigError(f"{where} must be {_type_name(tp)}, got {type(value).__name__} {value!r}")
    return value


def _split_argv(schema: type, argv: list[str], default_path: str | None) -> tuple[str | None, list]:
    """(config path, [(dotted key, parsed value, flag text)]) from the command line."""
    path, overrides, i = default_path, [], 0
    unique = _unique_keys(schema)
    while i < len(argv):
        flag = argv[i]
        if flag in ("-h", "--help"):
            print(_usage(schema, unique))
            raise SystemExit(0)
        if not flag.startswith("--"):
            raise ConfigError(f"unexpected argument {flag!r}; use --key value or --set section.key=value")
        name, eq, inline = flag[2:].partition("=")
        if eq:
            text, i = inline, i + 1
        elif i + 1 < len(argv):
            text, i = argv[i + 1], i + 2
        else:
            raise ConfigError(f"{flag} needs a value")
        if name == "config":
            path = text
        elif name == "set":
            key, eq, val = text.partition("=")
            if not eq or not key:
                raise ConfigError(f"--set {text!r}: expected section.key=value")
            overrides.append((key, _parse_value(val), f"--set {text}"))
        elif name in unique:
            overrides.append((unique[name], _parse_value(text), f"--{name}"))
        else:
            raise ConfigError(f"unknown flag --{name}; flags: --config, --set, "
                              + ", ".join(f"--{k}" for k in unique))
    return path, overrides


def _parse_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _unique_keys(schema: type) -> dict[str, str]:
    """Map each field name that occurs once among top-level scalars and section fields to its path."""
    seen: dict[str, list[str]] = {}
    fields, hints = _fields(schema)
    for name in fields:
        if _is_section(hints[name]):
            for sub in _fields(hints[name])[0]:
                seen.setdefault(sub, []).append(f"{name}.{sub}")
        else:
            seen.setdefault(name, []).append(name)
    return {k: v[0] for k, v in seen.items() if len(v) == 1}


def _usage(schema: type, unique: dict[str, str]) -> str:
    lines = ["options: --config FILE, --set section.key=value, or --key value for any of:"]
    lines += [f"  --{k:<24} ({path})" for k, path in unique.items()]
    return "\n".join(lines)


def _set_in_dict(d: dict, keys: list[str], value: Any) -> dict:
    out = dict(d)
    if len(keys) == 1:
        out[keys[0]] = value
    else:
        inner = out.get(keys[0], {})
        out[keys[0]] = _set_in_dict(inner if isinstance(inner, dict) else {}, keys[1:], value)
    return out


def _fields(schema: type) -> tuple[dict[str, dataclasses.Field], dict[str, Any]]:
    return {f.name: f for f in dataclasses.fields(schema)}, typing.get_type_hints(schema)


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _default_of(schema: type, name: str) -> Any:
    return getattr(schema(), name)


def _valid(schema: type, prefix: str) -> str:
    fields, hints = _fields(schema)
    return ", ".join(f"{prefix}{n} ({_type_name(hints[n])})" for n in fields)


def _type_name(tp: Any) -> str:
    if _is_section(tp):
        return "section"
    if typing.get_origin(tp) is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))
