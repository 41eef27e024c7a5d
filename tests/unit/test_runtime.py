"""Process-wide settings of the sandfs command and daemon (sandfs/runtime.py) and how the command
exits (sandfs/__main__.py), each checked in a fresh interpreter: the settings only take effect
before numpy is imported or threads start."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from sandfs.plan.window import _plan_window as unpaused_plan_window
from sandfs.plan.window import plan_window
from sandfs.runtime import (
    BLAS_THREADS_ENV,
    GIL_SWITCH_INTERVAL_S,
    HUGE_PAGES_ENV,
    MALLOC_ARENAS,
    collector_paused,
    quick_gil_turns,
)
from tests.helpers.plans import fake_videos, make_plan

ARENAS = textwrap.dedent("""
    import ctypes, re, sys, tempfile, threading
    from sandfs.runtime import limit_malloc_arenas
    if sys.argv[1] == "limit":
        assert limit_malloc_arenas()
    def churn():
        for _ in range(300):
            blocks = [bytearray(2000) for _ in range(200)]
            del blocks
    threads = [threading.Thread(target=churn) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    with tempfile.NamedTemporaryFile() as out:
        stream = ctypes.c_void_p(libc.fopen(out.name.encode(), b"w"))
        libc.malloc_info(0, stream)
        libc.fclose(stream)
        print(len(re.findall("<heap nr=", open(out.name).read())))
""")


def _fresh(code: str, *args: str, env: dict | None = None) -> str:
    """What `code` prints, run in a fresh interpreter (with `args`, in `env`)."""
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=60, check=True, env=env).stdout


def _arenas(mode: str) -> int:
    return int(_fresh(ARENAS, mode))


def test_threads_started_after_the_limit_share_two_malloc_arenas():
    if not hasattr(__import__("ctypes").CDLL(None), "malloc_info"):
        pytest.skip("not glibc")
    unlimited = _arenas("none")
    if unlimited <= MALLOC_ARENAS:
        pytest.skip(f"threads never contended for malloc here ({unlimited} arenas)")
    assert _arenas("limit") <= MALLOC_ARENAS


FAULTS = textwrap.dedent("""
    import resource, sys
    from sandfs.runtime import keep_freed_memory
    if sys.argv[1] == "keep":
        assert keep_freed_memory()
    def a_pass():  # a pass's frames: made, written, all freed at its end
        frames = [bytearray(700_000) for _ in range(60)]
        del frames
    a_pass()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        a_pass()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _faults(mode: str) -> int:
    return int(_fresh(FAULTS, mode))


def test_memory_freed_by_one_pass_is_the_next_pass_s_without_new_page_faults():
    """glibc trims a heap top with twice its mmap threshold free: every pass's frames took
    fresh pages again, at ~1.5 µs a page on this VM (runtime.py)."""
    if not hasattr(__import__("ctypes").CDLL(None), "mallopt"):
        pytest.skip("not glibc")
    default = _faults("default")
    assert default > 5 * 60 * 700_000 // 4096 // 2  # trimmed and touched again, pass by pass
    assert _faults("keep") < default // 10


def test_a_malloc_setting_the_user_made_wins():
    done = _fresh("from sandfs.runtime import keep_freed_memory as k; print(k())",
                  env=os.environ | {"MALLOC_TRIM_THRESHOLD_": "1000000"})
    assert done.strip() == "False"


TRIMMED = textwrap.dedent("""
    import sys
    from sandfs.runtime import keep_freed_memory, trim_free_memory
    assert keep_freed_memory() or sys.argv[1] == "user"
    def rss_mb():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20
    frames = [bytearray(1 << 20) for _ in range(int(sys.argv[2]))]  # at the main heap's top
    del frames  # free, kept there for the next frames
    before = rss_mb()
    trimmed = trim_free_memory(*map(int, sys.argv[3:]))
    print(trimmed, before - rss_mb())
""")


def _trimmed(*args: str, env: dict | None = None) -> tuple[str, int]:
    """Whether a trim ran, and the MB it gave back, after `args[1]` MB freed at the top."""
    ran, given_mb = _fresh(TRIMMED, *args, env=env).split()
    return ran, int(given_mb)


def test_memory_given_back_keeps_the_heap_top_kept_for_the_next_frames():
    """A trim after the scan or a window's parts gives back what was freed but the top that
    `keep_freed_memory` keeps on purpose: `malloc_trim(0)` gave it back too, and the next
    passes faulted their frames in again (runtime.py)."""
    if not hasattr(__import__("ctypes").CDLL(None), "malloc_trim"):
        pytest.skip("not glibc")
    assert _trimmed("ours", "48")[1] < 8  # MB given back
    assert _trimmed("ours", "48", "0")[1] > 40


def test_no_memory_is_given_back_where_the_user_s_malloc_settings_won():
    """Where the user's glibc settings win (`keep_freed_memory`), what malloc keeps is theirs:
    a trim keeping our pad gave back what their trim threshold keeps."""
    if not hasattr(__import__("ctypes").CDLL(None), "malloc_trim"):
        pytest.skip("not glibc")
    keeps = os.environ | {"MALLOC_MMAP_THRESHOLD_": str(32 << 20),
                          "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
    ran, given_mb = _trimmed("user", "128", env=keeps)
    assert ran == "False" and given_mb < 8


def test_the_daemon_s_threads_take_turns_at_the_gil_sooner_than_python_s_default():
    """Job threads drop the GIL for every frame an op makes and wait for it after each
    (runtime.py)."""
    default = sys.getswitchinterval()
    try:
        quick_gil_turns()
        assert sys.getswitchinterval() == pytest.approx(GIL_SWITCH_INTERVAL_S)
        assert sys.getswitchinterval() < default
    finally:
        sys.setswitchinterval(default)


SETTLED = textwrap.dedent("""
    import gc
    import sandfs.daemon
    from sandfs.runtime import settle_collector
    walked = len(gc.get_objects())
    settle_collector()
    class Node:
        pass
    a, b = Node(), Node()
    a.other, b.other = b, a
    del a, b
    print(walked, gc.get_freeze_count(), len(gc.get_objects()), gc.collect())
""")


def test_the_daemon_s_collector_stops_walking_the_objects_its_imports_left():
    """A full collection walked every module's objects with the GIL held (runtime.py)."""
    walked_before, frozen, walked_after, collected = map(int, _fresh(SETTLED).split())
    assert walked_before > 10_000
    assert frozen >= walked_before
    assert walked_after < walked_before / 10
    assert collected >= 2  # what is made afterwards is still collected


def _threads_after_import(env: dict) -> tuple[str, int]:
    code = ("import os, sandfs.__main__, numpy; "
            f"print(os.environ.get('{BLAS_THREADS_ENV}'), len(os.listdir('/proc/self/task')))")
    value, threads = _fresh(code, env=env).split()
    return value, int(threads)


def test_the_command_imports_numpy_without_starting_blas_threads():
    env = {k: v for k, v in os.environ.items() if k != BLAS_THREADS_ENV}
    assert _threads_after_import(env) == ("1", 1)


def test_a_blas_thread_count_the_user_set_is_kept():
    assert _threads_after_import(os.environ | {BLAS_THREADS_ENV: "2"})[0] == "2"


HUGE_PAGES = textwrap.dedent("""
    import sandfs.__main__, numpy as np
    array = np.ones(64 << 20, np.uint8)  # touched: its pages are there
    first, last = array.ctypes.data, array.ctypes.data + array.nbytes
    huge_kb, inside = 0, False
    with open("/proc/self/smaps") as f:  # the advice splits the array's mapping in parts
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start < last and end > first
            elif inside and head == "AnonHugePages:":
                huge_kb += int(line.split()[1])
    print(huge_kb)
""")


def _huge_kb(env: dict) -> int:
    return int(_fresh(HUGE_PAGES, env=env))


def test_the_command_advises_no_huge_pages_for_numpy_arrays():
    """A VM that gives its free memory back to the host made every huge page a host fault
    (runtime.py); the user may still ask for them."""
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
        if "[madvise]" not in f.read():
            pytest.skip("huge pages are not given on advice here")
    env = {k: v for k, v in os.environ.items() if k != HUGE_PAGES_ENV}
    if _huge_kb(env | {HUGE_PAGES_ENV: "1"}) == 0:
        pytest.skip("no huge page to be had here even when asked")
    assert _huge_kb(env) == 0


EXIT = textwrap.dedent("""
    import atexit, sandfs.__main__ as entry
    atexit.register(lambda: print("exit handlers ran"))
    entry.run_command = lambda: print("the answer") or 3

    class Module:
        def __del__(self):
            print("modules unloaded")

    held = Module()  # only the interpreter's teardown would collect it
    entry.main()
    print("not reached")
""")


def test_the_command_leaves_without_unloading_modules_but_runs_exit_handlers():
    done = subprocess.run([sys.executable, "-c", EXIT], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 3
    assert done.stdout.splitlines() == ["the answer", "exit handlers ran"]


def test_no_collection_runs_while_a_window_is_planned_and_the_collector_comes_back(tmp_path):
    """Planning a window makes objects that live as long as it: the collector walked them
    again and again while they were made (26-37% of planning's time)."""
    collections = []

    def count(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    # 1,000 videos: a window of 2,000 clips, tens of thousands of objects
    plan = make_plan(tmp_path, videos=fake_videos(1000), epochs=4, k_epochs=2)
    gc.callbacks.append(count)
    try:
        assert gc.isenabled()
        unpaused_plan_window([plan], 0)
        walked, collections[:] = len(collections), []
        plan_window([plan], 0)
        assert walked > 5 and len(collections) <= 1  # the one after: the plan is walked once
        assert gc.isenabled()
    finally:
        gc.callbacks.remove(count)


def test_the_collector_stays_paused_until_the_last_thread_leaves_and_stays_off_if_it_was():
    entered, leave = threading.Event(), threading.Event()

    def planning():
        with collector_paused():
            entered.set()
            leave.wait(5)

    other = threading.Thread(target=planning)
    other.start()
    entered.wait(5)
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread still plans
    leave.set()
    other.join(5)
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # off before: left off
    finally:
        gc.enable()

