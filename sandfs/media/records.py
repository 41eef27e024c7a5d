"""A dataset's files as the scan keeps them for the mount's life, a few bytes each
(docs/design.md#scan-records): a listed file's `ListedVideo` (its path, the one string a
video keeps and the one its windows' structures hold; one int for its size, mtime and inode;
and a place its dataset's files share: root, device, owner and mode), a probed one's
`VideoInfo` (its ListedVideo and its probe's `VideoFacts`, one object for videos probed
alike). Their attributes read as plain fields: `rel_path` and `name` are cut from the path
when asked for. As two frozen records of every field, with three strings, three ints and a
tuple of their own, a video took ~690 bytes (docs/performance.md#memory)."""

from __future__ import annotations

import collections
import itertools
import os
import sys
import threading
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from operator import attrgetter
from typing import TYPE_CHECKING

from sandfs.media.framepts import FramePts

if TYPE_CHECKING:
    import numpy as np

_MTIME_OFFSET = 1 << 63  # mtime_ns is signed: packed as mtime_ns + this
_FIELD = (1 << 64) - 1  # each of size, mtime and inode: 64 bits of the packed int


def _packed(size_bytes: int, mtime_ns: int, ino: int) -> int:
    """size | mtime << 64 | inode << 128: one int of ~48 bytes, where three took ~100."""
    mtime = mtime_ns + _MTIME_OFFSET
    if size_bytes >> 64 or mtime >> 64 or ino >> 64:  # a negative one too: -1
        raise ValueError(f"a file's size {size_bytes}, mtime_ns {mtime_ns} and inode {ino} "
                         "must each fit 64 bits (size and inode unsigned)")
    return size_bytes | mtime << 64 | ino << 128


class _Place:
    """Root + "/", device and access, shared by the files they fit (`_place`); a file whose
    path is not `root/rel_path` (a symlink's target) has one of its own, root None, its
    `name` and `rel_path` kept. Held weakly by `_PLACES`: gone with its last record."""

    __slots__ = ("__weakref__", "access", "device", "name", "rel_path", "root")

    def __init__(self, root: str | None, device: int | None,
                 access: tuple[int, int, int] | None, name: str = "", rel_path: str = "") -> None:
        self.root, self.device, self.access = root, device, access
        self.name, self.rel_path = name, rel_path

    def _fields(self) -> tuple:
        return self.root, self.device, self.access, self.name, self.rel_path

    def __eq__(self, other: object) -> bool:  # a file's own place: equal by value
        return other.__class__ is _Place and self._fields() == other._fields()  # type: ignore

    def __hash__(self) -> int:
        return hash(self._fields())


# (root + "/", device, access) -> its place while a record (or `_last_place`) holds it:
# remounts (a new device), chmods and datasets come and go over a daemon's life
_PLACES: weakref.WeakValueDictionary[tuple, _Place] = weakref.WeakValueDictionary()
_PLACES_LOCK = threading.Lock()
# the last one found, most often the next file's: (root, device, access, it), read by index
_last_place: tuple = ("", None, None, None)


def _place(name: str, rel_path: str, path: str, device: int | None,
           access: tuple[int, int, int] | None) -> _Place:
    """The place shared by every file it fits, where `path` is `root/rel_path` and `name` is
    `rel_path` without its extension (a listing's files but symlinks'); else the file's own.
    Few string calls: 250,000 files are listed at each warm start. Its root is interned
    (mortal): places of one root but other owners or modes share the string, as the book's
    keys do (`listing_root`)."""
    dot, cut = len(name), len(path) - len(rel_path)
    if not (rel_path.rfind(".") == dot and "/" not in rel_path[dot:] and cut > 0
            and path[cut - 1] == "/" and path.endswith(rel_path) and rel_path.startswith(name)):
        return _Place(None, device, access, name, rel_path)
    return listing_place(path[:cut], device, access)


def listing_place(root: str, device: int | None, access: tuple[int, int, int] | None
                  ) -> _Place:
    """The place of the files under `root` (ending in "/") of this device and access: the
    last one found, most often the next file's, without a lookup."""
    global _last_place
    last = _last_place
    if last[0] == root and last[1] == device and last[2] == access:
        return last[3]
    key = (sys.intern(root), device, access)
    found = _PLACES.get(key)
    if found is None:
        with _PLACES_LOCK:
            found = _PLACES.setdefault(key, _Place(*key))
    _last_place = (*key, found)
    return found


class ListedVideo:
    """A file the listing accepted (its name and stat checks): all a plan needs to place it in
    the epochs' permutations (docs/contract.md#lazy-scan). Its frames come from its probe.
    Immutable; equal and hashed by its fields, which read as a frozen dataclass's:
    `name` (VIDEO: rel_path without extension, "/" separated), `rel_path` (relative to the
    dataset root, with extension), `path` (absolute, symlinks resolved), `size_bytes`,
    `mtime_ns`, `identity` and `access` (as VideoInfo's)."""

    __slots__ = ("_path", "_place", "_stamp")  # read-only properties over them: immutable

    def __init__(self, name: str, rel_path: str, path: str, size_bytes: int, mtime_ns: int,
                 identity: tuple[int, int] | None = None,
                 access: tuple[int, int, int] | None = None) -> None:
        device, ino = identity if identity is not None else (None, 0)
        self._path = path  # the string every window's structures hold: one a video
        self._place = _place(name, rel_path, path, device, access)
        self._stamp = _packed(size_bytes, mtime_ns, ino)

    @classmethod
    def under(cls, place: _Place, path: str, size_bytes: int, mtime_ns: int,
              ino: int) -> ListedVideo:
        """The file at `path`, `place.root` + its rel_path, whose name is that rel_path
        without its last extension (a walk's file: the place `__init__` finds for it is
        `place`), made without the string checks that find it."""
        video = cls.__new__(cls)
        video._path = path
        video._place = place
        video._stamp = _packed(size_bytes, mtime_ns, ino)
        return video

    path = property(attrgetter("_path"))

    @property
    def name(self) -> str:
        root = self._place.root
        if root is None:
            return self._place.name
        path = self._path
        return path[len(root): path.rfind(".")]

    @property
    def rel_path(self) -> str:
        root = self._place.root
        return self._place.rel_path if root is None else self._path[len(root):]

    @property
    def root(self) -> str | None:
        """The folder + "/" its path is `root + rel_path` under, shared by the files it
        holds: a listing's files are under the dataset root, a symlink's target ending in
        "/" + rel_path under a folder of its own (`listing_root` tells them apart); None when
        the path does not end so (another symlink's target)."""
        return self._place.root

    @property
    def size_bytes(self) -> int:
        return self._stamp & _FIELD

    @property
    def mtime_ns(self) -> int:
        return (self._stamp >> 64 & _FIELD) - _MTIME_OFFSET

    @property
    def identity(self) -> tuple[int, int] | None:
        """(st_dev, st_ino) the scan found at `path`: every later open must reach that file."""
        device = self._place.device
        return None if device is None else (device, self._stamp >> 128)

    @property
    def access(self) -> tuple[int, int, int] | None:
        """(st_uid, st_gid, st_mode) the scan found: who may read it was decided from these."""
        return self._place.access

    def changed(self, st: os.stat_result) -> str | None:
        return source_changed(self, st)

    def _key(self) -> tuple:
        return (self._path, self._stamp, self._place)  # a place: shared, or the file's own

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not ListedVideo:
            return NotImplemented
        return self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self):
        return (ListedVideo, tuple(getattr(self, f) for f in LISTED_FIELDS))

    def __repr__(self) -> str:
        return _repr(self, LISTED_FIELDS)


LISTED_FIELDS = ("name", "rel_path", "path", "size_bytes", "mtime_ns", "identity", "access")


def listed_under(places: Sequence[_Place], paths: Sequence[str], size_bytes: np.ndarray,
                 mtime_ns: np.ndarray, ino: np.ndarray) -> list[ListedVideo]:
    """`ListedVideo.under` of each file, its stat as columns (uint64, int64, uint64, which
    `_packed` takes whole): made by C loops, no Python call a file (250,000 index rows at each
    warm start: 0.6 s one by one)."""
    import numpy as np  # here: a probe worker imports these records, and starts without it

    if not len(places) == len(paths) == len(size_bytes) == len(mtime_ns) == len(ino):
        raise ValueError("the columns are not of one length")  # map stops at the shortest
    words = np.empty((len(paths), 3), ">u8")  # big-endian: `int.from_bytes`'s order
    words[:, 0], words[:, 2] = ino, size_bytes
    words[:, 1] = mtime_ns.astype(np.uint64) + np.uint64(_MTIME_OFFSET)  # wraps as it packs
    stamps = map(int.from_bytes, words.view("V24").ravel().tolist())
    videos = list(map(object.__new__, itertools.repeat(ListedVideo, len(words))))
    for slot, values in (("_path", paths), ("_place", places), ("_stamp", stamps)):
        collections.deque(map(vars(ListedVideo)[slot].__set__, videos, values), maxlen=0)
    return videos


class NamedOnce(tuple[ListedVideo, ...]):
    """A walk's files by VIDEO name, no name twice (the walk refuses a name that collides):
    a plan's name index looks for no repeated name in it (250,000 names: 0.12-0.19 s at
    each start)."""

    __slots__ = ()


def listing_root(videos: Iterable[ListedVideo | VideoInfo]) -> str | None:
    """The root + "/" most of the videos' paths are `root + rel_path` under (a scan's
    listing: the dataset root, a symlink's target under a folder of its own aside); None if
    none is."""
    roots = list(map(attrgetter("root"), videos))
    distinct = set(roots) - {None}
    if len(distinct) <= 1:  # most listings: no count to make
        return distinct.pop() if distinct else None
    counts = collections.Counter(roots)
    del counts[None]
    return max(counts, key=counts.__getitem__)  # a tie: the first listed


@dataclass(frozen=True, slots=True)
class VideoFacts:
    """What a probe found of a usable video, its file aside: one object for videos probed
    alike (the scan's `_video_info`)."""

    width: int  # decoded frame size (rotation not applied)
    height: int
    num_frames: int  # frames the decoder returns (counted from packets where trusted)
    frame_pts: Sequence[int] = field(repr=False)  # pts of frame i (empty when frames lack pts)
    time_base: Fraction | None = None
    keyframe_indices: tuple[int, ...] = field(default=(), repr=False)
    seekable: bool = False  # pts unique and increasing: seek by pts is safe
    rotation: int = 0  # degrees, from the stream's display matrix
    codec: str = ""
    pix_fmt: str = ""
    stream_index: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "frame_pts", FramePts.of(self.frame_pts))


FACT_FIELDS = tuple(VideoFacts.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class _VideoInfoFields:
    """VideoInfo's fields as a dataclass would have them: `dataclasses.replace`, `fields` and
    `asdict` read a VideoInfo through these."""

    name: str
    rel_path: str
    path: str
    size_bytes: int
    mtime_ns: int
    width: int
    height: int
    num_frames: int
    frame_pts: Sequence[int] = field(repr=False)
    time_base: Fraction | None = None
    keyframe_indices: tuple[int, ...] = field(default=(), repr=False)
    seekable: bool = False
    rotation: int = 0
    codec: str = ""
    pix_fmt: str = ""
    stream_index: int = 0
    identity: tuple[int, int] | None = None
    access: tuple[int, int, int] | None = None


class VideoInfo:
    """A usable video. Frame INDEX i is the i-th frame the decoder returns (presentation order).
    Its file's fields are its ListedVideo's, its frames' its VideoFacts' (shared by videos
    probed alike); all read as a frozen dataclass's (`_VideoInfoFields`). `of`: without
    copying either."""

    __slots__ = ("_facts", "_listed")  # read-only properties over them: immutable
    __dataclass_fields__ = _VideoInfoFields.__dataclass_fields__

    def __init__(self, name: str, rel_path: str, path: str, size_bytes: int, mtime_ns: int,
                 width: int, height: int, num_frames: int, frame_pts: Sequence[int],
                 time_base: Fraction | None = None, keyframe_indices: tuple[int, ...] = (),
                 seekable: bool = False, rotation: int = 0, codec: str = "", pix_fmt: str = "",
                 stream_index: int = 0, identity: tuple[int, int] | None = None,
                 access: tuple[int, int, int] | None = None) -> None:
        self._listed = ListedVideo(name, rel_path, path, size_bytes, mtime_ns, identity,
                                   access)
        self._facts = VideoFacts(width, height, num_frames, frame_pts, time_base,
                                 keyframe_indices, seekable, rotation, codec, pix_fmt,
                                 stream_index)

    @classmethod
    def of(cls, listed: ListedVideo, facts: VideoFacts) -> VideoInfo:
        self = object.__new__(cls)
        self._listed, self._facts = listed, facts
        return self

    listed = property(attrgetter("_listed"))  # its file's fields
    facts = property(attrgetter("_facts"))  # its frames'

    def changed(self, st: os.stat_result) -> str | None:
        return source_changed(self, st)

    def timestamp_seconds(self, index: int) -> float | None:
        """frame.time of frame `index` (pts * time_base), or None when the stream has no pts."""
        facts = self._facts
        if not facts.frame_pts or facts.time_base is None:
            return None
        # the exact rational, rounded once (int / int is): float(pts * time_base) without
        # making a Fraction, 5.3 us against 0.56, 128 times for a SlowFast-size batch's meta
        time_base = facts.time_base
        return facts.frame_pts[index] * time_base.numerator / time_base.denominator

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not VideoInfo:
            return NotImplemented
        return (self._listed, self._facts) == (other._listed, other._facts)  # type: ignore

    def __hash__(self) -> int:
        return hash((self._listed, self._facts))

    def __reduce__(self):
        return (VideoInfo.of, (self._listed, self._facts))

    def __repr__(self) -> str:
        return _repr(self, [f.name for f in self.__dataclass_fields__.values() if f.repr])


for _name in (*LISTED_FIELDS, "root"):  # read through the ListedVideo, the facts: C getters
    setattr(VideoInfo, _name, property(attrgetter(f"_listed.{_name}")))
for _name in FACT_FIELDS:
    setattr(VideoInfo, _name, property(attrgetter(f"_facts.{_name}")))


def _repr(record: object, fields: Sequence[str]) -> str:
    shown = ", ".join(f"{name}={getattr(record, name)!r}" for name in fields)
    return f"{type(record).__name__}({shown})"


def source_changed(video: ListedVideo | VideoInfo, st: os.stat_result) -> str | None:
    """Why the file whose fstat is `st` is not `video` as scanned, or None."""
    if video.identity is not None and (st.st_dev, st.st_ino) != video.identity:
        return "not the file the dataset scan found"
    if (st.st_size, st.st_mtime_ns) != (video.size_bytes, video.mtime_ns):
        return "the file changed since the dataset scan"
    if video.access is not None and (st.st_uid, st.st_gid, st.st_mode) != video.access:
        return "its owner, group or mode changed since the dataset scan"
    return None
