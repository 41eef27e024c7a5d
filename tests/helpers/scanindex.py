"""Editing a scan index the way damage would: one entry's result changed in a sound file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from sandfs.fileio import read_checked_json, write_checked_json
from sandfs.media.resulttext import VIDEO_FIELDS


def edit_entry(index_path: Path, rel_path: str, edit: Callable[[dict], None]) -> None:
    """`edit(result)` changes the entry's parsed result in place; the file is written back with
    a valid checksum, so only the entry itself can tell."""
    document = read_checked_json(str(index_path))
    row = document["entries"][rel_path]
    stored = json.loads(row[3])  # a video's facts as a list: edited by name
    result = stored
    if isinstance(stored, list):
        result = {"video": dict(zip(VIDEO_FIELDS, stored, strict=True))}
    edit(result)
    if "video" in result:
        result = [result["video"][name] for name in VIDEO_FIELDS]
    row[3] = json.dumps(result, separators=(",", ":"))
    write_checked_json(str(index_path), document)
