"""Spread what one node holds to the other nodes that need it over the cluster's SSH mesh, in
about log2(N) rounds: the one node program behind both of mpictl's fan-outs.

Runs on the node that holds it (the seed) with its system python3, as the MPI user:
``python3 - SPEC_JSON``. SPEC is ``{"kind": ..., "hosts": [addresses], "connect_timeout": S,
"timeout": S, "seed": name of the seed in the records (default "seed")}`` and, by kind:

- ``"file"`` (roles/build_once, ``build_once_distribution: fanout``): ``"src"`` (the artifact
  here), ``"dest"`` (its path on the other nodes, the directory writable by the MPI user) and
  ``"sha256"`` (what the controller recorded). A holder sends ``ssh TARGET 'cat > DEST.part'``;
  the target checks the sha256 of what arrived and only then renames it to DEST, so a failed or
  corrupted transfer never leaves a file at DEST.
- ``"tree"`` (``mpictl run --workdir``): ``"dir"``, a directory relative to the MPI user's home
  that the seed holds; a holder sends it with ``rsync -a --delete --stats`` so every node mirrors
  the seed's copy.

In each round every node that holds the payload sends it to one node that lacks it (BatchMode,
pinned host keys), so the seed's link carries a few copies however many nodes there are. One
retry rule for both: a node that failed to receive is never used as a sender, and a target whose
sender was another node (which may have gone away) gets one more try from the seed; the last
record for a node is its outcome. Prints one JSON object: ``{"home": the MPI user's home here,
"transfers": [{"from", "to", "ok", "rc", "error", "seconds", "stdout", "stderr"}...]}``
(``error``: the last line of stderr). Standard library only.
"""

from __future__ import annotations

import json
import os
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
    """What the target of a file runs: write DEST.part from stdin, check it, rename it to DEST."""
    part = shlex.quote(dest + ".part")
    return (
        f"cat > {part} && "
        f"sum=$(sha256sum {part} | cut -d' ' -f1) && "
        f'if [ "$sum" = {shlex.quote(sha256)} ]; then mv -f {part} {shlex.quote(dest)}; '
        f'else rm -f {part}; echo "sha256 mismatch: got $sum" >&2; exit 3; fi'
    )


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


def send_argv(holder: str, target: str, spec: dict[str, Any]) -> list[str]:
    """The command (run here) that makes ``holder`` send its copy to ``target``."""
    ssh = ssh_options(spec["connect_timeout"])
    if spec["kind"] == "tree":
        argv = rsync_argv(spec["dir"], target, spec["connect_timeout"])
        return argv if holder == SELF else [*ssh, holder, shlex.join(argv)]
    source = spec["src"] if holder == SELF else spec["dest"]
    pipe = (
        f"{shlex.join([*ssh, target, receive_command(spec['dest'], spec['sha256'])])} "
        f"< {shlex.quote(source)}"
    )
    return ["sh", "-c", pipe] if holder == SELF else [*ssh, holder, pipe]


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
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = 124, "", f"timed out after {spec['timeout']} s"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return {
        "from": holder or spec.get("seed", "seed"),
        "to": target,
        "ok": rc == 0,
        "rc": rc,
        "error": "" if rc == 0 else (lines[-1] if lines else f"exit {rc}"),
        "seconds": round(time.monotonic() - start, 3),
        "stdout": out,
        "stderr": err,
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
    seed = spec.get("seed", "seed")
    failed = [r["to"] for r in records if not r["ok"] and r["from"] != seed]
    if failed:
        with ThreadPoolExecutor(max_workers=len(failed)) as pool:
            records += list(pool.map(lambda target: send(SELF, target, spec), failed))
    return records


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    if spec.get("kind") not in ("file", "tree"):
        print(f"mesh_spread: kind must be file or tree, got {spec.get('kind')!r}", file=sys.stderr)
        return 2
    if spec["kind"] == "tree":
        os.chdir(os.path.expanduser("~"))  # a tree's "dir" is relative to the home
    print(json.dumps({"home": os.path.expanduser("~"), "transfers": spread(spec)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
