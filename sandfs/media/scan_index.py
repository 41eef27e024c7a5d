"""The scan index: probe results of a previous scan, as JSON, keyed by (rel_path, path, size,
mtime), so a remount of an unchanged dataset probes nothing. An entry is a row `[path, size,
mtime, result, [dev, ino, uid, gid, mode]]`, its result a JSON text of its own, parsed when
asked for (250,000 entries as nested objects took 1.8 s of CPU to read, as rows 0.6 s); its
stat lets a lazy scan list the file without a stat of its own (`listed_from`), while the
dataset root's device number is the header's (`root_device`: a filesystem mounted again, or
restored to another disk, numbers every file's device anew). A file of
another format or scan version, or scanned under other limits, or whose checksum does not
match (a damaged file), is ignored (and rewritten); so is one damaged entry, whose file alone
is probed again."""

from __future__ import annotations

import errno
import json
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

from sandfs.fileio import read_checked_json, write_checked_pieces
from sandfs.media.records import listing_place
from sandfs.media.resulttext import result_from_text, result_text
from sandfs.media.types import (
    IDENTITY_VERSION,
    ListedVideo,
    MediaLimits,
    ProbeFacts,
    ProbeResult,
    listing_digest,
)
from sandfs.media.walk import passes_stat_checks
from sandfs.runtime import collector_paused

log = logging.getLogger("sandfs.media.scan")  # one logger for the whole scan

# bump when probe results change meaning: older index files are then ignored
# (2: MPEG-TS/PS are not seekable; 3: frames counted from packets, counted_by recorded;
# 4: pictures are not_a_video, where an index of 3 may hold them as one-frame videos;
# 5: entries as rows, each result a JSON text; 6: each row with the file's stat, a video's
# facts as a list)
SCAN_VERSION = 6
INDEX_FORMAT = "sandfs-scan-index"


Entries = dict[str, tuple[ListedVideo, ProbeResult]]  # rel_path -> (the file as listed, result)


def _index_limits(limits: MediaLimits) -> dict[str, int]:
    """The limits that decide a probe's outcome (a changed one invalidates the index)."""
    return {"max_pixels": limits.max_pixels, "max_frames": limits.max_frames}


NO_INDEX: tuple[dict[str, Any], None, None] = ({}, None, None)


def read_index(index_path: str | os.PathLike[str], limits: MediaLimits
               ) -> tuple[dict[str, Any], int | None, str | None]:
    """(rel_path -> its entry as stored, the dataset root's device number when it was
    written, the `listing_digest` of its entries if of this IDENTITY_VERSION): `listed_from`
    and `parse_entry` read an entry (UNREADABLE for a damaged one), from a sound file of this
    format, scan version and limits; NO_INDEX otherwise. A lazy scan parses an entry only
    when it is asked for: 100,000 of them took 2.6 s."""
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
        if document["format"] != INDEX_FORMAT or document["scan_version"] != SCAN_VERSION:
            raise ValueError("another format or scan version")
        if document["limits"] != _index_limits(limits):
            log.info("limits changed since the last scan: probing every file again")
            return NO_INDEX
        entries = document["entries"]
        if not isinstance(entries, dict):
            raise TypeError("entries are not a mapping")
        device, digest = document.get("root_device"), document.get("listing_digest")
        if document.get("identity_version") != IDENTITY_VERSION:
            digest = None  # another definition of the identity: computed, and stored again
        return (entries, device if isinstance(device, int) else None,
                digest if isinstance(digest, str) else None)
    except UNREADABLE as error:
        log.warning(
            "ignoring the scan index %s: %s", ascii(os.fspath(index_path)), ascii(repr(error))
        )
        return NO_INDEX


UNREADABLE = (KeyError, IndexError, TypeError, ValueError, AttributeError)


Entry = list[Any]  # as stored: [path, size_bytes, mtime_ns, the result's JSON text, stat]


def is_video_entry(entry: Entry) -> bool:
    """Is it a usable video's (known without parsing its result)?"""
    return entry[3].startswith("[")


def listed_from(entry: Entry | None, root: str, rel_path: str, limits: MediaLimits
                ) -> ListedVideo | None:
    """The usable video `entry` stored for the file the walk found at `root + rel_path` (root
    ending in "/"), as the listing would find it if the file is unchanged (the lazy scan
    checks that later: docs/contract.md#warm-listing); None for a bad one's entry, one not of
    a row's shape (a damaged row: its stat not ints, or out of a record's range), one the walk
    refuses by the row's stat under `limits` (a lowered max_file_bytes), or one of a symlink's
    target (then the file is listed by its stat: the walk refuses it as a cold listing does,
    resolves a link's target and checks it again). 250,000 rows are read at a warm start:
    no generator, and the record made under its listing's place (`ListedVideo.under`)."""
    try:
        stored, size_bytes, mtime_ns, result, (dev, ino, uid, gid, mode) = entry  # type: ignore
    except (TypeError, ValueError):
        return None
    if not (type(result) is str and result.startswith("[") and type(stored) is str
            and len(stored) == len(root) + len(rel_path) and stored.endswith(rel_path)
            and stored.startswith(root)):
        return None
    if not (type(size_bytes) is int and type(mtime_ns) is int and type(dev) is int
            and type(ino) is int and type(uid) is int and type(gid) is int
            and type(mode) is int and passes_stat_checks(mode, size_bytes, limits)):
        return None
    try:
        return ListedVideo.under(listing_place(root, dev, (uid, gid, mode)), stored,
                                 size_bytes, mtime_ns, ino)
    except ValueError:  # a stat out of a record's range (a damaged row): listed afresh
        return None


def parse_entry(entry: Entry) -> ProbeResult:
    return result_from_text(entry[3])


def save_index(index_path: str | os.PathLike[str], limits: MediaLimits, entries: Entries,
               root_device: int | None = None, texts: Mapping[str, str] | None = None,
               rows: Mapping[str, Entry] | None = None) -> None:
    """Writes `entries` atomically, leaving out results that depend on the machine's load;
    `root_device`: the dataset root's st_dev, whose files the rows' stats describe; `texts`:
    rel_path -> its result's `result_text` where a probe worker made it; `rows`: rows not
    parsed, written as they are (a scan saved partway: `index_row`). No cyclic
    collection meanwhile: the rows are garbage once written, and 250,000 of them made 8 full
    collections walk them as they were built (0.6 s with the GIL held, up to 140 ms each)."""
    with collector_paused():
        _save_index(index_path, limits, entries, root_device, texts or {}, rows or {})


ROWS_PER_PIECE = 4_096  # rows dumped at a time: the index's text is written as it is made


def _save_index(index_path: str | os.PathLike[str], limits: MediaLimits, entries: Entries,
                root_device: int | None, texts: Mapping[str, str],
                rows: Mapping[str, Entry]) -> None:
    """The document's rows are made and written a piece at a time (`write_checked_pieces`),
    the same bytes as dumped whole: at 250,000 rows the whole took ~220 MB at the scan's end,
    more than the daemon held when its first window was whole."""
    keys = [k for k, (_, result) in entries.items() if _is_lasting(result)]
    keys += [k for k in rows if k not in entries]
    head = {
        "format": INDEX_FORMAT,
        "scan_version": SCAN_VERSION,
        "limits": _index_limits(limits),
        "root_device": root_device,
        # the dataset identity of a listing that is these entries (a warm mount's, unchanged)
        "identity_version": IDENTITY_VERSION,
        "listing_digest": listing_digest(
            (k, entries[k][0].size_bytes if k in entries else rows[k][1]) for k in keys),
    }

    def row(key: str) -> Entry:
        if key not in entries:
            return rows[key]
        listed, result = entries[key]
        return _entry_to_json(listed, result, texts.get(key))

    def pieces() -> Iterator[bytes]:
        yield json.dumps(head, separators=(",", ":"))[:-1].encode() + b',"entries":{'
        for start in range(0, len(keys), ROWS_PER_PIECE):
            chunk = {k: row(k) for k in keys[start:start + ROWS_PER_PIECE]}
            text = json.dumps(chunk, separators=(",", ":"))[1:-1]
            yield (text if start == 0 else "," + text).encode()
        yield b"}}"

    try:
        write_checked_pieces(os.fspath(index_path), pieces())
    except OSError as error:
        log.warning(
            "cannot write the scan index %s: %s", ascii(os.fspath(index_path)), ascii(str(error))
        )


_ACCESS_ERRORS = tuple(os.strerror(code) for code in (errno.EACCES, errno.EPERM))


def _is_lasting(result: ProbeResult) -> bool:
    """Facts and failures of the file's content last until it changes; a timeout or a crash
    depends on the load, and a refused open on permissions, which change without touching the
    file's size or mtime (a chmod of its folder): those are probed again next time."""
    if isinstance(result, ProbeFacts):
        return True
    return result.lasting and not any(text in result.detail for text in _ACCESS_ERRORS)


def _entry_to_json(listed: ListedVideo, result: ProbeResult, text: str | None) -> Entry:
    """`text`: the result's `result_text`, made already (None: made here)."""
    return index_row(listed, text if text is not None else result_text(result))


def index_row(listed: ListedVideo, text: str) -> Entry:
    """`listed`'s row, its result's `text` as it is: the stat is the listing's."""
    stat = [*(listed.identity or (0, 0)), *(listed.access or (0, 0, 0))]
    return [listed.path, listed.size_bytes, listed.mtime_ns, text, stat]
