"""ObjectStore: a budgeted, checksummed, crash-safe object store on local disk.

Thread-safe: one lock guards the index and the byte accounting; encoding, checksums and file
writes and reads run outside it. The budget is never exceeded on disk: a put reserves its
(block-rounded) size first, evicting as needed, and gives up (returns False) when the object
cannot fit. Once usage passes 75 % of the budget, puts evict per `index.EVICTION_POLICIES`.

Crash safety: write a temp file, optionally fsync, rename, then index. A crash leaves at worst a
temp file (removed by `open`) or a complete object that the `open` scan finds. The index lives in
memory; `close` saves a snapshot that the next `open` loads (see `recovery`).
"""

from __future__ import annotations

import errno
import logging
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Sequence

import numpy as np

from sandfs.cache.disk import (
    HEADER_NBYTES,
    CorruptObjectError,
    Disk,
    Stack,
    check_storable,
    encode_header,
)
from sandfs.cache.formats import choose_format, codec_for
from sandfs.cache.index import EVICTION_POLICIES, Entry, Index
from sandfs.cache.keys import ObjectKey
from sandfs.cache.recovery import (
    RecoveryReport,
    load_snapshot,
    object_files,
    save_snapshot,
    scan,
    take_root,
)
from sandfs.faults import fault_point

log = logging.getLogger(__name__)

EVICT_AT_FRACTION = 0.75  # SAND §6: start evicting once usage passes this share of the budget
_COUNTERS = ("hits", "misses", "evictions", "recomputed", "corrupt_detected", "enospc",
             "write_failures", "no_room", "puts", "bytes_written", "bytes_read")


class ObjectStore:
    def __init__(self, root: str, budget_bytes: int, *, fsync: bool = False,
                 default_fmt: str | None = None) -> None:
        if budget_bytes <= 0:
            raise ValueError(f"budget_bytes must be > 0, got {budget_bytes}")
        self.root = os.path.abspath(root)
        self.budget_bytes = int(budget_bytes)
        self.evict_at_bytes = int(self.budget_bytes * EVICT_AT_FRACTION)
        self.default_fmt = default_fmt  # None: `choose_format` decides per object
        self.disk = Disk(self.root, fsync=fsync)
        self._lock = threading.Lock()
        self._index = Index()
        self._writing: set[ObjectKey] = set()
        self._reserved_nbytes = 0  # budget held by writes in flight
        self._counts: Counter[str] = Counter()
        # corrupt objects the open removed: no caller asked for them, so the store counts them
        # recomputed itself when they are stored again
        self._lost_at_open: set[ObjectKey] = set()
        self._block_bytes = 4096
        self._lock_fd: int | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self) -> RecoveryReport:
        """Takes the cache directory (one process at a time), removes temp files, drops corrupt,
        stale and foreign files, and rebuilds the index (from the snapshot of a clean close when
        there is one, else from every object's header)."""
        start = time.perf_counter()
        if self._lock_fd is not None:
            raise RuntimeError(f"cache {self.root} is already open")
        root_lock = take_root(self.root, self.disk.objects_dir)
        self._lock_fd, self._block_bytes = root_lock.fd, root_lock.block_bytes
        snapshot = load_snapshot(self.root)
        with self._lock:
            found = scan(self.disk, snapshot)
            self._index = Index()
            for obj in found.found:
                self._index.add(Entry(obj.key, obj.fmt, obj.file_nbytes,
                                      self._disk_nbytes(obj.file_nbytes)))
            self._lost_at_open = set(found.corrupt_keys)
            self._counts["corrupt_detected"] += found.removed["corrupt"]
            evicted = self._evict_to(self.budget_bytes, -math.inf)
        removed = found.removed
        report = RecoveryReport(
            objects=len(self._index), bytes_used=self._index.disk_nbytes,
            index_loaded=snapshot is not None, temp_removed=removed["temp"],
            corrupt_removed=removed["corrupt"], stale_removed=removed["stale"],
            foreign_removed=removed["foreign"], missing=found.missing,
            evicted_over_budget=evicted, seconds=time.perf_counter() - start)
        log.info("cache %s: %d objects, %d bytes of %d (%s)", self.root, report.objects,
                 report.bytes_used, self.budget_bytes,
                 "snapshot" if report.index_loaded else "header scan")
        return report

    def close(self) -> None:
        """Saves the index snapshot and releases the directory."""
        if self._lock_fd is None:
            return
        with self._lock:
            try:
                save_snapshot(self.root, self.disk, self._index)
            except OSError as exc:  # a full disk: the objects are safe, the index is rebuilt
                log.warning("cache %s: the index snapshot was not saved (%s); the next start "
                            "reads the objects' headers instead", self.root, exc)
        os.close(self._lock_fd)  # releases the flock
        self._lock_fd = None

    def __enter__(self) -> ObjectStore:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- objects -----------------------------------------------------------------------------

    def put(self, key: ObjectKey, array: np.ndarray | Stack, *, fmt: str | None = None,
            deadline: float = math.inf, needed_again: bool = True) -> bool:
        """Stores `array` under `key` (a `Stack`: its arrays stacked). True when the object is
        in the store afterwards (also when it already was); False when it cannot fit even after
        eviction, the disk is full, the write failed, or another thread is writing the same
        key. Nothing partial is left."""
        if math.isnan(deadline):
            raise ValueError("deadline is NaN")
        check_storable(array)
        incoming_deadline = deadline if needed_again else math.inf
        with self._lock:
            self._require_open()
            if self._refresh_existing(key, deadline, needed_again):
                return True
            if key in self._writing:
                return False
            capacity_bound = self._needed_nbytes() + array.nbytes > self.evict_at_bytes
        fmt = fmt or self.default_fmt or choose_format(key.kind, array,
                                                       capacity_bound=capacity_bound)
        if isinstance(array, Stack) and fmt != "raw":
            array = array.joined()  # a codec encodes one array; raw is written part by part
        codec = codec_for(fmt, array)
        payload = array.raw_parts() if isinstance(array, Stack) else (codec.encode(array),)
        header = encode_header(key, codec, array, payload)
        file_nbytes = HEADER_NBYTES + sum(len(part) for part in payload)
        entry = Entry(key, fmt, file_nbytes, self._disk_nbytes(file_nbytes), deadline,
                      not needed_again)
        with self._lock:
            if key in self._index or key in self._writing:
                return self._refresh_existing(key, deadline, needed_again)
            if not self._make_room(entry.disk_nbytes, incoming_deadline):
                self._counts["no_room"] += 1
                return False
            self._reserved_nbytes += entry.disk_nbytes
            self._writing.add(key)
        stored = False
        try:
            stored = self._write(entry, header, payload)
            return stored
        finally:
            with self._lock:
                self._reserved_nbytes -= entry.disk_nbytes
                self._writing.discard(key)
                if stored and key in self._lost_at_open:
                    self._lost_at_open.discard(key)
                    self._counts["recomputed"] += 1

    def get(self, key: ObjectKey, out: np.ndarray | None = None, *,
            mapped: bool = False) -> np.ndarray | None:
        """The stored array, or None on a miss. A corrupt object is logged once, deleted and
        counted, and is a miss: the caller recomputes it. `out`: where the caller will put it
        (a batch's slot); a raw object of its shape is read into it and `out` returned (on a
        miss it may hold garbage). `mapped`: a read-only array over the file's pages instead
        of a copy (`Disk.read`), for objects read once and not changed."""
        with self._lock:
            self._require_open()
            entry = self._index.get(key)
            if entry is None:
                self._counts["misses"] += 1
                return None
            generation = entry.generation
        path = self.disk.path_for(key)
        try:
            array = self.disk.read(path, key, out, mapped=mapped)
        except FileNotFoundError:
            self._drop(key, generation, path, None)
            return None
        except (CorruptObjectError, OSError) as error:
            self._drop(key, generation, path, error)
            return None
        with self._lock:
            self._counts["hits"] += 1
            self._counts["bytes_read"] += array.nbytes
        return array

    def __contains__(self, key: ObjectKey) -> bool:
        with self._lock:
            return key in self._index

    def object_count(self) -> int:
        """The objects held (complete on disk)."""
        with self._lock:
            return len(self._index)

    def resize(self, budget_bytes: int) -> int:
        """A new budget (the tasks of a self-sized store changed); objects over a smaller one
        are evicted at once, as `open` does (writes in flight, reserved under the old budget,
        still land: the next put evicts for them). The number evicted."""
        if budget_bytes <= 0:
            raise ValueError(f"budget_bytes must be > 0, got {budget_bytes}")
        with self._lock:
            self.budget_bytes = int(budget_bytes)
            self.evict_at_bytes = int(self.budget_bytes * EVICT_AT_FRACTION)
            return self._evict_to(self.budget_bytes, -math.inf)

    def room_below(self, fraction: float) -> int:
        """Bytes that may still be stored before the objects still needed (all but those
        `mark_done`, the first to evict) fill `fraction` of the budget. Done objects count as
        room: counted as used, a long run's read clips stopped decoding ahead for good once
        they filled half of the budget."""
        with self._lock:
            return max(0, int(self.budget_bytes * fraction) - self._needed_nbytes())

    def keys(self) -> list[ObjectKey]:
        with self._lock:
            return list(self._index.entries)

    def set_deadline(self, key: ObjectKey, deadline: float) -> bool:
        """Records when `key` is next needed (any monotonic unit: seconds, iterations); undoes
        `mark_done`. False if the store does not hold it."""
        if math.isnan(deadline):
            raise ValueError("deadline is NaN")
        with self._lock:
            return self._index.set_deadline(key, deadline)

    def mark_done(self, key: ObjectKey) -> bool:
        """Records that `key` was used and is not needed again: the first to be evicted."""
        with self._lock:
            return self._index.mark_done(key)

    def discard(self, key: ObjectKey) -> bool:
        """Deletes an object now (e.g. its task ended). False if the store does not hold it."""
        with self._lock:
            if key not in self._index:
                return False
            self._remove(key)
            return True

    def note_recomputed(self, count: int = 1) -> None:
        """Counts objects the caller had to compute again (a miss on something once stored).
        Objects the open removed as corrupt are counted by `put` when they are stored again."""
        with self._lock:
            self._counts["recomputed"] += count

    def stats(self) -> dict[str, object]:
        """The status.json `cache` figures, plus objects_by_kind, bytes_by_format, enospc,
        write_failures, no_room, and puts, bytes_written and bytes_read (objects created and
        the bytes of their files; payload bytes read back). Counters count since this store
        was created."""
        with self._lock:
            return {
                "bytes_used": self._index.disk_nbytes, "budget_bytes": self.budget_bytes,
                "objects": len(self._index),
                **{name: self._counts[name] for name in _COUNTERS},
                "objects_by_kind": self._index.count_by_kind(),
                "bytes_by_format": self._index.nbytes_by_format(),
            }

    def check(self, *, verify_payloads: bool = False) -> list[str]:
        """Consistency problems (empty when all is well): index vs files, sizes, the byte
        accounting and the budget. With `verify_payloads`, every object is read and verified
        too (nothing is deleted). Meant for tests and post-mortems, on a quiet store."""
        with self._lock:
            problems = []
            on_disk = {}
            for _, entry in object_files(self.disk.objects_dir):
                if entry.name.endswith(".tmp") and not self._writing:
                    problems.append(f"leftover temp file {entry.path}")
                on_disk[entry.path] = entry.stat(follow_symlinks=False)
            problems += self._check_entries(on_disk, verify_payloads)
            problems += [f"file not in the index: {path}" for path in on_disk
                         if not path.endswith(".tmp")]
            problems += self._check_accounting()
        return problems

    # -- internals (called with self._lock held unless said otherwise) -----------------------

    def _require_open(self) -> None:
        if self._lock_fd is None:
            raise RuntimeError(f"cache {self.root} is not open")

    def _used_nbytes(self) -> int:
        return self._index.disk_nbytes + self._reserved_nbytes

    def _needed_nbytes(self) -> int:
        """Usage without the done objects: they go first and cost nothing to lose, so they
        neither make objects compressed (lz4 only pays against re-decoding) nor take room
        from frames carried ahead."""
        return self._used_nbytes() - self._index.done_nbytes

    def _disk_nbytes(self, file_nbytes: int) -> int:
        return -(-file_nbytes // self._block_bytes) * self._block_bytes

    def _refresh_existing(self, key: ObjectKey, deadline: float, needed_again: bool) -> bool:
        """A put of a stored object only updates its bookkeeping: done, or a given deadline."""
        if key not in self._index:
            return False
        if not needed_again:
            self._index.mark_done(key)
        elif deadline != math.inf:
            self._index.set_deadline(key, deadline)
        return True

    def _make_room(self, nbytes: int, incoming_deadline: float) -> bool:
        """Evicts until `nbytes` more fit under the watermark (or nothing more may go); True if
        they fit under the budget then."""
        if nbytes > self.budget_bytes:
            return False
        self._evict_to(self.evict_at_bytes - nbytes, incoming_deadline)
        return self._used_nbytes() + nbytes <= self.budget_bytes

    def _evict_to(self, target_nbytes: int, incoming_deadline: float) -> int:
        evicted = 0
        for policy, pick in EVICTION_POLICIES:
            while self._used_nbytes() > target_nbytes:
                victim = pick(self._index, incoming_deadline)
                if victim is None:
                    break
                self._remove(victim)
                self._counts["evictions"] += 1
                evicted += 1
                log.debug("evicted %s (%s)", victim, policy)
                fault_point("evict_mid")
        return evicted

    def _remove(self, key: ObjectKey) -> None:
        # unlink first: if it fails, the index still accounts for the file
        self.disk.unlink(self.disk.path_for(key))
        self._index.remove(key)

    def _write(self, entry: Entry, header: bytes, payload: Sequence[bytes | memoryview]) -> bool:
        """Temp file, rename, index. Called without the lock; the budget is already reserved."""
        final_path = self.disk.path_for(entry.key)
        try:
            temp_path = self.disk.write_temp(final_path, header, payload)
        except OSError as error:
            self._note_write_error(error, final_path)
            return False
        with self._lock:
            try:
                self.disk.commit(temp_path, final_path)
            except OSError as error:
                self.disk.unlink(temp_path)
                self._note_write_error(error, final_path)
                return False
            try:
                fault_point("after_rename_before_index")
                self._index.add(entry)
            except BaseException:
                self.disk.unlink(final_path)  # unindexed bytes would escape the budget
                raise
            self._counts["puts"] += 1
            self._counts["bytes_written"] += entry.file_nbytes
        self.disk.sync_dir(final_path)
        return True

    def _note_write_error(self, error: OSError, path: str) -> None:
        with self._lock:
            if error.errno in (errno.ENOSPC, errno.EDQUOT):
                self._counts["enospc"] += 1
                first = self._counts["enospc"] == 1
                log.log(logging.WARNING if first else logging.DEBUG,
                        "cache disk full writing %s: object not cached (%s)", path, error)
            else:
                self._counts["write_failures"] += 1
                log.warning("cache write failed for %s: %s", path, error)

    def _drop(self, key: ObjectKey, generation: int, path: str,
              error: BaseException | None) -> None:
        """A get found `path` missing (error None) or unusable. Called without the lock."""
        with self._lock:
            self._counts["misses"] += 1
            entry = self._index.get(key)
            if entry is None or entry.generation != generation:
                return  # evicted or replaced meanwhile: not this reader's business
            if error is None:
                log.warning("cache object %s vanished from disk; will be recomputed", path)
            else:
                self._counts["corrupt_detected"] += 1
                log.warning("corrupt cache object %s (%s): deleted, will be recomputed",
                            path, error)
            self._remove(key)

    # -- check -------------------------------------------------------------------------------

    def _check_entries(self, on_disk: dict[str, os.stat_result], verify_payloads: bool
                       ) -> list[str]:
        problems = []
        for entry in self._index:
            path = self.disk.path_for(entry.key)
            status = on_disk.pop(path, None)
            if status is None:
                problems.append(f"indexed object has no file: {path}")
            elif status.st_size != entry.file_nbytes:
                problems.append(f"{path}: {status.st_size} bytes, index says {entry.file_nbytes}")
            if entry.disk_nbytes != self._disk_nbytes(entry.file_nbytes):
                problems.append(f"{path}: charged {entry.disk_nbytes} bytes for "
                                f"{entry.file_nbytes}")
            if verify_payloads and status is not None:
                try:
                    self.disk.read(path, entry.key)
                except (CorruptObjectError, OSError) as error:
                    problems.append(f"{path}: {error}")
        return problems

    def _check_accounting(self) -> list[str]:
        problems = []
        charged = sum(entry.disk_nbytes for entry in self._index)
        if charged != self._index.disk_nbytes:
            problems.append(f"bytes_used {self._index.disk_nbytes} != sum of objects {charged}")
        done = sum(entry.disk_nbytes for entry in self._index if entry.done)
        if done != self._index.done_nbytes:
            problems.append(f"done bytes {self._index.done_nbytes} != sum of done objects {done}")
        if self._used_nbytes() > self.budget_bytes:
            problems.append(f"usage {self._used_nbytes()} exceeds budget {self.budget_bytes}")
        if sum(self._index.count_by_kind().values()) != len(self._index):
            problems.append("objects_by_kind does not add up to objects")
        stray_done = [key for key in self._index.done_keys() if key not in self._index]
        if stray_done:
            problems.append(f"{len(stray_done)} done keys not in the index")
        if self._reserved_nbytes < 0 or (self._reserved_nbytes and not self._writing):
            problems.append(f"reserved {self._reserved_nbytes} bytes with no write in flight")
        return problems
