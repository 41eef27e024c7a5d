"""A window planned in parts on the batch board, in process: each part's `add_window` (its
pending jobs found among the parts before it), `pending_jobs()` once the window is whole, and
(`--memory`, a second pass under tracemalloc) the bytes a video that the window's videos and
the board hold, whole against in parts.

Fake videos (`tests/helpers/plans.py`: no decode, no scan), the `a` task of 2 epochs, k = 1:
window 0 is every video once. `--parts 1` is the window planned whole. One JSON record a
size and part count, in CPU seconds of the process: `add_s` (all parts), `first10_s`,
`last10_s`, `pending_jobs_ms`; with `--memory`, `bytes_a_video` and `bytes_a_clip` (the
board and the window's plan, its parts joined as `WindowBook.extend` joins them), and the
`TableRow`s and `ViewKey`s live once it is planned (`table_rows`, `view_keys`: none a batch
where a batch is numbers). To compare with an older commit, run this file from a worktree of
that commit.
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

from sandfs.plan.batchcolumns import TableRow
from sandfs.plan.window import ViewKey
from sandfs.sched import work
from sandfs.sched.board import BatchBoard
from sandfs.sched.windows import WindowBook
from tests.helpers.plans import fake_videos, live_objects, make_plan


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
    """Window 0 on a board, in `parts` parts, each joined to the window's plan first as the
    daemon joins it (`WindowBook.extend`, then `add_window`)."""
    paths = [video.path for video in plan.listed]
    per = -(-len(paths) // parts)
    board, done, book = BatchBoard(), frozenset(), WindowBook([plan])
    for k in range(parts):
        lead = frozenset(paths[k * per:(k + 1) * per]) if parts > 1 else None
        planned = work.plan_active_window([plan], 0, None, "leaves", lead=lead, skip=done)
        done |= lead or frozenset()
        if k:
            book.extend(0, planned.plan)
        else:
            book.add_window(planned.plan)
        started = time.process_time()
        board.add_window(planned)
        if spent is not None:
            spent.append(time.process_time() - started)
    return board, book.windows[0]


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
        before = live_objects((TableRow, ViewKey))
        held = add_parts(plan, parts)  # held while measured
        gc.collect()
        traced = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        clips = sum(len(video.uses) for video in held[1].videos.values())
        counts = live_objects((TableRow, ViewKey))
        found.update(bytes_a_video=round(traced / videos), bytes_a_clip=round(traced / clips, 1),
                     batches=len(held[1].views), table_rows=counts[TableRow] - before[TableRow],
                     view_keys=counts[ViewKey] - before[ViewKey])
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
