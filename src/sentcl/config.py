"""Typed configuration: nested dataclasses filled from YAML and ``key=value`` overrides.

Every error names the dotted config key that caused it; unknown keys are errors, never ignored.
Depends on nothing else in sentcl, so every layer may use it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import types
import typing
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from sentcl.errors import UserError

T = TypeVar("T")


class ConfigError(UserError, ValueError):
    """A configuration value or key is wrong; the message names the dotted key."""


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check (and where lossless, convert) ``value`` against the annotation ``tp``."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{key}: {shown(value)} matches none of {tp}")
    if origin is typing.Literal:
        if value not in get_args(tp):
            allowed = ", ".join(repr(a) for a in get_args(tp))
            raise ConfigError(f"{key}: {shown(value)} is not one of {allowed}")
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping for {_type_name(tp)}, got {shown(value)}")
        return from_dict(tp, value, prefix=key)
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {shown(value)}")
        (item_tp, *_) = get_args(tp) or (Any,)
        items = [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {shown(value)}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {shown(value)}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{key}: expected an integer, got {shown(value)}")
        return value
    if tp is float:
        if isinstance(value, str):  # PyYAML (YAML 1.1) reads 1e-5 as a string; accept it as a number
            with contextlib.suppress(ValueError):
                value = float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {shown(value)}")
        if not math.isfinite(value):  # no setting means infinity or NaN: inf temperature trains nothing
            raise ConfigError(f"{key}: {shown(value)} is not a finite number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {shown(value)}")
        return value
    return value


def from_dict(cls: type[T], data: dict[str, Any], prefix: str = "") -> T:
    """Build dataclass ``cls`` from ``data``; an unknown key raises ConfigError naming it."""
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs = {}
    for name, value in data.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        if name not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"unknown config key {key!r} (known here: {known})")
        kwargs[name] = _coerce(value, hints[name], key)
        if name.endswith("_weight") and isinstance(kwargs[name], float) and kwargs[name] < 0:
            raise ConfigError(f"{key}: a weight is ≥ 0, got {shown(value)}")
    try:
        obj = cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        missing = [n for n, f in fields.items() if n not in kwargs and _is_required(f)]
        where = f"{prefix}." if prefix else ""
        raise ConfigError(f"missing config key(s): {', '.join(where + m for m in missing)}") from exc
    validate = getattr(obj, "validate", None)
    if callable(validate):
        try:
            validate()
        except ConfigError as exc:
            raise ConfigError(f"{prefix + '.' if prefix else ''}{exc}") from None
    return obj


def _is_required(field: dataclasses.Field) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def to_dict(obj: Any) -> Any:
    """A plain (YAML-safe) dict of a dataclass tree."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


#: a recipe is a few hundred lines: bounds that no recipe reaches, and that keep a crafted file cheap
MAX_YAML_BYTES = 1 << 20
MAX_YAML_DEPTH = 64
#: how much of a value an error message shows
SHOWN = 80


def shown(value: Any) -> str:
    """``repr(value)`` cut to ``SHOWN`` characters, saying so: an error line stays a line."""
    text = repr(value)
    return text if len(text) <= SHOWN else f"{text[:SHOWN]}… ({len(text):,} characters)"


class _RecipeLoader(yaml.SafeLoader):
    """YAML's safe loader without anchors and aliases (744 bytes of nested aliases once grew to 6.5 GB) and
    with a nesting limit (5,000 levels were a RecursionError): recipes use neither."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.YAMLError(f"line {mark.line + 1}: aliases (*name) are not allowed in a recipe")
        event = self.peek_event()
        if getattr(event, "anchor", None):
            raise yaml.YAMLError(
                f"line {event.start_mark.line + 1}: anchors (&name) are not allowed in a recipe"
            )
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.YAMLError(
                    f"line {event.start_mark.line + 1}: nested deeper than {MAX_YAML_DEPTH} levels"
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        """A key written twice in one mapping is an error naming its line (YAML itself keeps the last)."""
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.YAMLError(f"line {line}: key {key!r} is given twice (first on line {seen[key]})")
            if isinstance(key, (str, int, float, bool)):
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str) -> Any:
    """YAML as recipes and overrides are read: safe, no aliases, bounded depth."""
    return yaml.load(text, Loader=_RecipeLoader)  # a SafeLoader subclass


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    if path.stat().st_size > MAX_YAML_BYTES:
        raise ConfigError(f"{path}: {path.stat().st_size:,} bytes; a recipe is at most {MAX_YAML_BYTES:,}")
    try:
        data = parse_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: invalid YAML: {getattr(exc, 'problem', None) or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level of a config must be a mapping")
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (value parsed as YAML) to a nested dict, in place."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {shown(item)} is not of the form key=value")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key or any(not part for part in key.split(".")):
            raise ConfigError(f"override {shown(item)} has an empty key")
        try:
            value = parse_yaml(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {key!r}: {shown(part)} is not a section")
            node = child
        node[parts[-1]] = value
    return data


_ENV_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def expand_path(value: str, key: str) -> str:
    """Expand ``~`` and ``$VAR``/``${VAR}``; an unset variable is an error naming the key."""
    for name in _ENV_VAR.findall(value):
        if name not in os.environ:
            raise ConfigError(f"{key}: environment variable {name} is not set (in {shown(value)})")
    return str(Path(os.path.expandvars(value)).expanduser())
