"""Tasks joining and leaving through .sand/tasks, in-process: create, write and flush a YAML
registers it (a refused one answers EINVAL at close, the reason in status.json), unlink ends
it, and a task registered again gets new inodes."""

from __future__ import annotations

import errno
import json
import os
import threading
from types import SimpleNamespace

import pyfuse3
import pytest
import trio
import yaml

from sandfs.config import yamlsafe
from sandfs.config.limits import DEFAULT_LIMITS
from tests.helpers.harness import task_config
from tests.helpers.operations import CTX, Listing, errno_of
from tests.helpers.reference import reference_view


def task_yaml(dataset_dir, **overrides) -> bytes:
    return yaml.safe_dump(task_config(dataset_dir, **overrides), sort_keys=False).encode()


async def status(fs) -> dict:
    return json.loads(await fs.read(".sand/status.json"))


async def test_a_task_file_written_to_sand_tasks_is_served(fs, dataset_dir):
    text = task_yaml(dataset_dir, task="t1", seed=3)
    await fs.write_new(".sand/tasks/t1.yaml", text)
    assert await fs.listdir("") == [".sand", "t0", "t1"]
    assert await fs.listdir(".sand/tasks") == ["t0.yaml", "t1.yaml"]
    assert await fs.read(".sand/tasks/t1.yaml") == text
    joined = fs.ops.service.tasks["t1"]  # its views are planned into the mount's windows
    for iteration in range(joined.iterations_per_epoch):
        path = f"t1/0/{iteration}/view"
        size = (await fs.stat(path)).st_size
        got = await fs.read(path)
        assert got == reference_view(joined, 0, iteration) and size == len(got), path
    assert set((await status(fs))["tasks"]) == {"t0", "t1"}


@pytest.mark.parametrize(("engine", "note"), [
    ({"k_epochs": 7, "workers": 1},
     "ignored: k_epochs, workers of task t1 (the mount's own are kept)"),
    (None, None),
])
async def test_engine_settings_of_a_task_joining_a_live_mount_are_ignored_with_a_warning(
        fs, dataset_dir, caplog, engine, note):
    config = task_config(dataset_dir, task="t1")
    config.pop("engine")
    text = yaml.safe_dump(config | ({"engine": engine} if engine else {})).encode()
    with caplog.at_level("WARNING", logger="sandfs"):
        await fs.write_new(".sand/tasks/t1.yaml", text)
    warnings = [r.getMessage() for r in caplog.records if "engine:" in r.getMessage()]
    assert warnings == ([f"engine: settings of a task added to a live mount are {note}"]
                        if note else [])
    joined = fs.ops.service.tasks["t1"]  # registered, with the mount's window size
    assert joined.k_epochs == fs.ops.service.tasks["t0"].k_epochs != 7


@pytest.mark.parametrize(("file_name", "text", "reason"), [
    ("bad.yaml", b"task: bad\nseed: x\n", "bad.yaml:1:1: epochs: required key is missing"),
    ("t2.yaml", None, "the file must be named after its task: t1.yaml"),
    ("t3.yaml", b"task: t3\n\xff\xfe\n", "can't decode byte 0xff"),
])
async def test_a_refused_task_file_is_einval_at_close_with_the_reason_in_status(
        fs, dataset_dir, file_name, text, reason):
    text = text or task_yaml(dataset_dir, task="t1")
    assert await errno_of(fs.write_new(f".sand/tasks/{file_name}", text)) == errno.EINVAL
    task = file_name.removesuffix(".yaml")
    assert reason in (await status(fs))["task_errors"][task]
    assert await fs.listdir("") == [".sand", "t0"]
    assert await fs.listdir(".sand/tasks") == ["t0.yaml"]


@pytest.mark.parametrize(("name", "code"), [
    (b"t1.yml", errno.EINVAL), (b".yaml", errno.EINVAL), (b"a b.yaml", errno.EINVAL),
    (b"t0.yaml", errno.EEXIST),
])
async def test_task_file_names(fs, name, code):
    tasks = await fs.inode(".sand/tasks")
    assert await errno_of(fs.ops.create(tasks, name, 0o644, os.O_WRONLY, CTX)) == code


async def test_an_upload_takes_sparse_writes_and_truncation_up_to_a_limit(fs):
    tasks = await fs.inode(".sand/tasks")
    info, attr = await fs.ops.create(tasks, b"t1.yaml", 0o644, os.O_WRONLY | os.O_CREAT, CTX)
    assert attr.st_mode & 0o777 == 0o600 and attr.st_size == 0 and info.direct_io
    assert await fs.ops.write(info.fh, 4, b"task") == 4
    assert fs.ops.uploads[fs.ops.files[info.fh].node].data == b"\0\0\0\0task"
    size = pyfuse3.EntryAttributes()
    size.st_size = 2
    fields = SimpleNamespace(update_size=True)  # `>` and cp truncate what they write
    assert (await fs.ops.setattr(attr.st_ino, size, fields, info.fh, CTX)).st_size == 2
    assert await errno_of(fs.ops.write(info.fh, DEFAULT_LIMITS.upload_bytes, b"x")) == errno.EFBIG
    await fs.ops.release(info.fh)  # closed without a flush: nothing is registered
    assert fs.ops.uploads == {}
    assert await fs.listdir(".sand/tasks") == ["t0.yaml"]


async def test_a_registered_upload_takes_no_more_writes(fs, dataset_dir):
    tasks = await fs.inode(".sand/tasks")
    info, _ = await fs.ops.create(tasks, b"t1.yaml", 0o644, os.O_WRONLY | os.O_CREAT, CTX)
    await fs.ops.write(info.fh, 0, task_yaml(dataset_dir, task="t1"))
    await fs.ops.flush(info.fh)
    await fs.ops.flush(info.fh)  # a second close of a dup()ed fd registers nothing more
    assert await errno_of(fs.ops.write(info.fh, 0, b"x")) == errno.EROFS
    await fs.ops.release(info.fh)
    assert await fs.listdir(".sand/tasks") == ["t0.yaml", "t1.yaml"]


async def test_unlinking_a_task_file_ends_the_task_and_a_new_registration_has_new_inodes(
        fs, dataset_dir):
    text = task_yaml(dataset_dir, task="t1", seed=7)  # not t0's views (those share inodes)
    await fs.write_new(".sand/tasks/t1.yaml", text)
    old_view = await fs.inode("t1/0/0/view")
    tasks = await fs.inode(".sand/tasks")
    await fs.ops.unlink(tasks, b"t1.yaml", CTX)
    assert await fs.listdir("") == [".sand", "t0"]
    assert await errno_of(fs.ops.lookup(pyfuse3.ROOT_INODE, b"t1", CTX)) == errno.ENOENT
    assert await errno_of(fs.ops.getattr(old_view, CTX)) == errno.ENOENT
    for name in (b"t1.yaml", b"t1", b"nope.yaml"):
        assert await errno_of(fs.ops.unlink(tasks, name, CTX)) == errno.ENOENT, name
    await fs.write_new(".sand/tasks/t1.yaml", task_yaml(dataset_dir, task="t1", seed=8))
    assert await fs.inode("t1/0/0/view") != old_view
    assert await errno_of(fs.ops.getattr(old_view, CTX)) == errno.ENOENT


async def test_a_task_registered_again_under_its_name_starts_its_figures_from_zero(
        fs, dataset_dir):
    await fs.write_new(".sand/tasks/t1.yaml", task_yaml(dataset_dir, task="t1", seed=7))
    await fs.read("t1/0/0/view")
    await fs.read("t1/0/1/view")
    assert (await status(fs))["tasks"]["t1"]["views_served"] == 2
    await fs.ops.unlink(await fs.inode(".sand/tasks"), b"t1.yaml", CTX)
    await fs.write_new(".sand/tasks/t1.yaml", task_yaml(dataset_dir, task="t1", seed=7))
    again = (await status(fs))["tasks"]["t1"]
    assert (again["views_served"], again["stall_seconds"]) == (0, 0)


async def test_a_trial_identical_to_another_shares_its_view_inodes(fs, dataset_dir):
    """A search's trials read one object per view (the page cache serves the later readers);
    ending one trial leaves the other's views as they are."""
    await fs.write_new(".sand/tasks/t1.yaml", task_yaml(dataset_dir, task="t1"))
    shared = await fs.inode("t1/0/0/view")
    assert shared == await fs.inode("t0/0/0/view")
    await fs.ops.unlink(await fs.inode(".sand/tasks"), b"t1.yaml", CTX)
    assert await errno_of(fs.ops.lookup(pyfuse3.ROOT_INODE, b"t1", CTX)) == errno.ENOENT
    assert (await fs.ops.getattr(shared, CTX)).st_size > 0  # still t0's view


async def test_a_task_refused_after_registering_leaves_no_trace(fs, dataset_dir, monkeypatch):
    """A failure while planning a joining task into the scheduler's windows refuses it as a
    whole: EINVAL at close, the reason in task_errors, and no trace in the tree, status, the
    scheduler or the coordination; the same file registers once the cause is gone."""
    from sandfs.sched import work

    planned = work.plan_task_part

    def broken(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(work, "plan_task_part", broken)
    text = task_yaml(dataset_dir, task="t1", seed=3)
    assert await errno_of(fs.write_new(".sand/tasks/t1.yaml", text)) == errno.EINVAL
    figures = await status(fs)
    assert figures["task_errors"]["t1"] == ("task t1 could not be planned: OSError: [Errno 28] "
                                            "No space left on device")
    assert set(figures["tasks"]) == {"t0"}
    assert await fs.listdir("") == [".sand", "t0"]
    assert await fs.listdir(".sand/tasks") == ["t0.yaml"]
    service = fs.ops.service
    assert set(service.scheduler.book.plans) == {"t0"}
    assert not service.registry.joining and not service.registry.registering.held
    assert "t1" not in service.tasks["t0"].coordination._configs
    assert all(task == "t0" for window in service.scheduler.book.windows.values()
               for readers in window.readers.values() for task, _ in readers)
    monkeypatch.setattr(work, "plan_task_part", planned)
    await fs.write_new(".sand/tasks/t1.yaml", text)
    joined = service.tasks["t1"]
    assert await fs.read("t1/0/0/view") == reference_view(joined, 0, 0)
    assert "t1" not in (await status(fs))["task_errors"]


async def test_a_task_whose_labels_cannot_be_read_is_refused_with_the_reason(fs, dataset_dir):
    cfg = task_config(dataset_dir, task="t1")
    cfg["dataset"]["labels"] = "/nonexistent/labels.csv"
    text = yaml.safe_dump(cfg, sort_keys=False).encode()
    assert await errno_of(fs.write_new(".sand/tasks/t1.yaml", text)) == errno.EINVAL
    assert "/nonexistent/labels.csv" in (await status(fs))["task_errors"]["t1"]
    assert await fs.listdir("") == [".sand", "t0"]
    assert "t1" not in fs.ops.service.tasks["t0"].coordination._configs


async def test_a_refused_task_file_is_named_by_its_path_in_the_mount(fs, dataset_dir):
    """Not by the folder its relative paths are anchored at (the mount's first config's)."""
    assert await errno_of(fs.write_new(".sand/tasks/bad.yaml", b"task: bad\nseed: x\n")
                          ) == errno.EINVAL
    reason = (await status(fs))["task_errors"]["bad"]
    assert reason.startswith("/nonexistent/.sand/tasks/bad.yaml:1:1: "), reason


async def test_a_fifo_given_as_labels_is_not_a_regular_file(fs, dataset_dir, tmp_path):
    fifo = tmp_path / "labels.csv"
    os.mkfifo(fifo)
    cfg = task_config(dataset_dir, task="t1")
    cfg["dataset"]["labels"] = str(fifo)
    text = yaml.safe_dump(cfg, sort_keys=False).encode()
    assert await errno_of(fs.write_new(".sand/tasks/t1.yaml", text)) == errno.EINVAL
    reason = (await status(fs))["task_errors"]["t1"]
    assert f"the labels file {fifo} is not a regular file" in reason, reason


async def test_listing_a_task_of_a_million_epochs_pages_from_any_offset(fs, dataset_dir):
    """readdir makes the entries of the page asked for, not the whole listing each call: the
    first page, a page near the end and a whole epoch directory come back at once."""
    await fs.write_new(".sand/tasks/long.yaml",
                       task_yaml(dataset_dir, task="long", epochs=1_000_000))
    task = await fs.ops.opendir(await fs.inode("long"), CTX)
    first = Listing(100)
    await fs.ops.readdir(task, 0, first)
    assert [name for name, _, _ in first.entries] == ["videos", *map(str, range(99))]
    assert [offset for _, _, offset in first.entries] == list(range(1, 101))
    last = Listing(100)
    await fs.ops.readdir(task, 999_990, last)
    assert [name for name, _, _ in last.entries] == list(map(str, range(999_989, 1_000_000)))
    assert last.entries[-1][2] == 1_000_001
    end = Listing(100)
    await fs.ops.readdir(task, 1_000_001, end)
    assert end.entries == []
    plan = fs.ops.service.tasks["long"]
    assert await fs.listdir("long/999999", room=2) == list(
        map(str, range(plan.iterations_per_epoch)))


def hold_parses(monkeypatch, until: threading.Event) -> tuple[list[int], threading.Event]:
    """Every parse of a task YAML waits at its root node until `until` is set: the thread of
    each parse, and an event set once one began."""
    compose = yamlsafe._CoreLoader.compose_node
    threads: list[int] = []
    began = threading.Event()

    def held(loader, parent, index):
        if parent is None:  # the document's root: once per parse
            threads.append(threading.get_ident())
            began.set()
            assert until.wait(10), "the parse was never released"
        return compose(loader, parent, index)

    monkeypatch.setattr(yamlsafe._CoreLoader, "compose_node", held)
    return threads, began


async def test_a_task_file_is_parsed_once(fs, dataset_dir, monkeypatch):
    released = threading.Event()
    released.set()
    parses, _ = hold_parses(monkeypatch, released)
    await fs.write_new(".sand/tasks/t1.yaml", task_yaml(dataset_dir, task="t1"))
    assert "t1" in fs.ops.service.tasks
    assert len(parses) == 1


async def test_a_large_task_file_is_parsed_while_other_tasks_are_read(fs, dataset_dir,
                                                                      monkeypatch):
    """The parse runs in a worker thread: held there until a view of t0 was read, it does not
    hold the read (parsed on the event loop, it would wait for the read forever)."""
    expected = await fs.read("t0/0/1/view")
    read_done = threading.Event()
    parses, began = hold_parses(monkeypatch, read_done)
    monkeypatch.setattr(yamlsafe, "MAX_NODES", 1000)  # small enough for any upload cap
    text = ("x: [" + ",".join(["1"] * 2000) + "]\n").encode()  # refused after all
    refused = []

    async def upload() -> None:
        refused.append(await errno_of(fs.write_new(".sand/tasks/big.yaml", text)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(upload)
        assert await trio.to_thread.run_sync(began.wait, 10)  # the upload is being parsed
        try:
            assert await fs.read("t0/0/1/view") == expected
        finally:
            read_done.set()
    assert parses != [threading.get_ident()] and len(parses) == 1
    assert refused == [errno.EINVAL]
    assert "more than 1000 values" in (await status(fs))["task_errors"]["big"]
