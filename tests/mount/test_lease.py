"""Leases: a task registered with hold=True ends when its registrar lets go, however it ends
(close, exit, SIGKILL); a task registered without one (hold=False, the CLI) outlives its
registrar."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from sandfs.client import prepare_task, register_task
from sandfs.config.loader import ConfigError
from sandfs.config.schema import Shard
from sandfs.errors import UserError
from tests.helpers.harness import mount_sandfs, sandfs_command, task_config, write_config

GONE_WITHIN_SECONDS = 5.0

REGISTRAR = """
import sys, time
from sandfs.client import register_task
handle = register_task(sys.argv[1], sys.argv[2], hold=sys.argv[3] == "hold")
print("registered", flush=True)
time.sleep(600)
"""


def tasks_on(mountpoint) -> set[str]:
    return set(json.loads((mountpoint / ".sand" / "status.json").read_bytes())["tasks"])


def wait_gone(mountpoint, task: str) -> float:
    started = time.monotonic()
    while task in tasks_on(mountpoint):
        assert time.monotonic() - started < GONE_WITHIN_SECONDS, f"{task} still registered"
        time.sleep(0.05)
    return time.monotonic() - started


def start_registrar(mountpoint, config, mode: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", REGISTRAR, str(mountpoint), str(config),
                                mode], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "registered"
    return process


def test_a_killed_holder_ends_its_task_and_an_unheld_task_stays(tmp_path, dataset_dir):
    base = write_config(tmp_path / "base.yaml", task_config(dataset_dir, task="base"))
    held = write_config(tmp_path / "held.yaml", task_config(dataset_dir, task="held"))
    free = write_config(tmp_path / "free.yaml", task_config(dataset_dir, task="free"))
    with mount_sandfs(tmp_path, [base]) as m:
        holder = start_registrar(m.mountpoint, held, "hold")
        loose = start_registrar(m.mountpoint, free, "free")
        try:
            assert tasks_on(m.mountpoint) == {"base", "held", "free"}
            assert m.path("held", "0", "0", "view").read_bytes()[:6] == b"\x93NUMPY"
            holder.send_signal(signal.SIGKILL)
            loose.send_signal(signal.SIGKILL)
            holder.wait(timeout=10)
            loose.wait(timeout=10)
            wait_gone(m.mountpoint, "held")
            time.sleep(0.5)
            assert tasks_on(m.mountpoint) == {"base", "free"}  # no lease: it outlives its writer
            assert not m.path("held").exists()
            cli = subprocess.run(sandfs_command("task", "add", str(m.mountpoint), str(held)),
                                 capture_output=True, text=True)
            assert cli.returncode == 0, cli.stderr
            time.sleep(0.5)
            assert tasks_on(m.mountpoint) == {"base", "free", "held"}  # the CLI has exited
        finally:
            for process in (holder, loose):
                if process.poll() is None:
                    process.kill()
                    process.wait()
                process.stdout.close()


def test_a_handle_ends_its_task_on_close(tmp_path, dataset_dir):
    base = write_config(tmp_path / "base.yaml", task_config(dataset_dir, task="base"))
    with mount_sandfs(tmp_path, [base]) as m:
        config = task_config(dataset_dir, task="ignored", epochs=2)
        with register_task(m.mountpoint, config, name="trial", hold=True) as handle:
            view = handle.view
            assert (view.task, view.epochs, view.iterations_per_epoch) == ("trial", 2, 3)
            assert view.path(1, 2) == str(m.path("trial", "1", "2", "view"))
            with open(view.path(1, 2), "rb") as f:  # the same pipeline and seed: same batch
                assert f.read() == m.path("base", "1", "2", "view").read_bytes()
            assert np.array_equal(view.read(1, 2), np.load(m.path("base", "1", "2", "view")))
            with pytest.raises(IndexError):
                view.path(2, 0)
            with pytest.raises(UserError, match="already registered"):
                register_task(m.mountpoint, config, name="trial")
        assert tasks_on(m.mountpoint) == {"base"}  # ended synchronously by close()
        # the same name again: a new registration, a new lease, ended by dropping it
        again = register_task(m.mountpoint, config, name="trial")
        os.close(again._lease_fd)  # as a killed process would: only the lease goes
        again._lease_fd = None
        wait_gone(m.mountpoint, "trial")
        again.close()  # the YAML is gone already: nothing to do
        unheld = register_task(m.mountpoint, config, name="kept", hold=False)
        assert not unheld.held
        unheld.close()
        assert tasks_on(m.mountpoint) == {"base"}


def test_prepare_task_names_ranks_and_reports_errors_with_lines(tmp_path, dataset_dir):
    config = task_config(dataset_dir, task="ddp")
    prepared = prepare_task(config, shard=Shard(4, 3))
    assert prepared.config.task == "ddp.r3"
    assert prepared.config.dataset.sampling.shard == Shard(4, 3)
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: bad\nseed: x\nepochs: 1\ndataset: {}\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:2:7: seed"):
        prepare_task(bad)
    with pytest.raises(UserError, match="not a live sandfs mount"):
        register_task(tmp_path, config)
