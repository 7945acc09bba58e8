"""Spread one build artifact from the node that holds it to the other nodes that need it
(roles/build_once, ``build_once_distribution: fanout``).

Runs on the seed node (the one the controller sent the artifact to, or its builder) with its
system python3, as the MPI user: ``python3 - SPEC_JSON``, where SPEC is ``{"src": path of the
artifact here, "dest": path on the other nodes (its directory writable by the MPI user), "sha256":
what the controller recorded, "hosts": [addresses], "connect_timeout": S, "timeout": S}``.

In each round every node that holds the artifact sends it to one node that lacks it, over the
cluster's SSH mesh (BatchMode, pinned host keys): ``ssh TARGET 'cat > DEST.part'`` fed from the
holder's copy, then the target checks the sha256 of what arrived and only then renames it to
DEST. So N nodes are reached in about log2(N) rounds, the controller's link carries one copy
however many nodes there are, and a failed or corrupted transfer never leaves a file at DEST: the
node is never used as a sender (a target whose sender failed gets one more try from the seed;
what still fails is reported: the last record for a node is its outcome). Prints one JSON
object: ``{"transfers": [{"from", "to", "ok", "error", "seconds"}...]}``. Standard library only.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

SELF = ""  # the seed itself in the holders list


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


def receive_command(dest: str, sha256: str) -> str:
    """What the target runs: write DEST.part from stdin, check it, rename it to DEST."""
    part = shlex.quote(dest + ".part")
    return (
        f"cat > {part} && "
        f"sum=$(sha256sum {part} | cut -d' ' -f1) && "
        f'if [ "$sum" = {shlex.quote(sha256)} ]; then mv -f {part} {shlex.quote(dest)}; '
        f'else rm -f {part}; echo "sha256 mismatch: got $sum" >&2; exit 3; fi'
    )


def send_argv(holder: str, target: str, spec: dict[str, Any]) -> list[str]:
    """The command (run here) that makes ``holder`` send its copy to ``target``."""
    ssh = ssh_options(spec["connect_timeout"])
    source = spec["src"] if holder == SELF else spec["dest"]
    pipe = (
        f"{shlex.join([*ssh, target, receive_command(spec['dest'], spec['sha256'])])} "
        f"< {shlex.quote(source)}"
    )
    if holder == SELF:
        return ["sh", "-c", pipe]
    return [*ssh, holder, pipe]


def send(holder: str, target: str, spec: dict[str, Any]) -> dict[str, Any]:
    start = time.monotonic()
    try:
        p = subprocess.run(
            send_argv(holder, target, spec),
            capture_output=True,
            text=True,
            timeout=spec["timeout"],
            stdin=subprocess.DEVNULL,
        )
        rc, err = p.returncode, p.stderr.strip()
    except subprocess.TimeoutExpired:
        rc, err = 124, f"timed out after {spec['timeout']} s"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return {
        "from": holder or "seed",
        "to": target,
        "ok": rc == 0,
        "error": "" if rc == 0 else (lines[-1] if lines else f"exit {rc}"),
        "seconds": round(time.monotonic() - start, 3),
    }


def spread(spec: dict[str, Any]) -> list[dict[str, Any]]:
    holders, pending, records = [SELF], list(spec["hosts"]), []
    while pending:
        pairs = list(zip(holders, pending, strict=False))
        pending = pending[len(pairs) :]
        with ThreadPoolExecutor(max_workers=len(pairs)) as pool:
            done = list(pool.map(lambda pair: send(pair[0], pair[1], spec), pairs))
        records += done
        holders += [r["to"] for r in done if r["ok"]]  # a failed node is reported, not used
    # A target whose sender failed (a holder may have gone away) gets one try from the seed.
    failed = [r["to"] for r in records if not r["ok"] and r["from"] != "seed"]
    if failed:
        with ThreadPoolExecutor(max_workers=len(failed)) as pool:
            records += list(pool.map(lambda target: send(SELF, target, spec), failed))
    return records


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    print(json.dumps({"transfers": spread(spec)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
