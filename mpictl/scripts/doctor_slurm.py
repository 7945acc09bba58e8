"""What ``mpictl doctor`` asks Slurm on the head (as the MPI user), as one JSON object.

``python3 - NODES_JSON`` with ``{"nodes": [names], "srun_nodes": [names], "credentials": {node:
munge credential}}`` on argv. Reports each node's state in ``sinfo`` (absent: not registered),
whether ``srun -w <srun_nodes> hostname`` answered from every node it asked (``srun_nodes``: the
nodes that answered ssh from the head, all when absent; ``asked`` names them), with
``--immediate`` (a busy cluster fails fast; an srun that fails or runs out of time is stopped and
its job cancelled by name, so that a node that did not answer is not left held by the doctor's
allocation), the MPI plugins of ``srun --mpi=list``, and for each node whether its munge
credential decodes here (it does only when both nodes hold the same munge key). Standard library
only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from typing import Any


def run(cmd: list[str], stdin: str = "", timeout: float = 60) -> tuple[int, str, str]:
    """Run ``cmd``; past ``timeout`` it gets SIGTERM (srun then gives its allocation back) and,
    5 s later, its process group SIGKILL."""
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    except OSError as exc:
        return 127, "", str(exc)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
        return proc.returncode, out.strip(), err.strip()
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):  # the group ended meanwhile
                os.killpg(proc.pid, signal.SIGKILL)
            try:
                proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:  # a grandchild outside the group holds a pipe
                proc.kill()
        return 124, "", f"timed out after {timeout:.0f} s"


def last(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def sinfo() -> tuple[dict[str, str], dict[str, str]]:
    """node -> its state (``idle``, ``mixed``, ``down*``, ``drained``, ...), and node -> the
    reason Slurm holds for a drained or down node (``none`` dropped)."""
    rc, out, _ = run(["sinfo", "-N", "-h", "-o", "%N|%T|%E"], timeout=30)
    states: dict[str, str] = {}
    reasons: dict[str, str] = {}
    for line in out.splitlines() if rc == 0 else []:
        name, _, rest = line.partition("|")
        state, _, reason = rest.partition("|")
        states.setdefault(name, state.strip())
        if reason.strip() and reason.strip() != "none":
            reasons.setdefault(name, reason.strip())
    return states, reasons


def srun_hostnames(nodes: list[str], timeout: float = 60) -> dict[str, Any]:
    """``srun`` on exactly ``nodes`` (those that answered ssh from the head: a node that is gone
    would get an allocation Slurm cannot end until it notices the node down), one task each."""
    if not nodes:
        return {"rc": None, "hosts": [], "error": "no node answered ssh from the head"}
    name = f"mpictl-doctor-{os.getpid()}"
    cmd = ["srun", "-J", name, f"-N{len(nodes)}", "-w", ",".join(nodes), "--ntasks-per-node=1"]
    cmd += ["--immediate=20", "-t", "1"]
    # the Slurm node name (the inventory name), whatever the machine's host name is
    rc, out, err = run([*cmd, "printenv", "SLURMD_NODENAME"], timeout=timeout)
    if rc != 0:
        # a node that does not answer (its prolog cannot run) keeps the allocation configuring
        # after srun is gone: cancelled here, it holds no node once that node is back
        run(["scancel", "--me", "--name", name], timeout=30)
    return {"rc": rc, "hosts": sorted(set(out.split())), "error": last(err)}


def mpi_plugins() -> list[str]:
    rc, out, err = run(["srun", "--mpi=list"], timeout=30)
    text = f"{out}\n{err}"  # 22.05 prints the list on stderr
    words = text.replace(",", " ").split()
    return sorted(
        {w for w in words if w in ("pmix", "pmi2", "cray_shasta", "none")}
        | {w for w in words if w.startswith("pmix_")}
    )


def decode(credentials: dict[str, str]) -> dict[str, str]:
    """node -> "" when its credential decodes here, else unmunge's reason."""
    out = {}
    for node, cred in credentials.items():
        rc, _, err = run(["unmunge"], stdin=cred + "\n", timeout=15)
        out[node] = "" if rc == 0 else (last(err) or f"unmunge exit {rc}")
    return out


def release() -> str:
    """``sinfo --version``: "slurm 26.05.3" ("" when it does not answer)."""
    rc, out, _ = run(["sinfo", "--version"], timeout=30)
    return last(out) if rc == 0 else ""


def main(spec: dict[str, Any]) -> dict[str, Any]:
    nodes = list(spec["nodes"])
    asked = [n for n in nodes if n in spec.get("srun_nodes", nodes)]
    states, reasons = sinfo()
    return {
        "version": release(),
        "sinfo": states,
        "reasons": reasons,
        "srun": {**srun_hostnames(asked), "asked": asked},
        "mpi": mpi_plugins(),
        "munge": decode(spec.get("credentials") or {}),
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
