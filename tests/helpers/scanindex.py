"""Reading and editing a scan index's rows the way damage would: a row a list
`[path, size, mtime, result text, [dev, ino, uid, gid, mode]]`, written back in a sound file
(a valid checksum), so only the rows themselves can tell: their stats as binary rows where
they fit them, as an earlier version's list where they do not (an int out of range, a
float)."""

from __future__ import annotations

import binascii
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from sandfs.fileio import read_checked_json, write_checked_json
from sandfs.media.resulttext import VIDEO_FIELDS
from sandfs.media.scan_index import SEP, STAT_ROW, stored_index


def read_rows(index_path: Path) -> tuple[dict[str, Any], dict[str, list]]:
    """(the document, rel_path -> its row)."""
    document = read_checked_json(str(index_path))
    stored = stored_index(document)
    stats = zip(*(list(map(int, c)) if isinstance(c, np.ndarray) else c for c in stored.stats),
                strict=True)
    return document, {rel_path: [stored.path(row), size, mtime, text, [*stat]]
                      for row, (rel_path, text, (size, mtime, *stat)) in enumerate(zip(
                          stored.rel_paths, stored.results, stats, strict=True))}


def write_rows(index_path: Path, document: dict[str, Any], rows: dict[str, list]) -> None:
    """`document` with `rows` as its rows."""
    keys, root = list(rows), document["root"]
    columns: dict[str, Any] = {
        "rel_path": SEP.join(keys),
        "path": SEP.join("" if rows[k][0] == root + k else rows[k][0] for k in keys),
        "result": SEP.join(rows[k][3] for k in keys),
    }
    columns["stat"] = _stats([(*rows[k][1:3], *rows[k][4]) for k in keys])
    write_checked_json(str(index_path), {**document, "rows": columns, "count": len(keys)})


def edit_entry(index_path: Path, rel_path: str, edit: Callable[[dict], None]) -> None:
    """`edit(result)` changes the row's parsed result in place."""
    document, rows = read_rows(index_path)
    stored = json.loads(rows[rel_path][3])  # a video's facts as a list: edited by name
    result = stored
    if isinstance(stored, list):
        result = {"video": dict(zip(VIDEO_FIELDS, stored, strict=True))}
    edit(result)
    if "video" in result:
        result = [result["video"][name] for name in VIDEO_FIELDS]
    rows[rel_path][3] = json.dumps(result, separators=(",", ":"))
    write_rows(index_path, document, rows)


def _stats(rows: list[tuple]) -> str | list:
    """The rows' stats as the index stores them, or a list of a row's fields then the next
    row's where a field is no int or out of its range."""
    try:
        if all(type(field) is int for row in rows for field in row):
            return binascii.b2a_base64(np.array(rows, STAT_ROW).tobytes(), newline=False).decode()
    except OverflowError:
        pass
    return [field for row in rows for field in row]
