"""Run one command on many nodes from the head, in parallel (``mpictl``'s job side).

Runs on the head with its system python3, as the MPI user: ``python3 -c "$(fanout.py)"``. Its
stdin is one JSON line ``{"hosts": [...], "command": "...", "timeout": S, "connect_timeout": S}``
followed by a program, which each host receives on stdin. Each host is reached with the cluster's
own SSH (``BatchMode=yes``, ``StrictHostKeyChecking=yes``: pinned host keys only). Prints one JSON
line per host: ``{"host", "rc", "stdout", "stderr"}`` (rc 255 when ssh could not connect, 124
when the host did not answer in time).
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def ssh_argv(host: str, command: str, connect_timeout: int) -> list[str]:
    return [
        "ssh",
        "-T",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"ConnectTimeout={int(connect_timeout)}",
        "-o",
        "LogLevel=INFO",
        host,
        command,
    ]


def one(host: str, spec: dict[str, Any], program: str) -> dict[str, Any]:
    argv = ssh_argv(host, spec["command"], spec["connect_timeout"])
    try:
        p = subprocess.run(
            argv, input=program, capture_output=True, text=True, timeout=spec["timeout"]
        )
    except subprocess.TimeoutExpired:
        return {"host": host, "rc": 124, "stdout": "", "stderr": "timed out"}
    return {"host": host, "rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}


def main() -> int:
    spec = json.loads(sys.stdin.readline())
    program = sys.stdin.read()
    hosts = list(spec["hosts"])
    with ThreadPoolExecutor(max_workers=min(32, max(1, len(hosts)))) as pool:
        for rec in pool.map(lambda h: one(h, spec, program), hosts):
            print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
