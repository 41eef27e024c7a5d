""".sand/metrics in-process: listed beside status.json, read-only, never cached, and its
counters agree with status.json after views were read."""

from __future__ import annotations

import json
import os

from tests.helpers.metrics import assert_between, parse_metrics
from tests.helpers.operations import CTX


async def test_metrics_agree_with_status_after_reads(fs, expected_view):
    for iteration in range(3):
        assert await fs.read(f"t0/0/{iteration}/view") == expected_view(0, iteration)
    before = json.loads(await fs.read(".sand/status.json"))
    samples = parse_metrics((await fs.read(".sand/metrics")).decode())
    after = json.loads(await fs.read(".sand/status.json"))
    assert_between(samples, before, after)
    assert samples[("sandfs_views_served_total", (("task", "t0"),))] == 3
    assert samples[("sandfs_frames_decoded_total", ())] > 0


async def test_metrics_file_is_read_only_and_read_fresh(fs):
    assert "metrics" in await fs.listdir(".sand")
    attr = await fs.stat(".sand/metrics")
    assert attr.st_mode & 0o777 == 0o444 and attr.st_size > 0
    info = await fs.ops.open(await fs.inode(".sand/metrics"), os.O_RDONLY, CTX)
    assert info.direct_io and not info.keep_cache
    await fs.ops.release(info.fh)
