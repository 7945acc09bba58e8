"""Versions of the cluster venv's MPI and deep-learning packages (part of ``mpictl doctor``).

Runs with the cluster venv's python (the doctor probe starts it). Prints one JSON object: the
``__version__`` of mpi4py, horovod and torch (null when the module does not import),
``tensorflow`` (its distribution's version and name, e.g. "2.15.1 (tensorflow-cpu)", read from
the package metadata without importing TensorFlow; null when none is installed) and
``mpi4py_library``, the first line of the MPI library mpi4py is linked against.
"""

from __future__ import annotations

import importlib.metadata
import json
from typing import Any

# The distributions that install the `tensorflow` package, the usual ones first (the horovod
# role's files/python_env.py has the same list; a unit test keeps them equal).
TF_DISTS = (
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-gpu",
    "tensorflow-intel",
    "tensorflow-aarch64",
    "tensorflow-rocm",
    "intel-tensorflow",
    "tf-nightly",
    "tf-nightly-cpu",
)


def tensorflow_version() -> str | None:
    for name in TF_DISTS:
        try:
            return f"{importlib.metadata.version(name)} ({name})"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def versions() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("mpi4py", "horovod", "torch"):
        try:
            out[name] = getattr(__import__(name), "__version__", "?")
        except Exception:  # noqa: BLE001 - a module that does not import has no version
            out[name] = None
    out["tensorflow"] = tensorflow_version()
    try:
        from mpi4py import MPI

        out["mpi4py_library"] = MPI.Get_library_version().split("\0")[0].splitlines()[0].strip()
    except Exception as exc:  # noqa: BLE001
        out["mpi4py_library"] = f"error: {exc}"
    return out


if __name__ == "__main__":
    print(json.dumps(versions()))
