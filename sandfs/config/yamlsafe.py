"""A strict YAML reader: plain data only, YAML 1.2 core scalars, no duplicate keys, and every
value remembers where it was written so that errors can point at it.

PyYAML implements YAML 1.1, whose implicit typing surprises people (`no` is False, `010` is 8,
`12:30` is 750). We resolve plain scalars the YAML 1.2 core way instead, but stricter on integers:
decimal only, so `010`, `0x10` and `1_000` stay strings (and typed fields say why).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

MAX_NODES = 100_000  # aliases can expand a small file into a huge tree ("billion laughs")
MAX_DEPTH = 64
MAX_INT_DIGITS = 40

_TAG = "tag:yaml.org,2002:"
STR, INT, FLOAT, BOOL, NULL = (_TAG + t for t in ("str", "int", "float", "bool", "null"))
SEQ, MAP = _TAG + "seq", _TAG + "map"
_ALLOWED_TAGS = {STR, INT, FLOAT, BOOL, NULL, SEQ, MAP}

_NULL_RE = re.compile(r"~|null|Null|NULL|")
_BOOL_RE = re.compile(r"true|false", re.IGNORECASE)
_INT_RE = re.compile(r"[-+]?(0|[1-9][0-9]*)")
# A float needs a dot or an exponent, so that `010` is never a number.
_FLOAT_RE = re.compile(r"[-+]?((\.[0-9]+|[0-9]+\.[0-9]*)([eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+)")
_INF_RE = re.compile(r"[-+]?\.(inf|Inf|INF)")
_NAN_RE = re.compile(r"\.(nan|NaN|NAN)")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


class ConfigError(Exception):
    """A config problem at a place in a file; `str()` is `FILE:LINE:COL: KEY: MESSAGE`."""

    def __init__(self, file: str, line: int, col: int, key: str, message: str) -> None:
        super().__init__(file, line, col, key, message)
        self.file = file
        self.line = line
        self.col = col
        self.key = key
        self.message = message

    def __str__(self) -> str:
        text = f"{self.file}:{self.line}:{self.col}: {self.key}: {self.message}"
        # Keys and values come from the file: escape control characters so it stays one line.
        return _CONTROL_RE.sub(lambda m: repr(m.group())[1:-1], text)


@dataclass(eq=False, slots=True)
class Value:
    """One YAML value with its position (1-based) and its dotted key path.

    `data` is a scalar (str, int, float, bool, None), a list of Values or a dict of Values.
    For a mapping, `key_marks` gives each key's own (line, col), and `owner_mark` where the key
    that holds the mapping is (`dataset:`), which is where a missing key is reported.
    """

    data: Any
    file: str
    path: str
    line: int
    col: int
    key_marks: dict[str, tuple[int, int]] = field(default_factory=dict)
    owner_mark: tuple[int, int] | None = None

    def error(self, message: str) -> ConfigError:
        return ConfigError(self.file, self.line, self.col, self.path or "<document>", message)

    def key_error(self, key: str, message: str) -> ConfigError:
        """An error about `key` of this mapping: at the key if present, else at the mapping."""
        line, col = self.key_marks.get(key) or self.owner_mark or (self.line, self.col)
        return ConfigError(self.file, line, col, child_path(self.path, key), message)


def child_path(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def read_yaml(text: str, file: str, *, first_line: int = 1) -> Value:
    """Parse one YAML document into a Value tree; raise ConfigError on anything non-plain.
    `first_line`: the line number the text's first line has in the file the user wrote (a
    line sandfs put before it does not count). Parsing stops at MAX_NODES values or MAX_DEPTH
    levels while it composes, before the rest of an oversized text is read."""
    loader = None
    try:
        loader = _CoreLoader(text)  # checks every character first
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + first_line, mark.column + 1) if mark else (first_line, 1)
        raise ConfigError(file, line, col, "<yaml>", _yaml_message(e)) from None
    except yaml.reader.ReaderError as e:
        line, col = _position(text, e.position)
        line += first_line - 1
        char = e.character if isinstance(e.character, str) else chr(e.character)
        message = f"a YAML file may not contain the character {char!r}"
        raise ConfigError(file, line, col, "<yaml>", message) from None
    except RecursionError:
        raise ConfigError(file, 1, 1, "<yaml>", "nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()
    if node is None:
        raise ConfigError(file, 1, 1, "<document>", "the file is empty; expected a task config")
    return _Builder(file, first_line - 1).build(node, "", 0)


class _CoreLoader(yaml.SafeLoader):
    """Resolves untagged plain scalars by YAML 1.2 core rules (decimal-only integers), and
    counts the nodes it composes: a text of a million values stops at the budget, not after
    its whole tree is built (aliases are counted where they are written; the builder counts
    what they expand to)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.nodes_left = MAX_NODES
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        mark = self.peek_event().start_mark
        self.nodes_left -= 1
        if self.nodes_left < 0:
            raise yaml.composer.ComposerError(
                None, None, f"the document expands to more than {MAX_NODES} values", mark)
        if self.depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def resolve(self, kind: type, value: str, implicit: tuple[bool, bool]) -> str:
        if kind is yaml.ScalarNode:
            return _core_tag(value) if implicit[0] else STR
        return SEQ if kind is yaml.SequenceNode else MAP


def _core_tag(value: str) -> str:
    if _NULL_RE.fullmatch(value):
        return NULL
    if _BOOL_RE.fullmatch(value):
        return BOOL
    if _INT_RE.fullmatch(value):
        return INT
    if _FLOAT_RE.fullmatch(value) or _INF_RE.fullmatch(value) or _NAN_RE.fullmatch(value):
        return FLOAT
    return STR


class _Builder:
    def __init__(self, file: str, line_offset: int = 0) -> None:
        self.file = file
        self.line_offset = line_offset
        self.nodes_left = MAX_NODES

    def build(self, node: yaml.Node, path: str, depth: int) -> Value:
        line, col = node.start_mark.line + 1 + self.line_offset, node.start_mark.column + 1
        where = Value(None, self.file, path, line, col)
        self.nodes_left -= 1
        if self.nodes_left < 0:
            raise where.error(f"the document expands to more than {MAX_NODES} values")
        if depth > MAX_DEPTH:
            raise where.error(f"nested deeper than {MAX_DEPTH} levels (a recursive alias?)")
        if node.tag not in _ALLOWED_TAGS:
            raise where.error(
                f"tag {_short_tag(node.tag)} is not allowed: a config holds plain data only "
                "(strings, numbers, true/false, null, lists, mappings)"
            )
        if isinstance(node, yaml.MappingNode):
            self._fill_mapping(where, node, depth)
        elif isinstance(node, yaml.SequenceNode):
            where.data = [
                self.build(item, child_path(path, i), depth + 1)
                for i, item in enumerate(node.value)
            ]
        else:
            where.data = _scalar(node, where)
        return where

    def _fill_mapping(self, where: Value, node: yaml.MappingNode, depth: int) -> None:
        where.data = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                line = key_node.start_mark.line + 1 + self.line_offset
                col = key_node.start_mark.column + 1
                raise ConfigError(
                    self.file,
                    line,
                    col,
                    where.path or "<document>",
                    "a mapping key must be a plain name, not a list or mapping",
                )
            key_where = self.build(key_node, where.path, depth + 1)
            key = key_node.value  # the text as written: `1:` and `null:` are names too
            if key in where.data:
                first_line = where.key_marks[key][0]
                raise ConfigError(
                    self.file,
                    key_where.line,
                    key_where.col,
                    child_path(where.path, key),
                    f"duplicate key (first given at line {first_line})",
                )
            where.key_marks[key] = (key_where.line, key_where.col)
            value = self.build(value_node, child_path(where.path, key), depth + 1)
            value.owner_mark = where.key_marks[key]
            where.data[key] = value


def _scalar(node: yaml.ScalarNode, where: Value) -> Any:
    text = node.value
    if node.tag == STR:
        return text
    if node.tag == NULL and _NULL_RE.fullmatch(text):
        return None
    if node.tag == BOOL and _BOOL_RE.fullmatch(text):
        return text.lower() == "true"
    if node.tag == INT and _INT_RE.fullmatch(text):
        if len(text.lstrip("+-")) > MAX_INT_DIGITS:
            raise where.error(f"integer too large ({len(text)} digits)")
        return int(text)
    if node.tag == FLOAT and (number := _float(text)) is not None:
        return number
    raise where.error(f"{text!r} is not a valid {_short_tag(node.tag)} (YAML 1.2 core)")


def _float(text: str) -> float | None:
    if _INF_RE.fullmatch(text):
        return -math.inf if text.startswith("-") else math.inf
    if _NAN_RE.fullmatch(text):
        return math.nan
    return float(text) if _FLOAT_RE.fullmatch(text) else None


def _short_tag(tag: str) -> str:
    return "!!" + tag.removeprefix(_TAG) if tag.startswith(_TAG) else tag


# PyYAML's wording for the usual slips, and what they mean to someone editing a config.
_PLAIN_MESSAGES = (
    ("mapping values are not allowed here",
     "unexpected ':' (a key indented deeper than the one above it, or a value with ': ' "
     "that needs quotes)"),
    ("expected <block end>, but found",
     "bad indentation: this line is indented differently from the keys above it"),
    ("found character '\\t' that cannot start any token",
     "a tab: indent YAML with spaces only"),
)


def _yaml_message(e: yaml.MarkedYAMLError) -> str:
    parts = [p for p in (e.context, e.problem) if p]
    raw = "; ".join(parts) or "invalid YAML"
    return next((plain for fragment, plain in _PLAIN_MESSAGES if fragment in raw), raw)


def _position(text: str, offset: int) -> tuple[int, int]:
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1
