"""sandfs.torch.ViewDataset through a real mount: items equal the reference views and their
labels, epochs, DataLoader workers (fork and spawn), and a few training steps."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest

from sandfs.config.loader import load_task_config
from sandfs.media.scan import scan_dataset
from sandfs.plan.task import TaskPlan
from tests.helpers.harness import mount_sandfs, task_config, write_config
from tests.helpers.reference import reference_view

torch = pytest.importorskip("torch")
from sandfs.torch import ViewDataset  # noqa: E402  (after the skip when torch is missing)


@pytest.fixture(scope="module")
def setup(tmp_path_factory, dataset_dir):
    workdir = tmp_path_factory.mktemp("torch")
    config_path = write_config(workdir / "task.yaml", task_config(dataset_dir))
    cfg = load_task_config(config_path)
    found = scan_dataset(cfg.dataset.video_dataset_path, cfg.dataset.extensions)
    plan = TaskPlan(cfg, found.videos, k_epochs=cfg.engine.k_epochs,
                    other_rel_paths=[b.rel_path for b in found.bad])
    with mount_sandfs(workdir, [config_path]) as mounted:
        yield mounted, plan


def expected_item(plan: TaskPlan, epoch: int, iteration: int):
    clips = np.load(io.BytesIO(reference_view(plan, epoch, iteration)))
    meta = plan.view_meta(plan.view_plan(epoch, iteration))
    labels = [-1 if s["label_index"] is None else s["label_index"] for s in meta["samples"]]
    return clips, labels, meta


def assert_item(item, expected) -> None:
    clips, labels, meta = item
    want_clips, want_labels, want_meta = expected
    assert clips.dtype == torch.uint8 and tuple(clips.shape) == want_clips.shape
    assert np.array_equal(clips.numpy(), want_clips)
    assert labels.dtype == torch.int64 and labels.tolist() == want_labels
    assert meta == want_meta


def test_items_equal_the_reference_views_and_labels(setup):
    mounted, plan = setup
    dataset = ViewDataset(mounted.mountpoint, "t0")
    assert dataset.classes == plan.class_names == ["archery", "bowling", "juggling"]
    assert dataset.num_epochs == plan.epochs
    for epoch in dataset.epochs():
        assert len(dataset) == plan.iterations_per_epoch
        for iteration in range(len(dataset)):
            assert_item(dataset[iteration], expected_item(plan, epoch, iteration))
    assert dataset.epoch == plan.epochs - 1


def test_set_epoch_and_bounds(setup):
    mounted, plan = setup
    dataset = ViewDataset(mounted.mountpoint, "t0", epoch=1)
    first = dataset[0][0]
    dataset.set_epoch(2)
    assert_item(dataset[0], expected_item(plan, 2, 0))
    assert not torch.equal(first, dataset[0][0])  # another epoch, another batch
    with pytest.raises(IndexError):
        dataset[len(dataset)]
    assert len(list(dataset)) == len(dataset)  # iterating stops at the end of the epoch
    with pytest.raises(ValueError, match=r"epochs 0\.\.2"):
        dataset.set_epoch(plan.epochs)
    with pytest.raises(FileNotFoundError, match="no task 'nope'"):
        ViewDataset(mounted.mountpoint, "nope")


@pytest.mark.parametrize("num_workers", [1, 2])
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_persistent_workers_read_the_epoch_the_main_process_set(setup, start_method,
                                                                num_workers):
    """The sampler carries the epoch in its keys: workers started once (persistent) read
    epoch 1 after set_epoch(1), never their copy's epoch 0 again."""
    mounted, plan = setup
    dataset = ViewDataset(mounted.mountpoint, "t0")
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=None, sampler=dataset.sampler(), num_workers=num_workers,
        multiprocessing_context=start_method, persistent_workers=True)
    for epoch in dataset.epochs():
        items = list(loader)
        assert len(items) == len(loader) == plan.iterations_per_epoch
        assert [meta["epoch"] for _, _, meta in items] == [epoch] * len(items)
        for iteration, item in enumerate(items):
            assert_item(item, expected_item(plan, epoch, iteration))


def test_a_worker_without_the_sampler_is_refused_not_a_repeated_epoch(setup):
    """Without `sampler=dataset.sampler()` a worker gets bare indices and cannot know the
    epoch: that is an error naming the fix, never epoch 0's batches again."""
    mounted, _ = setup
    dataset = ViewDataset(mounted.mountpoint, "t0")
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=1,
                                         persistent_workers=True)
    dataset.set_epoch(1)
    with pytest.raises(TypeError, match=r"pass sampler=dataset\.sampler\(\)"):
        next(iter(loader))


def test_the_sampler_follows_set_epoch(setup):
    mounted, plan = setup
    dataset = ViewDataset(mounted.mountpoint, "t0")
    sampler = dataset.sampler()
    assert list(sampler) == [(0, i) for i in range(plan.iterations_per_epoch)]
    sampler.set_epoch(2)  # DistributedSampler's spelling sets the dataset's epoch
    assert dataset.epoch == 2 and next(iter(sampler)) == (2, 0)
    assert_item(dataset[(1, 0)], expected_item(plan, 1, 0))  # a key names its own epoch
    with pytest.raises(ValueError, match=r"epochs 0\.\.2"):
        dataset[(plan.epochs, 0)]


class SharedProbe(torch.utils.data.Dataset):
    """Says, in the worker, whether the dataset's clips come in shared memory."""

    def __init__(self, dataset: ViewDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key):
        clips = self.dataset[key][0]
        return clips.is_shared(), clips


def test_a_worker_reads_into_shared_memory_the_main_process_keeps(setup):
    """In a DataLoader worker the view is read into shared memory, so the loader hands it over
    as it is (no second copy); in the main process it is read into ordinary memory."""
    mounted, plan = setup
    dataset = ViewDataset(mounted.mountpoint, "t0")
    assert not dataset[0][0].is_shared()
    loader = torch.utils.data.DataLoader(SharedProbe(dataset), batch_size=None, num_workers=1,
                                         sampler=dataset.sampler())
    for iteration, (in_shared_memory, clips) in enumerate(loader):
        assert in_shared_memory
        assert np.array_equal(clips.numpy(), expected_item(plan, 0, iteration)[0])


def test_a_tiny_model_trains_through_it(setup):
    mounted, _ = setup
    torch.manual_seed(0)
    dataset = ViewDataset(mounted.mountpoint, "t0")
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(len(dataset.classes)))
    model(dataset[0][0].float())  # materialize the lazy layer's shape
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    losses = []
    for _ in dataset.epochs():
        for clips, labels, _meta in torch.utils.data.DataLoader(dataset, batch_size=None):
            loss = torch.nn.functional.cross_entropy(model(clips.float() / 255), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    assert len(losses) == 9 and all(np.isfinite(losses))
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ}, timeout=120)


def test_sandfs_never_imports_torch_itself():
    done = run_python("import sys, sandfs, sandfs.cli, sandfs.daemon, sandfs.fuse.operations\n"
                      "assert 'torch' not in sys.modules, 'torch was imported'")
    assert done.returncode == 0, done.stderr


def test_a_missing_torch_is_a_clear_import_error():
    done = run_python("import sys\nsys.modules['torch'] = None\nimport sandfs.torch")
    assert done.returncode != 0
    assert "sandfs.torch needs PyTorch" in done.stderr
