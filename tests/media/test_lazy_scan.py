"""The lazy scan (docs/contract.md#lazy-scan): a dataset listed, planned from its listing, probed
as planning asks. Its views equal a full scan's on the same dataset, bad files included: a file
the probe refuses keeps its slots, each filled by the next usable video by name, whenever it is
found bad; a plan never places a bad file's frames."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from sandfs.config.loader import load_task_config
from sandfs.media import scan as scan_module
from sandfs.media.datasets import ScanBad
from sandfs.media.probebook import ProbeBook, ProbeQueue
from sandfs.media.scan import scan_dataset, start_lazy_scan
from sandfs.media.scan_index import read_index
from sandfs.media.scan_workers import ProbeJob, ScanPace, ScanStopped
from sandfs.media.types import BadVideo, ListedVideo, MediaLimits, VideoInfo
from sandfs.plan.mount import plan_tasks
from tests.helpers.harness import task_config, write_config
from tests.helpers.plans import fake_videos
from tests.helpers.scanindex import edit_entry, read_rows, write_rows

BAD = "bowling/bowling_001.mp4"  # between usable videos: its slots go to bowling_002


@pytest.fixture
def mixed_dataset(tmp_path, dataset_dir) -> Path:
    """The 12 painted videos with one of them truncated to garbage."""
    root = tmp_path / "mixed"
    shutil.copytree(dataset_dir, root)
    (root / BAD).write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"\x00" * 512)
    return root


def plans_of(tmp_path: Path, found, **overrides):
    cfg = load_task_config(write_config(tmp_path / "t.yaml", task_config(
        Path(found.root), **overrides)))
    key = (cfg.dataset.video_dataset_path, cfg.dataset.extensions)
    return plan_tasks([cfg], {key: found}, k_epochs=cfg.engine.k_epochs)[0]


def all_views(plan):
    return [plan.view_plan(e, i) for e in range(plan.epochs)
            for i in range(plan.iterations_per_epoch)]


def lazy_scan(root: Path, **options):
    stop = threading.Event()
    found, thread = start_lazy_scan(root, ["mp4"], stop=stop, workers=1, **options)
    return found, thread, stop


def test_lazy_views_equal_the_full_scans_bad_file_included(tmp_path, mixed_dataset):
    full = plans_of(tmp_path, scan_dataset(mixed_dataset, ["mp4"]))
    found, thread, stop = lazy_scan(mixed_dataset)
    try:
        assert found.probes.probed < len(found.listed) or not thread.is_alive()
        lazy = plans_of(tmp_path, found)
        assert len(lazy.listed) == len(full.listed) == 12  # the bad file keeps its slots
        assert lazy.identity == full.identity
        assert all_views(lazy) == all_views(full)
    finally:
        stop.set()
        thread.join()


def test_a_bad_files_slots_hold_the_next_usable_video_by_name(tmp_path, mixed_dataset):
    found, thread, stop = lazy_scan(mixed_dataset)
    try:
        plan = plans_of(tmp_path, found)
        bad = next(i for i, v in enumerate(plan.listed) if v.rel_path == BAD)
        assert plan.listed[bad + 1].rel_path == "bowling/bowling_002.mp4"
        assert plan.stand_in(bad) == bad + 1 and plan.stand_in(bad + 1) == bad + 1
        for view in all_views(plan):  # no clip of the bad file, ever
            assert all(plan.listed[c.video_index].rel_path != BAD for c in view.clips)
        # the slot's batch holds the stand-in (twice, where both fell in one batch)
        epoch_order = [int(i) for i in plan.epoch_order(0)]
        iteration = epoch_order.index(bad) // plan.sampling.videos_per_batch
        assert bad + 1 in plan.batch_videos(0, iteration)
        thread.join()
        assert [b.rel_path for b in ScanBad({("k", ()): found})] == [BAD]  # status.json's
        with pytest.raises(LookupError):
            plan.videos[bad]
    finally:
        stop.set()
        thread.join()


def test_a_task_with_every_video_bad_fails_its_views_not_the_planner(tmp_path):
    root = tmp_path / "junk"
    root.mkdir()
    for i in range(3):
        (root / f"v{i}.mp4").write_bytes(b"not a video" * 10)
    found, thread, stop = lazy_scan(root)
    try:
        plan = plans_of(tmp_path, found, sampling={"videos_per_batch": 2})
        from sandfs.plan.window import plan_window

        window = plan_window([plan], 0)
        assert window.views == {} and window.failed
        assert all("none of its 3 videos is usable" in f.reason for f in window.failed.values())
        assert plan.found_unusable()
    finally:
        stop.set()
        thread.join()


def test_waiters_on_a_probe_are_released_when_the_scan_stops():
    book = ProbeBook((), threading.Event())
    book.stop.set()
    with pytest.raises(ScanStopped):
        book.result("never/probed.mp4")


def test_the_queue_sends_what_is_waited_for_first_then_the_followed_order():
    jobs = [ProbeJob(f"v{i}", f"/d/v{i}", (0, i)) for i in range(6)]
    queue = ProbeQueue(jobs)
    assert queue.take().key == "v0"
    queue.follow(["v4", "v0", "v3"])  # v0 is sent already: skipped
    queue.first(["v5"])
    assert [queue.take().key for _ in range(5)] == ["v5", "v4", "v3", "v1", "v2"]
    assert not queue
    queue.extendleft([jobs[2]])  # a dead worker's job, sent again first
    assert queue.take().key == "v2" and len(queue) == 0


def test_the_scan_index_answers_a_second_lazy_scan_before_any_probe(tmp_path, mixed_dataset):
    index = tmp_path / "index.json"
    _, thread, _ = lazy_scan(mixed_dataset, index_path=index)
    thread.join()
    again, thread, stop = lazy_scan(mixed_dataset, index_path=index)
    try:
        assert len(again.probes.queue) == 0  # nothing to probe
        assert isinstance(again.probes.known(BAD), BadVideo)  # known at once (see below)
        usable = [v for v in again.listed if v.rel_path != BAD]
        assert all(isinstance(again.probes.result(v.rel_path), VideoInfo) for v in usable)
        thread.join()
        assert again.probes.probed == 12 and len(again.probes.bad()) == 1
    finally:
        stop.set()
        thread.join()


def test_an_index_hit_is_read_once_when_first_asked_for_a_damaged_one_probed():
    """A lazy scan reads a usable video's index entry when its result is first asked for (a
    warm 100,000-video mount spent 2.6 s reading them before serving; bad files' entries are
    read at once, so a task of bad files still fails its mount). An entry found damaged then
    has its file probed first of all."""
    listed = [ListedVideo(f"v{i}", f"v{i}.mp4", f"/d/v{i}.mp4", 1, 1) for i in range(3)]
    queue = ProbeQueue([])
    book = ProbeBook(listed, threading.Event(), queue)
    reads = []
    info = fake_videos(1)[0]

    def read(rel_path, found):
        reads.append((rel_path, threading.get_ident()))
        if found is None:
            queue.extendleft([ProbeJob(rel_path, f"/d/{rel_path}", None)])
        return found

    book.defer("v0.mp4", lambda: read("v0.mp4", info))
    book.defer("v1.mp4", lambda: read("v1.mp4", None))  # damaged: probed
    assert book.probed == 0 and book.known("v0.mp4") is None
    assert book.result("v0.mp4") is info and reads == [("v0.mp4", threading.get_ident())]
    book.resolve_all()
    assert [r for r, _ in reads] == ["v0.mp4", "v1.mp4"]  # each read once
    assert queue.take().key == "v1.mp4" and book.known("v1.mp4") is None


def test_waiting_for_every_probe_reads_the_deferred_results_itself():
    """The scan's thread reads deferred results slowly, beside the startup; a startup that
    waits for every probe (a task with `short_video: skip`) reads them itself."""
    listed = [ListedVideo(f"v{i}", f"v{i}.mp4", f"/d/v{i}.mp4", 1, 1) for i in range(5)]
    book = ProbeBook(listed, threading.Event())
    book.defer_all([v.rel_path for v in listed], lambda rel_path: BadVideo(rel_path, "r"))
    waiter = threading.Thread(target=book.wait_all, daemon=True)
    waiter.start()
    waiter.join(5)
    assert not waiter.is_alive() and book.probed == 5


def test_the_bad_files_are_listed_without_a_walk_over_every_result():
    """status.json lists the bad files on the event loop; at 250,000 videos a walk over every
    probe result held the loop at each read (found under a benchmark reading it twice a
    second). The book keeps its bad results apart."""
    infos = fake_videos(3)
    listed = [ListedVideo(v.name, v.rel_path, v.path, 1, 1) for v in infos]
    book = ProbeBook([*listed, ListedVideo("bad", "bad.mp4", "/d/bad.mp4", 1, 1)])

    class Unwalked(dict):
        def values(self):
            raise AssertionError("walked every result")

        def items(self):
            raise AssertionError("walked every result")

    book._results = Unwalked()
    for info in infos:
        book.record(info.rel_path, info)
    book.record("bad.mp4", BadVideo("bad.mp4", "open_invalid", "no"))
    assert [b.rel_path for b in book.bad()] == ["bad.mp4"]


@pytest.mark.parametrize("asked", [False, True], ids=["read-by-the-scan", "asked-for"])
def test_a_damaged_index_entry_has_its_file_probed_alone(tmp_path, mixed_dataset, monkeypatch,
                                                         asked):
    """The index's entries no plan asks for are read by the scan's thread a slice at a time,
    beside the planning threads; a damaged one, found there or by a plan asking for it after
    the thread's first probes, has its own file probed, and no other."""
    monkeypatch.setattr(scan_module, "RESOLVE_SLICE", 2)
    index = tmp_path / "index.json"
    _, thread, _ = lazy_scan(mixed_dataset, index_path=index)
    thread.join()
    damaged = "juggling/juggling_003.mp4"
    edit_entry(index, damaged, lambda r: r["video"].update(num_frames=101))  # pts short
    probed, probe_files = [], scan_module.probe_files

    def recorded(jobs, *args, on_result, **options):
        def hook(key, result):
            probed.append(key)
            on_result(key, result)
        return probe_files(jobs, *args, on_result=hook, **options)

    monkeypatch.setattr(scan_module, "probe_files", recorded)
    again, thread, stop = lazy_scan(mixed_dataset, index_path=index)
    try:
        if asked:
            assert isinstance(again.probes.result(damaged), VideoInfo)
        thread.join(60)
        assert not thread.is_alive()
        assert probed == [damaged] and again.probes.probed == 12
        assert isinstance(again.probes.known(damaged), VideoInfo)
    finally:
        stop.set()
        thread.join()


DAMAGED = "juggling/juggling_003.mp4"


def damaged_index(tmp_path: Path, root: Path, monkeypatch) -> Path:
    """`root`'s scan index with DAMAGED's entry damaged; the index read a row a slice."""
    monkeypatch.setattr(scan_module, "RESOLVE_SLICE", 1)
    index = tmp_path / "index.json"
    _, thread, _ = lazy_scan(root, index_path=index)
    thread.join()
    edit_entry(index, DAMAGED, lambda r: r["video"].update(num_frames=101))
    return index


def test_the_index_is_not_read_behind_a_waiting_reader_what_a_plan_needs_is(
        tmp_path, mixed_dataset, monkeypatch):
    """While a reader waits for a batch the scan's thread reads no more of the index (the GIL
    is the reader's jobs'); a plan still gets what it asks for, a damaged entry's file probed
    meanwhile; the rest is read once no reader waits."""
    index = damaged_index(tmp_path, mixed_dataset, monkeypatch)
    again, thread, stop = lazy_scan(mixed_dataset, index_path=index)
    waiting = again.probes.readers_wait()
    waiting.__enter__()
    try:
        time.sleep(0.3)  # a slice read before the hold is done by now
        held = again.probes.probed
        got = []  # probed while held (asked from a thread: not probed would hang)
        asker = threading.Thread(target=lambda: got.append(again.probes.result(DAMAGED)),
                                 daemon=True)
        asker.start()
        asker.join(30)
        assert len(got) == 1 and isinstance(got[0], VideoInfo)
        time.sleep(0.5)
        assert again.probes.probed == held + 1 < 12
        waiting.__exit__(None, None, None)
        thread.join(60)
        assert not thread.is_alive() and again.probes.probed == 12
    finally:
        stop.set()
        thread.join()


def test_a_warm_listing_keeps_the_index_s_own_texts(tmp_path, mixed_dataset):
    """A warm listing keeps, for an index written again, each row's text as the index gave
    it, no copy and no record (a record a result: ~260 bytes a video beside the text); an
    unchanged dataset's index is not written again."""
    index = tmp_path / "index.json"
    _, thread, _ = lazy_scan(mixed_dataset, index_path=index)
    thread.join()
    same = scan_module._Listing.of(mixed_dataset, ["mp4"], None, index, threading.Event(),
                                   defer=True)
    rows = dict(same.deferred)
    same.book.resolve_all()
    assert same.index_as_is and same.book.probed == 12
    assert all(same.found[k] is text for k, (_, text) in rows.items())
    shutil.copy(mixed_dataset / "juggling/juggling_003.mp4", mixed_dataset / "new.mp4")
    grown = scan_module._Listing.of(mixed_dataset, ["mp4"], None, index, threading.Event(),
                                    defer=True)
    grown.book.resolve_all()
    assert not grown.index_as_is and len(grown.found) == 12  # each row; the new file to probe


HELD = ScanPace(paced_from_videos=1, held_every_ms=1_000_000)  # no share while held


def saved_rows(index: Path) -> set[str]:
    return set(read_index(index, MediaLimits()).rel_paths) if index.exists() else set()


@pytest.mark.parametrize("every", [60.0, 0.0])
def test_a_scan_stopped_partway_leaves_an_index_the_next_is_warm_for(
        tmp_path, mixed_dataset, monkeypatch, every):
    """A scan held behind its readers may take hours: what it probed is saved when it is
    stopped (and every SAVE_EVERY_S); the next scan lists those from the index and probes
    the rest, its dataset identity computed (the index's digest is of its rows alone)."""
    monkeypatch.setattr(scan_module, "SAVE_EVERY_S", every)
    index = tmp_path / "index.json"
    found, thread, stop = lazy_scan(mixed_dataset, index_path=index, pace=HELD)
    asked = [v.rel_path for v in found.listed if v.rel_path != BAD][:3]
    with found.probes.readers_wait():
        assert all(isinstance(found.probes.result(rel), VideoInfo) for rel in asked)
        time.sleep(0.3)  # the last result's save, after its waiter is woken
        assert (saved_rows(index) >= set(asked)) == (every == 0.0)
        stop.set()
        thread.join(30)
    saved = saved_rows(index)
    assert set(asked) <= saved and len(saved) < 12
    again, thread, _ = lazy_scan(mixed_dataset, index_path=index)
    assert len(again.probes.queue) == 12 - len(saved) and again.digest is None
    thread.join(60)
    assert again.probes.probed == 12 and saved_rows(index) == {v.rel_path for v in again.listed}
    whole, thread, _ = lazy_scan(mixed_dataset, index_path=index)
    assert len(whole.probes.queue) == 0 and whole.digest is not None
    thread.join(60)


def test_a_warm_scan_stopped_partway_keeps_the_rows_it_did_not_read(tmp_path, mixed_dataset,
                                                                    monkeypatch):
    index = damaged_index(tmp_path, mixed_dataset, monkeypatch)
    again, thread, stop = lazy_scan(mixed_dataset, index_path=index, pace=HELD)
    with again.probes.readers_wait():  # no row read but the damaged one's (probed)
        assert isinstance(again.probes.result(DAMAGED), VideoInfo)
        stop.set()
        thread.join(30)
    assert len(saved_rows(index)) == 12
    third, thread, _ = lazy_scan(mixed_dataset, index_path=index)
    assert len(third.probes.queue) == 0 and third.digest is not None
    thread.join(60)


def test_a_warm_scan_reads_the_index_in_the_gaps_between_a_reader_s_waits(
        tmp_path, mixed_dataset, monkeypatch):
    """A reader bound by decoding waits nearly all the time: the last one out wakes the scan's
    thread, which reads a slice in each 15 ms gap (polling every 0.2 s, it saw few)."""
    monkeypatch.setattr(scan_module, "RESOLVE_SLICE", 1)
    index = tmp_path / "index.json"
    _, thread, _ = lazy_scan(mixed_dataset, index_path=index)
    thread.join()
    again, thread, stop = lazy_scan(mixed_dataset, index_path=index)
    try:
        with again.probes.readers_wait():
            time.sleep(0.3)
            before = again.probes.probed
        for _ in range(8):
            with again.probes.readers_wait():
                time.sleep(0.3)
            time.sleep(0.015)
        assert again.probes.probed - before >= 5
    finally:
        stop.set()
        thread.join()


def test_a_partial_save_after_a_device_change_stores_the_files_stat(tmp_path, mixed_dataset,
                                                                   monkeypatch):
    """A restore onto another device: the index's rows, read when asked for, are saved partway
    with the stat the listing took, so the next (warm) mount does not find them changed."""
    monkeypatch.setattr(scan_module, "RESOLVE_SLICE", 1)
    index = tmp_path / "index.json"
    _, thread, _ = lazy_scan(mixed_dataset, index_path=index)
    thread.join()
    document, rows = read_rows(index)
    document["root_device"] += 1
    for row in rows.values():
        row[4][0] += 1
    write_rows(index, document, rows)
    shutil.copy(mixed_dataset / "juggling/juggling_003.mp4", mixed_dataset / "new.mp4")
    first, thread, stop = lazy_scan(mixed_dataset, index_path=index, pace=HELD)
    with first.probes.readers_wait():  # the rows stay unread: saved partway by the new probe
        assert isinstance(first.probes.result("new.mp4"), VideoInfo)
        stop.set()
        thread.join(30)
    second, thread, _ = lazy_scan(mixed_dataset, index_path=index)
    thread.join(60)
    results = {v.rel_path: second.probes.result(v.rel_path) for v in second.listed}
    assert len(results) == 13  # the 12 listed first, new.mp4
    assert sorted(k for k, r in results.items() if isinstance(r, BadVideo)) == [BAD]
