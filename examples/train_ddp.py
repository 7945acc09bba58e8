"""A small data-parallel training run: PyTorch DistributedDataParallel over gloo.

    mpictl run -np 3 --torch --workdir examples -- python train_ddp.py [--steps 30]

``--torch`` gives every rank RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, which
``init_process_group(init_method="env://")`` reads; ``--workdir examples`` puts this file on every
node. The data are synthetic (noisy images whose class is where a brighter patch is), each rank
trains on its own shard, and DDP averages the gradients.
Rank 0 prints one JSON line per logged step: the loss averaged over all ranks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

IMAGE = 16


def synthetic_data(samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy images with a bright patch: top-left for class 1, bottom-right for class 0."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (samples,), generator=gen)
    pixels = torch.randn(samples, 1, IMAGE, IMAGE, generator=gen)
    patch = IMAGE // 3
    pixels[labels == 1, :, :patch, :patch] += 1.0
    pixels[labels == 0, :, -patch:, -patch:] += 1.0
    return pixels, labels


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * (IMAGE // 2) ** 2, 2),
    )


def arguments(description: str) -> argparse.Namespace:
    """The options both examples take."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    return parser.parse_args()


def main() -> None:
    args = arguments(__doc__.splitlines()[0])

    torch.set_num_threads(1)  # ranks share the node's cores
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234)  # the same initial weights everywhere (DDP broadcasts them anyway)
    model = DistributedDataParallel(small_cnn())
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    pixels, labels = synthetic_data(args.batch * args.steps, seed=100 + rank)  # this rank's shard
    loss_fn = nn.CrossEntropyLoss()
    started = time.perf_counter()
    for step in range(args.steps):
        batch = slice(step * args.batch, (step + 1) * args.batch)
        optimizer.zero_grad()
        loss = loss_fn(model(pixels[batch]), labels[batch])
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        if rank == 0:
            record = {"step": step, "loss": round(mean.item() / world, 5), "world_size": world}
            print(json.dumps(record), flush=True)
    if rank == 0:
        print(json.dumps({"done": True, "seconds": round(time.perf_counter() - started, 3)}))
    # Every rank is done before any leaves. Then leave without the process group's teardown:
    # under load, gloo's threads were seen aborting a rank at interpreter exit ("terminate called
    # without an active exception", exit 134) after the training had finished, which would fail
    # a job that did all its work.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
