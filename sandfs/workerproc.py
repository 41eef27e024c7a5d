"""A worker process for isolating risky work (probing videos, custom steps): a fresh
interpreter running `code` with two pipe ends as `sys.argv[1]` (jobs in) and `sys.argv[2]`
(replies out). Not multiprocessing: its spawn re-runs an unguarded `__main__` script, and fork
copies the parent's threads and descriptors. The child inherits only those two pipe ends and
starts its own session, so Ctrl-C reaches the parent, which stops its workers."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from multiprocessing.connection import Connection


@dataclass(frozen=True, slots=True)
class WorkerProcess:
    process: subprocess.Popen
    jobs: Connection  # parent -> worker
    replies: Connection  # worker -> parent


def start_worker_process(code: str, env: dict[str, str]) -> WorkerProcess:
    """`code` in a fresh interpreter with `env`, its two pipe ends given as arguments."""
    job_read, job_write = os.pipe()
    reply_read, reply_write = os.pipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", code, str(job_read), str(reply_write)],
            stdin=subprocess.DEVNULL, pass_fds=(job_read, reply_write), env=env,
            start_new_session=True,
        )
    except BaseException:
        os.close(job_write)
        os.close(reply_read)
        raise
    finally:
        os.close(job_read)
        os.close(reply_write)
    return WorkerProcess(process, Connection(job_write, readable=False),
                         Connection(reply_read, writable=False))
