"""What a root daemon opens for an unprivileged user's task, through a real mount: never a file
that user could not open, whatever they swap in their own folders, and never code from a folder
they may write (docs/deploy.md#what-the-daemon-opens). The daemon runs as root; the user is
`nobody` (uid 65534, no groups), in a forked child of the test. One test per finding of the
security review: C1, C2, C3, H5, L1."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml

from sandfs.media.synth import make_dataset, write_test_video
from tests.helpers.harness import mount_sandfs, task_config, write_config
from tests.helpers.users import NOBODY, as_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")


def nobody(action, *args):
    return as_user(NOBODY, action, *args)


def read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def write_task(path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def wait_idle(mount, timeout: float = 30.0) -> None:
    """Until the mount's background jobs are all done (status.json)."""
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        record = json.loads(read(mount.path(".sand", "status.json")))
        if not record["scheduler"]["jobs_running"] and not record["queues"]["prematerialize"]:
            return
        time.sleep(0.05)
    raise AssertionError("the mount's jobs did not finish")


def task_errors(mount) -> dict:
    return json.loads(read(mount.path(".sand", "status.json")))["task_errors"]


@pytest.fixture
def base() -> Path:
    """A folder anyone may traverse (pytest's tmp folders are root's), holding `root/` (root's
    task), `user/` (nobody's folder) and `secret/` (root's, searchable, files 0600)."""
    folder = Path(tempfile.mkdtemp(prefix="sandfs-open-", dir="/tmp"))
    folder.chmod(0o755)
    make_dataset(folder / "root", classes=["a"], videos_per_class=2, num_frames=(24, 24),
                 seed=1)
    (folder / "user").mkdir(mode=0o755)
    os.chown(folder / "user", NOBODY, NOBODY)
    (folder / "secret").mkdir(mode=0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def root_config(base: Path) -> Path:
    return write_config(base / "root.yaml", task_config(base / "root"))


def user_task(name: str, dataset: Path, **dataset_keys) -> str:
    cfg = task_config(dataset, task=name, epochs=50, sampling={"videos_per_batch": 1})
    cfg.pop("engine")
    cfg["dataset"] |= dataset_keys
    return yaml.safe_dump(cfg, sort_keys=False)


def as_nobody(action) -> None:
    """`action()` as nobody; it must succeed."""
    assert nobody(action) == ("ok", None)


def test_c1_a_folder_swapped_for_a_link_after_registration_reads_nothing_of_root(base):
    """C1: register a task on a decoy made to look like a root-only video (same size, mtime,
    frame count and frame size), then swap its folder for a link to the video's folder: the
    views not made yet must fail, not carry root's frames."""
    target = base / "secret" / "cls" / "clip.mp4"
    target.parent.mkdir(mode=0o711)
    write_test_video(target, num_frames=24, width=64, height=48, noise=True, seed=7)
    target.chmod(0o600)
    decoy_dir = base / "user" / "dsy" / "cls"
    size, mtime_ns = target.stat().st_size, target.stat().st_mtime_ns

    def plant_decoy() -> None:
        decoy_dir.mkdir(parents=True)
        write_test_video(decoy_dir / "clip.mp4", num_frames=24, width=64, height=48, seed=8)
        assert os.path.getsize(decoy_dir / "clip.mp4") < size
        os.truncate(decoy_dir / "clip.mp4", size)
        os.utime(decoy_dir / "clip.mp4", ns=(mtime_ns, mtime_ns))

    as_nobody(plant_decoy)
    with mount_sandfs(base / "run", [root_config(base)]) as m:
        text = user_task("steal", decoy_dir.parent, labels="none")
        as_nobody(lambda: write_task(m.path(".sand", "tasks", "steal.yaml"), text))

        def swap() -> None:
            os.rename(decoy_dir, decoy_dir.with_name("cls.real"))
            os.symlink(target.parent, decoy_dir)

        as_nobody(swap)
        outcomes = [nobody(read, m.path("steal", str(epoch), "0", "view"))
                    for epoch in range(20, 26)]
        served = [epoch for epoch, o in zip(range(20, 26), outcomes, strict=True)
                  if o[0] == "ok"]
        assert served == [], f"views of epochs {served} were made from root's video"
        assert {o[1] for o in outcomes} <= {errno.EIO, errno.EACCES}
        # the file itself is refused too, and the mount goes on serving root's task
        assert nobody(read, m.path("steal", "videos", "cls", "clip.mp4"))[1] in (
            errno.EIO, errno.EACCES)
        assert len(read(m.path("t0", "0", "0", "view"))) > 0
        # one error line per failed decode job, each for the swapped path and nothing else,
        # counted once the task is gone and no job of it runs
        as_nobody(lambda: os.unlink(m.path(".sand", "tasks", "steal.yaml")))
        wait_idle(m)
        errors = [line for line in m.log_text().splitlines() if " ERROR " in line]
        assert errors and all("cls/clip.mp4 failed: DecodeError" in e for e in errors), errors
        m.expected_log_errors = len(errors)


@pytest.mark.slow  # the fault point holds the planner for 10 s
def test_c2_a_labels_file_swapped_for_a_link_after_the_check_is_not_read(base):
    """C2: the labels file is swapped for a link to a root-only CSV while the planner is held
    (after the owner check, before planning): the task's classes are the ones the user wrote."""
    secret_dir = base / "vault"
    secret_dir.mkdir(mode=0o700)
    (secret_dir / "secret.csv").write_text("video,label\nrun1.mp4,TOPSECRET_hunter2\n")
    (secret_dir / "secret.csv").chmod(0o600)
    labels = base / "user" / "labels.csv"

    def setup() -> None:
        make_dataset(base / "user" / "ds", classes=["a"], videos_per_class=2,
                     num_frames=(24, 24), seed=2)
        labels.write_text("video,label\na/a_000,mine\n")

    as_nobody(setup)
    env = {"SANDFS_FAULT": "plan_task:1:sleep"}
    with mount_sandfs(base / "run", [root_config(base)], env=env) as m:
        text = user_task("lab", base / "user" / "ds", labels=str(labels))
        register = threading.Thread(target=as_nobody, args=(
            lambda: write_task(m.path(".sand", "tasks", "lab.yaml"), text),))
        register.start()
        time.sleep(3)  # the registration is checked and its planner held at the fault point

        def swap() -> None:
            os.symlink(secret_dir / "secret.csv", f"{labels}.tmp")
            os.rename(f"{labels}.tmp", labels)

        as_nobody(swap)
        register.join()
        classes = nobody(os.getxattr, m.path("lab"), "user.sand.classes")
        assert classes[0] == "ok" and json.loads(classes[1]) == ["mine"]


def test_c3_a_package_planted_in_the_daemons_folder_is_never_imported(base):
    """C3: the daemon is started from a folder anyone may write; a `sandfs/` planted there
    must not be imported by the probe workers a new dataset starts (as root)."""
    shared = base / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    marker = base / "user" / "PWNED"

    def plant() -> None:
        (shared / "sandfs").mkdir()
        (shared / "sandfs" / "__init__.py").write_text(
            f"open({str(marker)!r}, 'a').write('imported')\n")
        make_dataset(base / "user" / "fresh", classes=["a"], videos_per_class=2,
                     num_frames=(24, 24), seed=3)

    with mount_sandfs(base / "run", [root_config(base)], cwd=shared) as m:
        as_nobody(plant)
        text = user_task("trig", base / "user" / "fresh")
        as_nobody(lambda: write_task(m.path(".sand", "tasks", "trig.yaml"), text))
        assert not marker.exists(), "the planted package ran in the daemon's worker"
        assert nobody(read, m.path("trig", "0", "0", "view"))[0] == "ok"


def test_h5_a_run_time_task_may_not_scan_the_mount_and_the_mount_still_unmounts(base):
    """H5: a task whose dataset holds the mountpoint (its parent) or lies inside it is refused
    before any walk; the mount unmounts cleanly afterwards (mount_sandfs's strict teardown)."""
    with mount_sandfs(base / "run", [root_config(base)]) as m:
        for name, dataset in (("up", base / "run"), ("inside", m.mountpoint / "t0")):
            text = user_task(name, dataset, extensions=[".mp4", ".foo"])
            outcome = nobody(write_task, m.path(".sand", "tasks", f"{name}.yaml"), text)
            assert outcome == ("errno", errno.EINVAL), name
        errors = task_errors(m)
        assert f"mountpoint {m.mountpoint} is the dataset directory" in errors["up"]
        assert f"lies in the sandfs mount {m.mountpoint}" in errors["inside"]
        assert not m.path("up").exists()


def test_l1_a_refusal_names_the_path_as_written_not_where_its_link_leads(base):
    """L1: a link inside a folder the user cannot search is refused in words that name the
    link as the user wrote it, never its target."""
    hidden = base / "hidden-target-d41d8"
    make_dataset(hidden, classes=["a"], videos_per_class=1, num_frames=(24, 24), seed=4)
    vault = base / "vault"
    vault.mkdir(mode=0o700)
    (vault / "backup_link").symlink_to(hidden)
    with mount_sandfs(base / "run", [root_config(base)]) as m:
        written = vault / "backup_link"
        text = user_task("oracle", written)
        outcome = nobody(write_task, m.path(".sand", "tasks", "oracle.yaml"), text)
        assert outcome == ("errno", errno.EINVAL)
        error = nobody(lambda: task_errors(m))[1]["oracle"]
        assert error.endswith(f"may not list {written}")
        assert "d41d8" not in error
