"""Run ``mpictl fabric``'s NCCL measurements on the head, a step at a time.

Runs on the head with its system python3, as the MPI user: ``python3 -c SOURCE``, with one JSON
object on stdin: ``{"steps": [[{"id": ID, "argv": [...]}, ...], ...], "timeout": SECONDS}``.
Each argv is a whole mpirun line of two ranks (one pair of nodes, planned by mpictl like any job).
The measurements of a step (disjoint pairs: no node's link carries two of them) run at the same
time; the steps run one after the other. Each mpirun runs in a process group of its own and is
ended (SIGTERM, SIGKILL 5 s later) when it passes the timeout. Prints one JSON line per
measurement when its step is over: ``{"id", "rc", "output"}`` (stdout and stderr together, the
end of it when long; rc 124 on timeout, 127 when mpirun is not on PATH).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

KEEP = 64 * 1024  # characters of a measurement's output sent back (its end)


def end(proc: subprocess.Popen[str]) -> None:
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_step(step: list[dict[str, object]], timeout: float) -> list[dict[str, object]]:
    results: list[dict[str, object]] = []
    procs: list[tuple[dict[str, object], subprocess.Popen[str] | None, list[str]]] = []
    for item in step:
        chunks: list[str] = []
        try:
            proc = subprocess.Popen(
                [str(a) for a in item["argv"]],  # type: ignore[union-attr]
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=True,
            )
        except OSError as exc:
            results.append({"id": item["id"], "rc": 127, "output": f"cannot start: {exc}"})
            continue
        procs.append((item, proc, chunks))
    readers = []
    for _, proc, chunks in procs:
        assert proc is not None and proc.stdout is not None
        reader = threading.Thread(
            target=lambda p=proc, c=chunks: c.append(p.stdout.read()), daemon=True
        )
        reader.start()
        readers.append(reader)
    deadline = time.monotonic() + timeout
    for (item, proc, chunks), reader in zip(procs, readers, strict=True):
        assert proc is not None
        try:
            rc = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            end(proc)
            rc = 124
        reader.join(timeout=10)
        output = "".join(chunks)
        if rc == 124:
            output += f"\nmpictl: did not finish within {timeout:.0f} s, ended\n"
        results.append({"id": item["id"], "rc": rc, "output": output[-KEEP:]})
    return results


def main() -> int:
    spec = json.loads(sys.stdin.readline())
    timeout = float(spec.get("timeout", 120))
    for step in spec["steps"]:
        for result in run_step(step, timeout):
            print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
