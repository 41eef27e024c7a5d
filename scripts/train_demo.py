#!/usr/bin/env python3
"""Train a tiny 3D CNN for a few iterations by reading sandfs views — the whole data pipeline is
a `sandfs.torch.ViewDataset` over the mount (`open`, `read` and `getxattr` underneath).

Usage: scripts/train_demo.py MOUNT TASK [--epochs 2] [--iterations N]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader

from sandfs.torch import ViewDataset


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
    parser.add_argument("--workers", type=int, default=1,
                        help="DataLoader worker processes (a view is ready: one overlaps the "
                             "read with the step)")
    args = parser.parse_args()
    torch.manual_seed(0)
    dataset = ViewDataset(args.mount, args.task)
    model = TinyVideoNet(len(dataset.classes))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    # batch_size=None: every view is a whole batch already; the sampler hands the workers
    # (epoch, iteration) keys, so they read the epoch set here (persistent workers too)
    loader = DataLoader(dataset, batch_size=None, sampler=dataset.sampler(),
                        num_workers=args.workers, persistent_workers=args.workers > 0)
    for epoch in dataset.epochs():
        if epoch >= args.epochs:
            break
        started, iterations = time.monotonic(), 0
        for iteration, (clips, labels, _meta) in enumerate(loader):
            if args.iterations and iteration >= args.iterations:
                break
            iterations += 1
            loss = nn.functional.cross_entropy(model(clips), labels, ignore_index=-1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(f"epoch {epoch} iteration {iteration}: batch {tuple(clips.shape)} "
                  f"loss {loss.item():.3f}")
        print(f"epoch {epoch}: {iterations} iterations in {time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    main()
