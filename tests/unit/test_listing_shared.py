"""Tasks placing the same listing share what they derive from it (plan/listing.py): a task
joining a mount of 250,000 videos rebuilt each video's index, folder and label names. Shared
objects, with the answers each task would make on its own."""

from __future__ import annotations

import dataclasses
import os
import random
import threading

from sandfs.config.loader import load_task_config
from sandfs.media.probebook import ProbeBook
from sandfs.media.types import MediaLimits, NamedOnce
from sandfs.media.walk import vetted_targets
from sandfs.plan import listing as listing_module
from sandfs.plan.coordination import Coordination
from sandfs.plan.listing import KEPT_LISTINGS, Listings, NameIndex
from sandfs.plan.task import TaskPlan
from tests.helpers.harness import task_config, write_config
from tests.helpers.plans import FAKE_DATASET, fake_videos


def config(tmp_path, name: str, seed: int, **dataset):
    cfg = task_config(FAKE_DATASET, task=name, seed=seed)
    cfg["dataset"].update(dataset)
    return load_task_config(write_config(tmp_path / f"{name}.yaml", cfg), check_paths=False)


def test_tasks_on_one_listing_share_its_index_and_folders(tmp_path):
    videos = tuple(fake_videos(12))
    first, joined = config(tmp_path, "a", 1), config(tmp_path, "b", 2)
    coordination = Coordination([first, joined])
    a = TaskPlan(first, videos, k_epochs=2, coordination=coordination)
    b = TaskPlan(joined, videos, k_epochs=2, coordination=coordination,
                 other_rel_paths=["d/left-out.mp4"])
    alone = TaskPlan(joined, videos, k_epochs=2, other_rel_paths=["d/left-out.mp4"])
    assert a.video_index is b.video_index and a.labels is b.labels
    assert b.video_index == alone.video_index == {v.name: i for i, v in enumerate(videos)}
    assert list(b.labels) == list(alone.labels) == [v.rel_path[:2] for v in videos]
    assert len({id(label) for label in a.labels}) == 3  # a string a folder, not a video
    assert a.class_names == ["c0", "c1", "c2"]  # the other task's left-out folder is its own
    assert b.class_names == alone.class_names == ["c0", "c1", "c2", "d"]


def test_a_labels_file_matches_through_the_shared_names(tmp_path):
    videos = tuple(fake_videos(6))
    rows = "video,label\n" + "".join(f"{v.rel_path},k{i % 2}\n" for i, v in enumerate(videos))
    (tmp_path / "labels.csv").write_text(rows)
    coordination = Coordination([])
    plans = [TaskPlan(config(tmp_path, name, seed, labels=str(tmp_path / "labels.csv")), videos,
                      k_epochs=2, coordination=coordination,
                      labels_data=rows.encode())
             for name, seed in (("a", 1), ("b", 2))]
    for plan in plans:
        assert list(plan.labels) == [f"k{i % 2}" for i in range(6)]
        assert plan.class_names == ["k0", "k1"]
    assert plans[0].listing is plans[1].listing


def test_a_listing_other_than_the_kept_one_gets_facts_of_its_own():
    listings = Listings()
    videos = tuple(fake_videos(4))
    equal = tuple(fake_videos(4))  # equal, another object: its own facts
    assert listings.of(videos) is listings.of(videos)
    assert listings.of(equal) is not listings.of(videos)
    for count in range(KEPT_LISTINGS + 1):
        listings.of(tuple(fake_videos(count + 1)))
    assert listings.of(videos).listed is videos  # forgotten, made again for it


def test_a_name_index_answers_as_the_dict_it_replaces_names_repeated_or_not():
    """`NameIndex.index_of` checks the index a clip's start expects, with no dict of every
    name; where names repeat (a.mp4, a.avi) it answers the last one's index, as the dict."""
    rng = random.Random(7)
    videos = list(fake_videos(40))
    for i in rng.sample(range(1, 40), 6):  # a name another video has too
        videos[i] = dataclasses.replace(videos[i], name=videos[i - 1].name)
    index = NameIndex(videos)
    expected = {v.name: i for i, v in enumerate(videos)}
    assert index._by_name is None
    assert [index.index_of(v.name, i) for i, v in enumerate(videos)] == [
        expected[v.name] for v in videos]
    assert index._by_name is None  # the expected index checked, no dict made
    assert index.index_of(videos[3].name, 20) == expected[videos[3].name]  # not its: looked up
    assert index == expected and len(index) == len(expected) < len(videos)


def test_each_video_s_top_folder_is_its_own_in_any_order():
    """A video in the last one's folder is known by its prefix: each answer is still the
    video's own top folder, one string a folder, whatever the order (folders whose names
    start alike, a video at the root between two of one folder, nested folders)."""
    rel_paths = ["a/x.mp4", "a/y/z.mp4", "ab/x.mp4", "a/w.mp4", "top.mp4", "a/v.mp4", "ab/c/d.mp4",
                 "b.mp4", "ab/e.mp4", "a.mp4"]
    videos = [dataclasses.replace(fake_videos(1)[0], rel_path=r, name=r[:-4],
                                  path="/nowhere/" + r) for r in rel_paths]
    folders = Listings().of(videos).top_folders
    assert list(folders) == [r.partition("/")[0] if "/" in r else None for r in rel_paths]
    assert len({id(f) for f in folders if f is not None}) == 2


def test_a_walk_s_listing_is_looked_through_for_no_repeated_name(tmp_path, dataset_dir,
                                                                 monkeypatch):
    """The walk refuses a name that collides, so its listing (`NamedOnce`) names each video
    once: the probe book and a task's plan keep that very listing (tasks share its facts), and
    its name index looks for no repeated name (250,000 names: 0.12-0.19 s at each start)
    yet answers as a dict of its names."""
    listed = vetted_targets(os.path.realpath(dataset_dir), [".mp4"], MediaLimits())[0]
    assert isinstance(listed, NamedOnce) and len(listed) == 12
    book = ProbeBook(listed, threading.Event())
    book.defer_all([v.rel_path for v in listed], lambda rel_path: None)
    plan = TaskPlan(config(tmp_path, "a", 1), book.listed, k_epochs=2, probes=book)
    assert book.listed is listed and plan.listed is listed

    def looked(_):
        raise AssertionError("looked for repeated names")

    monkeypatch.setattr(listing_module, "repeated_names", looked)
    index = Listings().of(listed).video_index
    assert index == {v.name: i for i, v in enumerate(listed)}
    assert [index.index_of(v.name, i) for i, v in enumerate(listed)] == list(range(12))
