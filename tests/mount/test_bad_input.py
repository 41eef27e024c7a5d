"""A dataset with broken and hostile files still mounts; they are reported and left out."""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import struct
import time

from sandfs.media.mp4box import SAMPLE_TABLES
from sandfs.media.probe import probe_video
from sandfs.media.synth import write_test_video
from sandfs.media.types import MediaLimits
from tests.helpers.harness import mount_sandfs, task_config, write_config


def make_hostile_dataset(root, good_dir) -> dict[str, str]:
    """Copies 4 good videos next to bad files; returns {rel_path: expected reason}."""
    shutil.copytree(good_dir / "archery", root / "archery")
    (root / "junk").mkdir()
    (root / "junk" / "empty.mp4").write_bytes(b"")
    (root / "junk" / "text.mp4").write_text("this is not a video\n" * 50)
    # seeded: some draws of os.urandom probe as a container without a video stream
    (root / "junk" / "random.mp4").write_bytes(random.Random(4096).randbytes(4096))
    os.mkfifo(root / "junk" / "fifo.mp4")
    os.symlink("/etc/hostname", root / "junk" / "escape.mp4")
    good = (root / "archery" / "archery_000.mp4").read_bytes()
    (root / "junk" / "truncated.mp4").write_bytes(good[: len(good) // 3])
    write_test_video(root / "junk" / "huge.mp4", num_frames=1, width=8192, height=8192)
    (root / ".hidden.mp4").write_bytes(good)  # ignored, not reported
    return {
        "junk/empty.mp4": "open_invalid",
        "junk/text.mp4": "open_invalid",
        "junk/random.mp4": "open_invalid",
        "junk/fifo.mp4": "not_regular",
        "junk/escape.mp4": "outside_root",
        "junk/huge.mp4": "too_large",
    }


def test_bad_videos_are_reported_and_left_out(tmp_path, dataset_dir):
    root = tmp_path / "hostile"
    root.mkdir()
    expected = make_hostile_dataset(root, dataset_dir)
    config = write_config(tmp_path / "t.yaml", task_config(
        root, sampling={"videos_per_batch": 2}))
    with mount_sandfs(tmp_path, [config]) as m:
        deadline = time.monotonic() + 60  # the probes go on after the mount serves
        while (status := json.loads(m.path(".sand", "status.json").read_bytes()))[
                "scan"]["videos_scanned"] < status["scan"]["videos_total"]:
            assert time.monotonic() < deadline, status["scan"]
            time.sleep(0.01)
        reported = {b["path"]: b["reason"] for b in status["bad_videos"]}
        for rel, reason in expected.items():
            assert reported.get(rel) == reason, (rel, reported)
        assert ".hidden.mp4" not in reported
        usable = {f"archery/archery_{i:03d}" for i in range(4)}
        if "junk/truncated.mp4" not in reported:
            usable.add("junk/truncated")  # a truncated file may still hold decodable frames
        seen = set()
        for iteration in os.listdir(m.path("t0", "0")):
            view = m.path("t0", "0", iteration, "view")
            seen |= {s["video"] for s in json.loads(os.getxattr(view, "user.sand.meta"))["samples"]}
            view.read_bytes()
        assert seen == usable
        # the files refused by their probe keep their videos/ entries, without frames
        probed = {"text", "random", "huge", "truncated"}  # each: VIDEO.mp4 and VIDEO/
        assert sorted(os.listdir(m.path("t0", "videos"))) == ["archery", "junk"]
        assert set(os.listdir(m.path("t0", "videos", "junk"))) == probed | {
            f"{name}.mp4" for name in probed}
        assert os.listdir(m.path("t0", "videos", "junk", "text")) == []
        log = m.log_text()
        for rel in expected:
            assert f"reason={expected[rel]}" in log


def test_a_video_its_sample_tables_vouched_for_fails_at_first_decode_through_the_mount(
        tmp_path, dataset_dir):
    """An MP4 probed from its sample tables (no frame decoded: docs/contract.md#lazy-scan)
    whose frames are not what the tables say is found at its first decode: the views that need
    it fail with EIO (in `failures`), every other view is served, and it is not replaced (not
    in `bad_videos`)."""
    root = tmp_path / "data"
    shutil.copytree(dataset_dir / "archery", root / "archery")
    lying = root / "junk" / "lying.mp4"
    lying.parent.mkdir()
    write_test_video(lying, num_frames=40, width=64, height=48, gop=12)
    data = bytearray(lying.read_bytes())
    entry = data.index(b"avc1", data.index(b"stsd")) + 4  # the entry's body: width at 24
    struct.pack_into(">H", data, entry + 24, 32)  # the tables say 32x48, the frames are 64x48
    lying.write_bytes(bytes(data))
    facts = probe_video(str(lying), MediaLimits())
    assert (facts.counted_by, facts.width) == (SAMPLE_TABLES, 32)
    config = write_config(tmp_path / "t.yaml", task_config(
        root, sampling={"videos_per_batch": 2}))
    with mount_sandfs(tmp_path, [config]) as m:
        failed, served = [], []
        for iteration in sorted(os.listdir(m.path("t0", "0")), key=int):
            view = m.path("t0", "0", iteration, "view")
            meta = json.loads(os.getxattr(view, "user.sand.meta"))
            needs = "junk/lying" in {s["video"] for s in meta["samples"]}
            try:
                view.read_bytes()
            except OSError as error:
                assert error.errno == errno.EIO and needs, (iteration, error)
                failed.append(iteration)
            else:
                assert not needs, iteration
                served.append(iteration)
        assert len(failed) == 1 and len(served) == 2
        status = json.loads(m.path(".sand", "status.json").read_bytes())
        assert "junk/lying.mp4" not in {b["path"] for b in status["bad_videos"]}
        assert [f["path"] for f in status["failures"]] == [f"0/{failed[0]}/view"]
        m.expected_log_errors = 1  # the decode failure, logged once
