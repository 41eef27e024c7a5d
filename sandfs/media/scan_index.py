"""The scan index: probe results of a previous scan, as JSON, keyed by (rel_path, path, size,
mtime), so a remount of an unchanged dataset probes nothing. Its rows are columns: the
rel_paths, the paths that are not the root's + rel_path (a symlink's target), each result's
JSON text (parsed when asked for), each joined by NUL (no name nor JSON text holds one), and
the stats (size, mtime, dev, ino, uid, gid, mode) as one base64 string of fixed-size binary
rows (`STAT_ROW`): 250,000 rows' binary is read in 0.06 s, where their 1.75 million ints
as JSON take 0.29 s to parse, with the GIL held at each warm start. A row's stat lets a lazy
scan list its file without a stat of its own (`StoredIndex.listed`), while the dataset root's
device number is the header's (`root_device`: a filesystem mounted again, or restored to
another disk, numbers every file's device anew). A file of another format or scan version,
or scanned under other limits, or whose checksum does not match (a damaged file), is ignored
(and rewritten); so is one damaged row, whose file alone is probed again."""

from __future__ import annotations

import binascii
import errno
import itertools
import json
import logging
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from sandfs.fileio import read_checked_json, write_checked_pieces
from sandfs.media.records import listed_under, listing_place
from sandfs.media.resulttext import result_text
from sandfs.media.types import (
    IDENTITY_VERSION,
    ListedVideo,
    MediaLimits,
    ProbeFacts,
    ProbeResult,
    listing_digest,
)
from sandfs.media.walk import WalkRecord, passes_stat_checks
from sandfs.runtime import collector_paused

log = logging.getLogger("sandfs.media.scan")  # one logger for the whole scan

# bump when probe results change meaning: older index files are then ignored
# (2: MPEG-TS/PS are not seekable; 3: frames counted from packets, counted_by recorded;
# 4: pictures are not_a_video, where an index of 3 may hold them as one-frame videos;
# 5: entries as rows, each result a JSON text; 6: each row with the file's stat, a video's
# facts as a list; 7: the rows as columns; 8: the stats as binary rows)
SCAN_VERSION = 8
# their results mean what 8's do: read (6's files listed by their stat), then written as 8
COLUMNS_VERSION = 7  # the stats a JSON list of ints, a row's after the other
ROWS_VERSION = 6
INDEX_FORMAT = "sandfs-scan-index"
STAT_COLUMNS = ("size", "mtime", "dev", "ino", "uid", "gid", "mode")
# a row of the stats as stored: the kernel's widths (uid_t, gid_t and mode_t are 32 bits)
STAT_ROW = np.dtype([("size", "<u8"), ("mtime", "<i8"), ("dev", "<u8"), ("ino", "<u8"),
                     ("uid", "<u4"), ("gid", "<u4"), ("mode", "<u4")])
_WHERE = np.dtype([(name, STAT_ROW[name]) for name in ("dev", "uid", "gid", "mode")])  # place
TEXT_COLUMNS = ("rel_path", "path", "result")  # each NUL-joined
SEP = "\0"

# rel_path -> (the file as listed, its result or, a usable video's, that result's index text)
Entries = dict[str, tuple[ListedVideo, ProbeResult | str]]
Rows = Mapping[str, tuple[ListedVideo, str]]  # rel_path -> (as listed, its result's text)
UNREADABLE = (KeyError, IndexError, TypeError, ValueError, AttributeError)


def _index_limits(limits: MediaLimits) -> dict[str, int]:
    """The limits that decide a probe's outcome (a changed one invalidates the index)."""
    return {"max_pixels": limits.max_pixels, "max_frames": limits.max_frames}


@dataclass(frozen=True, slots=True)
class StoredIndex:
    """A scan index as read: row i is `rel_paths[i]`'s. One reader, at the listing."""

    root: str  # the dataset root + "/" its rows' paths are under, unless given
    rel_paths: list[str]
    paths: list[str]  # "": root + rel_path
    results: list[str]  # each a result's JSON text
    # as STAT_COLUMNS: arrays of STAT_ROW's fields, or (an index of an earlier version) lists
    # of ints in a sound row
    stats: tuple[np.ndarray, ...] | tuple[list[Any], ...]
    root_device: int | None = None  # the root's st_dev when it was written
    digest: str | None = None  # its rows' `listing_digest`, if of this IDENTITY_VERSION
    walked: WalkRecord | None = None  # the walk that listed its files

    def __len__(self) -> int:
        return len(self.rel_paths)

    def path(self, row: int) -> str:
        return self.paths[row] or self.root + self.rel_paths[row]

    def numbers(self) -> dict[str, int]:
        """rel_path -> its row."""
        return {rel_path: row for row, rel_path in enumerate(self.rel_paths)}

    def describes(self, row: int, listed: ListedVideo) -> bool:
        """Does the row describe the file as listed (its path, size and mtime)?"""
        return (self.path(row) == listed.path and self.stats[0][row] == listed.size_bytes
                and self.stats[1][row] == listed.mtime_ns)

    def listed(self, root: str, limits: MediaLimits) -> ListedRows:
        """Each usable video's row: its file as the walk of `root` (ending in "/") would list
        it, if unchanged, and its result's text; the lazy scan checks the file later
        (docs/contract.md#warm-listing). Not a bad one's row, nor one of a symlink's target
        (listed by its stat: the walk resolves a link and checks its target again), one whose
        stat is not ints of a record's range (a damaged row: listed afresh), nor one the walk
        refuses by its stat under `limits` (a lowered max_file_bytes). 250,000 rows at each
        warm start: made as columns, a place looked up where the stat's owner or mode
        changes."""
        if root != self.root:
            return ListedRows([], [], [])
        usable = self._usable(limits)
        mask = usable.tolist()  # for compress: a list's items, not NumPy bools
        if not isinstance(self.stats[0], np.ndarray):  # an earlier version's lists
            return self._listed_rows(root, mask)
        size, mtime, dev, ino, uid, gid, mode = (column[usable] for column in self.stats)
        where = np.empty(len(size), _WHERE)
        where["dev"], where["uid"], where["gid"], where["mode"] = dev, uid, gid, mode
        starts = np.flatnonzero(np.r_[True, where[1:] != where[:-1]]) if len(where) else []
        places = list(itertools.chain.from_iterable(
            itertools.repeat(listing_place(root, dev, (uid, gid, mode)), count)
            for (dev, uid, gid, mode), count in zip(
                where[starts].tolist(), np.diff([*starts, len(where)]).tolist(), strict=True)))
        rel_paths = list(itertools.compress(self.rel_paths, mask))
        return ListedRows(rel_paths, listed_under(places, list(map(root.__add__, rel_paths)),
                                                  size, mtime, ino),
                          list(itertools.compress(self.results, mask)))

    def _listed_rows(self, root: str, usable: list[bool]) -> ListedRows:
        """`listed` of stats as lists (COLUMNS_VERSION's), a row at a time."""
        found, last, place = ListedRows([], [], []), None, None
        for rel_path, text, size, mtime, dev, ino, uid, gid, mode in itertools.compress(
                zip(self.rel_paths, self.results, *self.stats, strict=True), usable):
            if (dev, uid, gid, mode) != last:
                last, place = (dev, uid, gid, mode), listing_place(root, dev, (uid, gid, mode))
            try:
                found.videos.append(ListedVideo.under(place, root + rel_path, size, mtime, ino))
            except ValueError:  # out of a record's range
                continue
            found.rel_paths.append(rel_path)
            found.texts.append(text)
        return found

    def _usable(self, limits: MediaLimits) -> np.ndarray:
        """A row's file is at the root + its rel_path, its result a video's, its stat ints
        that the walk's stat checks pass."""
        usable = np.fromiter((not path and text[:1] == "[" for path, text in zip(
            self.paths, self.results, strict=True)), bool, len(self))
        try:
            if any(type(column) is list and set(map(type, column)) - {int}
                   for column in self.stats):
                raise TypeError("a damaged row")
            size, mode = (np.asarray(self.stats[i], np.int64) for i in (0, 6))
        except (TypeError, OverflowError):  # row by row (a list's)
            return np.fromiter((ok and _ints(*row) and passes_stat_checks(row[6], row[0], limits)
                                for ok, row in zip(usable, zip(*self.stats, strict=True),
                                                   strict=True)), bool, len(self))
        usable &= (size > 0) & (size <= limits.max_file_bytes)
        usable &= (mode & _FORMAT_BITS) == stat.S_IFREG  # passes_stat_checks, as columns
        return usable


@dataclass(frozen=True, slots=True)
class ListedRows:
    """An index's usable rows (`StoredIndex.listed`), row i's file `videos[i]` at its
    `rel_paths[i]`, its result's text `texts[i]`."""

    rel_paths: list[str]
    videos: list[ListedVideo]
    texts: list[str]

    def by_rel_path(self) -> dict[str, tuple[ListedVideo, str]]:
        """rel_path -> (its file, its result's text)."""
        return dict(zip(self.rel_paths, zip(self.videos, self.texts, strict=True), strict=True))


class KnownRows:
    """An index's usable rows as a warm listing's walk asks for them (`walk.Known`); `hits`:
    those it answered for, rel_path -> (file, result's text), read when asked for."""

    def __init__(self, rows: ListedRows) -> None:
        self.rows = rows
        self.hits: dict[str, tuple[ListedVideo, str]] = {}
        self._by_rel_path: dict[str, tuple[ListedVideo, str]] | None = None

    def __call__(self, rel_path: str) -> ListedVideo | None:
        if self._by_rel_path is None:
            self._by_rel_path = self.rows.by_rel_path()
        row = self._by_rel_path.get(rel_path)
        if row is None:
            return None
        self.hits[rel_path] = row
        return row[0]

    def every(self, rel_paths: list[str]) -> Sequence[ListedVideo] | None:
        if rel_paths == self.rows.rel_paths:  # a whole index's rows: in the walk's order
            self.hits.update(self.rows.by_rel_path())
            return self.rows.videos
        found = [self(rel_path) for rel_path in rel_paths]
        return None if any(video is None for video in found) else found  # type: ignore


_FORMAT_BITS = 0o170000  # of a mode: the file's kind (stat.S_IFMT)


def _ints(*values: object) -> bool:
    return all(type(value) is int for value in values)


NO_INDEX = StoredIndex("", [], [], [], tuple([] for _ in STAT_COLUMNS))


def read_index(index_path: str | os.PathLike[str], limits: MediaLimits) -> StoredIndex:
    """The index's rows, from a sound file of this format, scan version (or an earlier one
    whose results mean the same) and limits; NO_INDEX otherwise."""
    try:
        document = read_checked_json(os.fspath(index_path))
    except FileNotFoundError:
        return NO_INDEX
    except (OSError, ValueError) as error:
        log.warning(
            "ignoring the scan index %s: %s", ascii(os.fspath(index_path)), ascii(str(error))
        )
        return NO_INDEX
    try:
        version = document["scan_version"]
        if document["format"] != INDEX_FORMAT or version not in (
                SCAN_VERSION, COLUMNS_VERSION, ROWS_VERSION):
            raise ValueError("another format or scan version")
        if document["limits"] != _index_limits(limits):
            log.info("limits changed since the last scan: probing every file again")
            return NO_INDEX
        if version == SCAN_VERSION:
            return stored_index(document)
        # no digest: the listing is not the index as it is, which is written again
        return replace(stored_index(
            document if version == COLUMNS_VERSION else _as_columns(document)), digest=None)
    except UNREADABLE as error:
        log.warning(
            "ignoring the scan index %s: %s", ascii(os.fspath(index_path)), ascii(repr(error))
        )
        return NO_INDEX


def stored_index(document: dict[str, Any]) -> StoredIndex:
    """The rows of a document of this scan version, or of COLUMNS_VERSION (its stats a list)
    (UNREADABLE if they are not columns of one length)."""
    rows, root, count = document["rows"], document["root"], document["count"]
    rel_paths, paths, results = (_split(rows[name], count) for name in TEXT_COLUMNS)
    stats = _stat_columns(rows["stat"], count)
    if not (isinstance(root, str) and len(rel_paths) == len(paths) == len(results) == count):
        raise ValueError("the rows' columns are not of one length")
    device, digest = document.get("root_device"), document.get("listing_digest")
    if document.get("identity_version") != IDENTITY_VERSION:
        digest = None  # another definition of the identity: computed, and stored again
    walk = document.get("walk")
    return StoredIndex(root, rel_paths, paths, results, stats,
                       device if type(device) is int else None,
                       digest if isinstance(digest, str) else None,
                       None if walk is None else _walk_record(walk, rel_paths))


def _stat_columns(stored: str | list[Any], count: int
                  ) -> tuple[np.ndarray, ...] | tuple[list[Any], ...]:
    """STAT_COLUMNS from their base64 STAT_ROWs, or from a list of a row's fields then the next
    row's (COLUMNS_VERSION)."""
    width = len(STAT_COLUMNS)
    if type(stored) is list:
        if len(stored) != width * count:
            raise ValueError("the rows' columns are not of one length")
        return tuple(stored[field::width] for field in range(width))
    if type(stored) is not str:
        raise TypeError("the stats are neither binary rows nor a list of a row's fields")
    table = np.frombuffer(binascii.a2b_base64(stored, strict_mode=True), STAT_ROW)
    if len(table) != count:
        raise ValueError("the rows' columns are not of one length")
    return tuple(table[name] for name in STAT_COLUMNS)


def _walk_record(walk: dict[str, Any], rel_paths: list[str]) -> WalkRecord:
    """The walk as stored: its candidates are the rows' and those without one."""
    folders = tuple((rel_dir, *stamp) for rel_dir, *stamp in walk["folders"])
    if not all(type(rel_dir) is str and len(stamp) == 4 and _ints(*stamp)
               for rel_dir, *stamp in folders) or type(walk["files"]) is not int:
        raise TypeError("a folder's stat is not a string and four ints")
    unrowed = walk["unrowed"]
    names = rel_paths + (_split(unrowed, 1) if unrowed else [])
    return WalkRecord(folders, walk["files"], sorted(names), walk["plain"] is True)


def _as_columns(document: dict[str, Any]) -> dict[str, Any]:
    """A ROWS_VERSION index (a list a row: [path, size, mtime, result, [dev, ino, uid, gid,
    mode]]) as this version's: its paths whole (no root: its files are listed by their stat,
    its results taken where a row describes its file), its digest none (the index is written
    again)."""
    entries, flat = document["entries"], []
    for _path, size, mtime, _text, fields in entries.values():
        flat += (size, mtime, *fields)
    columns = {"rel_path": SEP.join(entries), "stat": flat}
    for name, field in (("path", 0), ("result", 3)):
        columns[name] = SEP.join(row[field] for row in entries.values())
    return {"rows": columns, "root": "", "count": len(entries),
            "root_device": document.get("root_device")}


def _split(joined: str, count: int) -> list[str]:
    """A text column's values (one empty value and none join alike: `count` tells)."""
    if type(joined) is not str:
        raise TypeError("a text column is not a string")
    return joined.split(SEP) if count else []


def is_video_text(text: str) -> bool:
    """Is it a usable video's result (known without parsing it)?"""
    return text.startswith("[")


def save_index(index_path: str | os.PathLike[str], limits: MediaLimits, root: str,
               entries: Entries, root_device: int | None = None, rows: Rows | None = None,
               walked: WalkRecord | None = None) -> None:
    """Writes `entries` atomically, leaving out results that depend on the machine's load;
    `root`: the dataset root (its real path) the files were listed under; `root_device`: its
    st_dev, whose files the rows' stats describe; `rows`: rows not parsed, written as they
    are (a scan saved partway); `walked`: the walk that listed the files. No cyclic collection
    meanwhile: 250,000 rows' pieces made 8 full collections walk what was built (0.6 s with
    the GIL held, up to 140 ms each)."""
    with collector_paused():
        _save_index(index_path, limits, root.rstrip("/") + "/", entries, root_device,
                    rows or {}, walked)


ROWS_PER_PIECE = 4_096  # a text column's rows written at a time: written as it is made


def _save_index(index_path: str | os.PathLike[str], limits: MediaLimits, root: str,
                entries: Entries, root_device: int | None, rows: Rows,
                walked: WalkRecord | None) -> None:
    """The text columns are made and written a piece at a time (`write_checked_pieces`):
    a document dumped whole took ~220 MB at the end of a scan of 250,000 videos, more than the
    daemon held when its first window was whole."""
    keys = [k for k, (_, result) in entries.items() if _is_lasting(result)]
    keys += [k for k in rows if k not in entries]
    listed = [entries[k][0] if k in entries else rows[k][0] for k in keys]
    head = {
        "format": INDEX_FORMAT,
        "scan_version": SCAN_VERSION,
        "limits": _index_limits(limits),
        "root": root,
        "root_device": root_device,
        "count": len(keys),
        # the dataset identity of a listing that is these rows (a warm mount's, unchanged)
        "identity_version": IDENTITY_VERSION,
        "listing_digest": listing_digest(
            (k, v.size_bytes) for k, v in zip(keys, listed, strict=True)),
    }
    if walked is not None:  # its candidates without a row: refused, or probed again
        unrowed = [n for n in walked.names if n not in entries and n not in rows]
        unrowed += [k for k, (_, result) in entries.items() if not _is_lasting(result)]
        head["walk"] = {"folders": walked.folders, "files": walked.files,
                        "unrowed": SEP.join(unrowed), "plain": walked.plain}

    def text(key: str) -> str:
        if key not in entries:
            return rows[key][1]
        found = entries[key][1]
        return found if isinstance(found, str) else result_text(found)

    columns = {
        "rel_path": lambda: keys,
        "path": lambda: ("" if v.path == root + k else v.path
                         for k, v in zip(keys, listed, strict=True)),
        "result": lambda: map(text, keys),
    }

    def pieces() -> Iterator[bytes]:
        yield json.dumps(head, separators=(",", ":"))[:-1].encode() + b',"rows":{'
        for name in TEXT_COLUMNS:
            yield from _joined_pieces(name, columns[name]())
        yield b',"stat":"'
        for start in range(0, len(listed), STAT_ROWS_PER_PIECE):
            yield binascii.b2a_base64(_stats(listed[start:start + STAT_ROWS_PER_PIECE]),
                                      newline=False)
        yield b'"}}'

    try:
        write_checked_pieces(os.fspath(index_path), pieces())
    except OSError as error:
        log.warning(
            "cannot write the scan index %s: %s", ascii(os.fspath(index_path)), ascii(str(error))
        )


def _joined_pieces(name: str, values: Iterator[str] | list[str]) -> Iterator[bytes]:
    """`"name":"a\\u0000b..."`, ROWS_PER_PIECE values at a time: JSON escapes each character
    alone, so the escaped pieces of one string joined are the string's."""
    yield ("" if name == TEXT_COLUMNS[0] else ",").encode() + f'"{name}":"'.encode()
    values, first = iter(values), True
    while chunk := list(itertools.islice(values, ROWS_PER_PIECE)):
        joined = ("" if first else SEP) + SEP.join(chunk)
        yield json.dumps(joined)[1:-1].encode()
        first = False
    yield b'"'


# a piece's rows are 3 x 44 bytes a row: base64 pieces of whole 3-byte groups join into the
# whole's base64
STAT_ROWS_PER_PIECE = 3 * 1_365


def _stats(listed: list[ListedVideo]) -> bytes:
    """The rows' STAT_ROWs (0 where the listing took none), made a piece at a time: a list a
    field held 250,000 rows' ints at once (~100 MB as the index was saved, against ~40 MB a
    piece at a time)."""
    return np.array([(v.size_bytes, v.mtime_ns, *(v.identity or (0, 0)),
                      *(v.access or (0, 0, 0))) for v in listed], STAT_ROW).tobytes()


_ACCESS_ERRORS = tuple(os.strerror(code) for code in (errno.EACCES, errno.EPERM))


def _is_lasting(result: ProbeResult | str) -> bool:
    """Facts (or a usable video's text) and failures of the file's content last until it
    changes; a timeout or a crash depends on the load, and a refused open on permissions,
    which change without touching the file's size or mtime (a chmod of its folder): those
    are probed again next time."""
    if isinstance(result, ProbeFacts | str):
        return True
    return result.lasting and not any(text in result.detail for text in _ACCESS_ERRORS)
