"""Opening a video for the probe and the decoder: a regular file only, its scanned stream set
up for a single-threaded decode, and PyAV's errors described without its file name. Apart
from decode.py, so that the probe workers (fresh interpreters, started while the daemon mounts)
do not import numpy: 50 ms of their 160 ms start."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from av.container import InputContainer
from av.video.stream import VideoStream


class NotRegularFileError(OSError):
    pass


@contextmanager
def open_regular_file(path: str) -> Iterator[BinaryIO]:
    """Opens `path` for reading without following a final symlink and without blocking on a
    FIFO (O_NOFOLLOW | O_NONBLOCK), and refuses anything but a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFileError(f"not a regular file: {path!r}")
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
