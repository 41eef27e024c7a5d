"""A reply the kernel no longer waits for (a close answered while the mount ends) is not an
error in the daemon's log; every other pyfuse3 error still is."""

from __future__ import annotations

import logging

from sandfs.fuse.mountpoint import quiet_late_replies


def test_a_late_reply_is_debug_and_other_errors_stay(caplog):
    quiet_late_replies()
    caplog.set_level(logging.INFO)
    pyfuse3_log = logging.getLogger("pyfuse3")
    pyfuse3_log.error("fuse_release(): fuse_reply_* failed with %s", "No such file or directory")
    pyfuse3_log.error("fuse_read(): fuse_reply_* failed with %s", "Broken pipe")
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == ["fuse_read(): fuse_reply_* failed with Broken pipe"]
