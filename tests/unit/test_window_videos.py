"""A window's videos as columns (`WindowVideos`) read as the dict of `VideoWork` records it
replaced: the same paths in the same order, each video's probe, plan, window and uses, through
what changes a window (uses replaced, videos added and deleted, a snapshot's batches kept),
in a seeded random sequence run on both."""

from __future__ import annotations

import random
from array import array
from types import SimpleNamespace

import numpy as np
import pytest

from sandfs.plan.window import VideoWork, plan_window
from sandfs.plan.windowvideos import (
    ColumnVideo,
    WindowVideos,
    _emptied,
    group_counts,
    join_videos,
)
from tests.helpers.plans import fake_videos, make_plan


def two_tasks(tmp_path, videos: int = 30):
    for name in "ab":
        (tmp_path / name).mkdir()
    listed = fake_videos(videos)
    return (make_plan(tmp_path / "a", videos=listed, task="a"),
            make_plan(tmp_path / "b", videos=listed, task="b", seed=3))


def as_records(videos) -> dict[str, VideoWork]:
    """The mapping as the dict of records it stands for."""
    return {path: VideoWork(w.info, w.plan, w.window, tuple(w.uses))
            for path, w in videos.items()}


def same(videos, records: dict[str, VideoWork]) -> None:
    assert list(videos) == list(records) and len(videos) == len(records)
    for path, record in records.items():
        assert path in videos
        found = videos[path]
        assert (found.info, found.plan, found.window) == (record.info, record.plan,
                                                          record.window)
        assert tuple(found.uses) == tuple(record.uses)
        assert found.frame_keys == record.frame_keys


def test_a_planned_windows_videos_are_columns_read_as_records(tmp_path):
    first, second = two_tasks(tmp_path)
    window = plan_window([first, second], 0)
    videos = window.videos
    assert isinstance(videos, WindowVideos)
    assert all(type(w) is ColumnVideo for w in videos.values())
    assert len(videos) == 30 and "nowhere.mp4" not in videos
    with pytest.raises(KeyError):
        videos["nowhere.mp4"]
    # each video's plan is its first use's, its uses in the order they were planned
    for work in videos.values():
        assert work.info.path in {v.path for v in work.plan.listed}
        assert len({u.view for u in work.uses}) == len(work.uses)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_changes_read_as_the_records_they_replace(tmp_path, seed):
    rng = random.Random(seed)
    first, second = two_tasks(tmp_path)
    videos = plan_window([first, second], 0).videos
    records = as_records(videos)
    other = plan_window([second], 1).videos  # videos to add: another window's
    extra = list(other.items())
    for _ in range(60):
        step = rng.choice(["uses", "add", "delete", "setdefault", "snapshot"])
        paths = list(records)
        if step == "uses" and paths:  # a task joining or leaving replaces a video's uses
            path = rng.choice(paths)
            uses = tuple(records[path].uses)
            new = tuple(u for u in uses if rng.random() < 0.6)
            if rng.random() < 0.3 and extra:
                new += tuple(rng.choice(extra)[1].uses)
            videos[path].uses = new
            records[path].uses = new
        elif step == "add" and extra:
            path, work = extra.pop(rng.randrange(len(extra)))
            if path not in records:
                record = VideoWork(work.info, work.plan, work.window, tuple(work.uses))
                videos[path] = record
                records[path] = VideoWork(work.info, work.plan, work.window, tuple(work.uses))
        elif step == "setdefault" and paths:
            path = rng.choice(paths)
            found = videos.setdefault(path, VideoWork(records[path].info, first, 9))
            assert tuple(found.uses) == tuple(records[path].uses)
        elif step == "delete" and paths:
            path = rng.choice(paths)
            del videos[path]
            del records[path]
            with pytest.raises(KeyError):
                del videos[path]
        elif step == "snapshot":
            keys = {u.view for w in records.values() for u in w.uses}
            wanted = {k for k in keys if rng.random() < 0.7}.__contains__
            kept = videos.kept_only(wanted)
            expected = {p: VideoWork(w.info, w.plan, w.window,
                                     tuple(u for u in w.uses if wanted(u.view)))
                        for p, w in records.items()}
            same(kept, {p: w for p, w in expected.items() if w.uses})
            if rng.random() < 0.3:  # a snapshot of a snapshot
                again = kept.kept_only(lambda view: True)
                same(again, {p: w for p, w in expected.items() if w.uses})
        same(videos, records)


def test_a_window_holds_no_record_a_video(tmp_path):
    """The videos of a planned window are its columns: no record, dict entry or `WindowUses`
    held a video (~33 bytes a clip, 5 clips a video), each made when looked up."""
    plan = make_plan(tmp_path, fake_videos(40), epochs=5)
    videos = plan_window([plan], 0).videos
    assert sum(len(w.uses) for w in videos.values()) == len(videos.columns.batch) > 40
    assert len(videos.columns) == 40
    assert not videos._records and not videos._added
    assert videos.group_of("missing") == -1
    first = next(iter(videos))
    assert videos[first] is not videos[first] and videos[first] == videos[first]
    held = videos[first]  # a job holds its video: uses replaced since are read, not its own
    before = held.uses
    videos[first].uses = before[:1]
    assert tuple(held.uses) == tuple(before[:1]) and len(before) > 1


def test_a_mismatch_is_a_clear_error(tmp_path):
    plan = make_plan(tmp_path, fake_videos(4), epochs=5)
    videos = plan_window([plan], 0).videos
    with pytest.raises(ValueError, match="4 groups, 3 probes, 4 plans"):
        WindowVideos(0, videos.columns, videos.infos[:3], videos.plans, [0] * 4)


def join_records(records: dict[str, VideoWork], rest) -> None:
    """The rest of a window joined as `WindowBook.extend` joined a dict of records."""
    for path, work in rest.items():
        found = records.get(path)
        if found is None:
            records[path] = VideoWork(work.info, work.plan, work.window, tuple(work.uses))
        else:
            found.uses = tuple(found.uses) + tuple(work.uses)


@pytest.mark.parametrize("seed", range(4))
def test_a_window_planned_in_parts_joins_as_chunks(tmp_path, seed):
    """Parts joined (`join_videos`) read as the records joined a video at a time, their paths
    in the window's one hash index, a part joined twice (its videos there already: uses after
    theirs), then changes and snapshots as above."""
    rng = random.Random(seed)
    first, second = two_tasks(tmp_path)
    paths = [video.path for video in first.listed]
    rng.shuffle(paths)
    cuts = sorted(rng.sample(range(1, len(paths)), 3))
    parts = [frozenset(paths[a:b]) for a, b in zip([0, *cuts], [*cuts, len(paths)],
                                                   strict=True)]
    base = plan_window([first, second], 0, lead=parts[0]).videos
    records = as_records(base)
    done = set(parts[0])
    for lead in parts[1:]:
        rest = plan_window([first, second], 0, lead=lead, skip=done).videos
        join_videos(base, rest)
        join_records(records, rest)
        done |= lead
        same(base, records)
    again = plan_window([first, second], 0, lead=parts[1], skip=parts[0]).videos
    join_videos(base, again)  # its videos are there already
    join_records(records, again)
    same(base, records)
    every = [*records, "missing"]  # a video in two chunks: the first one's number
    assert base.groups_of(every).tolist() == [base.group_of(p) for p in every]
    assert base.group_of("missing") == -1
    for path in rng.sample(list(records), 5):  # a task joining or leaving
        new = tuple(u for u in records[path].uses if rng.random() < 0.5)
        base[path].uses = new
        records[path].uses = new
    keys = {u.view for w in records.values() for u in w.uses}
    wanted = {k for k in keys if rng.random() < 0.6}.__contains__
    expected = {p: VideoWork(w.info, w.plan, w.window, tuple(u for u in w.uses if wanted(u.view)))
                for p, w in records.items()}
    same(base.kept_only(wanted), {p: w for p, w in expected.items() if w.uses})
    same(base, records)


def test_a_video_deleted_and_planned_again_in_a_later_part_is_found(tmp_path):
    """A video deleted (a task leaving took its uses) and then planned again with a later
    part is that part's video: found, iterated once, replaced in its place."""
    first, second = two_tasks(tmp_path)
    paths = [video.path for video in first.listed]
    lead = frozenset(paths[:10])
    base = plan_window([first, second], 0, lead=lead).videos
    gone = next(iter(base))
    del base[gone]
    assert gone not in base
    rest = plan_window([first, second], 0, lead=frozenset(paths[10:]) | {gone},
                       skip=lead - {gone}).videos
    assert gone in rest
    join_videos(base, rest)
    assert gone in base and list(base).count(gone) == 1 and len(base) == len(list(base))
    assert tuple(base[gone].uses) == tuple(rest[gone].uses)
    assert base.group_of(gone) == base.groups_of([gone])[0] >= len(lead)
    replaced = tuple(base[gone].uses)[:1]
    base[gone] = VideoWork(base[gone].info, base[gone].plan, 0, replaced)
    assert list(base).count(gone) == 1 and tuple(base[gone].uses) == replaced
    assert not base._added
    del base[gone]
    assert gone not in base and gone not in list(base)
    with pytest.raises(KeyError):
        base[gone]


def test_an_empty_group_counts_none_wherever_it_stands():
    """A group with no use left at the end (or start, or between) counts 0: `np.add.reduceat`
    raised on an empty last group."""
    columns = SimpleNamespace(starts=array("i", [0, 0, 2, 2, 5, 5]),
                              batch=array("i", [0, 1, 0, 1, 1]))
    counted = np.array([True, False, True, True, False])
    assert group_counts(counted, columns).tolist() == [0, 1, 0, 2, 0]
    assert _emptied(columns, bytearray([0, 1])) == {0, 2, 4}


def test_a_column_video_reads_as_its_path_and_number(tmp_path):
    first, second = two_tasks(tmp_path)
    videos = plan_window([first, second], 0).videos
    path = next(iter(videos))
    assert repr(videos[path]) == (f"ColumnVideo({path!r}, window=0, "
                                  f"uses={len(videos[path].uses)}, number=0)")
