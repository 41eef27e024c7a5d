"""The reliability figures the suite measures, for scripts/reliability.py: a test that measures
one appends its counts as one JSON line to the file named by $SANDFS_RELIABILITY_REPORT
(nothing when it is unset). Tests record before they assert, so a failing run still reports
what it found."""

from __future__ import annotations

import json
import os

REPORT_ENV = "SANDFS_RELIABILITY_REPORT"


def record(figure: str, **counts: int) -> None:
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as report:  # one append per line
            report.write(json.dumps({"figure": figure, **counts}) + "\n")
