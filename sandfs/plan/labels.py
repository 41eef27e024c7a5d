"""Labels from a file (`labels: FILE`): which class each video of a task is.

Three layouts are read:

- `video,label` rows, optionally under a header row. A header is recognized by its names
  (case-insensitive): a video column named video, path or file, and a label column named
  label or class, in any order and among other columns. Without a header the first two
  columns are video and label. A video is named by its path relative to the dataset root
  (with or without the extension) or, when no two videos share it, by its file name alone.
- Kinetics: a header `label,youtube_id,time_start,time_end,split`; a row names the video file
  `{youtube_id}_{time_start:06d}_{time_end:06d}` (any extension, in any folder).
- PySlowFast (`train.csv`, `val.csv`): `path label_index` lines, space-separated, no header.

The classes are every label of the file, sorted; where every label is a whole number (a class
index, as PySlowFast's are), the classes are `0`..the largest, so a clip's `label_index` is
that number. Videos without a label and rows that match no video are counted (and logged) so
that a misspelled file never shifts labels silently; a file with no row, or none naming a
video of the task, is a UserError.

`parse_label_rows` is pure (bytes in, rows out); `read_labels` only reads the file, once, as
the task's owner could (docs/deploy.md#what-the-daemon-opens).
"""

from __future__ import annotations

import csv
import errno
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sandfs.access import Owner, read_owner_file
from sandfs.errors import UserError
from sandfs.media.types import VideoInfo

log = logging.getLogger(__name__)

VIDEO_COLUMNS = ("video", "path", "file")
LABEL_COLUMNS = ("label", "class")
KINETICS_COLUMNS = ("youtube_id", "time_start", "time_end")


@dataclass(frozen=True, slots=True)
class LabelRow:
    line: int
    video: str  # as the file names it: a relative path, a file name, or a Kinetics stem
    label: str


@dataclass(frozen=True, slots=True)
class Labels:
    """The labels of a task's videos, in video order, and what did not match."""

    labels: tuple[str | None, ...]
    classes: tuple[str, ...]
    videos_without_label: int
    rows_without_video: int


def read_labels(path: str, owner: Owner, max_bytes: int) -> bytes:
    """The labels file's bytes, read once, as its owner could, through one checked descriptor
    (`read_owner_file`): the planner parses these bytes and never opens the path again.
    UserError, naming the path as the task wrote it, when it cannot be read."""
    try:
        return read_owner_file(path, owner, max_bytes)
    except OSError as exc:
        limit = " (SANDFS_MAX_LABELS_BYTES)" if exc.errno == errno.EFBIG else ""
        raise UserError(f"labels file {path}: {exc.strerror}{limit}") from None


def parse_label_rows(data: bytes | str, source: str) -> list[LabelRow]:
    """The rows of a labels file's contents; `source` names it in errors."""
    try:
        text = data.decode("utf-8-sig") if isinstance(data, bytes) else data
        lines = text.splitlines()
        first = next((line for line in lines if line.strip()), "")
        if first and "," not in first and len(first.split()) == 2:
            rows = _pyslowfast_rows(lines, source)
        else:
            rows = _csv_rows([(n, row) for n, row in enumerate(csv.reader(lines), 1)
                              if any(row)])
    except (UnicodeDecodeError, csv.Error) as exc:
        raise UserError(f"labels file {source}: {exc}") from None
    if not rows:
        raise UserError(f"labels file {source}: no labelled row: expected `video,label` CSV "
                        f"rows, a Kinetics CSV or PySlowFast's `path label_index` lines")
    return rows


def _pyslowfast_rows(lines: Sequence[str], source: str) -> list[LabelRow]:
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 2 or not _is_index(fields[1]):
            raise UserError(f"labels file {source}:{n}: expected `path label_index` (as the "
                            f"file's first line), got {line.strip()!r}")
        rows.append(LabelRow(n, fields[0], fields[1]))
    return rows


def _csv_rows(rows: list[tuple[int, list[str]]]) -> list[LabelRow]:
    if not rows:
        return []
    header = [cell.strip().lower() for cell in rows[0][1]]
    if all(name in header for name in ("label", *KINETICS_COLUMNS)):
        return _kinetics_rows(rows[1:], header)
    video, label = _column(header, VIDEO_COLUMNS), _column(header, LABEL_COLUMNS)
    has_header = video is not None and label is not None
    video, label = (video, label) if has_header else (0, 1)
    return [LabelRow(n, row[video].strip(), row[label].strip())
            for n, row in rows[has_header:] if len(row) > max(video, label)]


def _column(header: list[str], names: Sequence[str]) -> int | None:
    return next((header.index(name) for name in names if name in header), None)


def _kinetics_rows(rows, header: list[str]) -> list[LabelRow]:
    at = {name: header.index(name) for name in ("label", *KINETICS_COLUMNS)}
    out = []
    for n, row in rows:
        try:
            start, end = (int(float(row[at[name]])) for name in ("time_start", "time_end"))
            stem = f"{row[at['youtube_id']].strip()}_{start:06d}_{end:06d}"
            out.append(LabelRow(n, stem, row[at["label"]].strip()))
        except (IndexError, ValueError):
            log.warning("labels: line %d is not a Kinetics row (label,youtube_id,time_start,"
                        "time_end): ignored", n)
    return out


def _is_index(label: str) -> bool:
    return label.isascii() and label.isdigit() and (label == "0" or label[0] != "0")


def label_classes(rows: Sequence[LabelRow]) -> tuple[str, ...]:
    """The class names a label_index indexes: `0`..the largest where every label is a class
    index, else the labels sorted."""
    labels = {r.label for r in rows}
    if labels and all(_is_index(label) for label in labels):
        return tuple(str(i) for i in range(max(map(int, labels)) + 1))
    return tuple(sorted(labels))


def match_labels(task: str, rows: Sequence[LabelRow], videos: Sequence[VideoInfo],
                 names: Mapping[str, int] | None = None) -> Labels:
    """Each video's label: the row naming its relative path (with or without extension) or,
    when unique among the videos, its file name (with or without extension). UserError when
    no row names any video (a file for another dataset, or paths from another root).
    `names`: `video_names(videos)`, if made already."""
    names = video_names(videos) if names is None else names
    labels: list[str | None] = [None] * len(videos)
    unmatched = 0
    for row in rows:
        index = _lookup(names, row.video)
        if index is None:
            unmatched += 1
            continue
        labels[index] = row.label
    if rows and videos and unmatched == len(rows):
        raise UserError(f"task {task}: labels: none of the {len(rows)} rows names a video of "
                        f"the task (line {rows[0].line} names {rows[0].video!r}; a video is "
                        f"named by its path under video_dataset_path, or its file name)")
    result = Labels(tuple(labels), label_classes(rows), labels.count(None), unmatched)
    if result.videos_without_label or result.rows_without_video:
        log.warning("task %s: labels: %d of %d videos have no label, %d of %d rows match no "
                    "video", task, result.videos_without_label, len(videos),
                    result.rows_without_video, len(rows))
    return result


def _lookup(names: Mapping[str, int], video: str) -> int | None:
    """The video a row names: by the whole name, else by its longest tail that names one (an
    absolute path, or one under another root, as PySlowFast's files give them)."""
    parts = video.strip("/").split("/")
    for start in range(len(parts)):
        tail = "/".join(parts[start:])
        if tail and tail in names:
            return names[tail]
    return None


def video_names(videos: Sequence[VideoInfo]) -> dict[str, int]:
    """Every name a row may give a video by: relative path and file name, each with and
    without its extension; a file name two videos share names neither."""
    names: dict[str, int] = {}
    leaves: dict[str, int] = {}
    leaf_counts: Counter[str] = Counter()
    for index, video in enumerate(videos):
        names[video.rel_path] = names[video.name] = index
        for leaf in {video.rel_path.rsplit("/", 1)[-1], video.name.rsplit("/", 1)[-1]}:
            leaf_counts[leaf] += 1
            leaves[leaf] = index
    return {**{leaf: i for leaf, i in leaves.items() if leaf_counts[leaf] == 1}, **names}
