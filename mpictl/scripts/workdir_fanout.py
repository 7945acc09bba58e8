"""Spread a synced workdir from the head to the other nodes (``mpictl run --workdir``).

Runs on the head with its system python3, as the MPI user: ``python3 - SPEC_JSON``, where SPEC is
``{"dir": "<path relative to home>", "hosts": [...], "connect_timeout": S, "timeout": S}``.
The head already holds the tree. In each round every node that holds it sends it (rsync over the
cluster's SSH: BatchMode, pinned host keys, ``--delete`` so each node mirrors the head) to one
node that does not, so N nodes are reached in about log2(N) rounds and no node sends more than
a few copies. Prints one JSON object: this node's ``home`` and one record per transfer
(``from``, ``to``, ``rc``, rsync's ``stdout`` with its ``--stats``, ``stderr``).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

SELF = ""  # the head itself in the holders list


def ssh_options(connect_timeout: int) -> list[str]:
    return [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"ConnectTimeout={int(connect_timeout)}",
    ]


def rsync_argv(directory: str, target: str, connect_timeout: int) -> list[str]:
    """rsync of ``~/directory/`` to the same path on ``target`` (run on the sending node)."""
    quoted = shlex.quote(directory)
    return [
        "rsync",
        "-a",
        "--delete",
        "--stats",
        "-e",
        shlex.join(ssh_options(connect_timeout)),
        f"--rsync-path=mkdir -p {quoted} && rsync",
        f"{directory}/",
        f"{target}:{directory}/",
    ]


def send(holder: str, target: str, spec: dict[str, Any]) -> dict[str, Any]:
    argv = rsync_argv(spec["dir"], target, spec["connect_timeout"])
    if holder != SELF:  # another node sends: run the same rsync there
        argv = [*ssh_options(spec["connect_timeout"]), holder, shlex.join(argv)]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=spec["timeout"])
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = 124, "", "timed out"
    return {"from": holder or "head", "to": target, "rc": rc, "stdout": out, "stderr": err}


def spread(spec: dict[str, Any]) -> list[dict[str, Any]]:
    holders, pending, records = [SELF], list(spec["hosts"]), []
    while pending:
        pairs = list(zip(holders, pending, strict=False))
        pending = pending[len(pairs) :]
        with ThreadPoolExecutor(max_workers=len(pairs)) as pool:
            done = list(pool.map(lambda pair: send(pair[0], pair[1], spec), pairs))
        records += done
        holders += [r["to"] for r in done if r["rc"] == 0]  # a failed node is reported, not used
    return records


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    os.chdir(os.path.expanduser("~"))
    print(json.dumps({"home": os.getcwd(), "transfers": spread(spec)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
