"""Opening a video for the probe and the decoder: a regular file only, reached through no
symlink and checked on its descriptor (a root daemon opens what a user's task names:
docs/deploy.md#what-the-daemon-opens), its scanned stream set up for a single-threaded decode,
and PyAV's errors described without its file name. Apart from decode.py, so that the probe
workers (fresh interpreters, started while the daemon mounts) do not import numpy: 50 ms of
their 160 ms start."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import BinaryIO

from av.container import InputContainer
from av.video.stream import VideoStream

from sandfs.openat import READ_FLAGS, Identity, open_no_symlinks, open_regular

# In a job worker process (sandfs/execution): the sources the daemon opened for the job, by
# path (or why it could not); such a worker opens no path itself.
_passed: ContextVar[Mapping[str, int | OSError] | None] = ContextVar("passed_sources",
                                                                    default=None)


@contextmanager
def passed_sources(sources: Mapping[str, int | OSError]) -> Iterator[None]:
    """Within: `open_regular_file` opens only these paths, from the descriptors given."""
    token = _passed.set(dict(sources))
    try:
        yield
    finally:
        _passed.reset(token)


def _open_source(path: str) -> int:
    passed = _passed.get()
    if passed is None:
        return open_no_symlinks(path, READ_FLAGS)
    given = passed.get(path)
    if given is None:
        raise PermissionError(errno.EACCES, "a job worker opens only what the daemon passed it",
                              path)
    if isinstance(given, OSError):
        raise given
    fd = os.dup(given)  # its own: closed with the file; the offset is shared, so rewound
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class NotRegularFileError(OSError):
    pass


class FileReplacedError(OSError):
    """The file opened is not the one the scan recorded: moved, swapped or replaced since."""


@contextmanager
def open_regular_file(path: str, identity: Identity | None = None) -> Iterator[BinaryIO]:
    """Opens the regular file at `path` (`open_regular`: NotRegularFileError for anything
    else) and refuses, given `identity`, any file but that one (FileReplacedError): the
    checks are made on the descriptor, so what is read is what was checked."""
    fd, file_stat = open_regular(
        path, lambda: NotRegularFileError(f"not a regular file: {path!r}"), _open_source)
    try:
        if identity is not None and (file_stat.st_dev, file_stat.st_ino) != identity:
            raise FileReplacedError(f"not the file the scan found: {path!r}")
        file = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with file:
        yield file


def open_stream(container: InputContainer, stream_index: int) -> VideoStream:
    """The scanned video stream, set up for a single-threaded decode (the callers run
    decodes in parallel; frame threading also hangs on some inputs)."""
    stream = container.streams[stream_index]
    if not isinstance(stream, VideoStream):
        raise ValueError(f"stream {stream_index} is {stream.type}, not video")
    stream.codec_context.thread_type = "SLICE"
    stream.codec_context.thread_count = 1
    return stream


def describe_error(error: BaseException) -> str:
    """`InvalidDataError: Invalid data found when processing input`, without PyAV's file name
    (a file object's name is its descriptor number)."""
    strerror = getattr(error, "strerror", None)  # FFmpegError is no OSError but has one
    return f"{type(error).__name__}: {strerror or error}"
