#!/usr/bin/env python3
"""Data-parallel training under torchrun (DDP, gloo, CPU), each rank reading its shard of the
videos from the node's sandfs mount.

The node runs one mount without tasks (`sandfs mount MNT`); in the training script,
`sandfs.torch.join_task(MNT, CONFIG)` registers this rank's shard (RANK of WORLD_SIZE, from
torchrun's environment) as task `NAME.rRANK`, holds it for as long as the process lives and
returns its dataset:

    sandfs mount /mnt/sand
    torchrun --nproc-per-node 2 examples/torchrun_ddp.py /mnt/sand task.yaml

Rank 0 prints, as a JSON last line, how often each video was read in each epoch across the
ranks (exactly once where the world size divides the videos), and the losses.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader

from sandfs.torch import join_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mount")
    parser.add_argument("config", help="the task's YAML (every rank gives the same)")
    parser.add_argument("--workers", type=int, default=1, help="DataLoader workers per rank")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)  # the same initial weights on every rank
    with join_task(args.mount, args.config) as dataset:  # this rank's shard, held
        net = nn.Sequential(nn.Flatten(), nn.LazyLinear(len(dataset.classes)))
        net(dataset[0][0].float())  # the lazy layer takes its shape before DDP wraps it
        model = nn.parallel.DistributedDataParallel(net)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        loader = DataLoader(dataset, batch_size=None, sampler=dataset.sampler(),
                            num_workers=args.workers, persistent_workers=args.workers > 0)
        coverage, losses = [], []
        for _epoch in dataset.epochs():
            videos = []
            for clips, labels, meta in loader:
                loss = nn.functional.cross_entropy(model(clips.float() / 255), labels,
                                                   ignore_index=-1)
                optimizer.zero_grad()
                loss.backward()  # DDP averages the gradients across the ranks
                optimizer.step()
                losses.append(round(loss.item(), 4))
                videos += [sample["video"] for sample in meta["samples"]]
            everyone = [None] * dist.get_world_size()
            dist.all_gather_object(everyone, videos)
            coverage.append(Counter(v for rank_videos in everyone for v in rank_videos))
    if dist.get_rank() == 0:
        print(json.dumps({"world_size": dist.get_world_size(),
                          "reads_per_video": [dict(sorted(c.items())) for c in coverage],
                          "losses": losses}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
