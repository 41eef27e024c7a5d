"""A window's uses as columns (`plan/uses.py`): each `ClipUse` made on demand is the one a plan
made before (its batch, slot, clip and readers), whatever a window's consumers do with them."""

from __future__ import annotations

import pickle
from array import array

import pytest

from sandfs.plan.cliptable import ClipTable, TableClips, frame_count
from sandfs.plan.records import ClipPath, StreamClip
from sandfs.plan.uses import ClipUse, ColumnUses, Uses, ViewRow, batches, frame_rows
from sandfs.plan.window import ViewKey, plan_window
from sandfs.sched.objects import leaf_rows
from sandfs.sched.urgency import urgency_entries
from tests.helpers.plans import fake_videos, make_plan
from tests.unit.test_testviews import make_plan as evaluation_plan


def rows(count: int, clips_per_view: int = 3) -> list[ViewRow]:
    return [ViewRow(ViewKey(("k",), 0, i), tuple(f"clip{i}.{s}" for s in range(clips_per_view)),
                    (("t", i),)) for i in range(count)]


def test_a_window_s_uses_are_its_views_clips_in_their_slots(tmp_path):
    """Every use of a planned window (one and two samples a video) is the ClipUse of its
    batch's clip in its slot, with the batch's readers; every clip of every view is used once."""
    for overrides in ({}, {"sampling": {"samples_per_video": 2}}):
        plan = make_plan(tmp_path, fake_videos(12), **overrides)
        window = plan_window([plan], 0)
        seen = set()
        for work in window.videos.values():
            assert isinstance(work.uses, ColumnUses)
            for use in work.uses:
                clip = window.view_plans[use.view].clips[use.slot]
                assert use == ClipUse(use.view, use.slot, clip, window.readers[use.view])
                assert plan.videos[clip.video_index] is work.info
                seen.add((use.view, use.slot))
        assert seen == {(key, slot) for key, view in window.view_plans.items()
                        for slot in range(len(view.clips))}
        fresh = make_plan(tmp_path, fake_videos(12), **overrides)
        for key, view in window.view_plans.items():  # the table's clips: those resolved
            assert isinstance(view.clips, TableClips)
            again = fresh.view_plan(key.epoch, key.iteration)
            assert view == again and tuple(view.clips) == again.clips


def test_uses_behave_as_the_tuple_they_stand_for():
    made = rows(4)
    uses = Uses([made[0], made[2], made[2], made[3]], [1, 0, 2, 1])
    plain = tuple(ClipUse(r.view, s, r.clips[s], r.readers)
                  for r, s in zip([made[0], made[2], made[2], made[3]], [1, 0, 2, 1],
                                  strict=True))
    assert uses == plain and tuple(uses) == plain and len(uses) == 4
    assert uses[1] == plain[1] and uses[-1] == plain[-1] and uses[1:3] == plain[1:3]
    assert isinstance(uses[1:3], ColumnUses)
    assert uses.keep({made[2].view}.__contains__) == plain[1:3]
    assert uses + uses[:1] == plain + plain[:1] and isinstance(uses + uses[:1], ColumnUses)
    assert uses + plain[:1] == plain + plain[:1] and plain[:1] + uses == plain[:1] + plain
    assert list(batches(uses)) == [made[0], made[2], made[2], made[3]]
    assert batches(plain) is plain
    with pytest.raises(TypeError):
        hash(uses)


def test_uses_travel_to_a_worker_process_as_a_tuple():
    """Its rows hold their whole batches' clips: a worker gets the video's own."""
    made = rows(2)
    uses = Uses(made, [2, 0])
    sent = pickle.loads(pickle.dumps(uses))
    assert type(sent) is tuple and sent == uses


def test_slots_past_a_byte_and_bad_columns():
    made = rows(2, clips_per_view=300)
    uses = Uses(made, [299, 7])
    assert isinstance(uses.columns[1], array) and [u.slot for u in uses] == [299, 7]
    assert isinstance(Uses(made, [255, 7]).columns[1], bytes)
    with pytest.raises(ValueError, match="2 batches for 1 slots"):
        Uses(made, [1])
    assert len(Uses([], [])) == 0 and Uses([], []) == ()


def as_lists(entries) -> tuple:
    return ({task: (p.tolist(), j.tolist()) for task, (p, j) in entries.by_task.items()},
            {view: entries.views.of(view) for view in entries.views.views}, list(entries.jobs))


def test_window_wide_readers_read_the_columns_as_the_clips(tmp_path):
    """`leaf_rows`, `urgency_entries` and `frame_rows` read the columns; the same as from a
    tuple a video."""
    plan = make_plan(tmp_path, fake_videos(12))
    window = plan_window([plan], 0)
    as_tuples = plan_window([make_plan(tmp_path, fake_videos(12))], 0)
    for work in as_tuples.videos.values():
        work.uses = tuple(work.uses)
    got, want = leaf_rows(window), leaf_rows(as_tuples)
    for column in ("view", "video", "first", "slot", "nbytes"):
        assert getattr(got, column).tolist() == getattr(want, column).tolist()
    assert list(got.keys) == list(want.keys)
    pending = {path: work.uses for path, work in window.videos.items()}
    tuples = {path: work.uses for path, work in as_tuples.videos.items()}
    assert as_lists(urgency_entries(0, pending)) == as_lists(urgency_entries(0, tuples))
    for path, work in window.videos.items():  # what pruning and a video's frames read
        assert list(frame_rows(work.uses)) == list(frame_rows(as_tuples.videos[path].uses))
        assert work.frame_keys == as_tuples.videos[path].frame_keys


def test_a_table_s_batches_are_the_tuples_they_stand_for(tmp_path):
    plan = make_plan(tmp_path, fake_videos(12), sampling={"samples_per_video": 2})
    views = [plan.view_plan(0, i) for i in range(plan.iterations_per_epoch)]
    rows = ClipTable.of([view.clips for view in views])
    assert rows[0].table is rows[-1].table and len(rows[0].table) == sum(
        len(view.clips) for view in views)
    for got, view in zip(rows, views, strict=True):
        clips = view.clips
        assert got == clips and tuple(got) == clips and hash(got) == hash(clips)
        assert [got[i] for i in range(-len(clips), len(clips))] == [*clips, *clips]
        assert got[1:3] == clips[1:3] and all(type(c) is StreamClip for c in got)
        assert all(a.frame_indices is b.frame_indices and a.ops is b.ops and a.path is b.path
                   for a, b in zip(got, clips, strict=True))  # the plan's own, not copies
        assert [frame_count(got, i) for i in range(len(got))] == [
            len(c.frame_indices) for c in clips]
        sent = pickle.loads(pickle.dumps(got))
        assert type(sent) is tuple and sent == clips
        with pytest.raises(IndexError):
            got[len(clips)]
    with pytest.raises(ValueError, match="rows"):
        TableClips(rows[0].table, len(rows[0].table), 1)
    assert ClipTable.of([]) == [] and ClipTable.of([()])[0] == ()


def test_test_views_and_shards_plan_in_windows_as_alone(tmp_path):
    shard = {"sampling": {"shard": {"rank": 1, "world_size": 2}}}
    for made in (lambda: evaluation_plan(tmp_path, fake_videos(12)),
                 lambda: make_plan(tmp_path, fake_videos(12), **shard)):
        window, alone = plan_window([made()], 0), made()
        assert window.view_plans
        for key, view in window.view_plans.items():
            assert isinstance(view.clips, TableClips)
            again = alone.view_plan(key.epoch, key.iteration)
            assert view == again and alone.view_meta(view) == alone.view_meta(again)


def test_decode_resize_and_a_failing_condition_plan_in_windows_as_alone(tmp_path):
    """A view whose condition fails fails alone (`failed`, its reason); the others, and
    clips decoded at another size, are those planned alone."""
    fails = [{"name": "resize", "branch_type": "single", "inputs": ["frame"], "outputs": ["r"],
              "config": [{"resize": {"shape": [32, 32]}}]},
             {"name": "odd", "branch_type": "conditional", "inputs": ["r"], "outputs": ["out"],
              "branches": [{"condition": "1 // (iteration - 1) >= 0",
                            "config": [{"inv_sample": True}]},
                           {"condition": "else", "config": []}]}]
    for overrides in ({"sampling": {"decode_resize": {"shape": [36, 48],
                                                      "interpolation": "area"}}},
                      {"augmentation": fails}):
        window = plan_window([make_plan(tmp_path, fake_videos(12), **overrides)], 0)
        alone = make_plan(tmp_path, fake_videos(12), **overrides)
        assert window.view_plans
        for key, view in window.view_plans.items():
            assert isinstance(view.clips, TableClips)
            assert view == alone.view_plan(key.epoch, key.iteration)
        if "augmentation" in overrides:
            assert {key.iteration for key in window.failed} == {1}
            assert all("division" in failed.reason for failed in window.failed.values())
        else:
            assert all(c.source for v in window.view_plans.values() for c in v.clips)


@pytest.mark.parametrize(("top", "code"), [(200, "B"), (60_000, "H"), (300_000, "i")])
def test_a_table_s_columns_are_as_narrow_as_their_values(top, code):
    """A clip table's columns take the narrowest type that holds their values (a sample, a
    stream, an index among a few distinct paths: a byte), and read back the same ints."""
    path = ClipPath((1,), (), None)
    clips = [StreamClip(video, video % 3, 0, (video % 7,), (), path)
             for video in (0, 1, top, top - 1)]
    table = ClipTable(clips)
    assert table.video.typecode == code and table.sample.typecode == table.stream.typecode == "B"
    assert table.path.typecode == table.frames.typecode == "B"
    assert [table.clip(row) for row in range(len(table))] == clips
    with pytest.raises(ValueError, match="negative"):
        ClipTable([StreamClip(-1, 0, 0, (0,), (), path)])
