"""Check one node before a smoke suite starts: ``VENV_PYTHON - ARG...`` (run by ``mpictl smoke``).

Runs with the cluster venv's python, as the MPI user. Each argument is a file that must exist
(absolute path: the smoke programs) or a module that must import (``mpi4py``, ``horovod.torch``).
Prints one JSON line: ``{"missing": [paths], "modules": {name: "ok" | "<Error>: <message>"}}``.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any


def check(args: list[str]) -> dict[str, Any]:
    missing = [p for p in args if p.startswith("/") and not os.path.isfile(p)]
    modules: dict[str, str] = {}
    for name in [a for a in args if not a.startswith("/")]:
        try:
            importlib.import_module(name)
            modules[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - any import failure is the answer
            modules[name] = f"{type(exc).__name__}: {exc}"
    return {"missing": missing, "modules": modules}


if __name__ == "__main__":
    print(json.dumps(check(sys.argv[1:])))
