#!/usr/bin/env python3
"""Data-parallel training with Ray Train (TorchTrainer, gloo, CPU) on a local two-node cluster,
each rank reading its shard of the videos from its own node's sandfs mount.

In each worker `sandfs.ray.task(config)` takes the world size and rank from Ray Train, names the
task `NAME.rR` and registers it on the worker's node, so a node plans and decodes only the
videos of its own ranks. The script trains 4 ranks spread over 2 nodes, then the same 4 ranks
on one node (fresh mounts), and prints as a JSON last line: per-epoch coverage across ranks,
the frames each node decoded, and the tasks left on the mounts.

Usage: examples/ray_train_ddp.py [--epochs 2] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections import Counter

import numpy as np
import ray
import ray.train
import torch
from ray.cluster_utils import Cluster
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer, prepare_model
from torch import nn

import sandfs.ray as sandray
from sandfs.media.synth import make_dataset

WORLD_SIZE = 4


def data_config(dataset: str, epochs: int) -> dict:
    return {
        "task": "ddp", "seed": 0, "epochs": epochs,
        "dataset": {
            "tag": "train", "video_dataset_path": dataset, "labels": "dirname",
            "sampling": {"videos_per_batch": 2, "frames_per_video": 8, "frame_stride": 2},
            "augmentation": [
                {"name": "resize", "branch_type": "single", "inputs": ["frame"],
                 "outputs": ["clip"], "config": [{"resize": {"shape": [32, 32]}}]},
            ],
        },
    }


def train_loop(loop: dict) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    with sandray.task(loop["data"], settings=loop["settings"]) as view:  # shard from Ray Train
        classes = len(os.listdir(os.path.join(view.root, "videos")))
        model = prepare_model(nn.Sequential(
            nn.Conv3d(3, 8, kernel_size=3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool3d(1),
            nn.Flatten(), nn.Linear(8, classes)))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        read = []
        for epoch in range(view.epochs):
            videos = []
            for iteration in range(view.iterations_per_epoch):
                path = view.path(epoch, iteration)
                with open(path, "rb") as f:
                    clips = torch.from_numpy(np.load(f)).permute(0, 4, 1, 2, 3).float() / 255
                meta = json.loads(os.getxattr(path, "user.sand.meta"))
                labels = torch.tensor([s["label_index"] for s in meta["samples"]])
                videos += [s["video"] for s in meta["samples"]]
                loss = nn.functional.cross_entropy(model(clips), labels)
                optimizer.zero_grad()
                loss.backward()  # DDP all-reduces the gradients across the ranks (gloo)
                optimizer.step()
            read.append(videos)
        record = {"task": view.task, "node": ray.get_runtime_context().get_node_id(),
                  "epochs": read}
    with open(os.path.join(loop["out"], f"{record['task']}.json"), "w") as f:
        json.dump(record, f)


def run(name: str, data: dict, work: str, placement: str, cpus_per_worker: float) -> dict:
    settings = sandray.DaemonSettings(mountpoint=f"{work}/{name}/{{node}}/mnt",
                                      cache_dir=f"{work}/{name}/{{node}}/cache",
                                      mount_args=("--workers", "1"))
    out = os.path.join(work, name, "ranks")
    os.makedirs(out, exist_ok=True)
    TorchTrainer(
        train_loop, train_loop_config={"data": data, "settings": settings, "out": out},
        scaling_config=ScalingConfig(num_workers=WORLD_SIZE, placement_strategy=placement,
                                     resources_per_worker={"CPU": cpus_per_worker}),
        run_config=RunConfig(storage_path=os.path.join(work, "results"), name=name),
    ).fit()
    records = []
    for rank_file in sorted(os.listdir(out)):
        with open(os.path.join(out, rank_file)) as f:
            records.append(json.load(f))
    statuses = {node: s for node, s in sandray.node_status().items() if s}
    sandray.stop_daemons()
    return {"records": records, "statuses": statuses}


def coverage(records: list[dict], videos: int, epochs: int) -> float:
    """The share of epochs in which the ranks together read every video exactly once."""
    exact = 0
    for epoch in range(epochs):
        counts = Counter(v for r in records for v in r["epochs"][epoch])
        exact += len(counts) == videos and set(counts.values()) == {1}
    return exact / epochs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workdir", help="default: a new temporary directory")
    args = parser.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="sandfs-ddp-")
    dataset = os.path.join(work, "videos")
    videos = 16  # a multiple of the world size: no padding repeats
    if not os.path.isdir(dataset):
        # videos several clip spans long: a rank's clips in two epochs overlap little
        make_dataset(dataset, classes=2, videos_per_class=videos // 2, num_frames=(96, 160),
                     size=(64, 48), seed=0, gop=16, noise=True)
    data = data_config(dataset, args.epochs)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    cluster.add_node(num_cpus=2)
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        spread = run("spread", data, work, "SPREAD", 1)
        packed = run("packed", data, work, "PACK", 0.5)
    finally:
        sandray.stop_daemons()
        ray.shutdown()
        cluster.shutdown()
    one_node = max(s["frames_decoded"] for s in packed["statuses"].values())
    per_node = {n[:8]: s["frames_decoded"] for n, s in spread["statuses"].items()}
    ranks_per_node = Counter(r["node"][:8] for r in spread["records"])
    figures = {
        "ranks": len(spread["records"]), "ranks_per_node": dict(ranks_per_node),
        "epoch_coverage_exactly_once": coverage(spread["records"], videos, args.epochs),
        "tasks_left": sorted(t for s in spread["statuses"].values() for t in s["tasks"]),
        "frames_decoded_per_node": per_node, "frames_decoded_one_node_all_ranks": one_node,
        "max_node_ratio_vs_one_node": round(max(per_node.values()) / max(one_node, 1), 3),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
