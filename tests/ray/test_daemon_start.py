"""The node daemon (sandfs.ray's actor class, run here in-process) starts sandfs so the
caller's folder never shadows the package: from a folder holding a `sandfs/` directory, as a
Ray job started beside its checkout is, and with that folder on PYTHONPATH, as Ray's
working_dir puts it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sandfs.launch import sandfs_argv, sandfs_env
from tests.helpers.harness import require_fuse, task_config, write_config

pytest.importorskip("ray")
import sandfs.ray as sandray


@pytest.fixture
def clone_beside(tmp_path, monkeypatch):
    """The working directory holds `sandfs/` (a clone's folder, no __init__.py) and is on
    PYTHONPATH."""
    folder = tmp_path / "work"
    (folder / "sandfs").mkdir(parents=True)
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PYTHONPATH", str(folder))
    return folder


def test_the_node_daemon_mounts_from_a_folder_holding_sandfs(tmp_path, dataset_dir,
                                                              clone_beside):
    require_fuse()
    settings = sandray.DaemonSettings(mountpoint=f"{tmp_path}/{{node}}/mnt",
                                      cache_dir=f"{tmp_path}/{{node}}/cache",
                                      mount_args=("--workers", "1"))
    daemon = sandray.NodeDaemon(settings, "node0")
    text = write_config(tmp_path / "t0.yaml", task_config(dataset_dir)).read_text()
    try:
        mount = daemon.ensure_mount("t0", text)
        assert daemon.status()["tasks"].keys() == {"t0"}
        assert os.path.getsize(os.path.join(mount.mountpoint, "t0", "0", "0", "view")) > 0
    finally:
        daemon.stop()
    assert daemon.process is None and not daemon.serving()


def test_the_command_ignores_the_working_directory_and_shadowing_paths(clone_beside):
    done = subprocess.run([*sandfs_argv("--version")], env=sandfs_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "PYTHONPATH" not in sandfs_env()
    shadowed = subprocess.run([sys.executable, "-m", "sandfs", "--version"],
                              capture_output=True, text=True, timeout=60)
    assert "cannot import name" in shadowed.stderr  # what the plain `python -m` did
