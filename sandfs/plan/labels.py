"""Labels from a CSV file (`labels: FILE.csv`): which class each video of a task is.

Two layouts are read:

- `video,label` rows, optionally under a header row. A header is recognized by its names
  (case-insensitive): a video column named video, path or file, and a label column named
  label or class, in any order and among other columns. Without a header the first two
  columns are video and label. A video is named by its path relative to the dataset root
  (with or without the extension) or, when no two videos share it, by its file name alone.
- Kinetics: a header `label,youtube_id,time_start,time_end,split`; a row names the video file
  `{youtube_id}_{time_start:06d}_{time_end:06d}` (any extension, in any folder).

The classes are every label of the file, sorted. Videos without a label and rows that match no
video are counted (and logged) so that a misspelled file never shifts labels silently.
"""

from __future__ import annotations

import csv
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

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


def read_label_csv(path: str) -> list[LabelRow]:
    """The rows of a labels CSV (either layout). UserError when it cannot be read."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = [(n, row) for n, row in enumerate(csv.reader(f), 1) if any(row)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UserError(f"labels file {path}: {exc}") from None
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


def match_labels(task: str, rows: Sequence[LabelRow], videos: Sequence[VideoInfo]) -> Labels:
    """Each video's label: the row naming its relative path (with or without extension) or,
    when unique among the videos, its file name (with or without extension)."""
    names = _video_names(videos)
    labels: list[str | None] = [None] * len(videos)
    unmatched = 0
    for row in rows:
        index = names.get(row.video) if row.video else None
        if index is None:
            unmatched += 1
            continue
        labels[index] = row.label
    result = Labels(tuple(labels), tuple(sorted({r.label for r in rows})),
                    labels.count(None), unmatched)
    if result.videos_without_label or result.rows_without_video:
        log.warning("task %s: labels: %d of %d videos have no label, %d of %d rows match no "
                    "video", task, result.videos_without_label, len(videos),
                    result.rows_without_video, len(rows))
    return result


def _video_names(videos: Sequence[VideoInfo]) -> dict[str, int]:
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
