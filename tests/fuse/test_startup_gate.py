"""The startup gate in-process: the daemon mounts before its datasets are scanned, so until the
tasks are planned a request that needs them waits (never ENOENT for a path that will exist),
`.sand/status.json` answers at once with the scan's progress, a failed or stopped startup
releases the waiters with EIO, and the daemon's own threads get EDEADLK instead of waiting on
themselves. The directories of the tasks the configs name answer at once, as they will serve:
the gate is one level below them."""

from __future__ import annotations

import errno
import json
import os
import threading
from types import SimpleNamespace

import pyfuse3
import pytest
import trio
import trio.testing

from sandfs.access import owner_of
from sandfs.config.loader import load_task_config
from sandfs.fuse.operations import SandOperations
from sandfs.media.types import ScanProgress
from sandfs.startup import NotServing, OwnRequest, Startup
from tests.helpers.operations import CTX, Client, errno_of, make_service
from tests.helpers.plans import build_plan


@pytest.fixture
def service(t0_config, scans):
    return make_service([build_plan(t0_config, *scans.values())],
                        task_texts={"t0": load_task_config(t0_config).source_text})


@pytest.fixture
def startup() -> Startup:
    return Startup(workers=2, memory_limit_bytes=1 << 20)


@pytest.fixture
def client(startup) -> Client:
    return Client(SandOperations(startup))


@pytest.fixture
def configured(t0_config) -> Startup:
    """A startup as the daemon makes it: its configs' tasks and owners known before the scan."""
    return Startup(workers=2, memory_limit_bytes=1 << 20,
                   tasks={"t0": owner_of(load_task_config(t0_config))})


def seen(attr: pyfuse3.EntryAttributes) -> tuple:
    """What stat shows of a node: inode, type and mode, owner, links."""
    return attr.st_ino, attr.st_mode, attr.st_uid, attr.st_gid, attr.st_nlink


async def at_once(call):
    """The answer of a handler call that must not wait for the scan."""
    results: dict = {}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer_later, call, results, "answer")
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert "answer" in results, "it waited for the scan"
    return results["answer"]


async def status(client: Client) -> dict:
    return json.loads(await client.read(".sand/status.json"))


async def answer_later(call, results: dict, name: str) -> None:
    """Run a handler call to its answer (or errno): `results[name]`."""
    try:
        results[name] = await call
    except pyfuse3.FUSEError as exc:
        results[name] = exc.errno


async def test_status_answers_at_once_with_the_scans_progress(client, startup, scans):
    key = next(iter(scans))
    startup.scanning([key])
    assert (await status(client))["scan"]["datasets"][0]["videos_total"] is None  # listing
    startup.scanned(key, ScanProgress(videos_scanned=3, videos_total=12, seconds=0.5))
    figures = await status(client)
    assert figures["pid"] == os.getpid() and figures["tasks"] == {}
    assert figures["workers"] == 2 and figures["memory_limit_bytes"] == 1 << 20
    scan = figures["scan"]
    assert scan["phase"] == "scanning" and scan["error"] is None
    assert (scan["videos_scanned"], scan["videos_total"]) == (3, 12)
    assert scan["datasets"] == [{"path": key[0], "extensions": list(key[1]),
                                 "videos_scanned": 3, "videos_total": 12}]
    startup.enter("planning")
    assert (await status(client))["scan"]["phase"] == "planning"
    assert (await client.read(".sand/metrics")).startswith(b"# HELP")
    assert sorted(await client.listdir(".sand")) == ["metrics", "status.json", "tasks"]
    assert (await client.stat("")).st_ino == pyfuse3.ROOT_INODE


async def test_a_path_that_will_exist_waits_until_the_tasks_are_planned(
        client, startup, service, scans, expected_view):
    startup.scanning(list(scans))
    results: dict = {}
    async with trio.open_nursery() as daemon:
        async with trio.open_nursery() as readers:
            readers.start_soon(answer_later, client.read("t0/0/1/view"), results, "view")
            readers.start_soon(answer_later, client.listdir(""), results, "root")
            readers.start_soon(answer_later, client.inode(".sand/tasks/t0.yaml"), results,
                               "yaml")
            await trio.testing.wait_all_tasks_blocked()
            assert results == {}  # waiting, not ENOENT
            assert (await status(client))["scan"]["phase"] == "scanning"  # answers at once
            service.scan_status = startup.scan_status  # as the daemon builds it
            await daemon.start(service.run)  # as the daemon does once the tasks are planned
            startup.serve(service)
        daemon.cancel_scope.cancel()
    assert results["view"] == expected_view(0, 1)
    assert sorted(results["root"]) == [".sand", "t0"]
    assert results["yaml"] > pyfuse3.ROOT_INODE
    figures = await status(client)
    assert figures["scan"]["phase"] == "ready" and "t0" in figures["tasks"]
    assert await errno_of(client.inode("t1")) == errno.ENOENT  # names that never exist


async def test_a_configured_tasks_directory_answers_at_once_as_it_will_serve(
        configured, service, scans, expected_view):
    client = Client(SandOperations(configured))
    configured.scanning(list(scans))
    early = await at_once(client.ops.lookup(pyfuse3.ROOT_INODE, b"t0", CTX))
    assert early.st_mode & 0o7777 == configured.tasks["t0"].dir_mode
    assert seen(await at_once(client.ops.getattr(early.st_ino, CTX))) == seen(early)
    assert early.entry_timeout == early.attr_timeout == 0  # looked up again once serving
    results: dict = {}
    async with trio.open_nursery() as daemon:
        async with trio.open_nursery() as readers:
            readers.start_soon(answer_later, client.read("t0/0/1/view"), results, "view")
            readers.start_soon(answer_later, client.listdir("t0"), results, "listing")
            readers.start_soon(answer_later, client.getxattr("t0", "user.sand.classes"),
                               results, "classes")
            readers.start_soon(answer_later, client.stat("t1"), results, "t1")
            await trio.testing.wait_all_tasks_blocked()
            assert results == {}  # one level down, the gate: waiting, not ENOENT
            assert (await status(client))["scan"]["phase"] == "scanning"
            service.scan_status = configured.scan_status
            await daemon.start(service.run)
            configured.serve(service)
        daemon.cancel_scope.cancel()
    assert results["view"] == expected_view(0, 1)
    assert results["listing"][0] == "videos" and results["t1"] == errno.ENOENT
    assert json.loads(results["classes"]) == service.tasks["t0"].class_names
    served = await client.ops.lookup(pyfuse3.ROOT_INODE, b"t0", CTX)
    assert seen(served) == seen(early)  # the same inode, owner and mode as before serving
    assert seen(await client.ops.getattr(early.st_ino, CTX)) == seen(early)


async def test_a_configured_tasks_directory_is_released_with_the_others(configured):
    client = Client(SandOperations(configured))
    t0 = await at_once(client.inode("t0"))
    results: dict = {}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer_later, client.ops.opendir(t0, CTX), results, "opendir")
        await trio.testing.wait_all_tasks_blocked()
        assert results == {}
        configured.fail(RuntimeError("every video is bad"))
    assert results == {"opendir": errno.EIO}
    assert await errno_of(client.ops.getxattr(t0, b"user.sand.classes", CTX)) == errno.EIO


@pytest.mark.parametrize("ending", ["failed", "stopped"])
async def test_waiters_get_eio_when_the_startup_fails_or_stops(client, startup, ending):
    results: dict = {}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer_later, client.stat("t0"), results, "t0")
        await trio.testing.wait_all_tasks_blocked()
        if ending == "failed":
            startup.fail(RuntimeError("every video is bad"))
        else:
            startup.stop()
    assert results == {"t0": errno.EIO}
    assert await errno_of(client.stat("t0/0")) == errno.EIO  # later requests too, at once
    scan = (await status(client))["scan"]
    assert scan["phase"] == ending
    assert scan["error"] == ("every video is bad" if ending == "failed" else None)


async def test_the_daemons_own_threads_get_edeadlk_instead_of_waiting(client, startup):
    own = SimpleNamespace(pid=threading.get_native_id(), uid=0, gid=0)
    with pytest.raises(pyfuse3.FUSEError) as caught:
        await client.ops.lookup(pyfuse3.ROOT_INODE, b"t0", own)
    assert caught.value.errno == errno.EDEADLK
    with pytest.raises(OwnRequest):
        await startup.wait(threading.get_native_id())
    sand = await client.ops.lookup(pyfuse3.ROOT_INODE, b".sand", own)  # needs no task
    assert sand.st_ino != pyfuse3.ROOT_INODE


async def test_an_unprivileged_viewer_sees_the_scan_but_not_the_dataset_paths(startup, scans):
    startup.scanning(list(scans))
    scan = startup.status_for(viewer=os.getuid() + 12345).to_json()["scan"]
    assert scan["phase"] == "scanning" and scan["datasets"] == []
    assert startup.status_for(None).to_json()["scan"]["datasets"][0]["path"] == \
        next(iter(scans))[0]


async def test_wait_returns_the_service_once_serving(startup, service):
    startup.serve(service)
    assert await startup.wait() is service
    assert Startup.serving(service).ready
    stopped = Startup(workers=1, memory_limit_bytes=0)
    stopped.stop()
    with pytest.raises(NotServing):
        await stopped.wait()
    assert stopped.stop_scan.is_set()  # a scan still running stops


def test_a_served_mounts_status_keeps_the_scan_section(startup, service):
    startup.serve(service)
    service.scan_status = startup.scan_status  # as the daemon builds it
    figures = startup.status_for(None).to_json()
    assert figures["scan"]["phase"] == "ready" and figures["tasks"]["t0"]["videos"] > 0
    took = figures["scan"]["seconds"]
    assert startup.status_for(None).to_json()["scan"]["seconds"] == took  # frozen once ready
