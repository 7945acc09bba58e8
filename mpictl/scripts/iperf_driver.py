"""Measure the TCP link between two nodes with iperf3 (``mpictl bench``).

Runs on the head with its system python3, as the MPI user: ``python3 - A B PORT SECONDS``. Starts
an iperf3 server for one test on B and the client on A, both over the cluster's SSH, and prints one
JSON line ``{"rc", "stdout", "stderr"}`` with the client's exit code and its ``iperf3 -J`` output.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time

SSH = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]


def measure(a: str, b: str, port: str, seconds: str) -> dict[str, object]:
    server = subprocess.Popen(
        [*SSH, b, f"exec timeout 60 iperf3 -s -1 -p {shlex.quote(port)}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.5)
    client = subprocess.run(
        [*SSH, a, "iperf3 -J -c " + shlex.join([b, "-p", port, "-t", seconds])],
        capture_output=True,
        text=True,
        timeout=90,
    )
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.kill()
    return {"rc": client.returncode, "stdout": client.stdout, "stderr": client.stderr}


if __name__ == "__main__":
    if len(sys.argv) != 5:
        print("usage: iperf_driver.py A B PORT SECONDS", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(measure(*sys.argv[1:5])))
