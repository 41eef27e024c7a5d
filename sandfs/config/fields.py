"""Typed reads of YAML `Value`s. Each raises a ConfigError at the value, naming what is allowed,
and explains the YAML 1.1 readings (`no` as false, `010` as 8) that this loader does not make."""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Collection, Iterable
from typing import Any

from sandfs.config.yamlsafe import Value

_YAML11_BOOLS = {"yes", "no", "on", "off", "y", "n"}
_LEADING_ZERO_RE = re.compile(r"[-+]?0[0-9]+")
_RADIX_RE = re.compile(r"[-+]?0[xXoObB][0-9a-fA-F_]+")
_SEXAGESIMAL_RE = re.compile(r"[-+]?[0-9]+(:[0-5]?[0-9])+")
_SEPARATOR_RE = re.compile(r"[-+]?[0-9][0-9_]*_[0-9_]*")


def describe(value: Value) -> str:
    """How a value reads in an error message: `the string 'no'`, `the integer 5`, `a list`."""
    data = value.data
    if data is None:
        return "null"
    if isinstance(data, bool):
        return "true" if data else "false"
    if isinstance(data, int):
        return f"the integer {data}"
    if isinstance(data, float):
        return f"the number {_float_text(data)}"
    if isinstance(data, str):
        return f"the string {_clip(data)!r}"
    return "a list" if isinstance(data, list) else "a mapping"


def mapping(
    value: Value, allowed: Collection[str], required: Iterable[str] = ()
) -> dict[str, Value]:
    """The mapping's entries, after checking for unknown and missing keys."""
    if not isinstance(value.data, dict):
        raise value.error(
            f"expected a mapping with keys {_listing(allowed)}, got {describe(value)}"
        )
    for key in value.data:
        if key not in allowed:
            message = f"unknown key {key!r}{did_you_mean(key, allowed)}; allowed keys: "
            raise value.key_error(key, message + _listing(allowed))
    for key in required:
        if key not in value.data:
            raise value.key_error(key, "required key is missing")
    return value.data


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def sequence(value: Value, what: str, *, min_len: int = 0) -> list[Value]:
    if not isinstance(value.data, list):
        raise value.error(f"expected a list of {what}, got {describe(value)}")
    if len(value.data) < min_len:
        raise value.error(f"expected at least {min_len} {what}, got {len(value.data)}")
    return value.data


def integer(value: Value, *, minimum: int | None = None, maximum: int | None = None) -> int:
    data = value.data
    if not isinstance(data, int) or isinstance(data, bool):
        raise value.error(f"expected an integer, got {describe(value)}{_integer_hint(data)}")
    if minimum is not None and data < minimum:
        raise value.error(f"must be at least {minimum}, got {data}")
    if maximum is not None and data > maximum:
        raise value.error(f"must be at most {maximum}, got {data}")
    return data


def number(value: Value) -> float:
    """A finite int or float (`.inf` and `.nan` are refused)."""
    data = value.data
    if not isinstance(data, int | float) or isinstance(data, bool):
        raise value.error(f"expected a number, got {describe(value)}")
    if not math.isfinite(data):
        raise value.error(f"expected a finite number, got {_float_text(data)}")
    return float(data)


def boolean(value: Value) -> bool:
    if not isinstance(value.data, bool):
        hint = ""
        if isinstance(value.data, str) and value.data.lower() in _YAML11_BOOLS:
            hint = " (only true and false are booleans; YAML 1.1's yes/no/on/off are strings)"
        raise value.error(f"expected true or false, got {describe(value)}{hint}")
    return value.data


def string(value: Value, *, pattern: re.Pattern[str] | None = None, what: str = "") -> str:
    """A non-empty string; `pattern` (full match) with `what` describing it for the message."""
    if not isinstance(value.data, str):
        raise value.error(f"expected {what or 'a string'}, got {describe(value)}")
    if not value.data.strip():
        raise value.error(f"expected {what or 'a string'}, got an empty string")
    if pattern is not None and not pattern.fullmatch(value.data):
        raise value.error(f"expected {what}, got {_clip(value.data)!r}")
    return value.data


def choice(value: Value, choices: Collection[str]) -> str:
    if not isinstance(value.data, str) or value.data not in choices:
        hint = did_you_mean(value.data, choices) if isinstance(value.data, str) else ""
        raise value.error(f"expected one of {_listing(choices)}, got {describe(value)}{hint}")
    return value.data


def plain(value: Value) -> Any:
    """The value as plain Python data (dicts, lists, scalars), e.g. for op parameters."""
    if isinstance(value.data, dict):
        return {key: plain(item) for key, item in value.data.items()}
    if isinstance(value.data, list):
        return [plain(item) for item in value.data]
    return value.data


def _integer_hint(data: object) -> str:
    if not isinstance(data, str):
        return ""
    if _LEADING_ZERO_RE.fullmatch(data):
        return " (leading zeros are not allowed: YAML 1.1 would read it as octal)"
    if _RADIX_RE.fullmatch(data):
        return " (only decimal integers are allowed)"
    if _SEXAGESIMAL_RE.fullmatch(data):
        return " (YAML 1.1 would read it as a base-60 number; it is a string here)"
    if _SEPARATOR_RE.fullmatch(data):
        return " (digit separators '_' are not allowed)"
    return ""


def _float_text(data: float) -> str:
    if math.isnan(data):
        return ".nan"
    if math.isinf(data):
        return ".inf" if data > 0 else "-.inf"
    return repr(data)


def _listing(names: Iterable[str]) -> str:
    return ", ".join(names)


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def resolve_path(text: str, base_dir: str) -> str:
    """A path from a config: `~` expanded, relative ones anchored at `base_dir`."""
    return os.path.normpath(os.path.join(base_dir, os.path.expanduser(text)))
