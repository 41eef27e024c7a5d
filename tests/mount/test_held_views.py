"""Through the kernel: later batches are filled in the buffers of batches every reader has
read, never in one a reader still holds open."""

from __future__ import annotations

import os

from tests.helpers.harness import mount_sandfs, task_config, write_config
from tests.helpers.plans import build_plan
from tests.helpers.reference import reference_view

UPSCALE = [{"name": "big", "branch_type": "single", "inputs": ["frame"], "outputs": ["b"],
            "config": [{"resize": {"shape": [240, 320]}}]}]  # 3.7 MB views: past any readahead


def test_a_view_held_open_reads_its_own_bytes_after_later_batches(tmp_path, dataset_dir):
    """The reader reads a view's first page and keeps it open while the task reads on; room
    for about three batches, so later ones take the buffers of those read. The rest of the
    held view, past what the kernel read ahead, still comes from the daemon: its own bytes."""
    config = write_config(tmp_path / "t.yaml", task_config(
        dataset_dir, augmentation=UPSCALE,
        engine={"k_epochs": 1, "workers": 1, "memory_limit": "16M"}))
    plan = build_plan(config)
    size = plan.view_nbytes(0, 0)
    later = [(e, i) for e in range(plan.epochs) for i in range(plan.iterations_per_epoch)][1:]
    with mount_sandfs(tmp_path, [config]) as m:
        fd = os.open(m.path("t0", "0", "0", "view"), os.O_RDONLY)
        try:
            head = os.pread(fd, 4096, 0)
            for epoch, iteration in later:
                assert m.path("t0", str(epoch), str(iteration), "view").read_bytes() == \
                    reference_view(plan, epoch, iteration), (epoch, iteration)
            rest = os.pread(fd, size, len(head))
        finally:
            os.close(fd)
    assert head + rest == reference_view(plan, 0, 0)
