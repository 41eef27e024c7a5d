"""Finding a mount's device in mountinfo (for its readahead window) without touching it."""

from __future__ import annotations

from sandfs.fuse.readahead import mount_device, set_readahead

MOUNTINFO = """\
22 1 0:21 / / rw,relatime - overlay overlay rw
90 22 0:55 / /tmp/with\\040space/mnt rw,nosuid - fuse.sandfs sandfs rw,user_id=0
91 22 0:56 / /tmp/other rw,nosuid - fuse.sandfs sandfs rw,user_id=0
92 91 0:57 / /tmp/other rw,nosuid - fuse.sandfs sandfs rw,user_id=0
"""


def test_the_device_of_a_mountpoint(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTINFO)
    assert mount_device("/tmp/with space/mnt", str(info)) == "0:55"
    assert mount_device("/tmp/other", str(info)) == "0:57"  # the last mount there wins
    assert mount_device("/tmp/nothing", str(info)) is None


def test_an_unmounted_path_is_left_alone(tmp_path):
    assert set_readahead(str(tmp_path / "not-a-mount")) is False
