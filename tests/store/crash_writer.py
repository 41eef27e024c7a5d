"""Run by test_store_faults.py in a subprocess with SANDFS_FAULT set (e.g. a kill9 action):
opens a store at ROOT with BUDGET bytes and puts frames 0..COUNT-1, each needed sooner than the
last (deadline COUNT - index), so that a full store evicts."""

from __future__ import annotations

import sys

from store_helpers import SHAPES, key, make_array

from sandfs.cache import ObjectStore


def main(root: str, budget_bytes: str, count: str) -> None:
    with ObjectStore(root, int(budget_bytes)) as store:
        for i in range(int(count)):
            store.put(key("frame", i), make_array(i, SHAPES["frame"]), fmt="raw",
                      deadline=int(count) - i)


if __name__ == "__main__":
    main(*sys.argv[1:])
