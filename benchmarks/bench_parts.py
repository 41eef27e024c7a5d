"""A window planned in parts on the batch board, in process: each part's `add_window` (its
pending jobs found among the parts before it), `pending_jobs()` once the window is whole, and
(`--memory`, a second pass under tracemalloc) the bytes a video that the window's videos and
the board hold, whole against in parts.

Fake videos (`tests/helpers/plans.py`: no decode, no scan), the `a` task of 2 epochs, k = 1:
window 0 is every video once. `--parts 1` is the window planned whole. One JSON record a
size and part count, in CPU seconds of the process: `add_s` (all parts), `first10_s`,
`last10_s`, `pending_jobs_ms`; with `--memory`, `bytes_a_video`. To compare with an older
commit, run this file from a worktree of that commit.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import emit, git_sha

from sandfs.plan.windowvideos import join_videos
from sandfs.sched import work
from sandfs.sched.board import BatchBoard
from tests.helpers.plans import fake_videos, make_plan


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=20000)
    parser.add_argument("--parts", type=int, nargs="+", default=[200])
    parser.add_argument("--memory", action="store_true", help="bytes a video held, too")
    args = parser.parse_args()
    if args.videos < 1 or min(args.parts) < 1 or max(args.parts) > args.videos:
        parser.error("--videos and --parts must be >= 1, parts no more than videos")
    return args


def add_parts(plan, parts: int, spent: list[float] | None = None):
    """Window 0 on a board, in `parts` parts; its plan joined as `WindowBook.extend` joins."""
    paths = [video.path for video in plan.listed]
    per = -(-len(paths) // parts)
    board, done, base = BatchBoard(), frozenset(), None
    for k in range(parts):
        lead = frozenset(paths[k * per:(k + 1) * per]) if parts > 1 else None
        planned = work.plan_active_window([plan], 0, None, "leaves", lead=lead, skip=done)
        done |= lead or frozenset()
        started = time.process_time()
        board.add_window(planned)
        if spent is not None:
            spent.append(time.process_time() - started)
        if base is None:
            base = planned.plan
        else:
            join_videos(base.videos, planned.plan.videos)
    return board, base


def record(plan, videos: int, parts: int, memory: bool) -> dict:
    spent: list[float] = []
    board, _ = add_parts(plan, parts, spent)
    started = time.process_time()
    jobs = len(board.pending_jobs())
    listed = time.process_time() - started
    found = {"record": "parts", "videos": videos, "parts": parts, "jobs": jobs,
             "add_s": round(sum(spent), 3), "first10_s": round(sum(spent[:10]), 3),
             "last10_s": round(sum(spent[-10:]), 3), "pending_jobs_ms": round(listed * 1e3, 1)}
    if memory:
        del board
        gc.collect()
        tracemalloc.start()
        held = add_parts(plan, parts)  # noqa: F841  (held while measured)
        gc.collect()
        found["bytes_a_video"] = round(tracemalloc.get_traced_memory()[0] / videos)
        tracemalloc.stop()
    return found


def main() -> int:
    args = parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plan = make_plan(Path(tmp), videos=fake_videos(args.videos), task="a", epochs=2,
                         k_epochs=1)
        for parts in args.parts:
            emit({**record(plan, args.videos, parts, args.memory), "git_sha": git_sha()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
