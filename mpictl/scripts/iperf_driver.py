"""Measure TCP links between pairs of nodes with iperf3 (``mpictl bench``, ``mpictl fabric``).

Runs on the head with its system python3, as the MPI user:
``python3 -c "$(iperf_driver.py)" PORT SECONDS A B [A B ...]``, its stdin the controller's SSH
channel, held open while it runs: when it reaches end of file (the controller went away: Ctrl-C,
a lost connection), the driver ends its iperf3 servers and clients at once and exits 130 instead
of finishing the round for nobody. For each pair it starts an iperf3 server for one test
on B and then the client on A, both over the cluster's SSH; the pairs run at the same time (a
round of disjoint pairs), so no node's link carries two measurements. Prints one JSON line per
pair, ``{"a", "b", "rc", "stdout", "stderr"}``, with the client's exit code and its ``iperf3 -J``
output.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time

SSH = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]
CHILDREN: list[subprocess.Popen[str]] = []
LOCK = threading.Lock()


def start(argv: list[str]) -> subprocess.Popen[str]:
    with LOCK:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        CHILDREN.append(proc)
    return proc


def watch_controller(stream: object = None) -> None:
    """Return when the controller's channel (stdin) ends; then end every child and exit 130."""
    source = stream if stream is not None else sys.stdin
    while source.read(4096):  # type: ignore[attr-defined]
        pass
    with LOCK:
        for proc in CHILDREN:
            if proc.poll() is None:
                proc.kill()
    print("iperf_driver: the controller went away; iperf3 ended", file=sys.stderr, flush=True)
    os._exit(130)


def client(a: str, b: str, port: str, seconds: str, out: dict[str, object]) -> None:
    proc = start([*SSH, a, "iperf3 -J -c " + shlex.join([b, "-p", port, "-t", seconds])])
    try:
        stdout, stderr = proc.communicate(timeout=90)
        out.update(rc=proc.returncode, stdout=stdout, stderr=stderr)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        out.update(rc=124, stdout="", stderr=f"iperf3 client on {a} did not finish within 90 s")


def measure(port: str, seconds: str, pairs: list[tuple[str, str]]) -> list[dict[str, object]]:
    servers = [start([*SSH, b, f"exec timeout 60 iperf3 -s -1 -p {shlex.quote(port)}"])
               for _, b in pairs]  # fmt: skip
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
    threading.Thread(target=watch_controller, daemon=True).start()
    pairs = [(hosts[i], hosts[i + 1]) for i in range(0, len(hosts), 2)]
    for rec in measure(port, seconds, pairs):
        print(json.dumps(rec), flush=True)
