"""What every task placing the same listed videos derives from them alike, made once per
listing and shared: each video's index by name, its top folder (`labels: dirname`) and the
names a labels file may give it. A task joining a mount of 250,000 videos rebuilt these for
~0.25 s of CPU (held by the GIL beside the other tasks' planning); its plan now looks them up.
Read-only once made: tasks share the objects. Also what the tasks draw alike in a window
(`window_draws`), while one of them holds it."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cached_property
from operator import attrgetter
from typing import Any, TypeVar
from weakref import WeakValueDictionary

import numpy as np

from sandfs.media.types import ListedVideo, NamedOnce, VideoInfo
from sandfs.plan.labels import video_names

T = TypeVar("T")

# listings whose facts are kept (a mount's scans, and the few tasks placing fewer videos)
KEPT_LISTINGS = 8


class ListingFacts:
    """The facts of one listing (sorted by name), each made when first asked for."""

    def __init__(self, listed: Sequence[ListedVideo] | Sequence[VideoInfo]) -> None:
        self.listed = listed
        # what the tasks draw alike in a window, while one of them holds it (`window_draws`)
        self._windows: WeakValueDictionary[int, Any] = WeakValueDictionary()
        self._lock = threading.Lock()  # planning threads of several tasks

    def window_draws(self, window: int, make: Callable[[], T]) -> T:
        """What every task placing this listing draws alike in the window (`clipdraws.py`:
        names, sizes, pool anchors): `make()`'s, one object while any task holds it."""
        with self._lock:
            found = self._windows.get(window)
            if found is None:
                found = self._windows[window] = make()
            return found

    @cached_property
    def video_index(self) -> NameIndex:
        """A listed video's index by its name."""
        return NameIndex(self.listed)

    @cached_property
    def top_folders(self) -> tuple[str | None, ...]:
        """Each video's class under `labels: dirname`: its top folder (None: at the root),
        one string a folder, not one a video (~50 bytes a video). A video in the last one's
        folder is known by its prefix (no slice, no lookup: 250,000 videos 0.2 -> 0.11 s at
        each start, beside the listing)."""
        folders: dict[str | None, str | None] = {}
        tops: list[str | None] = []
        top, prefix = None, None
        for rel_path in map(attrgetter("rel_path"), self.listed):
            if prefix is None or not rel_path.startswith(prefix):
                found = top_folder(rel_path)
                top = folders.setdefault(found, found)
                prefix = None if top is None else top + "/"
            tops.append(top)
        return tuple(tops)

    @cached_property
    def folders(self) -> frozenset[str]:
        """The top folders of the listing (None left out)."""
        return frozenset(self.top_folders) - {None}

    @cached_property
    def names(self) -> Mapping[str, int]:
        """Every name a labels row may give a video by (`labels.video_names`)."""
        return video_names(self.listed)


class NameIndex(Mapping[str, int]):
    """A listed video's index by its name (the last one's, where names repeat), with no dict of
    every name where the caller knows the index it expects (`index_of`, a clip's start): that
    dict was ~48 bytes a video, ~10 of a window's plan bytes a clip. A name alone is looked
    up in the dict, made when first asked for; a `bisect` over the names cost ~3x a dict's."""

    __slots__ = ("_by_name", "_listed", "_repeated")

    def __init__(self, listed: Sequence[ListedVideo] | Sequence[VideoInfo]) -> None:
        self._listed = listed
        # repeated names -> the last's index: found now, with the listing's other facts, not
        # on a joining task's first batch (a dict of 250,000 names ~38 ms); none in a walk's
        self._repeated = {} if isinstance(listed, NamedOnce) else repeated_names(listed)
        self._by_name: dict[str, int] | None = None

    def index_of(self, name: str, expected: int) -> int:
        """The index of `name`: `expected` where that video has the name and no other does."""
        listed = self._listed
        if not (0 <= expected < len(listed) and listed[expected].name == name):
            return self[name]
        return self._repeated.get(name, expected) if self._repeated else expected

    def _dict(self) -> dict[str, int]:
        found = self._by_name
        if found is None:
            found = self._by_name = {v.name: i for i, v in enumerate(self._listed)}
        return found

    def __getitem__(self, name: str) -> int:
        return self._dict()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())


def repeated_names(listed: Sequence[ListedVideo] | Sequence[VideoInfo]) -> dict[str, int]:
    """The names more than one listed video has, each with the last one's index; found by
    their hashes in numpy, not a set of every name."""
    hashes = np.fromiter((hash(v.name) for v in listed), np.int64, len(listed))
    values, counts = np.unique(hashes, return_counts=True)
    suspects = set(values[counts > 1].tolist())
    if not suspects:
        return {}
    seen: dict[str, list[int]] = {}
    for index, video in enumerate(listed):
        if hash(video.name) in suspects:
            seen.setdefault(video.name, []).append(index)
    return {name: found[-1] for name, found in seen.items() if len(found) > 1}


class Listings:
    """The mount's listings' facts, by listing object (each kept alive while its facts are, so
    its id names it); the last KEPT_LISTINGS asked for are kept."""

    def __init__(self) -> None:
        self._facts: OrderedDict[int, ListingFacts] = OrderedDict()
        self._lock = threading.Lock()  # registrations plan tasks in several threads

    def of(self, listed: Sequence[ListedVideo] | Sequence[VideoInfo]) -> ListingFacts:
        with self._lock:
            found = self._facts.get(id(listed))
            if found is None or found.listed is not listed:
                found = self._facts[id(listed)] = ListingFacts(listed)
            self._facts.move_to_end(id(listed))
            while len(self._facts) > KEPT_LISTINGS:
                self._facts.popitem(last=False)
            return found


def top_folder(rel_path: str) -> str | None:
    """A video's class under `labels: dirname`: its top folder (None: at the root)."""
    top, slash, _ = rel_path.partition("/")
    return top if slash else None
