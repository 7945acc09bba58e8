"""A Keras model trained with Horovod's TensorFlow bindings (its allreduce over the cluster's MPI).

    mpictl run -np 3 --workdir examples -- python train_tf_horovod.py [--steps 30]

Needs a cluster built with ``horovod_frameworks: [pytorch, tensorflow]`` (or ``[tensorflow]``).
No ``--tf``: ``hvd.init()`` takes the ranks from MPI. Horovod's ``DistributedOptimizer`` averages
the gradients and ``BroadcastGlobalVariablesCallback`` starts every rank from rank 0's weights;
each rank trains on its own shard of the synthetic data (the shard chosen by its rank). Rank 0
prints one JSON line per step (the loss averaged over all ranks, ``MetricAverageCallback``);
at the end every rank prints the digest of its shard and its weights checksum, which is the same
on every rank only because the allreduce averaged the different shards' gradients.
"""

from __future__ import annotations

import json
import os

# Before TensorFlow loads: its start-up chatter (oneDNN, CPU features) on every rank's stderr.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import horovod.tensorflow.keras as hvd  # noqa: E402
import tensorflow as tf  # noqa: E402
from tf_common import arguments, checksum, digest, one_thread, small_cnn, synthetic_data  # noqa: E402


class PrintLoss(tf.keras.callbacks.Callback):
    """Rank 0: one JSON line per step (an epoch of one batch, its loss averaged over ranks)."""

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if hvd.rank() == 0:
            record = {
                "step": epoch,
                "loss": round(float(logs["loss"]), 5),
                "world_size": hvd.size(),
            }
            print(json.dumps(record), flush=True)


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    one_thread()
    hvd.init()
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:  # one GPU per rank (Horovod's own recipe), before TensorFlow touches a device
        tf.config.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], "GPU")
    pixels, labels = synthetic_data(args.batch * args.steps, seed=100 + hvd.rank())  # this shard
    data = tf.data.Dataset.from_tensor_slices((pixels, labels)).batch(args.batch).repeat()
    tf.keras.utils.set_random_seed(1234 + hvd.rank())  # different initial weights: rank 0's win
    model = small_cnn()
    # Horovod 0.28's DistributedOptimizer wraps Keras 2's optimizers (tf.keras.optimizers.legacy).
    # The averaged gradient is the global batch's, as in train_tf_multiworker.py: the same rate
    # (Horovod's habit of scaling it by hvd.size() made this small model's loss jump at first).
    optimizer = hvd.DistributedOptimizer(
        tf.keras.optimizers.legacy.SGD(learning_rate=args.lr, momentum=0.9)
    )
    model.compile(
        optimizer=optimizer,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    # One batch per epoch, so each step's loss (not Keras' running mean) reaches the callbacks.
    model.fit(
        data,
        steps_per_epoch=1,
        epochs=args.steps,
        verbose=0,
        callbacks=[
            hvd.callbacks.BroadcastGlobalVariablesCallback(0),
            hvd.callbacks.MetricAverageCallback(),
            PrintLoss(),
        ],
    )
    record = {
        "rank": hvd.rank(),
        "size": hvd.size(),
        "shard": digest(pixels, labels),
        "checksum": checksum(model),
    }
    print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
