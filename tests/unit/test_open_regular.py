"""The one guard for opening a file a task names (sandfs/openat.py `open_regular`): through no
symlink, never blocking on a FIFO put in the file's place, a regular file only; each caller
keeps its own error, and no descriptor is left open."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from sandfs.access import Owner, read_owner_file
from sandfs.media.opening import NotRegularFileError, open_regular_file
from sandfs.openat import pread_file

DAEMON = Owner(os.geteuid(), os.getegid(), frozenset(), 0o400)


def _pread(path: str) -> bytes:
    return pread_file(path, 0, 4)[1]


def _owner_read(path: str) -> bytes:
    return read_owner_file(path, DAEMON, 1 << 10)


def _source_read(path: str) -> bytes:
    with open_regular_file(path) as file:
        return file.read(4)


CALLERS = {_pread: (OSError, errno.EINVAL), _owner_read: (OSError, errno.EINVAL),
           _source_read: (NotRegularFileError, None)}


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("read", list(CALLERS), ids=lambda f: f.__name__)
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_anything_but_a_regular_file_is_refused_with_the_callers_error(tmp_path, read, kind):
    path = tmp_path / "thing"
    os.mkfifo(path) if kind == "fifo" else path.mkdir()  # a FIFO: open() would wait here
    error, code = CALLERS[read]
    before = open_fds()
    outcome: list[BaseException | bytes] = []

    def attempt() -> None:
        try:
            outcome.append(read(str(path)))
        except BaseException as raised:  # judged below, in the test's thread
            outcome.append(raised)

    reader = threading.Thread(target=attempt, daemon=True)  # a hang fails, not stalls
    reader.start()
    reader.join(5)
    assert not reader.is_alive(), "the read waits on the FIFO"
    [raised] = outcome
    assert isinstance(raised, error) and "not a regular file" in str(raised), raised
    assert code is None or raised.errno == code
    assert open_fds() == before


@pytest.mark.parametrize("read", list(CALLERS), ids=lambda f: f.__name__)
def test_a_regular_file_is_read_and_a_link_is_not_followed(tmp_path: Path, read):
    (tmp_path / "file").write_bytes(b"data")
    (tmp_path / "link").symlink_to("file")
    assert read(str(tmp_path / "file")) == b"data"
    before = open_fds()
    with pytest.raises(OSError) as raised:
        read(str(tmp_path / "link"))
    assert raised.value.errno == errno.ELOOP
    assert open_fds() == before
