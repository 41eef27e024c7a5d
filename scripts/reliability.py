#!/usr/bin/env python3
"""The reliability report: runs the tests that measure reliability (the stress tier's sizes by
default) and prints one JSON line of what they measured, summed per figure.

Each of those tests appends its own counts to $SANDFS_RELIABILITY_REPORT
(tests/helpers/reliability.py); nothing here is estimated, and a figure whose tests did not
run (skipped: no FUSE, not root) is absent rather than zero.

    scripts/reliability.py            # the stress tier: 50 kill -9 cycles, 32 readers, ...
    scripts/reliability.py --quick    # the default tier's sizes (3 kills, 8 readers)
    scripts/reliability.py --chaos 5 [--seed S]   # the chaos run (tests/helpers/chaos.py)

The chaos run prints one JSON report instead, and exits 1 when anything went wrong; the seed
of a failing run replays the same operations.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT_ENV = "SANDFS_RELIABILITY_REPORT"  # = tests.helpers.reliability.REPORT_ENV
MEASURING_TESTS = (  # each records one figure (see its record(...) call)
    "tests/mount/test_cache.py::test_random_kills_while_reading_lose_no_bytes",
    "tests/mount/test_cache.py::test_a_corrupt_cached_object_is_detected_and_recomputed",
    "tests/store/test_store_corruption.py::test_corruption_detected_on_read",
    "tests/store/test_store_corruption.py::test_swapped_objects_with_valid_checksums",
    "tests/store/test_store_corruption.py::test_every_injection_detected_by_the_startup_scan",
    "tests/media/test_scan.py::test_corpus_file_is_classified_as_expected",
    "tests/unit/config/test_fields.py::test_bad_config_points_at_file_line_and_key",
    "tests/mount/test_views.py::test_concurrent_reader_processes_get_exact_bytes",
    "tests/mount/test_permissions.py::test_another_user_reads_nothing_of_a_root_task",
)


def summed(lines: list[str]) -> dict[str, dict[str, int]]:
    """Counts per figure, with `runs`: how many test runs recorded it."""
    figures: dict[str, Counter[str]] = defaultdict(Counter)
    for line in lines:
        counts = json.loads(line)
        figure = figures[counts.pop("figure")]
        figure.update(counts)
        figure["runs"] += 1
    return {name: dict(counts) for name, counts in sorted(figures.items())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="the default tier's sizes instead of the stress tier's")
    parser.add_argument("--chaos", type=float, metavar="MINUTES",
                        help="run the chaos run for MINUTES against one real mount")
    parser.add_argument("--seed", type=int, help="the chaos run's seed (default: random)")
    args = parser.parse_args()
    if args.chaos is not None:
        return chaos(args.chaos, args.seed)
    marks = "not stress" if args.quick else "stress or not stress"
    with tempfile.TemporaryDirectory(prefix="sandfs-reliability-") as folder:
        report = os.path.join(folder, "counts.jsonl")
        env = {**os.environ, REPORT_ENV: report,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                           os.environ.get("PYTHONPATH")]))}
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "-m", marks, *MEASURING_TESTS], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = Path(report).read_text().splitlines() if os.path.exists(report) else []
    tail = done.stdout.strip().splitlines()[-1:] or [""]
    print(json.dumps({"tier": "quick" if args.quick else "stress", **summed(lines),
                      "pytest": {"exit_status": done.returncode, "summary": tail[0]}}))
    if done.returncode:
        print(done.stdout, file=sys.stderr)
    return done.returncode


def chaos(minutes: float, seed: int | None) -> int:
    sys.path.insert(0, str(ROOT))
    from tests.helpers.chaos import run_chaos

    seed = random.randrange(1 << 32) if seed is None else seed
    report = run_chaos(minutes, seed)
    print(json.dumps({"tier": "chaos", **report.to_json()}))
    return 0 if report.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
