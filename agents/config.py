"""Typed configuration: YAML defaults, presets, ``--config FILE`` and dotted flags, read into one
tree of dataclasses per entry point (``agents.run_config.TrainConfig``,
``agents.learning.supervised.Config``). docs/config.md gives the order of precedence, the
selectors and the presets.

Every key and value is checked here against its field's type, so that every error is one
:class:`ConfigError` line naming the key and what it allows, whatever the parser's wording;
jsonargparse prints ``--help`` from the fields' types, defaults and one-line docstrings.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import functools
import os
import types
import typing
from typing import Any, Callable, Literal, Optional, TypeVar

import yaml
from jsonargparse import ArgumentParser, set_parsing_settings

from agents.errors import ConfigError
from agents.files import atomic_write_text
from fastnet.options import unknown_choice

C = TypeVar("C")

set_parsing_settings(docstring_parse_attribute_docstrings=True)


def parse(make_schema: Callable[[dict[str, str]], type[C]], argv: list[str], defaults_path: str,
          selectors: dict[str, tuple[str, ...]] | None = None, short_flags: dict[str, str] | None = None,
          prog: str | None = None, description: str | None = None, presets: dict[str, str] | None = None,
          recipe: dict[str, Any] | None = None) -> C:
    """The config of ``make_schema(names)`` from ``defaults_path``, ``--config FILE`` and ``argv``.

    ``selectors`` maps each dotted key whose value decides its section's type (``"core.name"``)
    to the valid values; ``names`` maps each such section (``"core"``) to the chosen one. ``presets``
    names more presets to apply before the selectors' (``{"env": "CountRecallEasy"}``); one may
    choose a selector's value (``presets.actions.continuous``' core), below the file and the flags.
    ``recipe`` holds sections merged over the defaults file's, below the presets, the file and the
    flags (launch/train.py's memory recipe: memory.yaml's learning sections).
    ``short_flags`` maps short flags to dotted keys (``{"--total_steps": "run.total_steps"}``). The
    schema's ``renamed`` (a class attribute, if it has one) maps keys of older versions to their
    names now, in flags and files. ``--help`` and ``--print_config`` print and raise
    ``SystemExit(0)``; bad input raises :class:`ConfigError`.
    """
    short_flags = short_flags or {}
    argv = _expand(argv, short_flags)
    defaults = load_yaml(defaults_path)
    user_path = flag_value(argv, "config")
    user = load_yaml(user_path) if user_path is not None else {}
    names, fields, selectors = {}, {}, selectors or {}
    defaults = deep_merge(defaults, recipe or {})
    preset = deep_merge(apply_presets(defaults, presets or {}), apply_presets(user, presets or {}))  # may choose a core
    for key, choices in selectors.items():
        section, _, fields[section] = key.rpartition(".")
        name = flag_value(argv, key)
        if name is None:
            name = (preset.get(section) or {}).get(fields[section])
        kind = section if fields[section] == "name" else fields[section]  # a core by its section, a stem by its key
        if problem := unknown_choice(name, choices, kind=kind):
            raise ConfigError(f"--{key}: {problem}")
        names[section] = name
    schema = make_schema(names)
    renamed = getattr(schema, "renamed", {})
    argv = _expand(argv, {f"--{old}": new for old, new in renamed.items()})
    chosen = {**(presets or {}), **names}
    raw = deep_merge(apply_presets(rename_keys(defaults, renamed), chosen),
                     apply_presets(rename_keys(user, renamed), chosen))
    raw = deep_merge(raw, {section: {fields[section]: name} for section, name in names.items()})
    config = from_dict(schema, raw, user_path or defaults_path)
    if "--help" in argv or "-h" in argv:  # with the defaults the files resolve to
        print_help(schema, config, prog=prog, description=description, short_flags=short_flags)
        raise SystemExit(0)
    flags = read_flags(schema, argv, skip=("config", *selectors))  # those read above
    config = from_dict(schema, deep_merge(raw, flags), "the config")
    if "--print_config" in argv:
        print(to_yaml(config), end="")
        raise SystemExit(0)
    return config


def read_flags(schema: type, argv: list[str], *, skip: tuple[str, ...]) -> dict[str, Any]:
    """The ``--section.key VALUE`` (or ``=VALUE``) flags of ``argv`` as nested mappings, each
    checked against ``schema`` in turn: known, given a value, of its type (the keys in ``skip``:
    given a value). A value is read as YAML, except a string's (kept as typed) and a section's
    (the YAML file it names)."""
    flags: dict[str, Any] = {}
    args = iter(argv)
    for arg in args:
        flag, eq, text = arg.partition("=")
        if arg in ("--print_config", "--debug"):
            continue
        if not flag.startswith("--"):
            raise ConfigError(f"unexpected argument {arg!r}; options are written --section.key VALUE")
        if flag[2:] not in skip and (problem := _unknown(schema, flag[2:], flag)):
            raise ConfigError(problem)
        if not eq and ((text := next(args, None)) is None or text.startswith("--")):
            raise ConfigError(f"{flag}: needs a value (a negative number is written {flag}=-1)")
        if flag[2:] in skip:
            continue
        tp = _type_at(schema, flag[2:])
        if dataclasses.is_dataclass(tp):
            value = load_yaml(text, flag=flag)
        elif tp is str or tp == Optional[str] and text != "null":  # as typed
            value = text
        else:
            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError:
                value = text
        typed_value(schema, flag[2:], value, "--")
        *path, last = flag[2:].split(".")
        functools.reduce(lambda d, k: d.setdefault(k, {}), path, flags)[last] = value
    return flags


def from_dict(schema: type[C], data: dict[str, Any], source: str) -> C:
    """``schema`` built from nested mappings (a YAML file's, a checkpoint's saved config), each key
    and value checked (:func:`typed_value`), keys of old names (``schema.renamed``) read as
    today's and absent ones at their defaults; ``source`` names the mappings in errors."""
    data = rename_keys(data, getattr(schema, "renamed", {}))
    try:
        return schema(**{str(k): typed_value(schema, str(k), v) for k, v in data.items()})
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


def typed_value(schema: type, key: str, value: Any, dash: str = "") -> Any:
    """``value`` (as YAML reads it) as the type of ``schema``'s dotted ``key``: a section built
    from a mapping of its keys, a tuple from a list, a float from an integer or from YAML's string
    "1e-3". ConfigError if ``schema`` lacks the key or its type refuses the value; ``dash`` is "--"
    for a flag's, which messages write ``--key``."""
    if problem := _unknown(schema, key, dash + key):
        raise ConfigError(problem)
    tp = _type_at(schema, key)
    if not dataclasses.is_dataclass(tp):
        try:
            return _typed(tp, value)
        except ValueError as e:
            raise ConfigError(f"{dash}{key}: {e}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{dash}{key}: expected a mapping of the section's keys, got {value!r}")
    return tp(**{str(k): typed_value(schema, f"{key}.{k}", v, dash) for k, v in value.items()})


# What a restricted number type (jsonargparse.typing's, or restricted_number_type's) accepts, by name
_NUMBERS = {"PositiveInt": ("an integer > 0", "must be > 0"), "NonNegativeInt": ("an integer >= 0", "must be >= 0"),
            "PositiveFloat": ("a number > 0", "must be > 0"), "NonNegativeFloat": ("a number >= 0", "must be >= 0"),
            "ClosedUnitInterval": ("a number in [0, 1]", "must be in [0, 1]"),
            "OpenUnitInterval": ("a number in (0, 1)", "must be in (0, 1)"),
            "UnitIntervalHalfOpen": ("a number in [0, 1)", "must be in [0, 1)"),
            "Niceness": ("an integer in [0, 19]", "must be in [0, 19]"), "int": ("an integer", ""),
            "float": ("a number", "")}


def _typed(tp: Any, value: Any) -> Any:
    """``value`` as a ``tp`` (a field's type: a literal, an optional, a boolean, a string, a
    restricted number, or a list, tuple or mapping of them); ValueError saying why it cannot be."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (list, tuple, dict) and not isinstance(value, dict if origin is dict else list):
        raise ValueError(f"expected {'a mapping' if origin is dict else 'a list'}, got {value!r}")
    if origin in (list, tuple):
        items = args[:1] * len(value) if origin is list or args[-1] is Ellipsis else args
        if len(items) != len(value):
            raise ValueError(f"expected a list of {len(items)} items, got {value!r}")
        return origin(_typed(item, v) for item, v in zip(items, value))
    if origin is dict:
        return {_typed(args[0], k): _typed(args[1], v) for k, v in value.items()}
    if origin is Literal and value not in args:
        near = [a for a in args if isinstance(a, str) and str(value).lower() == a.lower()]  # pong -> Pong
        raise ValueError(f"expected one of {', '.join(map(repr, args))}; got {value!r}"
                         + (f" (did you mean {near[0]!r}?)" if near else ""))
    if origin in (typing.Union, types.UnionType):  # the first type that takes it, as the parser tries them
        if value is None and type(None) in args:
            return None
        problems = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _typed(option, value)
            except ValueError as e:
                problems.append(str(e))
        raise ValueError(" or ".join(problems))
    if tp is bool and not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    if tp is str and not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    if isinstance(tp, type) and issubclass(tp, (int, float)) and tp is not bool:
        kind, bound = _NUMBERS.get(tp.__name__, (tp.__name__, "out of range"))
        if isinstance(value, str) and not issubclass(tp, int):
            with contextlib.suppress(ValueError):
                value = float(value)  # YAML reads 1e-3 as a string
        if isinstance(value, bool) or not isinstance(value, int if issubclass(tp, int) else (int, float)):
            raise ValueError(f"expected {kind}, got {value!r}")
        try:
            tp(value)
        except ValueError:
            raise ValueError(f"{bound}, got {value}") from None
        return float(value) if issubclass(tp, float) else value
    return value


def print_help(schema: type, config: Any, *, prog: str | None, description: str | None,
               short_flags: dict[str, str]) -> None:
    """Print ``schema``'s options (a dataclass's) with ``config``'s values as their defaults, and
    ``--config``, ``--print_config`` and ``--debug``."""
    epilog = None
    if short_flags:
        epilog = "short forms: " + ", ".join(f"{k} = --{v}" for k, v in short_flags.items())
    parser = ArgumentParser(prog=prog, description=description, epilog=epilog, exit_on_error=False,
                            allow_abbrev=False, print_config=None,
                            usage="%(prog)s [--config FILE] [--section.key VALUE ...]")
    parser.add_argument("--config", type=str, default=None, metavar="FILE",
                        help="A YAML file merged over the defaults (flags override it).")
    parser.add_argument("--print_config", action="store_true",
                        help="Print the fully resolved config as YAML and exit.")
    parser.add_argument("--debug", action="store_true",
                        help="Show the full traceback of an error (or set DELTABEAST_DEBUG=1).")
    parser.add_class_arguments(schema, nested_key=None, fail_untyped=True)
    parser.set_defaults(dict(parser.parse_object(to_dict(config), defaults=True).items()))
    sections = {f"--{name}" for name in parser.groups}  # the sections, nested ones (actor.server) too
    for action in parser._actions:  # jsonargparse's "--core CONFIG  Path to a configuration file."
        (flag,) = action.option_strings[-1:] or (None,)
        if flag in short_flags:
            action.metavar, action.help = "NAME", f"Short for --{short_flags[flag]}."
        elif flag in sections:
            action.metavar, action.help = "FILE", f"A YAML file of the {flag[2:]} section's options."
        elif isinstance(action.metavar, str) and len(action.metavar) > 60:  # a Literal's "{a,b,...}", unwrapped
            action.metavar = flag.rpartition(".")[2].upper()  # the choices stay in the wrapped "(type: ...)"
    parser.print_help()


def _expand(argv: list[str], aliases: dict[str, str]) -> list[str]:
    """``argv`` with each flag of ``aliases`` as its dotted key: ``--total_steps 5`` -> ``--run.total_steps 5``."""
    return [f"--{aliases[flag]}{eq}{value}" if flag in aliases else arg
            for arg in argv for flag, eq, value in [arg.partition("=")]]


def flag_value(argv: list[str], key: str) -> str | None:
    """The value of the last ``--key VALUE`` or ``--key=VALUE`` in ``argv``, else None."""
    value = None
    for i, arg in enumerate(argv):
        if arg == f"--{key}" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(f"--{key}="):
            value = arg.split("=", 1)[1]
    return value


def load_yaml(path: str, *, flag: str = "--config") -> dict[str, Any]:
    """The mapping in the YAML file ``path`` (given by ``flag``); ConfigError if it is missing,
    malformed, not UTF-8 or not a mapping."""
    if not os.path.isfile(path):
        raise ConfigError(f"{flag}: the file {path!r} does not exist")
    with open(path, encoding="utf-8") as f:
        try:
            data = yaml.safe_load(f)
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: not UTF-8 text; save it as UTF-8") from None
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise ConfigError(f"{path}: malformed YAML{where}: {getattr(e, 'problem', None) or e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def rename_keys(raw: dict[str, Any], renamed: dict[str, str]) -> dict[str, Any]:
    """A copy of ``raw`` with the value at each old dotted key of ``renamed`` moved to its new key."""
    raw = copy.deepcopy(raw)
    for old, new in renamed.items():
        *path, last = old.split(".")
        parent = functools.reduce(lambda d, k: d.get(k) if isinstance(d, dict) else None, path, raw)
        if isinstance(parent, dict) and last in parent:
            *new_path, new_last = new.split(".")
            functools.reduce(lambda d, k: d.setdefault(k, {}), new_path, raw).setdefault(new_last, parent.pop(last))
    return raw


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``update`` merged in, recursing into mappings present in both."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def apply_presets(raw: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """Merge ``raw["presets"][section][name]`` over ``raw`` for each chosen ``section: name``, in
    the order of ``names``; a preset's own ``presets`` (a task's per-core defaults) are merged
    into the table first, so that they apply for the later selectors."""
    raw = dict(raw)
    presets = raw.pop("presets", None) or {}
    for section, name in names.items():
        chosen = dict((presets.get(section) or {}).get(name) or {})
        presets = deep_merge(presets, chosen.pop("presets", None) or {})
        raw = deep_merge(raw, chosen)
    return raw


@functools.cache
def section(kind: str, name: str) -> type:
    """The ``kind`` section ("core", "env", "task" or "network") for ``name``: that core's, env's,
    task's or stem's options dataclass with a first field ``name: Literal[name]`` (a network's:
    ``stem``), so that the name and its options form one section (``core: {name: delta, ...}``)."""
    import envs
    from agents.network import STEM_NETWORKS
    from envs.tasks import TASKS
    from fastnet.registry import CORES, core_class

    # the valid names, the options class, the word for it in --help, the key that names it, and the
    # flag that chooses it (None: the entry point fixes it)
    choices, options_class, word, key, flag = {
        "core": (CORES, lambda: core_class(name).Config, "core", "name", "--core"),
        "env": (envs.ENVS, lambda: envs.env_class(name).Config, "env", "name", None),
        "task": (TASKS, lambda: TASKS[name][0].Config, "task", "name", "--task"),
        "network": (STEM_NETWORKS, lambda: STEM_NETWORKS[name], "stem", "stem", "--network.stem")}[kind]
    base = options_class()
    cls = dataclasses.make_dataclass(f"{name.title().replace('_', '')}{word.title()}",
                                     [(key, Literal[name], dataclasses.field(default=name))], bases=(base,))
    first = (base.__doc__ or "").strip().split("\n")[0]
    how = f" ({flag} NAME --help lists that {word}'s options)" if flag else " (fixed by the entry point)"
    cls.__doc__ = (f"{word.title()} {name!r}: {first}\n\nAttributes:\n"
                   f"    {key}: The {word}, one of: {', '.join(choices)}{how}.")
    cls.__module__ = base.__module__
    return cls


RESUMABLE = {"resumable": True}
"""Field metadata: a resumed run may change this setting (on a section's field: all of its keys);
a change to any other is refused (agents.learning.checkpoint.check_same_run)."""


def resumable_keys(config: Any, prefix: str = "") -> tuple[str, ...]:
    """The dotted keys of ``config``'s fields marked :data:`RESUMABLE`, its sections' included."""
    keys: list[str] = []
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.metadata.get("resumable"):
            keys.append(prefix + f.name)
        elif dataclasses.is_dataclass(value):
            keys += resumable_keys(value, f"{prefix}{f.name}.")
    return tuple(keys)


def options(section: Any) -> dict[str, Any]:
    """The fields of a named section as keyword options, less its ``name``."""
    return {k: v for k, v in dataclasses.asdict(section).items() if k != "name"}


def to_dict(config: Any) -> dict[str, Any]:
    """The config as plain nested dicts (for YAML dumps and checkpoints)."""
    return plain(dataclasses.asdict(config))


def plain(value: Any) -> Any:
    """Built-in types only, as a config is saved (tuples become lists; a subclass of float or int,
    such as numpy's float64 or an older checkpoint's restricted number, its base)."""
    if isinstance(value, dict):  # a named section's name first: core: {name: delta, ...}
        return {k: plain(value[k]) for k in sorted(value, key=lambda k: k != "name")}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    for tp in (bool, int, float, str):
        if isinstance(value, tp):
            return tp(value)
    return value


def to_yaml(config: Any) -> str:
    return yaml.safe_dump(to_dict(config), sort_keys=False)


def save_yaml(config: Any, path: str) -> None:
    """Write the resolved config to ``path`` as YAML (atomically)."""
    atomic_write_text(path, to_yaml(config))


def check(condition: bool, key: str, message: str) -> None:
    """ConfigError ``"key: message"`` unless ``condition`` (for checks across fields)."""
    if not condition:
        raise ConfigError(f"{key}: {message}")


def _fields(schema: type) -> dict[str, Any]:
    """A config dataclass's field names and types."""
    hints = typing.get_type_hints(schema)
    return {f.name: hints[f.name] for f in dataclasses.fields(schema)}


def _type_at(schema: type, key: str) -> Any:
    """The type of the (known) dotted ``key`` of ``schema``."""
    return functools.reduce(lambda tp, part: _fields(tp)[part], key.split("."), schema)


def _unknown(schema: type, key: str, label: str) -> str | None:
    """The one-line error for the dotted ``key`` (written ``label``) if ``schema`` has no such
    key, naming the section's keys and the nearest key there is; None if it has."""
    section, fields = "", _fields(schema)
    for part in key.split(".")[:-1]:
        if not dataclasses.is_dataclass(fields.get(part)):
            break
        section, fields = f"{section}{part}.", _fields(fields[part])
    if key[len(section):] in fields:
        return None
    everything = _leaf_keys(schema)
    by_last_part = {}  # total_step -> run.total_steps: a key typed without its section
    for k in everything:
        by_last_part.setdefault(k.rpartition(".")[2], k)
    near = (difflib.get_close_matches(key, everything, n=1, cutoff=0.8)
            or [by_last_part[k] for k in difflib.get_close_matches(key.rpartition(".")[2], by_last_part, n=1,
                                                                   cutoff=0.8)])
    flag = label.startswith("--")
    guess = f" (did you mean {'--' * flag}{near[0]}?)" if near else ""
    where = f" of {section[:-1]}" if section else ""
    return f"unknown {'option' if flag else 'key'} {label}{guess}; valid keys{where}: {', '.join(fields)}"


def _leaf_keys(schema: type, prefix: str = "") -> list[str]:
    return [k for name, tp in _fields(schema).items()
            for k in (_leaf_keys(tp, f"{prefix}{name}.") if dataclasses.is_dataclass(tp) else [prefix + name])]
