"""The harness's own failure paths (pyfuse3's fixture had a bug exactly there), and the fault
points: a failure while serving gives EIO for the views that need it, is logged, and the log
gate notices it."""

from __future__ import annotations

import contextlib
import errno
import os

import pytest

from tests.helpers.harness import is_mounted, mount_sandfs, task_config, write_config


def test_a_daemon_that_cannot_start_leaves_nothing(tmp_path, dataset_dir):
    config = task_config(dataset_dir, sampling={"videos_per_batch": 99, "drop_last": True})
    path = write_config(tmp_path / "t.yaml", config)
    with pytest.raises(RuntimeError, match="exited with 1 before mounting"), \
            mount_sandfs(tmp_path, [path]):
        pass
    assert not is_mounted(tmp_path / "mnt")


def test_a_failing_test_body_is_torn_down(tmp_path, config_path):
    holder = {}
    with pytest.raises(ZeroDivisionError), mount_sandfs(tmp_path, [config_path]) as m:
        holder["m"] = m
        holder["busy"] = open(m.path("t0", "0", "0", "view"), "rb")  # noqa: SIM115 - open on purpose
        1 / 0  # noqa: B018
    assert not is_mounted(holder["m"].mountpoint)
    assert holder["m"].process.poll() is not None
    with contextlib.suppress(OSError):  # its mount is gone; closed only so nothing leaks
        holder["busy"].close()


def test_a_decode_failure_is_eio_and_caught_by_the_log_gate(tmp_path, config_path):
    env = {"SANDFS_FAULT": "after_decode:1:raise"}
    with pytest.raises(AssertionError, match="error lines, expected 0"), \
            mount_sandfs(tmp_path, [config_path], env=env) as m:
        failed = 0
        for iteration in os.listdir(m.path("t0", "0")):
            try:
                m.path("t0", "0", iteration, "view").read_bytes()
            except OSError as exc:
                assert exc.errno == errno.EIO
                failed += 1
        assert failed >= 1  # the views of the failed video; the others are served
        assert os.getxattr(m.path("t0", "1", "0", "view"), "user.sand.state") in (
            b"planned", b"materializing", b"ready", b"failed")


def test_expected_errors_can_be_declared(tmp_path, config_path):
    env = {"SANDFS_FAULT": "after_decode:1:raise"}
    with mount_sandfs(tmp_path, [config_path], env=env) as m:
        for iteration in os.listdir(m.path("t0", "0")):
            with contextlib.suppress(OSError):
                m.path("t0", "0", iteration, "view").read_bytes()
        m.expected_log_errors = 1  # one failed video, logged once
