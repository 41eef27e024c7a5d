#!/usr/bin/env python3
"""Train a tiny 3D CNN for a few iterations by reading sandfs views — the whole data pipeline is
`open`, `read` and `getxattr` on the mount.

Usage: scripts/train_demo.py MOUNT TASK [--epochs 2] [--iterations N]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch
from torch import nn


def read_view(mount: str, task: str, epoch: int, iteration: int):
    path = f"{mount}/{task}/{epoch}/{iteration}/view"
    with open(path, "rb") as f:
        batch = torch.from_numpy(np.load(f))  # (N, T, H, W, C) uint8
    meta = json.loads(os.getxattr(path, "user.sand.meta"))
    labels = [s["label_index"] for s in meta["samples"]]
    return batch, torch.tensor(labels)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mount")
    parser.add_argument("task")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=0, help="per epoch; 0 = all")
    args = parser.parse_args()
    torch.manual_seed(0)
    task_dir = f"{args.mount}/{args.task}"
    num_classes = len(os.listdir(f"{task_dir}/videos"))  # labels: dirname -> class folders
    model = TinyVideoNet(num_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        iterations = len(os.listdir(f"{task_dir}/{epoch}"))
        if args.iterations:
            iterations = min(iterations, args.iterations)
        started = time.monotonic()
        for iteration in range(iterations):
            clips, labels = read_view(args.mount, args.task, epoch, iteration)
            loss = nn.functional.cross_entropy(model(clips), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(f"epoch {epoch} iteration {iteration}: batch {tuple(clips.shape)} "
                  f"loss {loss.item():.3f}")
        print(f"epoch {epoch}: {iterations} iterations in {time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    main()
