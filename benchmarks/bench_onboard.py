#!/usr/bin/env python3
"""The board's batches (`sched/onboard.py`) at scale, in process: two windows of `--batches`
batches each as rows (`plan/batchrows.py`), on the board; reported: process CPU µs a
membership test (a batch of window 0, of window 1, and a dict's of the same keys), and CPU
seconds of `len()` once every batch of window 0 has left (`views_planned`, each status scrape).
No dataset: the task plan is a stand-in with the windows' arithmetic only.

Usage: benchmarks/bench_onboard.py [--batches 100000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import emit, git_sha

from sandfs.plan.batchrows import BatchRows, ReadersMap, ViewPlansMap, ViewsMap
from sandfs.plan.window import ViewKey, WindowPlan
from sandfs.sched.onboard import OnBoard


class StandIn:
    """What `BatchRows` asks of a task plan: windows of 2 epochs."""

    k_epochs = 2

    def __init__(self, per: int) -> None:
        self.iterations_per_epoch = per

    def window_of(self, epoch: int) -> int:
        return epoch // 2

    def window_epochs(self, window: int) -> range:
        return range(2 * window, 2 * window + 2)


def window(number: int, plan_key: str, plan: StandIn) -> tuple[WindowPlan, list[ViewKey]]:
    table = BatchRows()
    keys = [ViewKey(plan_key, epoch, iteration) for epoch in plan.window_epochs(number)
            for iteration in range(plan.iterations_per_epoch)]
    for key in keys:
        table.add(key, plan)
    views = ViewsMap(table)
    return WindowPlan(number, {}, views, ReadersMap(table), {}, ViewPlansMap(table)), keys


def us_each(keys: list[ViewKey], contains) -> float:
    start = time.process_time()
    found = sum(1 for key in keys if contains(key))
    assert found == len(keys)
    return (time.process_time() - start) / len(keys) * 1e6


def run(batches: int) -> dict:
    plan = StandIn(batches // 2)
    (first, keys0), (second, keys1) = window(0, "A", plan), window(1, "B", plan)
    board = OnBoard()
    board.add_window(first, {})
    board.add_window(second, {})
    record = {"lookup_w0_us": us_each(keys0, board.__contains__),
              "lookup_w1_us": us_each(keys1, board.__contains__),
              "lookup_dict_us": us_each(keys1, dict.fromkeys(keys0 + keys1).__contains__)}
    for key in keys0:
        board.leave(key)
    start = time.process_time()
    assert len(board) == len(keys1)
    record["len_after_left_s"] = time.process_time() - start
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100_000, help="a window's batches")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs = [run(args.batches) for _ in range(args.repeats)]
    emit({"bench": "onboard", "batches": args.batches, "git_sha": git_sha(),
          **{name: round(statistics.median(r[name] for r in runs), 4) for name in runs[0]}})


if __name__ == "__main__":
    main()
