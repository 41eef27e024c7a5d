"""Run by test_store_faults.py as `python -m tests.helpers.crash_writer` in a subprocess with
SANDFS_FAULT set (e.g. a kill9 action): opens a store at ROOT with BUDGET bytes and puts frames
0..COUNT-1, each needed sooner than the last (deadline COUNT - index), so that a full store
evicts."""

from __future__ import annotations

import sys

from sandfs.cache import ObjectStore
from tests.helpers.store import SHAPES, key, make_array


def main(root: str, budget_bytes: str, count: str) -> None:
    with ObjectStore(root, int(budget_bytes)) as store:
        for i in range(int(count)):
            store.put(key("frame", i), make_array(i, SHAPES["frame"]), fmt="raw",
                      deadline=int(count) - i)


if __name__ == "__main__":
    main(*sys.argv[1:])
