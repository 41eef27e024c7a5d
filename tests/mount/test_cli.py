"""The command line and the daemon's life cycle: background mount, status, unmount, signals,
stale mounts left by a killed daemon, and errors that mount nothing."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from sandfs.pids import running
from tests.helpers.harness import (
    forgiving_teardown,
    is_mounted,
    mount_sandfs,
    require_fuse,
    run_cli,
    sandfs_command,
    start_daemon,
    task_config,
    wait_mounted,
    write_config,
)


@pytest.fixture
def background_mount(tmp_path, config_path):
    require_fuse()
    mountpoint = tmp_path / "bg"
    yield mountpoint
    forgiving_teardown(mountpoint, None)
    for line in subprocess.run(["pgrep", "-f", str(mountpoint)], capture_output=True,
                               text=True).stdout.split():
        os.kill(int(line), signal.SIGKILL)


def test_background_mount_status_and_unmount(background_mount, config_path, tmp_path):
    done = run_cli("mount", str(background_mount), "--config", str(config_path),
                   "--cache-dir", str(tmp_path / "cache"))
    assert done.returncode == 0, done.stderr
    assert is_mounted(background_mount)  # mount returns only once it serves
    assert "mounted" in done.stdout
    with open(background_mount / "t0" / "0" / "0" / "view", "rb") as f:
        assert len(f.read()) > 0
    status = run_cli("status", str(background_mount), "--json")
    assert status.returncode == 0
    figures = json.loads(status.stdout)
    assert figures["tasks"]["t0"]["views_served"] == 1
    human = run_cli("status", str(background_mount))
    assert "task t0: epoch 0 iteration 0" in human.stdout
    pid = figures["pid"]
    done = run_cli("unmount", str(background_mount))
    assert done.returncode == 0, done.stderr
    assert not is_mounted(background_mount)
    assert not running(pid)  # unmount waited for the daemon to exit (reaped or not yet)
    log = (tmp_path / "cache" / "sandfs.log").read_text()
    assert "ERROR" not in log and "Traceback" not in log


def test_background_daemon_keeps_none_of_the_callers_descriptors(background_mount, config_path,
                                                                  tmp_path):
    """The daemon is forked from the command: a pipe the caller handed it must reach its end
    once the command returns (a caller waiting for EOF would otherwise wait for the unmount),
    and the daemon answers its own readiness, not the caller's --ready-fd."""
    read_fd, write_fd = os.pipe()
    try:
        done = subprocess.run(
            [*sandfs_command(), "mount", str(background_mount), "--config", str(config_path),
             "--cache-dir", str(tmp_path / "cache"), "--ready-fd", str(write_fd)],
            pass_fds=(write_fd,), capture_output=True, text=True, timeout=120)
        os.close(write_fd)
        write_fd = None
        assert done.returncode == 0, done.stderr
        with os.fdopen(read_fd, "rb") as pipe:
            read_fd = None
            assert pipe.read() == b"ready\n"  # EOF: no other process holds the write end
        pid = json.loads(run_cli("status", str(background_mount), "--json").stdout)["pid"]
        assert os.getsid(pid) == pid  # its own session: the caller's Ctrl-C does not reach it
        assert {0, 1, 2} <= {int(fd) for fd in os.listdir(f"/proc/{pid}/fd")}
        assert os.readlink(f"/proc/{pid}/fd/0") == os.devnull
    finally:
        for fd in (read_fd, write_fd):
            if fd is not None:
                os.close(fd)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signals_unmount_cleanly(tmp_path, config_path, signum):
    with mount_sandfs(tmp_path, [config_path]) as m:
        m.process.send_signal(signum)
        assert m.process.wait(timeout=10) == 0
        deadline = time.monotonic() + 5
        while is_mounted(m.mountpoint) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not is_mounted(m.mountpoint)


def test_stale_mount_of_a_killed_daemon_is_cleaned(tmp_path, config_path):
    require_fuse()
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    process = start_daemon(mountpoint, [config_path], tmp_path / "c", tmp_path / "first.log")
    try:
        wait_mounted(mountpoint, process, tmp_path / "first.log")
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        with pytest.raises(OSError) as caught:  # the reader is not left hanging
            os.stat(mountpoint / "t0")
        assert caught.value.errno in (errno.ENOTCONN, errno.ECONNABORTED)
        assert is_mounted(mountpoint)
        with mount_sandfs(tmp_path, [config_path]) as second:  # the same mountpoint
            assert os.listdir(second.path("t0", "0"))
            assert "stale mount" in second.log_text()
    finally:
        forgiving_teardown(mountpoint, process)


def test_mountpoint_in_use_is_refused(tmp_path, config_path):
    with mount_sandfs(tmp_path, [config_path]) as m:
        done = run_cli("mount", str(m.mountpoint), "--config", str(config_path), "--foreground",
                       "--cache-dir", str(tmp_path / "other-cache"))
        assert done.returncode == 1
        last = done.stderr.strip().splitlines()[-1]  # --foreground logs to stderr before it
        assert last.startswith("sandfs: ") and "busy" in last
        assert os.listdir(m.path("t0"))  # the first mount still serves


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"epochs": 0}, "epochs"),
        ({"seed": "zero"}, "seed"),
        ({"sampling": {"frame_stride": 0}}, "frame_stride"),
        ({"augmentation": []}, "augmentation"),
    ],
)
@pytest.mark.parametrize("mode", [(), ("--foreground",)], ids=["background", "foreground"])
def test_config_errors_mount_nothing(tmp_path, dataset_dir, overrides, fragment, mode):
    """A foreground mount starts its probe worker before it reads the configs: a bad one
    still gives one line (the worker shares stderr, and the command's output ends with it)."""
    config = write_config(tmp_path / "bad.yaml", task_config(dataset_dir, **overrides))
    mountpoint = tmp_path / "mnt"
    done = run_cli("mount", str(mountpoint), "--config", str(config), *mode)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad.yaml:" in lines[0] and fragment in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not is_mounted(mountpoint)


def test_the_command_line_starts_without_numpy_or_opencv():
    """`sandfs status`, `unmount` and a mount's start do not wait for the ops' libraries: a
    config is checked after the mount's probe worker has started (0.1 s)."""
    code = ("import sys, sandfs.cli; "
            "print(sorted({'numpy', 'cv2', 'av', 'trio'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_missing_dataset_and_empty_epochs_are_clear_errors(tmp_path, dataset_dir):
    config = task_config(dataset_dir)
    config["dataset"]["video_dataset_path"] = str(tmp_path / "nowhere")
    done = run_cli("mount", str(tmp_path / "m"), "--config",
                   str(write_config(tmp_path / "a.yaml", config)))
    assert done.returncode == 2 and "video_dataset_path" in done.stderr
    big_batch = task_config(dataset_dir, sampling={"videos_per_batch": 50, "drop_last": True})
    done = run_cli("mount", str(tmp_path / "m"), "--config",
                   str(write_config(tmp_path / "b.yaml", big_batch)), "--cache-dir",
                   str(tmp_path / "c"))
    assert done.returncode == 1 and "fewer than videos_per_batch" in done.stderr, done.stderr
    assert not is_mounted(tmp_path / "m")


def test_mount_help_says_config_repeats_and_is_optional():
    done = run_cli("mount", "--help")
    assert done.returncode == 0
    assert "repeat it for more" in done.stdout and "Without any" in done.stdout


def test_plan_prints_the_merged_plan_without_mounting(tmp_path, dataset_dir):
    slow = write_config(tmp_path / "slow.yaml", task_config(
        dataset_dir, task="slow", seed=1, sampling={"frames_per_video": 6, "frame_stride": 2}))
    mae = write_config(tmp_path / "mae.yaml", task_config(
        dataset_dir, task="mae", seed=2, sampling={"frames_per_video": 3, "frame_stride": 4}))
    done = run_cli("plan", "--config", str(slow), "--config", str(mae), "--epochs", "4")
    assert done.returncode == 0, done.stderr
    assert "plan of 2 task(s) over 3 epochs (k=2, 2 window(s))" in done.stdout  # 3 it has
    assert "frame grid 2" in done.stdout and "frames decoded:" in done.stdout
    assert "frames decoded are upper bounds" in done.stdout  # the skipped frames are unknown
    report = json.loads(run_cli("plan", "--config", str(slow), "--config", str(mae),
                                "--json").stdout)
    total = report["total"]
    assert total["frames_decoded"] < total["frames_decoded_independent"]
    assert report["windows"][0]["frames_by_task_count"].get("2", 0) > 0  # shared frames
    assert report["savings"]["decode"] > 0
    probe = ("import sys; from sandfs.cli import main; main(sys.argv[1:]); "
             "print('sandfs.daemon' in sys.modules, 'pyfuse3' in sys.modules, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe, "plan", "--config", str(slow)],
                          capture_output=True, text=True, timeout=120)
    assert done.stderr.strip().splitlines()[-1] == "False False"  # plan mounts nothing


def test_plan_counts_the_epochs_a_task_has_and_prints_each_window(tmp_path, dataset_dir):
    short = write_config(tmp_path / "short.yaml", task_config(
        dataset_dir, task="short", epochs=2, engine={"k_epochs": 5}))
    done = run_cli("plan", "--config", str(short))
    assert done.returncode == 0, done.stderr
    assert "plan of 1 task(s) over 2 epochs (k=5, 1 window(s))" in done.stdout, done.stdout
    report = json.loads(run_cli("plan", "--config", str(short), "--json").stdout)
    window = report["windows"][0]
    assert report["epochs"] == 2
    assert (f"  window 0: frames decoded {window['frames_decoded']:,} vs "
            f"{window['frames_decoded_independent']:,}, augmentation ops") in done.stdout
    # --epochs past the task's end is the task's end; a partial window is planned whole
    assert "over 2 epochs" in run_cli("plan", "--config", str(short), "--epochs", "9").stdout
    long = write_config(tmp_path / "long.yaml", task_config(dataset_dir, task="long", epochs=9))
    done = run_cli("plan", "--config", str(long), "--epochs", "3")  # k=2: windows 0 and 1
    assert "over 4 epochs (k=2, 2 window(s))" in done.stdout, done.stdout
    assert "  window 1: frames decoded" in done.stdout


@pytest.mark.parametrize(("flag", "value", "fragment"), [
    ("--decode-ahead", "-1", "--decode-ahead: expected an integer >= 0"),
    ("--k-epochs", "0", "--k-epochs: expected an integer >= 1"),
    ("--workers", "none", "--workers: expected a positive integer or auto"),
])
def test_bad_engine_flags_are_clear_errors(tmp_path, config_path, flag, value, fragment):
    done = run_cli("mount", str(tmp_path / "m"), "--config", str(config_path), flag, value)
    assert done.returncode != 0 and fragment in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not is_mounted(tmp_path / "m")


def one_line_error(done: subprocess.CompletedProcess, code: int = 1) -> str:
    assert done.returncode == code, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sandfs: "), done.stderr
    return lines[0]


def test_a_log_that_is_a_link_is_refused_not_followed(tmp_path, config_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (cache / "sandfs.log").symlink_to(victim)
    done = run_cli("mount", str(tmp_path / "m"), "--config", str(config_path),
                   "--cache-dir", str(cache))
    assert "cannot open the log" in one_line_error(done)
    assert victim.read_text() == "precious\n"
    assert not is_mounted(tmp_path / "m")


def test_a_refused_cache_dir_gets_no_log(tmp_path, config_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    done = run_cli("mount", str(tmp_path / "m"), "--config", str(config_path),
                   "--cache-dir", str(shared))
    assert "writable by others" in one_line_error(done)
    assert not (shared / "sandfs.log").exists()


@pytest.mark.parametrize("layout", ["is-dataset", "in-dataset", "holds-dataset", "holds-cache",
                                    "not-empty"])
def test_layouts_that_would_deadlock_or_hide_files_are_refused(tmp_path, dataset_dir, layout):
    require_fuse()
    dataset = tmp_path / "data"
    shutil.copytree(dataset_dir, dataset / "videos")
    mountpoint, cache = tmp_path / "m", tmp_path / "cache"
    if layout == "is-dataset":
        dataset, mountpoint = dataset / "videos", dataset / "videos"
    elif layout == "in-dataset":
        dataset, mountpoint = dataset / "videos", dataset / "videos" / "archery"
    elif layout == "holds-dataset":
        mountpoint = dataset
        dataset = dataset / "videos"
    elif layout == "holds-cache":
        dataset, cache = dataset / "videos", mountpoint / "cache"
    else:
        dataset = dataset / "videos"
        mountpoint.mkdir()
        (mountpoint / "notes.txt").write_text("mine\n")
    config = write_config(tmp_path / "t.yaml", task_config(dataset))
    done = run_cli("mount", str(mountpoint), "--config", str(config), "--cache-dir", str(cache))
    fragment = {"is-dataset": "is the dataset directory", "in-dataset": "is the dataset directory",
                "holds-dataset": "is inside the mountpoint", "holds-cache": "cache dir",
                "not-empty": "is not empty"}[layout]
    assert fragment in one_line_error(done)
    assert not is_mounted(mountpoint)
    if layout == "holds-cache":
        assert not mountpoint.exists()  # nothing was written under it


def test_a_mountpoint_inside_a_sandfs_mount_is_refused(tmp_path, config_path):
    with mount_sandfs(tmp_path, [config_path]) as m:
        inner = m.path("t0", "x")
        done = run_cli("mount", str(inner), "--config", str(config_path), "--cache-dir",
                       str(tmp_path / "c2"), "--foreground")
        assert f"inside the sandfs mount {m.mountpoint}" in done.stderr.strip().splitlines()[-1]
        assert done.returncode == 1


def test_status_and_unmount_of_a_stopped_daemon_return_within_their_timeout(tmp_path,
                                                                           config_path):
    with mount_sandfs(tmp_path, [config_path]) as m:
        os.kill(m.process.pid, signal.SIGSTOP)
        try:
            start = time.monotonic()
            done = run_cli("status", str(m.mountpoint), "--timeout", "1", timeout=30)
            assert "did not answer within 1s" in one_line_error(done)
            with subprocess.Popen(sandfs_command("status", str(m.mountpoint), "--timeout", "60"),
                                  stderr=subprocess.PIPE) as waiting:
                time.sleep(1.5)
                waiting.send_signal(signal.SIGINT)  # Ctrl-C
                assert waiting.wait(timeout=10) == 130
                assert b"Traceback" not in waiting.stderr.read()
            done = run_cli("unmount", str(m.mountpoint), "--timeout", "2", timeout=30)
            assert done.returncode == 0, done.stderr  # the kernel unmounts without the daemon
            assert not is_mounted(m.mountpoint)
            assert time.monotonic() - start < 15
        finally:
            os.kill(m.process.pid, signal.SIGCONT)
        assert m.process.wait(timeout=10) == 0  # once continued it sees the unmount and exits
        # requests queued while it was stopped get their replies refused by the closed
        # connection, which pyfuse3 logs as errors; nothing else may be one
        errors = [line for line in m.log_text().splitlines() if " ERROR " in line]
        assert all("fuse_reply_" in line for line in errors), errors
        m.expected_log_errors = len(errors)


def test_the_demo_config_leaves_the_mountpoint_and_cache_to_the_command_line(tmp_path):
    """scripts/demo.sh passes both: a path fixed in the config would be shared by every user."""
    from sandfs.config.loader import load_task_configs
    from sandfs.config.settings import mount_settings

    demo = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "demo.yaml")
    configs = load_task_configs([demo], check_paths=False)
    assert not {"mountpoint", "cache_dir"} & configs[0].engine_given
    settings, _ = mount_settings(configs, {"cache_dir": str(tmp_path / "c")}, str(tmp_path / "m"))
    assert (settings.mountpoint, settings.cache_dir) == (str(tmp_path / "m"), str(tmp_path / "c"))


EXIT_CASES = [  # (command line with {d}: a folder, {c}: a good config, {b}: a bad one), status
    ("mount {d}/m --config {d}/none.yaml", 2),
    ("mount {d}/m --config {b}", 2),
    ("mount {d}/m --config {c} --k-epochs 0", 2),
    ("mount {d}/m --config {c} --budget lots", 2),
    ("mount --config {c}", 2),  # no mountpoint anywhere
    ("mount {d}/m --config {c} --frobnicate", 2),
    ("mount {d}/m --config {e} --cache-dir {d}/cache", 1),  # an empty epoch
    ("unmount {d}", 1),
    ("unmount {d} --timeout 0", 2),
    ("status {d}", 1),
    ("status {d} --timeout -1", 2),
    ("status {d} --watch --interval 0", 2),
    ("task add {d} {c}", 1),
    ("task add {d} {b}", 2),
    ("task remove {d} t0", 1),
    ("task frob {d}", 2),
    ("plan --config {c} --epochs 1", 0),
    ("plan --config {b}", 2),
    ("plan --config {c} --epochs 0", 2),
    ("plan --config {c} --k-epochs 0", 2),
    ("frob", 2),
]


@pytest.mark.parametrize(("line", "code"), EXIT_CASES, ids=[c[0] for c in EXIT_CASES])
def test_exit_status_is_the_documented_one(tmp_path, dataset_dir, config_path, line, code):
    """docs/commands.md#exit-status: 0 success, 2 a bad config or argument, 1 anything else."""
    bad = write_config(tmp_path / "bad.yaml", task_config(dataset_dir, epochs=0))
    empty = write_config(tmp_path / "empty.yaml", task_config(
        dataset_dir, sampling={"videos_per_batch": 50, "drop_last": True}))
    args = line.format(d=tmp_path, c=config_path, b=bad, e=empty).split()
    done = run_cli(*args)
    assert done.returncode == code, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    if code:  # one line (after argparse's usage lines for a bad command line)
        lines = [x for x in done.stderr.splitlines() if x and not x.startswith(("usage:", " "))]
        assert len(lines) == 1 and lines[0].startswith("sandfs"), done.stderr
    assert not is_mounted(tmp_path / "m")


def test_ctrl_c_exits_130(monkeypatch, capsys):
    from sandfs import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_status", interrupted)
    assert cli.main(["status", "/nowhere"]) == 130


@pytest.mark.parametrize("made", [True, False])
def test_unmount_of_something_not_mounted_says_so(tmp_path, made):
    if made:
        (tmp_path / "plain").mkdir()
    line = one_line_error(run_cli("unmount", str(tmp_path / "plain")))
    assert line == f"sandfs: {tmp_path / 'plain'} is not mounted"


def test_version_and_log_level_in_any_case(tmp_path, config_path):
    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout.startswith("sandfs ")
    with mount_sandfs(tmp_path, [config_path], extra_args=["--log-level", "debug"]) as m:
        assert " DEBUG " in m.log_text()
