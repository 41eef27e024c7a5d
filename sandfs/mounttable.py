"""The kernel's mount table as this process sees it (no pyfuse3: the CLI reads it too)."""

from __future__ import annotations

import os
import re

SANDFS_FSTYPE = "fuse.sandfs"  # how the kernel lists sandfs mounts (fsname and subtype sandfs)
_ESCAPE = re.compile(r"\\([0-7]{3})")  # mountinfo writes a space in a path as \040


def mountpoints(fstype: str | None = None) -> list[str]:
    """Every mountpoint this process sees, or those of one filesystem type."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields, _, rest = line.partition(" - ")
            if fstype is None or rest.split(" ", 1)[0] == fstype:
                found.append(_ESCAPE.sub(lambda m: chr(int(m[1], 8)), fields.split()[4]))
    return found


def is_mounted(path: str) -> bool:
    return os.path.abspath(path) in mountpoints()
