"""bench_scale's join figure (`joined_record`): the other task's reads during the join are
timed, and a read of it that fails fails the record instead of reporting no read as 0 s."""

from __future__ import annotations

import errno
import time

import bench_scale
import numpy as np
import pytest
import yaml


def mount_like(tmp_path):
    """A folder standing for the mount (its `.sand/tasks/`) and the first task's config."""
    (tmp_path / ".sand" / "tasks").mkdir(parents=True)
    config = tmp_path / "first.yaml"
    config.write_text(yaml.safe_dump({"task": "first", "seed": 3}))
    return tmp_path, config


def reads_of(tmp_path, fails_at: int | None):
    def read_batch(mountpoint, task, iteration):
        if task == "joined":
            written = yaml.safe_load((tmp_path / ".sand" / "tasks" / "joined.yaml").read_text())
            assert written == {"task": "joined", "seed": 4}
        elif iteration == fails_at:
            raise OSError(errno.EIO, "Input/output error")
        time.sleep(0.05)
        return np.zeros(1)
    return read_batch


def test_the_join_and_the_other_task_s_reads_are_timed(tmp_path, monkeypatch):
    mountpoint, config = mount_like(tmp_path)
    monkeypatch.setattr(bench_scale, "read_batch", reads_of(tmp_path, fails_at=None))
    record = bench_scale.joined_record(mountpoint, config, "first")
    assert 0.04 <= record["joined_first_batch_s"] < 1
    assert record["other_read_during_join_s"] >= 0.04
    assert record["other_read_before_s"] >= 0.04


def test_a_failed_read_of_the_other_task_fails_the_record(tmp_path, monkeypatch):
    mountpoint, config = mount_like(tmp_path)
    monkeypatch.setattr(bench_scale, "read_batch", reads_of(tmp_path, fails_at=3))
    with pytest.raises(RuntimeError, match="first's read 3 failed") as failed:
        bench_scale.joined_record(mountpoint, config, "first")
    assert isinstance(failed.value.__cause__, OSError)
