"""Custom steps out of process (sandfs/ops/isolated.py): the same bytes as in process, and a
step that crashes, exits, raises or hangs fails only its own calls, within its timeout, with no
worker process or shared memory segment left behind."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import custom_ops
import numpy as np
import pytest

from sandfs import ops as oplib
from sandfs.ops import isolated
from sandfs.ops.base import OpInstance, OpType
from tests.helpers.processes import segments_of

custom_ops.register()


def worker_pids() -> set[int]:
    """Live worker processes started by this process."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and b"worker_main" in cmdline:
            found.add(int(entry))
    return found


@pytest.fixture
def clean_pool():
    isolated.shutdown()
    yield
    isolated.shutdown()
    assert worker_pids() == set(), "worker processes left behind"
    assert segments_of(os.getpid()) == set(), "shared memory segments left behind"


def clip(frames: int = 3, height: int = 24, width: int = 32) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(frames)]


def misbehave(how: str) -> OpInstance:
    return OpInstance("test_misbehave", oplib.validate_op("test_misbehave", {"how": how}))


def test_an_isolated_op_gives_the_bytes_it_gives_in_process(clean_pool):
    frames = clip()
    inst = OpInstance("test_gamma", oplib.validate_op("test_gamma", {"gamma": 0.7}))
    out = oplib.apply_instance(inst, frames)  # through a worker process
    expected = custom_ops.Gamma().apply_clip({"gamma": 0.7}, {}, frames)
    assert [a.tobytes() for a in out] == [b.tobytes() for b in expected]
    assert all(a.dtype == np.uint8 and a.flags.c_contiguous for a in out)
    status = isolated.status()
    assert status["calls"] == 1 and status["processes"] == 1 and status["failed"] == 0
    assert worker_pids()  # kept for the next call
    # in a chain: the built-in flip in process, the custom step out of it
    flip = OpInstance("flip", oplib.validate_op("flip", {}))
    got = oplib.apply_chain([flip, inst], frames)
    assert np.array_equal(np.stack(got), np.stack(
        [custom_ops.Gamma().apply({"gamma": 0.7}, {}, f[:, ::-1]) for f in frames]))


@pytest.mark.parametrize(("how", "reason"), [
    ("segfault", "worker process died (signal SIGSEGV)"),
    ("exit", "worker process died (exit code 3)"),
    ("raise", "ValueError: told to raise"),
    ("hang", "no result within timeout_s (1.5 s)"),
])
def test_a_failing_op_fails_only_its_calls(clean_pool, how, reason):
    frames = clip()
    started = time.monotonic()
    with pytest.raises(isolated.IsolatedOpError, match=reason.replace("(", r"\(").replace(
            ")", r"\)")):
        oplib.apply_instance(misbehave(how), frames)
    assert time.monotonic() - started < 1.5 + 10
    # the pool goes on: the next call gets a working (replaced) worker
    assert [f.tobytes() for f in oplib.apply_instance(misbehave("ok"), frames)] == [
        f.tobytes() for f in frames]
    status = isolated.status()
    assert status["failed"] == 1 and reason in status["failures"][0]
    assert status["workers_replaced"] == (0 if how == "raise" else 1)


def test_a_worker_killed_while_idle_is_replaced_before_the_next_call(clean_pool):
    frames = clip()
    oplib.apply_instance(misbehave("ok"), frames)
    (pid,) = worker_pids()
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    assert [f.tobytes() for f in oplib.apply_instance(misbehave("ok"), frames)] == [
        f.tobytes() for f in frames]
    status = isolated.status()
    assert status["failed"] == 0 and status["workers_replaced"] == 1
    assert worker_pids() != {pid}


def test_concurrent_calls_share_the_pool(clean_pool):
    frames = clip(frames=2)
    gammas = [0.3, 0.5, 0.7, 0.9, 1.1, 1.3]

    def run(gamma):
        inst = OpInstance("test_gamma", (("gamma", gamma),))
        return np.stack(oplib.apply_instance(inst, frames))

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, gammas))
    for gamma, got in zip(gammas, results, strict=True):
        assert np.array_equal(got, np.stack(custom_ops.Gamma().apply_clip(
            {"gamma": gamma}, {}, frames)))
    assert isolated.status()["processes"] <= isolated.POOL_PROCESSES


def test_an_op_whose_output_contradicts_its_shape_fails(clean_pool):
    with pytest.raises(isolated.IsolatedOpError, match=r"returned \(1, 2, 32, 3\) uint8, its "
                       r"output_shape says \(1, 24, 32, 3\)"):
        oplib.apply_instance(misbehave("shape"), clip(frames=1))


@pytest.mark.parametrize(("attrs", "fragment"), [
    ({"isolation": "elsewhere"}, "isolation must be one of"),
    ({"isolation": "process", "timeout_s": 0}, "timeout_s must be a positive number"),
    ({"isolation": "process", "__module__": "__main__"}, "importable module"),
])
def test_registration_checks_the_isolation(attrs, fragment):
    op_type = type("Local", (OpType,), {"name": "test_bad_isolation", **attrs})
    with pytest.raises(ValueError, match=fragment):
        oplib.register_op(op_type)


def test_a_calls_segments_are_named_for_the_daemon_and_unlinked(clean_pool):
    """While a call runs, its two segments are this process's (not another run's on the same
    machine, which a test or an operator tells apart by the name); when it fails, they go."""
    with ThreadPoolExecutor(1) as pool:
        call = pool.submit(oplib.apply_instance, misbehave("hang"), clip())
        give_up = time.monotonic() + 10
        while len(segments_of(os.getpid())) < 2 and time.monotonic() < give_up:
            time.sleep(0.02)
        assert len(segments_of(os.getpid())) == 2
        with pytest.raises(isolated.IsolatedOpError, match="no result within timeout_s"):
            call.result(timeout=30)
    assert segments_of(os.getpid()) == set()
