"""The same training run with Horovod (its allreduce over the cluster's MPI).

    mpictl run -np 3 --workdir examples -- python train_horovod.py [--steps 30]

Horovod needs no ``--torch``: ``hvd.init()`` takes the ranks from MPI. ``DistributedOptimizer``
averages the gradients; rank 0's initial weights are broadcast. Rank 0 prints one JSON line per
step with the loss averaged over all ranks.
"""

from __future__ import annotations

import json

import horovod.torch as hvd
import torch
from torch import nn
from train_ddp import arguments, small_cnn, synthetic_data


def main() -> None:
    args = arguments(__doc__.splitlines()[0])

    torch.set_num_threads(1)
    hvd.init()
    model = small_cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    pixels, labels = synthetic_data(args.batch * args.steps, seed=100 + hvd.rank())
    loss_fn = nn.CrossEntropyLoss()
    for step in range(args.steps):
        batch = slice(step * args.batch, (step + 1) * args.batch)
        optimizer.zero_grad()
        loss = loss_fn(model(pixels[batch]), labels[batch])
        loss.backward()
        optimizer.step()
        mean = hvd.allreduce(loss.detach(), name="loss")
        if hvd.rank() == 0:
            record = {"step": step, "loss": round(mean.item(), 5), "world_size": hvd.size()}
            print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
