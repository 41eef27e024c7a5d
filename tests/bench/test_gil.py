"""The GIL measurement of the benchmarks (benchmarks/gil.py): py-spy's samples summed by thread
role, and a real daemon sampled while a reader reads its views. The figure is a benchmark's;
here only that the measurement runs and adds up."""

from __future__ import annotations

import subprocess
import time

import pytest
from common import MixedDatasetSpec, VideoKind, sandfs_mount
from gil import (
    GilProfile,
    GilSampler,
    by_function,
    on_cpu_share,
    parse_raw,
    py_spy,
    thread_role,
)
from test_bench_mount import task_config

from sandfs import reading

RAW = """\
thread (0x7F0A): MainThread;<module> (sandfs/__main__.py:5);run (trio/_core/_run.py:2532) 30
thread (9563): None from job VideoJobKey(window=0, path='a.mp4');Thread._bootstrap (x.py:1) 12
thread (9564): None from job VideoJobKey(window=1, path='b.mp4');Thread._bootstrap (x.py:1) 8
thread (9565): plan from planner;Thread._bootstrap (threading.py:1002) 5
thread (9566): scan-ahead_0;Thread._bootstrap (threading.py:1002) 1
thread (9567);Thread._bootstrap (threading.py:1002) 2
py-spy> a line that is not a sample
"""


def test_samples_are_summed_by_thread_and_role():
    assert parse_raw(RAW) == {(None, "loop"): 30, (9563, "job VideoJobKey"): 12,
                              (9564, "job VideoJobKey"): 8, (9565, "plan"): 5,
                              (9566, "scan-ahead"): 1, (9567, "unnamed"): 2}
    assert thread_role("pread from <nursery>") == "pread"


def test_a_role_s_samples_are_summed_by_function_each_once_a_stack():
    raw = RAW + ("thread (0x7F0A): MainThread;run (trio/_core/_run.py:2532);"
                 "read (sandfs/fuse/operations.py:9);read (sandfs/fuse/operations.py:12) 4\n")
    total, under = by_function(raw)
    assert total == 34
    assert under["run (trio/_core/_run.py)"] == 34
    assert under["read (sandfs/fuse/operations.py)"] == 4  # recursive: counted once
    assert by_function(raw, "plan")[1]["Thread._bootstrap (threading.py)"] == 5


def test_a_thread_preempted_while_holding_the_gil_is_counted_for_its_time_on_a_cpu():
    before = {7: (1_000, 500), 8: (0, 0)}
    after = {7: (4_000, 1_500), 8: (2_000, 0), 9: (300, 100)}
    assert on_cpu_share(before, after, 7) == 0.75
    assert on_cpu_share(before, after, 8) == 1.0
    assert on_cpu_share(before, after, 9) == 0.75  # born meanwhile
    assert on_cpu_share(before, after, 10) == 1.0  # gone: unknown
    assert on_cpu_share(before, after, None) == 1.0


def test_the_figures_per_batch_add_up():
    profile = GilProfile(250, {"loop": 0.12, "job VideoJobKey": 0.08},
                         {"loop": 0.06, "job VideoJobKey": 0.04}, lagging=False)
    figures = profile.per_batch(10, wall_s=0.5)
    assert figures["gil_ms_per_batch"] == 20.0
    assert figures["gil_ms_per_batch_loop"] == 12.0
    assert figures["gil_ms_per_batch_threads"] == 8.0
    assert figures["gil_ms_per_batch_by_role"] == {"loop": 12.0, "job VideoJobKey": 8.0}
    assert figures["gil_cpu_ms_per_batch"] == 10.0
    assert figures["gil_cpu_ms_per_batch_loop"] == 6.0
    assert figures["gil_ceiling_batches_per_s"] == 100.0  # from the time on a CPU
    assert figures["gil_held_share"] == 0.4
    assert profile.per_gb(2 * 10**9) == {"gil_ms_per_gb": 100.0, "gil_cpu_ms_per_gb": 50.0,
                                         "gil_cpu_ms_per_gb_loop": 30.0,
                                         "gil_sampler_lagging": False}
    with pytest.raises(ValueError, match="no batch"):
        profile.per_batch(0)


@pytest.mark.skipif(py_spy() is None, reason="py-spy is not installed (the bench extra)")
def test_a_daemon_serving_views_is_sampled_by_thread(tmp_path):
    dataset = tmp_path / "videos"
    MixedDatasetSpec(classes=1, videos_per_class=4, kinds=(VideoKind("libx264", ".mp4", 96, 64),),
                     seconds=(2, 2), gop_frames=25).write(dataset)
    config = task_config(dataset, tmp_path / "clips.yaml")
    with (sandfs_mount(tmp_path, [config], k_epochs=1, workers=1) as mount,
          GilSampler(mount.pid, rate_hz=500) as sampler):
        views = [mount.mountpoint / "clips" / "0" / str(i) / "view" for i in range(2)]
        until = time.monotonic() + 1.0  # past the page cache: every read asks the daemon
        while time.monotonic() < until:
            assert all(reading.read_view(view).shape[0] == 2 for view in views)
    profile = sampler.profile
    assert 0 < profile.held_cpu_s <= profile.held_s
    assert "loop" in profile.by_role_s  # the trio thread answered the reads
    assert profile.per_batch(2)["gil_ms_per_batch"] > 0


@pytest.mark.skipif(py_spy() is None, reason="py-spy is not installed (the bench extra)")
def test_a_process_it_cannot_sample_is_an_error_with_py_spys_words():
    gone = subprocess.Popen(["true"])
    gone.wait()
    with pytest.raises(RuntimeError, match="py-spy wrote no samples"), GilSampler(gone.pid):
        time.sleep(0.5)
