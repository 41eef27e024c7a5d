"""The tree's name parsing in-process: strict numbers, one path per object, and a fuzz that any
byte string resolves to a node or to nothing (ENOENT) — never to an exception."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandfs.config.loader import load_task_config
from sandfs.fuse.namespace import ROOT, Namespace, Node, parse_number
from sandfs.plan.coordination import Coordination
from sandfs.plan.task import TaskPlan
from sandfs.plan.window import view_key
from tests.helpers.harness import task_config, write_config
from tests.helpers.operations import make_service
from tests.helpers.plans import FAKE_DATASET, fake_videos, make_plan


@pytest.fixture(scope="module")
def namespace(tmp_path_factory) -> Namespace:
    plan = make_plan(tmp_path_factory.mktemp("ns"), videos=fake_videos(10))
    return Namespace(make_service([plan], task_texts={"t0": "task: t0\n"}))


@pytest.mark.parametrize("text", ["0", "7", "17", "123456789"])
def test_canonical_numbers_parse(text):
    assert parse_number(text) == int(text)


@pytest.mark.parametrize(
    "text", ["", "01", "+1", " 1", "1 ", "1_0", "-1", "١", "１", "1e3", "0x1", "1234567890", "٠"]
)
def test_other_spellings_do_not(text):
    assert parse_number(text) is None


def test_walk_and_sizes(namespace):
    task = namespace.child(ROOT, "t0")
    epoch = namespace.child(task, "2")
    view = namespace.child(namespace.child(epoch, "1"), "view")
    assert view == Node("view", task="t0", epoch=2, iteration=1)
    assert namespace.file_size(view) == namespace.service.tasks["t0"].view_nbytes(2, 1)
    assert namespace.child(task, "3") is None  # epochs: 3
    assert namespace.child(epoch, "3") is None  # 10 videos / 4 -> 3 iterations
    videos = namespace.child(task, "videos")
    assert [n for _, n, _ in namespace.children(videos)] == ["c0", "c1", "c2"]
    folder = namespace.child(videos, "c0")
    frames = namespace.child(folder, "v000")
    assert namespace.child(folder, "v000.mp4").kind == "video_file"
    assert namespace.child(frames, "frame119") is not None
    assert namespace.child(frames, "frame120") is None
    aug0 = namespace.child(namespace.child(frames, "frame3"), "aug0")
    assert namespace.file_size(aug0) == 128 + 48 * 64 * 3


def walk(namespace: Namespace, names: list[bytes]) -> None:
    node = ROOT
    for raw in names:
        child = namespace.child(node, os.fsdecode(raw))
        if child is None:
            return
        assert isinstance(child, Node)
        node = child


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(
    st.binary(min_size=1, max_size=255).filter(lambda b: b"/" not in b and b"\0" not in b),
    st.sampled_from([b"t0", b"0", b"1", b"videos", b"c0", b"v000", b"frame0", b".sand",
                     b"tasks", b"status.json", b"view", b"aug1", b"..", b"%2F", b"t0.yaml"]),
), min_size=1, max_size=6))
def test_any_name_resolves_or_is_enoent(namespace, names):
    walk(namespace, names)


def plans_on_one_mount(tmp_path, shards=None, **seeds: int) -> dict[str, TaskPlan]:
    configs = []
    for task, seed in seeds.items():
        config = task_config(FAKE_DATASET, task=task, seed=seed)
        if shards and task in shards:
            config["dataset"]["sampling"]["shard"] = {"world_size": 2, "rank": shards[task]}
        path = write_config(tmp_path / f"{task}.yaml", config)
        configs.append(load_task_config(path, check_paths=False))
    coordination = Coordination(configs)
    return {c.task: TaskPlan(c, fake_videos(10), k_epochs=2, coordination=coordination)
            for c in configs}


def test_views_of_identical_tasks_are_one_object(tmp_path):
    """Same data and seed: one identity per (epoch, iteration), exactly where the scheduler's
    view_key is one; another seed or position is another object."""
    plans = plans_on_one_mount(tmp_path, a=0, b=0, c=1)
    namespace = Namespace(make_service(list(plans.values())))
    identities, keys = {}, {}
    for task, plan in plans.items():
        for epoch in range(plan.epochs):
            for iteration in range(plan.iterations_per_epoch):
                node = Node("view", task=task, epoch=epoch, iteration=iteration)
                identities[(task, epoch, iteration)] = namespace.identity(node)
                keys[(task, epoch, iteration)] = view_key(plan, epoch, iteration)
    for left in identities:
        for right in identities:
            same_object = identities[left] == identities[right]
            assert same_object == (keys[left] == keys[right]), (left, right)
            same_data = left[0] == right[0] or {left[0], right[0]} == {"a", "b"}
            assert same_object == (same_data and left[1:] == right[1:]), (left, right)
    folder = Node("videos", task="a")
    assert namespace.identity(folder) == folder != namespace.identity(replace(folder, task="b"))


def test_ranks_of_one_job_are_never_one_object(tmp_path):
    """Two ranks share the data key (one permutation per epoch) but read other videos: one
    inode for both would let the page cache hand one rank the other's batch."""
    plans = plans_on_one_mount(tmp_path, shards={"r0": 0, "r1": 1}, r0=0, r1=0)
    namespace = Namespace(make_service(list(plans.values())))
    assert plans["r0"].data_key == plans["r1"].data_key
    for epoch in range(2):
        ids = {task: namespace.identity(Node("view", task=task, epoch=epoch, iteration=0))
               for task in plans}
        keys = {task: view_key(plans[task], epoch, 0) for task in plans}
        assert ids["r0"] != ids["r1"] and keys["r0"] != keys["r1"]
