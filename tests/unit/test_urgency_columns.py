"""The urgency order as columns (`sched/urgency.py`) ranks as brute force over the same
pending clips does (`soonest_jobs`, none of its code), and finds a batch's jobs as the order
of a tuple an entry did (`tests/helpers/urgency_reference.py`), step for step: windows added,
clips added one by one (several, of several tasks, between two reads) and many at once, jobs
done and busy, windows dropped; ties at one position too."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest

from sandfs.plan.uses import Uses, ViewRow
from sandfs.plan.window import ClipUse, ViewKey
from sandfs.sched import urgency
from sandfs.sched.jobs import UrgencyEntries, VideoJobKey
from sandfs.sched.urgency import UrgencyOrder, urgency_entries
from sandfs.sched.viewjobs import view_jobs
from tests.helpers import urgency_reference as reference


def a_window(rng: random.Random, window: int, tasks: list[str]) -> dict[str, Uses]:
    """A window's pending clips by video: batches of a few slots, each read by one or two
    tasks at positions that tie often; a video's clips in a few batches."""
    rows = []
    for batch in range(rng.randint(1, 12)):
        readers = tuple((task, rng.randint(0, 9))
                        for task in rng.sample(tasks, min(len(tasks), rng.randint(1, 2))))
        clips = tuple(SimpleNamespace(frame_indices=(slot,)) for slot in range(4))
        rows.append(ViewRow(ViewKey("p", window, batch), clips, readers))
    pending = {}
    for video in range(rng.randint(1, 20)):
        chosen = [rng.choice(rows) for _ in range(rng.randint(1, 4))]
        pending[f"w{window}v{video:02d}"] = Uses(chosen, [rng.randrange(4) for _ in chosen])
    return pending


def same(new: UrgencyOrder, old: reference.UrgencyOrder, pending: dict, rng: random.Random,
         views: list[ViewKey]) -> None:
    busy = set(rng.sample(sorted(pending, key=repr), min(len(pending), rng.randint(0, 3))))
    # as brute force over the clips pending ranks them: a job made and pending again at the
    # entry of a clip made (`UrgencyOrder._fresh`), none busy
    assert new.urgent(pending, busy) == reference.soonest_jobs(pending, busy, new.per_task)
    asked = set(rng.sample(views, min(len(views), 3)))
    assert new.of_views(asked, pending) == old.of_views(asked, pending)


@pytest.mark.parametrize("seed", range(40))
def test_the_columns_rank_as_brute_force_does(seed, monkeypatch):
    """Half the runs build a window's entries 3 videos at a time, as a large window is."""
    if seed % 2:
        monkeypatch.setattr(urgency, "_CHUNK_VIDEOS", 3)
    rng = random.Random(seed)
    tasks = ["a", "b", "c"][:rng.randint(1, 3)]
    new, old = UrgencyOrder(per_task=rng.choice([1, 2, 4])), reference.UrgencyOrder()
    old.per_task = new.per_task
    pending: dict[VideoJobKey, tuple] = {}
    windows: dict[int, list[ViewKey]] = {}

    def drop(window: int) -> None:
        for job in [j for j in pending if j.window == window]:
            del pending[job]
        new.forget_window(window, windows[window])
        old.forget_window(window, windows.pop(window))

    for _ in range(30):
        views = [v for keys in windows.values() for v in keys]
        action = rng.random()
        if action < 0.25 or not windows:
            window = max(windows, default=-1) + 1
            clips = a_window(rng, window, tasks)
            made, was = urgency_entries(window, clips), reference.urgency_entries(window, clips)
            assert [job for job in made.jobs] == list(was.jobs.values())
            before = dict(pending)
            for job in made.jobs:
                pending[job] = (*pending.get(job, ()), *clips[job.path])
            new.add_entries(made, before)
            old.add_entries(was, before)
            windows[window] = sorted({row.view for uses in clips.values()
                                      for row in uses.columns[0]}, key=repr)
        elif action < 0.45 and views:
            for _ in range(rng.randint(1, 6)):  # no read between them, as a job's unkept clips
                key = rng.choice(views)
                job = VideoJobKey(key.epoch, f"w{key.epoch}v{rng.randint(0, 25):02d}")
                readers = tuple((task, rng.randint(0, 9))
                                for task in rng.sample(tasks, rng.randint(1, len(tasks))))
                use = ClipUse(key, rng.randrange(4), None, readers)
                pending[job] = (*pending.get(job, ()), use)
                new.add(job, use)
                old.add(job, use)
            if rng.random() < 0.3 and len(windows) > 1:  # then a window dropped before a read
                drop(min(windows))
        elif action < 0.55 and views:
            added = []
            for _ in range(rng.randint(1, 5)):
                key = rng.choice(views)
                job = VideoJobKey(key.epoch, f"w{key.epoch}v{rng.randint(0, 25):02d}")
                use = ClipUse(key, 0, None, tuple((t, rng.randint(0, 9)) for t in tasks[:2]))
                pending[job] = (*pending.get(job, ()), use)
                added.append((job, use))
            new.add_many(added, pending)
            old.add_many(added, pending)
        elif action < 0.85 and pending:
            for job in rng.sample(sorted(pending, key=repr), min(len(pending), 3)):
                pending[job] = ()  # its clips made
        elif len(windows) > 1:
            drop(min(windows))
        same(new, old, pending, rng, views or [ViewKey("p", 0, 0)])


class Colliding(str):
    """A batch key whose hash every other one shares."""

    def __hash__(self) -> int:
        return 7


def test_a_batch_s_jobs_are_found_past_keys_of_the_same_hash():
    views = [Colliding(name) for name in ("x", "y", "z")]
    keys = np.array([2, 0, 2, 1, 2]) * 3 + np.array([0, 1, 1, 1, 2])  # (batch, job)
    found = view_jobs(0, views, np.sort(keys), 3)
    assert [found.of(v) for v in views] == [[1], [1], [0, 1, 2]]
    assert found.of(Colliding("w")) == [] and found.of("x") == []


def test_a_window_s_entries_come_with_the_videos_they_number():
    """A window's entries name its jobs by their videos' numbers in its pending clips: entries
    without them cannot be made, rather than failing the window when it is added."""
    made = urgency_entries(0, {"v0": (), "v1": ()})
    assert [job.path for job in made.jobs] == ["v0", "v1"]
    with pytest.raises(TypeError):
        UrgencyEntries(made.by_task, made.views)  # type: ignore[call-arg]
