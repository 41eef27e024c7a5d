"""With one worker, the order jobs start in is the same from run to run, for a user comparing
two runs or a test of scheduling. The jobs worth ranking are a set (`UrgencyOrder.urgent`),
iterated in the order of their paths' hashes, which differ from process to process
(PYTHONHASHSEED); the policy's last tie-breaks, the job's window and key, decide between jobs
equal on all else (`policy.priority`), so no hash order reaches the choice."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import trio

from sandfs.sched.scheduler import Scheduler
from sandfs.stats import Stats
from tests.helpers.plans import fake_videos, make_plan
from tests.unit.test_scheduler import RecordingMaterializer, run_until_settled

ROOT = Path(__file__).resolve().parents[2]
# two tasks: without the key's tie-break, 40 videos started in another order under each of
# hash seeds 1-3; 12 or 16 in one of four at most
VIDEOS = 40


def print_started_jobs(workdir: str) -> None:
    """Two tasks over VIDEOS videos, one worker: print the jobs in the order they start. Run
    in a process of its own, under the hash seed it was given."""
    videos, plans = fake_videos(VIDEOS), []
    for task, seed in (("b", 3), ("a", 7)):
        (Path(workdir) / task).mkdir()
        plans.append(make_plan(Path(workdir) / task, videos=videos, epochs=4, k_epochs=2,
                               task=task, seed=seed))
    scheduler = Scheduler(plans, RecordingMaterializer(), Stats(), workers=1,
                          memory_limit_bytes=1 << 30, limiter=trio.CapacityLimiter(1))
    start = scheduler._start

    def print_and_start(job) -> None:
        print(job.key)
        start(job)

    scheduler._start = print_and_start
    trio.run(run_until_settled, scheduler)


def started_under(hash_seed: int, tmp_path: Path) -> list[str]:
    workdir = tmp_path / f"seed{hash_seed}"
    workdir.mkdir()
    code = ("from tests.unit.test_job_order import print_started_jobs; "
            f"print_started_jobs({str(workdir)!r})")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=120,
                         env={**os.environ, "PYTHONHASHSEED": str(hash_seed)})
    return out.stdout.splitlines()


def test_jobs_start_in_the_same_order_whatever_the_hash_seed(tmp_path):
    first = started_under(1, tmp_path)
    assert len(first) == 2 * VIDEOS  # each video once a window, two windows
    assert started_under(2, tmp_path) == first
