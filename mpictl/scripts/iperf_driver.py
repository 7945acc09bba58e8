"""Measure TCP links between pairs of nodes with iperf3 (``mpictl bench``, ``mpictl fabric``).

Runs on the head with its system python3, as the MPI user:
``python3 - PORT SECONDS A B [A B ...]``. For each pair it starts an iperf3 server for one test
on B and then the client on A, both over the cluster's SSH; the pairs run at the same time (a
round of disjoint pairs), so no node's link carries two measurements. Prints one JSON line per
pair, ``{"a", "b", "rc", "stdout", "stderr"}``, with the client's exit code and its ``iperf3 -J``
output.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import threading
import time

SSH = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]


def client(a: str, b: str, port: str, seconds: str, out: dict[str, object]) -> None:
    try:
        proc = subprocess.run(
            [*SSH, a, "iperf3 -J -c " + shlex.join([b, "-p", port, "-t", seconds])],
            capture_output=True,
            text=True,
            timeout=90,
        )
        out.update(rc=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)
    except subprocess.TimeoutExpired:
        out.update(rc=124, stdout="", stderr=f"iperf3 client on {a} did not finish within 90 s")


def measure(port: str, seconds: str, pairs: list[tuple[str, str]]) -> list[dict[str, object]]:
    servers = [
        subprocess.Popen(
            [*SSH, b, f"exec timeout 60 iperf3 -s -1 -p {shlex.quote(port)}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _, b in pairs
    ]
    time.sleep(1.5)
    results: list[dict[str, object]] = [{"a": a, "b": b} for a, b in pairs]
    threads = [
        threading.Thread(target=client, args=(a, b, port, seconds, results[i]))
        for i, (a, b) in enumerate(pairs)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for server in servers:
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
    return results


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) < 4 or len(args) % 2:
        print("usage: iperf_driver.py PORT SECONDS A B [A B ...]", file=sys.stderr)
        sys.exit(2)
    port, seconds, hosts = args[0], args[1], args[2:]
    pairs = [(hosts[i], hosts[i + 1]) for i in range(0, len(hosts), 2)]
    for rec in measure(port, seconds, pairs):
        print(json.dumps(rec), flush=True)
