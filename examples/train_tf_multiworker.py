"""The same Keras model trained with TensorFlow's own multi-worker strategy, without Horovod.

    mpictl run -np 3 --tf --workdir examples -- python train_tf_multiworker.py [--steps 30]

``--tf`` gives every rank the ``TF_CONFIG`` that ``tf.distribute.MultiWorkerMirroredStrategy``
reads: one worker per rank (address and port), this rank's task index. The strategy's
collectives (gRPC between the workers) average the gradients. Each rank trains on its own shard
(the shard chosen by its task index, which is its rank). Rank 0 prints one JSON line per step
(the loss summed over the replicas' shares of the global batch, so the mean over all ranks); at
the end every rank prints the digest of its shard and its weights checksum, equal on every rank
only when the gradients were averaged across the different shards.
"""

from __future__ import annotations

import json
import os

# Before TensorFlow loads: its start-up chatter (oneDNN, CPU features) on every rank's stderr.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
from tf_common import arguments, checksum, digest, one_thread, small_cnn, synthetic_data  # noqa: E402


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    one_thread()
    # Every worker must create the strategy before any other TensorFlow operation.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    rank = resolver.task_id
    replicas = strategy.num_replicas_in_sync
    pixels, labels = synthetic_data(args.batch * args.steps, seed=100 + rank)  # this shard
    with strategy.scope():
        tf.keras.utils.set_random_seed(1234)  # variables are synced from worker 0 anyway
        model = small_cnn()
        optimizer = tf.keras.optimizers.SGD(learning_rate=args.lr, momentum=0.9)
        loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf.keras.losses.Reduction.NONE
        )

    @tf.function
    def step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        def replica_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                # this replica's share of the global batch's mean loss
                loss = tf.nn.compute_average_loss(
                    loss_fn(y, model(x, training=True)), global_batch_size=args.batch * replicas
                )
            grads = tape.gradient(loss, model.trainable_variables)
            pairs = zip(grads, model.trainable_variables)  # noqa: B905 - autograph: no strict=
            optimizer.apply_gradients(pairs)  # the gradients are all-reduced here
            return loss

        per_replica = strategy.run(replica_step, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    for i in range(args.steps):
        batch = slice(i * args.batch, (i + 1) * args.batch)
        loss = step(tf.constant(pixels[batch]), tf.constant(labels[batch]))
        if rank == 0:
            record = {"step": i, "loss": round(float(loss), 5), "num_replicas_in_sync": replicas}
            print(json.dumps(record), flush=True)
    record = {
        "rank": rank,
        "size": replicas,
        "shard": digest(pixels, labels),
        "checksum": checksum(model),
    }
    print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
