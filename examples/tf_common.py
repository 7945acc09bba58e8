"""What the two TensorFlow examples share: the options, the synthetic data, the model, and the
digests each rank prints at the end: of its shard (different on every rank) and of its final
weights (the same on every rank only when the ranks' updates were averaged)."""

from __future__ import annotations

import argparse
import hashlib
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

IMAGE = 16


def arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    return parser.parse_args()


def one_thread() -> None:
    """Ranks share the node's cores: one thread each (before TensorFlow starts its runtime)."""
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def synthetic_data(samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Noisy images with a bright patch: top-left for class 1, bottom-right for class 0 (the
    PyTorch examples' data, channels last)."""
    gen = np.random.default_rng(seed)
    labels = gen.integers(0, 2, samples).astype("int64")
    pixels = gen.standard_normal((samples, IMAGE, IMAGE, 1)).astype("float32")
    patch = IMAGE // 3
    pixels[labels == 1, :patch, :patch, :] += 1.0
    pixels[labels == 0, -patch:, -patch:, :] += 1.0
    return pixels, labels


def small_cnn() -> tf.keras.Model:
    return tf.keras.Sequential(
        [
            tf.keras.layers.Input((IMAGE, IMAGE, 1)),
            tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
            tf.keras.layers.MaxPooling2D(2),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(2),
        ]
    )


def digest(*arrays: np.ndarray) -> str:
    """sha256 of arrays' bytes (first 16 hex digits)."""
    out = hashlib.sha256()
    for array in arrays:
        out.update(np.ascontiguousarray(array).tobytes())
    return out.hexdigest()[:16]


def checksum(model: tf.keras.Model) -> str:
    """The weights' digest: equal only where the weights are."""
    return digest(*(np.asarray(w, dtype="float32") for w in model.get_weights()))
