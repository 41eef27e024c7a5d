#!/usr/bin/env python3
"""A Ray Tune search (ASHA) over the learning rate of a tiny 3D CNN, reading sandfs views.

Every trial registers its task on its node's sandfs mount with `sandfs.ray.task` (the node's
daemon is started on the first trial) and the task ends with the trial, also when ASHA stops it
early. The trials share one data pipeline and seed, so they read the very same batches: the
search decodes about what one trial alone decodes. The script first runs one trial alone on its
own mount, then the search on another, and prints the figures as a JSON last line.

Usage: examples/ray_tune_asha.py [--trials 4] [--epochs 4] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import numpy as np
import ray
import torch
from ray import tune
from ray.tune.schedulers import ASHAScheduler
from torch import nn

import sandfs.ray as sandray
from sandfs.media.synth import make_dataset

LEARNING_RATES = [3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0]


class TinyVideoNet(nn.Module):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv3d(3, 8, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool3d(2),
            nn.Conv3d(8, 16, kernel_size=3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool3d(1),
        )
        self.head = nn.Linear(16, num_classes)

    def forward(self, clips: torch.Tensor) -> torch.Tensor:  # (N, T, H, W, C) uint8
        x = clips.permute(0, 4, 1, 2, 3).float() / 255.0
        return self.head(self.features(x).flatten(1))


def data_config(dataset: str, epochs: int) -> dict:
    """One data pipeline for every trial (the same seed: the same batches)."""
    return {
        "task": "asha", "seed": 0, "epochs": epochs,
        "dataset": {
            "tag": "train", "video_dataset_path": dataset, "labels": "dirname",
            "sampling": {"videos_per_batch": 4, "frames_per_video": 8, "frame_stride": 2},
            "augmentation": [
                {"name": "resize", "branch_type": "single", "inputs": ["frame"],
                 "outputs": ["small"], "config": [{"resize": {"shape": [40, 52]}}]},
                {"name": "crop", "branch_type": "single", "inputs": ["small"],
                 "outputs": ["clip"], "config": [{"random_crop": {"size": [32, 32]}}]},
            ],
        },
        # one window for the whole run, so that trials joining a little late share it
        "engine": {"k_epochs": 2 * epochs},
    }


def trainable(config: dict) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    with sandray.task(config["data"], name=f"asha{config['trial']}",
                      settings=config["settings"]) as view:
        classes = len(os.listdir(os.path.join(view.root, "videos")))
        model = TinyVideoNet(classes)
        optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATES[config["trial"]])
        for epoch in range(view.epochs):
            losses = []
            for iteration in range(view.iterations_per_epoch):
                path = view.path(epoch, iteration)
                with open(path, "rb") as f:
                    clips = torch.from_numpy(np.load(f))
                meta = json.loads(os.getxattr(path, "user.sand.meta"))
                labels = torch.tensor([s["label_index"] for s in meta["samples"]])
                loss = nn.functional.cross_entropy(model(clips), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
            tune.report({"loss": float(np.mean(losses)), "epoch": epoch + 1})


def search(data: dict, trials: int, settings: sandray.DaemonSettings, storage: str,
           name: str) -> dict:
    """Run `trials` trials under ASHA; the figures of the node's mount afterwards."""
    scheduler = ASHAScheduler(metric="loss", mode="min", max_t=data["epochs"], grace_period=1,
                              reduction_factor=2)
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 2 / max(trials, 2)}),  # all trials at once
        param_space={"trial": tune.grid_search(list(range(trials))), "data": data,
                     "settings": settings},
        tune_config=tune.TuneConfig(scheduler=scheduler),
        run_config=tune.RunConfig(storage_path=storage, name=name, verbose=0))
    results = tuner.fit()
    epochs_run = [r.metrics.get("epoch", 0) for r in results]
    statuses = {node[:8]: s for node, s in sandray.node_status().items() if s}
    sandray.stop_daemons()
    return {"trials": len(epochs_run),
            "stopped_early": sum(e < data["epochs"] for e in epochs_run),
            "errors": sum(r.error is not None for r in results),
            "tasks_left": sorted(t for s in statuses.values() for t in s["tasks"]),
            "frames_decoded_per_node": {n: s["frames_decoded"] for n, s in statuses.items()},
            "frames_decoded": sum(s["frames_decoded"] for s in statuses.values()),
            "views_materialized": sum(s["views_materialized"] for s in statuses.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--workdir", help="default: a new temporary directory")
    args = parser.parse_args()
    if not 1 <= args.trials <= len(LEARNING_RATES):
        parser.error(f"--trials must be 1..{len(LEARNING_RATES)}")
    work = args.workdir or tempfile.mkdtemp(prefix="sandfs-asha-")
    dataset = os.path.join(work, "videos")
    if not os.path.isdir(dataset):
        make_dataset(dataset, classes=2, videos_per_class=6, num_frames=(32, 48),
                     size=(64, 48), seed=0, gop=16, noise=True)
    data = data_config(dataset, args.epochs)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        runs = {}
        for name, trials in (("alone", 1), ("search", args.trials)):
            settings = sandray.DaemonSettings(
                mountpoint=f"{work}/{name}/{{node}}/mnt", cache_dir=f"{work}/{name}/{{node}}/cache",
                mount_args=("--workers", "2"))
            runs[name] = search(data, trials, settings, os.path.join(work, "tune"), name)
            print(f"{name}: {runs[name]}", flush=True)
    finally:
        sandray.stop_daemons()
        ray.shutdown()
    figures = {**runs["search"],
               "frames_decoded_alone": runs["alone"]["frames_decoded"],
               "frames_ratio_vs_alone": round(runs["search"]["frames_decoded"]
                                              / max(runs["alone"]["frames_decoded"], 1), 3)}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
