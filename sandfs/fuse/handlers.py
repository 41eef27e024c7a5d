"""How a FUSE handler answers. A handler may raise nothing but FUSEError (anything else would
leave the syscall unanswered), so every handler runs inside `errors_to_errno`: domain errors map
to errno in one table, unexpected ones are logged once and become EIO."""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from contextlib import contextmanager
from functools import wraps

import pyfuse3
import trio

from sandfs.bounds import LimitReached
from sandfs.sched.flights import ObjectFailed

log = logging.getLogger(__name__)


def fuse_error(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)


@contextmanager
def errors_to_errno(what: str):
    try:
        yield
    except pyfuse3.FUSEError:
        raise
    except ObjectFailed as exc:
        raise fuse_error(errno.EIO) from exc
    except LimitReached as exc:  # a user past one of the mount's limits
        raise fuse_error(exc.errno) from exc
    except (trio.Cancelled, KeyboardInterrupt):
        raise
    except Exception as exc:
        log.exception("unexpected error in %s", what)
        raise fuse_error(errno.EIO) from exc


def handler(method: Callable) -> Callable:
    @wraps(method)
    async def wrapped(self, *args, **kwargs):
        with errors_to_errno(method.__name__):
            return await method(self, *args, **kwargs)

    return wrapped


async def read_only(self, *args, **kwargs):
    """Every write-like request: the tree is read-only."""
    raise fuse_error(errno.EROFS)
