"""A worker process for isolating risky work (probing videos, custom steps): a fresh
interpreter running `code` with two pipe ends as `sys.argv[1]` (jobs in) and `sys.argv[2]`
(replies out). Not multiprocessing: its spawn re-runs an unguarded `__main__` script, and fork
copies the parent's threads and descriptors. The child inherits only those two pipe ends and
starts its own session, so Ctrl-C reaches the parent, which stops its workers.

The interpreter starts isolated (`-I`: no current folder, user site or PYTHON* variables on its
import path) in `/`, with an explicit import path: a root daemon must never import a `sandfs/`
planted in the folder it was started from (docs/deploy.md#what-the-daemon-opens)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection


@dataclass(frozen=True, slots=True)
class WorkerProcess:
    process: subprocess.Popen
    jobs: Connection  # parent -> worker
    replies: Connection  # worker -> parent


def package_parent() -> str:
    """The folder this process imported the `sandfs` package from."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_worker_process(code: str, import_path: Sequence[str] = ()) -> WorkerProcess:
    """`code` in a fresh isolated interpreter, importing from this process's `sandfs`, then
    `import_path` (absolute folders), then its site-packages; its two pipe ends given as
    arguments."""
    path = [package_parent(), *(p for p in import_path if os.path.isabs(p))]
    job_read, job_write = os.pipe()
    reply_read, reply_write = os.pipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-c", f"import sys; sys.path[:0] = {path!r}; {code}",
             str(job_read), str(reply_write)],
            stdin=subprocess.DEVNULL, pass_fds=(job_read, reply_write), cwd="/",
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
