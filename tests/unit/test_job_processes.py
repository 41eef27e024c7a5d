"""Video jobs in worker processes (`engine: execution: processes`): the same bytes as in
threads, shared memory counted and never left behind, a killed worker failing its job alone,
and a worker that opens only the sources the daemon passed it."""

from __future__ import annotations

import mmap
import os
import pickle
import resource
import shutil
import socket
import threading

import numpy as np
import pytest
import trio

from sandfs.cache import ObjectStore
from sandfs.execution import shm
from sandfs.execution.channel import Channel
from sandfs.execution.worker import ASK, PauseAsker, _portable
from sandfs.materialize import Materializer
from sandfs.media.decode import DecodeError, ScanMismatch
from sandfs.media.opening import open_regular_file, passed_sources
from sandfs.sched.jobs import VideoJob
from sandfs.sched.scheduler import Scheduler
from sandfs.stats import Stats
from tests.helpers.harness import task_config, write_config
from tests.helpers.plans import build_plans
from tests.helpers.reference import reference_view
from tests.unit.test_scheduler import read_all
from tests.unit.test_step_failures import (
    FAILING,
    read_every_view,
    uses_step,
    with_both_kinds,
)


def plan_of(tmp_path, dataset_dir, *, epochs: int = 4, k_epochs: int = 2, **overrides):
    path = write_config(tmp_path / "t.yaml", task_config(
        dataset_dir, epochs=epochs, engine={"k_epochs": k_epochs}, **overrides))
    return next(iter(build_plans([path]).values()))


def scheduler(plan, execution: str, store=None, *, workers: int = 2,
              decode_ahead: int = 0) -> Scheduler:
    stats = Stats()  # the materializer's counters are the scheduler's, as in the daemon
    return Scheduler([plan], Materializer(stats), stats, workers=workers,
                     memory_limit_bytes=1 << 30, limiter=trio.CapacityLimiter(workers),
                     store=store, decode_ahead=decode_ahead, execution=execution)


async def views_made(tmp_path, plan, execution: str, **options) -> tuple[dict, Stats]:
    with ObjectStore(str(tmp_path / f"cache-{execution}"), 1 << 30) as store:
        made = scheduler(plan, execution, store, **options)
        views = await read_all(plan, made)
        return views, made.stats


@pytest.mark.parametrize(("decode_ahead", "epochs", "k_epochs"), [(0, 4, 2), (2, 6, 1)])
async def test_processes_make_the_same_bytes_as_threads(tmp_path, dataset_dir, decode_ahead,
                                                       epochs, k_epochs):
    """Carried frames (decode_ahead) come back through shared memory and are read from disk
    by a later window's pass, through the daemon's store."""
    plan = plan_of(tmp_path, dataset_dir, epochs=epochs, k_epochs=k_epochs)
    threads, thread_stats = await views_made(tmp_path, plan, "threads", decode_ahead=decode_ahead)
    processes, process_stats = await views_made(tmp_path, plan, "processes",
                                                decode_ahead=decode_ahead)
    assert None not in threads.values() and len(threads) == plan.epochs * plan.iterations_per_epoch
    assert processes == threads
    # the workers' counters reach the daemon's (their values depend on how passes interleave)
    for counter in ("frames_decoded", "aug_ops", "crop_ops"):
        assert process_stats.get(counter) > 0 and thread_stats.get(counter) > 0, counter
    if decode_ahead:
        assert process_stats.get("frames_from_disk") > 0
        assert process_stats.get("clips_made_ahead") > 0


def test_a_batch_buffer_in_shared_memory_is_found_by_its_descriptor():
    whole = shm.shared_empty(4096)
    array = whole[128:].view(np.float32).reshape(4, -1)
    fd, offset = shm.locate(array)
    assert offset == 128 and os.fstat(fd).st_size == 4096
    with pytest.raises(ValueError):
        shm.locate(np.empty(4))


async def test_the_ledger_counts_the_workers_shared_memory(tmp_path, dataset_dir):
    plan = plan_of(tmp_path, dataset_dir)
    seen = []
    with ObjectStore(str(tmp_path / "cache"), 1 << 30) as store:
        made = scheduler(plan, "processes", store)

        def count() -> None:
            memory = made.memory
            frames = sum(job.frame_bytes for job in made.running.values())
            seen.append((memory.used_bytes, made.board.memory_bytes + frames + made.carry.nbytes,
                         made.pool.shared_bytes()))

        views = await read_all(plan, made, after_read=count)
    assert None not in views.values()
    assert all(used == others + scratch for used, others, scratch in seen)
    assert any(scratch > 0 for *_, scratch in seen)  # clips went to the store through it
    assert made.pool.shared_bytes() == 0  # the workers stopped with the scheduler


def written_by_a_child(nbytes: int) -> np.ndarray:
    """A shared buffer whose pages another process wrote (none mapped in this one yet)."""
    array = shm.shared_empty(nbytes)
    fd, _ = shm.locate(array)
    child = os.fork()
    if child == 0:
        np.frombuffer(mmap.mmap(fd, nbytes), np.uint8)[:] = 7
        os._exit(0)
    os.waitpid(child, 0)
    return array


def faults_reading(array: np.ndarray) -> int:
    into = np.ones_like(array)  # its own pages touched before
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    np.copyto(into, array)
    assert into[-1] == 7
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_a_batch_a_worker_wrote_is_mapped_before_the_loop_serves_it():
    """The job's thread maps a clip's pages as it is handed over (without the GIL), so the
    FUSE loop's copy of the batch takes no page faults."""
    plain = faults_reading(written_by_a_child(4 << 20))
    assert plain >= 32  # one a 64 KiB at most
    ready = written_by_a_child(4 << 20)
    if not shm.populate(ready):
        pytest.skip("MADV_POPULATE_READ needs Linux 5.14")
    assert faults_reading(ready) * 4 < plain


def test_shared_memory_is_named_nowhere_in_dev_shm():
    """Shared memory is memfds: nothing is named in /dev/shm, so a daemon killed with SIGKILL
    leaves nothing behind there, whatever its workers held."""
    before = set(os.listdir("/dev/shm"))
    buffer = shm.shared_empty(1 << 20)
    buffer[:] = 1
    assert set(os.listdir("/dev/shm")) == before
    fd, _ = shm.locate(buffer)
    assert os.readlink(f"/proc/self/fd/{fd}").startswith(f"/memfd:{shm.NAME}")


def two_tasks_apart(tmp_path, dataset_dir) -> dict:
    """`plain` and `bad` on videos of their own (no pass serves both), two epochs a window."""
    configs = []
    for task, folder in (("plain", "archery"), ("bad", "bowling")):
        videos = tmp_path / task / folder
        shutil.copytree(dataset_dir / folder, videos)
        configs.append(write_config(tmp_path / f"{task}.yaml", task_config(
            videos.parent, task=task, epochs=4, engine={"k_epochs": 2},
            sampling={"videos_per_batch": 1})))
    return build_plans(configs)


@pytest.mark.parametrize("fault", ["decode:1:kill9:bad", "decode:*:raise:bad",
                                   "augment:2:raise:bad"])
async def test_a_worker_killed_or_failing_fails_its_own_jobs_alone(tmp_path, dataset_dir,
                                                                   monkeypatch, fault):
    """The fault fires in the workers (they inherit SANDFS_FAULT; this process parsed it at
    import): killed with SIGKILL at its first decode for `bad`, each worker fails that job, is
    replaced, and the next one dies likewise; `plain`'s batches are all served, the same
    bytes as without the fault."""
    monkeypatch.setenv("SANDFS_FAULT", fault)
    plans = two_tasks_apart(tmp_path, dataset_dir)
    stats = Stats()
    made = Scheduler(list(plans.values()), Materializer(stats), stats, workers=2,
                     memory_limit_bytes=1 << 30, limiter=trio.CapacityLimiter(2),
                     execution="processes")
    got = await read_every_view(made, plans)
    monkeypatch.delenv("SANDFS_FAULT")
    stats = Stats()
    clean = await read_every_view(Scheduler(list(plans.values()), Materializer(stats), stats,
                                            workers=2, memory_limit_bytes=1 << 30,
                                            limiter=trio.CapacityLimiter(2)), plans)
    plain = {k: v for k, v in got.items() if k[0] == "plain"}
    assert plain == {k: v for k, v in clean.items() if k[0] == "plain"}
    assert all(isinstance(v, bytes) for v in plain.values())
    failed = {k: v for k, v in got.items() if k[0] == "bad" and isinstance(v, str)}
    assert failed
    if "kill9" in fault:
        assert len(failed) == len([k for k in got if k[0] == "bad"])
        assert all("worker process died (signal SIGKILL)" in v for v in failed.values())
    else:
        assert all("RuntimeError: injected fault at " in v for v in failed.values()), failed


@pytest.mark.parametrize("exc", [
    DecodeError("cls/clip", "OSError: Too many levels of symbolic links"),
    ScanMismatch("cls/clip", "/data/cls/clip.mp4", "40 frames", "39"),
    FileNotFoundError(2, "gone", "/data/x.mp4"), ValueError("plain"),
])
def test_a_job_s_exception_reaches_the_daemon_as_it_was_raised(exc):
    """The reason a failed batch reads in status.json and the log is a thread's: DecodeError
    takes other arguments than its message and did not survive pickling (it came as
    `RuntimeError: DecodeError: ...`)."""
    back = pickle.loads(pickle.dumps(_portable(exc)))
    assert type(back) is type(exc)
    assert (str(back), back.args, vars(back)) == (str(exc), exc.args, vars(exc))


def test_a_job_worker_opens_only_the_sources_passed_to_it(tmp_path):
    source = tmp_path / "v.mp4"
    source.write_bytes(b"video bytes")
    other = tmp_path / "w.mp4"
    other.write_bytes(b"other")
    fd = os.open(source, os.O_RDONLY)
    try:
        os.lseek(fd, 3, os.SEEK_SET)  # read from the start all the same
        missing = FileNotFoundError(2, "gone")
        with passed_sources({str(source): fd, str(other) + ".x": missing}):
            with open_regular_file(str(source)) as file:
                assert file.read() == b"video bytes"
            with pytest.raises(PermissionError, match="opens only what the daemon passed"), \
                    open_regular_file(str(other)):
                pass
            with pytest.raises(FileNotFoundError), open_regular_file(str(other) + ".x"):
                pass
        with open_regular_file(str(other)) as file:  # the daemon's own opens are as before
            assert file.read() == b"other"
        os.fstat(fd)  # still the caller's
    finally:
        os.close(fd)


async def test_a_pass_in_a_worker_pauses_and_resumes_where_it_stopped(tmp_path, dataset_dir,
                                                                      monkeypatch):
    """Each pass asked to pause at its first chance (as for a blocked reader's job) keeps its
    decoder in its worker, which a later run resumes: the same bytes as threads. The gate held
    open, every pass asks at its first clip's end and waits for the answer: no race."""
    plan = plan_of(tmp_path, dataset_dir)
    threads, _ = await views_made(tmp_path, plan, "threads")
    asked, paused = set(), []

    def once(self, job) -> bool:  # where a pass may pause (`_pauses`: one a worker at most)
        first = job.key not in asked
        asked.add(job.key)
        return first

    monkeypatch.setattr(Scheduler, "_should_pause", once)
    monkeypatch.setattr(Scheduler, "_readers_blocked", lambda self: True)
    with ObjectStore(str(tmp_path / "cache-paused"), 1 << 30) as store:
        made = scheduler(plan, "processes", store)
        real_pause = made.passes.pause
        monkeypatch.setattr(made.passes, "pause",
                            lambda key, step: (paused.append(key), real_pause(key, step)))
        assert await read_all(plan, made) == threads
    # every pass asked paused at once (and, the bytes being whole, resumed)
    assert asked and len(paused) == len(asked) and set(paused) == asked


async def test_a_pass_in_a_worker_gives_its_worker_to_the_job_a_blocked_reader_waits_for(
        tmp_path, dataset_dir):
    """One worker, as in threads (`test_scheduler`): a pass left with no clip the reader waits
    for pauses at a clip's end (the gate is open while a reader waits) for the job of the
    batch it waits for, then resumes where it stopped, to the same bytes. Each pass told to
    pause pauses there and then: the answer is the worker's to wait for."""
    plan = plan_of(tmp_path, dataset_dir)
    threads, _ = await views_made(tmp_path, plan, "threads", workers=1)
    told, paused = [], []
    with ObjectStore(str(tmp_path / "cache-one"), 1 << 30) as store:
        made = scheduler(plan, "processes", store, workers=1)
        real_told, real_pause = made.passes.will_pause, made.passes.pause

        def will_pause(key) -> None:
            assert made.passes.room()  # one paused a worker at most
            told.append(key)
            real_told(key)

        made.passes.will_pause = will_pause
        made.passes.pause = lambda key, step: (paused.append(key), real_pause(key, step))
        assert await read_all(plan, made) == threads
    assert paused and paused == told


def test_a_pass_asks_whether_to_pause_only_while_the_gate_is_open():
    """Closed (no reader blocked), a clip's end costs a worker a read of shared memory and
    the daemon nothing; open, the worker asks and waits for the answer."""
    ours, theirs = socket.socketpair()
    gate = shm.shared_empty(1)
    ask = PauseAsker(Channel(theirs), gate)
    daemon = Channel(ours)
    assert ask() is False
    ours.setblocking(False)
    with pytest.raises(BlockingIOError):
        ours.recv(1)  # nothing was sent
    ours.setblocking(True)
    gate[0] = 1
    for answer in (True, False):
        daemon.send(answer)  # the answer may come before the question is read
        assert ask() is answer
        assert daemon.recv()[0] == (ASK,)
    ours.close()
    theirs.close()


async def test_a_pass_failing_while_paused_in_a_worker_gives_the_worker_back(
        tmp_path, dataset_dir, monkeypatch):
    """A pass paused in a worker whose job failed meanwhile (its hand-over raised in the loop)
    was dropped with its worker still lent: after as many as the pool has processes, every
    next job waited for one for good, the daemon idle and a reader unanswered. Now it ends in
    its worker first, then fails; its views fail, the others are the threads' bytes."""
    plan = plan_of(tmp_path, dataset_dir)
    threads, _ = await views_made(tmp_path, plan, "threads", workers=1)
    broken, paused = set(), []
    real_record = Scheduler._record

    def record(self, job, part) -> None:  # the first parts of three passes: a hand-over bug
        if isinstance(job, VideoJob) and len(broken) < 3 and job.key not in broken:
            broken.add(job.key)
            raise RuntimeError("injected hand-over failure")
        real_record(self, job, part)

    monkeypatch.setattr(Scheduler, "_record", record)
    monkeypatch.setattr(Scheduler, "_readers_blocked", lambda self: True)
    monkeypatch.setattr(Scheduler, "_should_pause", lambda self, job: job.key in broken)
    made = scheduler(plan, "processes", workers=1)  # two processes: three leaks hang it
    real_pause, real_close, real_steps = made.passes.pause, made.pool.close, made.pool.steps
    made.passes.pause = lambda key, step: (paused.append(key), real_pause(key, step))
    passes, leaked = [], []

    def steps(*args):
        passes.append(real_steps(*args))
        return passes[-1]

    def close() -> None:  # as the scheduler stops: no worker lent to a job that ended
        lent = [id(w) for w in made.pool._workers._lent.values()]
        leaked.extend(p.job.key for p in passes
                      if id(p.worker) in lent and p.job.key not in made.running)
        real_close()

    made.pool.steps, made.pool.close = steps, close

    async def every_job_ended() -> None:
        # a pass resumed as the scheduler stops is cancelled before it runs: its job leaves
        # `running`, its worker lent till the pool stops it, which `close` would call a leak
        while made.running:
            await made._next_wakeup()  # each job's end wakes the scheduler

    # what hung: jobs waiting for a worker (freed by closing the pool), a reader for a batch
    # no job would make nor fail (ended by the time limit)
    watchdog = threading.Timer(60, made.pool.close)
    watchdog.start()
    try:
        with trio.fail_after(90):
            got = await read_every_view(made, {plan.name: plan}, before_stop=every_job_ended)
    finally:
        watchdog.cancel()
    assert len(broken) == 3 and set(paused) <= broken and paused
    failed = {(e, i) for (_, e, i), data in got.items() if isinstance(data, str)}
    assert failed and all("injected hand-over failure" in got[plan.name, e, i]
                          for e, i in failed)
    assert {(e, i): v for (_, e, i), v in got.items() if (e, i) not in failed} == {
        k: v for k, v in threads.items() if k not in failed}
    assert not leaked  # none kept by a pass dropped paused


@pytest.mark.parametrize("how", ["thread_raise", "process_raise"])
async def test_a_custom_step_registered_in_code_runs_and_fails_in_a_worker_as_in_a_thread(
        tmp_path, dataset_dir, how):
    """Steps this process registered (not by entry point) are imported by the workers as
    this process did; a failing one fails the views that need it with the same reason."""
    step, reason = FAILING[how]
    plans = with_both_kinds(tmp_path, dataset_dir, step)
    stats = Stats()
    made = Scheduler(list(plans.values()), Materializer(stats), stats, workers=2,
                     memory_limit_bytes=1 << 28, limiter=trio.CapacityLimiter(2),
                     execution="processes")
    got = await read_every_view(made, plans)
    bad, step_name = plans["bad"], next(iter(step))
    for (name, epoch, iteration), data in got.items():
        if name == "bad" and uses_step(bad, epoch, iteration, step_name):
            assert data == reason
        else:
            assert data == reference_view(plans[name], epoch, iteration), (name, epoch)


async def test_workers_holding_paused_passes_stop_quietly_with_the_scheduler(
        tmp_path, dataset_dir, monkeypatch, capfd):
    """A worker stopped mid-pass (the daemon unmounting while a pass is paused) exits
    without a traceback in the daemon's log, and none is left running. Passes of four epochs
    have clips enough that a pass asked to pause at its first clip's end does pause."""
    plan = plan_of(tmp_path, dataset_dir, epochs=8, k_epochs=4)
    monkeypatch.setattr(Scheduler, "_should_pause", lambda self, job: True)
    monkeypatch.setattr(Scheduler, "_readers_blocked", lambda self: True)
    made = scheduler(plan, "processes")
    workers = []
    async with trio.open_nursery() as nursery:
        real_pause = made.passes.pause

        def pause_then_stop(key, step) -> None:  # the scheduler stops with a pass paused
            real_pause(key, step)
            workers.extend(w.process for w in made.pool._workers._lent.values())
            nursery.cancel_scope.cancel()

        made.passes.pause = pause_then_stop
        await nursery.start(made.run)
        made.opened(plan.name, 0, 0)
        await trio.sleep(20)
        nursery.cancel_scope.cancel()
    assert workers  # the test shows something
    for process in workers:
        assert process.wait(timeout=10) == 0
    assert "Traceback" not in capfd.readouterr().err
