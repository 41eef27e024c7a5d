"""An MP4/MOV video's facts from its sample tables, without a decoder.

`moov/trak/mdia/minf/stbl` says what the demuxing probe (`probe.py`) counts from packets: the
sample count and durations (`stts`), composition offsets (`ctts`), sync samples (`stss`), the
timescale (`mdhd`), the codec and picture size (`stsd`), the edit list (`elst`) and where each
chunk lies in the file (`stsc`, `stsz`, `stco`/`co64`). That reads a few kilobytes of the file
and no frame: 0.1-0.3 ms a video against 3 ms to demux it and decode its first frame.

Only the plain case is answered: one video track of H.264 (`avc1`, 8-bit 4:2:0), among video
and sound tracks only, no fragments, no rotation, at most one edit that shifts the timestamps
without hiding a sample, every sample inside the file, a first sample that is a sync sample
and the earliest picture. Anything else, or any box that is cut short, overruns its parent or
is larger than this reader takes, raises NotPlain: the demuxing probe decides, as before. The
checks a decoder would make (the first frame decodes, its size) are made at first decode,
where a frame that disagrees raises decode.ScanMismatch (docs/contract.md#lazy-scan).
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left
from collections.abc import Iterator
from fractions import Fraction
from typing import BinaryIO

from sandfs.media.types import MediaLimits, ProbeFacts

SAMPLE_TABLES = "sample tables"  # ProbeFacts.counted_by
MAX_MOOV_BYTES = 16 << 20  # a larger index is read by the demuxing probe
MAX_TOP_BOXES = 64  # top-level boxes walked to find moov
PLAIN_TRACKS = frozenset({b"vide", b"soun"})
STBL_KNOWN = frozenset({b"stsd", b"stts", b"ctts", b"stss", b"stsc", b"stsz", b"stco",
                        b"co64", b"sdtp", b"stps"})
IDENTITY_MATRIX = (0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000)
# baseline, main and extended: always 8-bit 4:2:0; the others' avcC says (or we do not trust it)
PLAIN_PROFILES = frozenset({66, 77, 88})


class NotPlain(Exception):
    """Not a file this reader answers for: the demuxing probe decides."""


def sample_table_facts(file: BinaryIO, limits: MediaLimits) -> ProbeFacts:
    """The facts of an open MP4/MOV file; NotPlain for anything but the plain case."""
    try:
        return _facts(file, limits)
    except (struct.error, IndexError, ValueError) as error:  # a field past its box's end
        raise NotPlain(f"a malformed box: {error}") from None


def _facts(file: BinaryIO, limits: MediaLimits) -> ProbeFacts:
    size = os.fstat(file.fileno()).st_size
    moov = _read_moov(file, size)
    boxes = dict(_children(moov, 0, len(moov), {b"mvhd", b"trak", b"mvex"}, many=b"trak"))
    if b"mvex" in boxes or b"mvhd" not in boxes:
        raise NotPlain("fragmented, or no movie header")
    traks = boxes.get(b"trak", [])
    handlers = [_handler(moov, trak) for trak in traks]
    if not set(handlers) <= PLAIN_TRACKS or handlers.count(b"vide") != 1:
        raise NotPlain(f"tracks {handlers}")
    index = handlers.index(b"vide")
    movie_timescale = _u32(moov, boxes[b"mvhd"][0] + (20 if moov[boxes[b"mvhd"][0]] else 12))
    return _track_facts(moov, traks[index], index, movie_timescale, size, limits)


# -- boxes ------------------------------------------------------------------------------------


def _read_moov(file: BinaryIO, size: int) -> bytes:
    """The moov box's body, found among the first MAX_TOP_BOXES top-level boxes after ftyp."""
    position = 0
    for count in range(MAX_TOP_BOXES):
        if position + 8 > size:
            break
        file.seek(position)
        header = file.read(16)
        length, kind, skip = _header(header, 0, size - position)
        if count == 0 and kind != b"ftyp":
            raise NotPlain("no ftyp box first")
        if kind == b"moof":
            raise NotPlain("fragmented")
        if kind == b"moov":
            if length - skip > MAX_MOOV_BYTES:
                raise NotPlain(f"a moov of {length} bytes")
            file.seek(position + skip)
            body = file.read(length - skip)
            if len(body) != length - skip:
                raise NotPlain("moov cut short")
            return body
        position += length
    raise NotPlain("no moov box")


def _header(data: bytes, at: int, room: int) -> tuple[int, bytes, int]:
    """(box length, type, header length) of the box at `at`, within `room` bytes."""
    if room < 8 or len(data) < at + 8:
        raise NotPlain("a box header cut short")
    length, kind = struct.unpack_from(">I4s", data, at)
    skip = 8
    if length == 1:
        if room < 16 or len(data) < at + 16:
            raise NotPlain("a box header cut short")
        length, skip = struct.unpack_from(">Q", data, at + 8)[0], 16
    elif length == 0:
        length = room  # to the end of its parent
    if length < skip or length > room:
        raise NotPlain(f"a {kind!r} box of {length} bytes in {room}")
    return length, kind, skip


def _boxes(data: bytes, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """(type, body start, body end) of the boxes in data[start:end]; each at least 8 bytes
    long, so the walk ends."""
    at = start
    while at < end:
        length, kind, skip = _header(data, at, end - at)
        yield kind, at + skip, at + length
        at += length


def _children(data: bytes, start: int, end: int, wanted: frozenset[bytes] | set[bytes],
              many: bytes = b"") -> Iterator[tuple[bytes, object]]:
    """The wanted child boxes: (type, (start, end)); `many` once, as a list of them all."""
    found: list[tuple[int, int]] = []
    seen = set()
    for kind, body, stop in _boxes(data, start, end):
        if kind == many:
            found.append((body, stop))
        elif kind in wanted:
            if kind in seen:
                raise NotPlain(f"two {kind!r} boxes")
            seen.add(kind)
            yield kind, (body, stop)
    if many:
        yield many, found


def _child(data: bytes, span: tuple[int, int], kind: bytes) -> tuple[int, int]:
    for found, body, stop in _boxes(data, *span):
        if found == kind:
            return body, stop
    raise NotPlain(f"no {kind!r} box")


Kids = dict[bytes, tuple[int, int]]


def _kids(data: bytes, span: tuple[int, int]) -> Kids:
    """The child boxes of a container, the first of each type: one walk, looked up after."""
    found: Kids = {}
    for kind, body, stop in _boxes(data, *span):
        found.setdefault(kind, (body, stop))
    return found


def _get(kids: Kids, kind: bytes) -> tuple[int, int]:
    try:
        return kids[kind]
    except KeyError:
        raise NotPlain(f"no {kind!r} box") from None


def _path(data: bytes, span: tuple[int, int], *kinds: bytes) -> tuple[int, int]:
    for kind in kinds:
        span = _child(data, span, kind)
    return span


def _u32(data: bytes, at: int) -> int:
    if len(data) < at + 4:
        raise NotPlain("a field cut short")
    return struct.unpack_from(">I", data, at)[0]


def _table(data: bytes, span: tuple[int, int], row: str, skip: int = 8) -> list[tuple]:
    """A full box's table: a version and flags, `skip - 8` more bytes, a row count, rows."""
    start, end = span
    count = _u32(data, start + skip - 4)
    width = struct.calcsize(row)
    if start + skip + count * width > end:
        raise NotPlain(f"a table of {count} rows overruns its box")
    return list(struct.iter_unpack(row, data[start + skip:start + skip + count * width]))


# -- the video track --------------------------------------------------------------------------


def _handler(moov: bytes, trak: tuple[int, int]) -> bytes:
    start, _ = _path(moov, trak, b"mdia", b"hdlr")
    return moov[start + 8:start + 12]


def _track_facts(moov: bytes, trak: tuple[int, int], index: int, movie_timescale: int,
                 file_size: int, limits: MediaLimits) -> ProbeFacts:
    track = _kids(moov, trak)
    _check_matrix(moov, _get(track, b"tkhd"))
    mdia = _kids(moov, _get(track, b"mdia"))
    mdhd = _get(mdia, b"mdhd")[0]
    timescale = _u32(moov, mdhd + (20 if moov[mdhd] else 12))
    if not timescale or not movie_timescale:
        raise NotPlain("no timescale")
    stbl = _kids(moov, _get(_kids(moov, _get(mdia, b"minf")), b"stbl"))
    if not stbl.keys() <= STBL_KNOWN:
        raise NotPlain(f"sample table boxes {sorted(stbl.keys() - STBL_KNOWN)}")
    width, height = _avc1_size(moov, _get(stbl, b"stsd"))
    if width * height > limits.max_pixels:
        raise NotPlain("too many pixels: the demuxing probe says so")
    pts = _presentation(moov, stbl, limits.max_frames)
    shift = _edit_shift(moov, track, timescale, movie_timescale, pts)
    pts = [p - shift for p in pts]
    sync = _sync_samples(moov, stbl, len(pts))
    _check_in_file(moov, stbl, len(pts), file_size)
    if not pts or 0 not in sync or pts[0] != min(pts) or len(set(pts)) < len(pts):
        raise NotPlain("the first sample is not the first picture, or pts repeat")
    frame_pts = sorted(pts)
    keyframes = tuple(sorted(bisect_left(frame_pts, pts[s]) for s in sync))
    return ProbeFacts(width=width, height=height, num_frames=len(pts), frame_pts=frame_pts,
                      time_base=Fraction(1, timescale), keyframe_indices=keyframes, seekable=True,
                      rotation=0, codec="h264", pix_fmt="yuv420p", stream_index=index,
                      counted_by=SAMPLE_TABLES)


def _check_matrix(moov: bytes, tkhd: tuple[int, int]) -> None:
    start, end = tkhd
    at = start + (52 if moov[start] else 40)
    if at + 36 > end or struct.unpack_from(">9i", moov, at) != IDENTITY_MATRIX:
        raise NotPlain("a display matrix (rotation)")


def _avc1_size(moov: bytes, stsd: tuple[int, int]) -> tuple[int, int]:
    """The picture size of the one sample entry, an avc1 of 8-bit 4:2:0."""
    start, end = stsd
    if _u32(moov, start + 4) != 1:
        raise NotPlain("not one sample entry")
    kinds = list(_boxes(moov, start + 8, end))
    kind, body, stop = kinds[0]
    if kind != b"avc1" or body + 78 > stop:
        raise NotPlain(f"sample entry {kind!r}")
    width, height = struct.unpack_from(">HH", moov, body + 24)
    avcc = _child(moov, (body + 78, stop), b"avcC")
    if not _avcc_420_8bit(moov[avcc[0]:avcc[1]]) or not width or not height:
        raise NotPlain("not 8-bit 4:2:0 H.264")
    return width, height


def _avcc_420_8bit(avcc: bytes) -> bool:
    if len(avcc) < 7 or avcc[0] != 1:
        return False
    if avcc[1] in PLAIN_PROFILES:
        return True
    at = 5  # past the parameter sets, to the high profiles' chroma format and bit depths
    for count_mask in (0x1F, 0xFF):
        if at >= len(avcc):
            return False
        count, at = avcc[at] & count_mask, at + 1
        for _ in range(count):
            if at + 2 > len(avcc):
                return False
            at += 2 + struct.unpack_from(">H", avcc, at)[0]
    if at + 3 > len(avcc):
        return False
    return avcc[at] & 3 == 1 and avcc[at + 1] & 7 == 0 and avcc[at + 2] & 7 == 0


def _presentation(moov: bytes, stbl: Kids, max_frames: int) -> list[int]:
    """Each sample's decode time plus its composition offset, in decode order."""
    dts, now = [], 0
    for count, delta in _table(moov, _get(stbl, b"stts"), ">II"):
        if len(dts) + count > max_frames:  # the demuxing probe refuses it (too_large)
            raise NotPlain("more samples than max_frames")
        dts += range(now, now + count * delta, delta) if delta else [now] * count
        now += count * delta
    if b"ctts" not in stbl:
        return dts
    offsets = []
    for count, offset in _table(moov, stbl[b"ctts"], ">Ii"):
        offsets += [offset] * min(count, len(dts) - len(offsets) + 1)
    if len(offsets) != len(dts):
        raise NotPlain("ctts and stts count different samples")
    return [d + o for d, o in zip(dts, offsets, strict=True)]


def _edit_shift(moov: bytes, track: Kids, timescale: int, movie_timescale: int,
                pts: list[int]) -> int:
    """What one edit subtracts from every pts; NotPlain where it would hide a sample."""
    if b"edts" not in track:
        return 0
    elst = _child(moov, track[b"edts"], b"elst")
    row = ">IiHH" if moov[elst[0]] == 0 else ">QqHH"
    edits = _table(moov, elst, row)
    if len(edits) != 1:
        raise NotPlain(f"{len(edits)} edits")
    duration, media_time, rate, fraction = edits[0]
    if media_time < 0 or (rate, fraction) != (1, 0) or min(pts, default=0) < media_time:
        raise NotPlain("an edit that hides samples or changes the rate")
    shown = duration * timescale / movie_timescale
    if duration and shown < max(pts, default=0) - media_time:
        raise NotPlain("an edit shorter than the track")
    return media_time


def _sync_samples(moov: bytes, stbl: Kids, count: int) -> list[int]:
    if b"stss" not in stbl:
        raise NotPlain("no sync sample table")
    stss = stbl[b"stss"]
    sync = [number - 1 for (number,) in _table(moov, stss, ">I")]
    if any(not 0 <= s < count for s in sync):
        raise NotPlain("a sync sample out of range")
    return sync


def _check_in_file(moov: bytes, stbl: Kids, count: int, file_size: int) -> None:
    """Every sample lies inside the file (a truncated file is the demuxing probe's refusal)."""
    stsz = _get(stbl, b"stsz")
    uniform, samples = _u32(moov, stsz[0] + 4), _u32(moov, stsz[0] + 8)
    if samples != count:
        raise NotPlain(f"stsz counts {samples} samples, stts {count}")
    sizes = [uniform] * samples if uniform else [s for (s,) in _table(moov, stsz, ">I", 12)]
    wide = b"co64" in stbl
    offsets = [o for (o,) in _table(moov, _get(stbl, b"co64" if wide else b"stco"),
                                    ">Q" if wide else ">I")]
    runs = _table(moov, _get(stbl, b"stsc"), ">III")
    sample, run, per_chunk = 0, 0, 0
    for chunk, offset in enumerate(offsets, start=1):
        while run < len(runs) and runs[run][0] <= chunk:  # stsc: from which chunk on, how many
            per_chunk, run = runs[run][1], run + 1
        end = offset + sum(sizes[sample:sample + per_chunk])
        sample += per_chunk
        if end > file_size:
            raise NotPlain("a sample past the end of the file")
    if sample < count:
        raise NotPlain("the chunks hold fewer samples than the tables count")
