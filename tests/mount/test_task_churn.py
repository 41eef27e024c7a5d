"""Tasks that come and go while another task reads new windows (a Ray Tune search ending trials
early): registering and removing a task in a loop through .sand/tasks never ends the daemon
and never leaves the reader waiting for a window."""

from __future__ import annotations

import errno
import time

import pytest
import yaml

from tests.helpers.churn import HANG_S, ViewReader, register_and_remove
from tests.helpers.harness import mount_sandfs, task_config, write_config
from tests.helpers.plans import build_plan
from tests.helpers.reference import reference_view
from tests.helpers.reliability import record


def jumper_text(dataset) -> str:
    """A task on the same videos under another tag: its own frame pools (C4's jumper)."""
    config = task_config(dataset, task="jumper", seed=5, epochs=1_000_000,
                         sampling={"videos_per_batch": 1})
    config["dataset"] |= {"tag": "jumper", "labels": "none"}
    return yaml.safe_dump(config, sort_keys=False)


@pytest.mark.parametrize("rounds", [25, pytest.param(1000, marks=pytest.mark.stress)])
def test_register_remove_churn_beside_a_reader_of_new_windows(tmp_path, dataset_dir, rounds):
    config = write_config(tmp_path / "healthy.yaml", task_config(
        dataset_dir, task="healthy", epochs=1000, engine={"k_epochs": 1, "workers": 2}))
    plan = build_plan(config)
    text = jumper_text(dataset_dir)
    with mount_sandfs(tmp_path, [config]) as m:
        reader = ViewReader(m.mountpoint, "healthy", plan.iterations_per_epoch, plan.epochs)
        reader.start()
        met: list[int] = []
        started = time.monotonic()
        for _ in range(rounds):
            met += register_and_remove(m.mountpoint, "jumper", text)
            assert reader.hung_s() < HANG_S, "the reader waits for a window no one plans"
        churn_s = time.monotonic() - started
        time.sleep(0.5)  # the reader goes on after the last removal
        stopped = reader.stop()
        alive = m.process.poll() is None
        record("task_churn", rounds=rounds, daemon_deaths=int(not alive),
               hangs=int(not stopped), reader_errors=len(reader.errors))
        print(f"{rounds} rounds in {churn_s:.1f} s; {len(reader.durations_s)} views read, "
              f"slowest {max(reader.durations_s):.2f} s")
        assert alive, m.log_text()[-3000:]
        assert stopped, "a read hung after the churn"
        assert reader.errors == []
        assert set(met) <= {errno.ENOENT}, met  # a removal may find the task refused first
        assert max(reader.durations_s) < HANG_S
        for (epoch, iteration), data in reader.kept.items():
            assert data == reference_view(plan, epoch, iteration), (epoch, iteration)
        assert len(reader.durations_s) > plan.iterations_per_epoch  # it reached new windows
