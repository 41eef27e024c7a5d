"""A daemon counts as exited once it is a zombie: an orphan's adopter may reap it late, and
`sandfs unmount` or the next Ray actor must not wait on that."""

from __future__ import annotations

import os
import time

from sandfs.pids import running, wait_for_exit


def test_a_process_that_exited_is_not_running_even_before_it_is_reaped():
    assert running(os.getpid())
    child = os.fork()
    if child == 0:
        os._exit(0)
    try:
        assert wait_for_exit(child, time.monotonic() + 10)
        assert os.path.exists(f"/proc/{child}")  # a zombie, not reaped yet
        assert not running(child)
    finally:
        os.waitpid(child, 0)
    assert not running(child)


def test_waiting_for_a_running_process_gives_up_at_the_deadline():
    started = time.monotonic()
    assert not wait_for_exit(os.getpid(), started + 0.2)
    assert time.monotonic() - started >= 0.2
