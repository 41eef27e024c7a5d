"""How a FUSE handler answers. A handler may raise nothing but FUSEError (anything else would
leave the syscall unanswered), so every handler is wrapped by `handler`: domain errors map to
errno in one place, unexpected ones are logged once and become EIO."""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from functools import wraps

import pyfuse3

from sandfs.bounds import LimitReached
from sandfs.sched.flights import ObjectFailed

log = logging.getLogger(__name__)


def fuse_error(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)


def handler(method: Callable) -> Callable:
    """The handler, answering FUSEError only: a plain try (no context manager), as it runs
    once per 1 MiB of every view served."""
    name = method.__name__

    @wraps(method)
    async def wrapped(self, *args, **kwargs):
        try:
            return await method(self, *args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except ObjectFailed as exc:
            raise fuse_error(errno.EIO) from exc
        except LimitReached as exc:  # a user past one of the mount's limits
            raise fuse_error(exc.errno) from exc
        except Exception as exc:  # trio.Cancelled and KeyboardInterrupt pass: BaseException
            log.exception("unexpected error in %s", name)
            raise fuse_error(errno.EIO) from exc

    return wrapped


async def read_only(self, *args, **kwargs):
    """Every write-like request: the tree is read-only."""
    raise fuse_error(errno.EROFS)
