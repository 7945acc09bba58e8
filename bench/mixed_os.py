"""Benchmark: a cluster that mixes OS releases, as one upgraded node by node (issue 26, day 2).

python bench/mixed_os.py [--keep]

1. Brings up a 3-node sandbox of its own (``bench-mixed``): node1 and node2 Debian 12
   (bookworm), node3 Debian 13 (trixie, ``sandbox_os`` per host), CUDA mounted where this machine
   has it (as the tests' and the demo's sandboxes, so the bookworm builds come from the shared
   artifact cache), with Slurm.
2. Provisions it with the test sources and measures the run. From the run's events: every
   compile task ran at most once per OS release (never once per node), each component has one
   build fingerprint per release, and the two releases' fingerprints differ.
3. `mpictl smoke --suite mpi` through mpirun and through Slurm, `mpictl doctor`, Slurm's release
   on every node, `srun --mpi=pmix` and `mpirun` inside an allocation (mpi4py's allreduce on the
   three nodes, across both releases), and the no-change re-run (changed count, seconds).

Horovod is off in this cluster: PyTorch for Python 3.13 (Debian 13's) cannot be fetched from this
machine (its package index lacks the CUDA libraries PyPI's torch build needs, and the CPU
build here is for Python 3.11 only). Its state (keys, facts, runs) is in a state dir of its own
(MPICTL_STATE_DIR, default ~/.local/state/mpictl-bench-mixed): the fact cache is keyed by host
name, and the demo's nodes have the same names. Writes bench/out/mixed_os.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import source_vars, write_result  # noqa: E402 - after the path that finds it

NAME = "bench-mixed"
SUBNET = "10.89.77.0/24"
PORT_BASE = 2770
OS_OF = {"node1": "bookworm", "node2": "bookworm", "node3": "trixie"}
VENV_PY = "/opt/mpictl/venv/bin/python"
ALLREDUCE = "from mpi4py import MPI; c = MPI.COMM_WORLD; print('sum', c.allreduce(c.rank + 1))"


def mpictl(*args: str, timeout: int = 3600) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "mpictl"
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def make_inventory(dst: Path) -> Path:
    from mpictl import sandbox

    inv = sandbox.clone_inventory(dst, NAME, SUBNET, PORT_BASE)
    host_vars = inv / "host_vars"
    host_vars.mkdir(exist_ok=True)
    (host_vars / "node3.yml").write_text("sandbox_os: trixie\n")
    with (inv / "group_vars" / "mpi_nodes.yml").open("a") as fh:
        fh.write(
            "\n# bench/mixed_os.py: no PyTorch for Python 3.13 can be fetched here\n"
            "horovod_enabled: false\n"
        )
    return inv


def builds(result: Any) -> dict[str, Any]:
    """From the events: where each component compiled, and its fingerprint on each node."""
    compiled: dict[str, list[str]] = defaultdict(list)
    fingerprints: dict[str, dict[str, str]] = defaultdict(dict)
    for r in result.task_results():
        if r.status not in ("ok", "changed"):
            continue
        task = r.task
        if task.startswith("Compile ") and task.endswith(" on the builder node"):
            compiled[task.removeprefix("Compile ").removesuffix(" on the builder node")].append(
                r.host
            )
        facts = r.result.get("ansible_facts", {}) if isinstance(r.result, dict) else {}
        res = facts.get("build_once_result") if isinstance(facts, dict) else None
        if isinstance(res, dict) and res.get("fingerprint") and " for " in task:
            fingerprints[task.rsplit(" for ", 1)[1]][r.host] = res["fingerprint"]
    problems = []
    for what, hosts in compiled.items():
        per_os = defaultdict(list)
        for h in hosts:
            per_os[OS_OF[h]].append(h)
        problems += [
            f"{what} compiled {len(v)} times on {v} ({o})" for o, v in per_os.items() if len(v) > 1
        ]
    for name, by_host in fingerprints.items():
        per_os: dict[str, set[str]] = defaultdict(set)
        for h, fp in by_host.items():
            per_os[OS_OF[h]].add(fp)
        if any(len(v) != 1 for v in per_os.values()):
            problems.append(f"{name}: more than one fingerprint within a release: {dict(per_os)}")
        if len(per_os) == 2 and per_os["bookworm"] == per_os["trixie"]:
            problems.append(f"{name}: one fingerprint for both releases")
    per_release = {
        what: {o: sum(OS_OF[h] == o for h in hosts) for o in sorted(set(OS_OF.values()))}
        for what, hosts in compiled.items()
    }
    return {
        "compiled_on": dict(compiled),
        "compiles_per_release": per_release,
        "fingerprints": dict(fingerprints),
        "problems": problems,
    }


def ssh(inv: Path, host: str, command: str, user: str = "root") -> subprocess.CompletedProcess[str]:
    port = {"node1": PORT_BASE, "node2": PORT_BASE + 1, "node3": PORT_BASE + 2}[host]
    state = Path(os.environ.get("MPICTL_STATE_DIR", Path.home() / ".local/state/mpictl"))
    key = state / "sandbox" / NAME / "id_ed25519"
    known = state / "sandbox" / NAME / "known_hosts"
    wrapped = command if user == "root" else f"runuser -u {user} -- bash -lc {json.dumps(command)}"
    return subprocess.run(
        [
            "ssh",
            "-p",
            str(port),
            "-i",
            str(key),
            "-o",
            f"UserKnownHostsFile={known}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "IdentitiesOnly=yes",
            "root@127.0.0.1",
            wrapped,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def main() -> int:
    # A state dir of its own: its nodes are named node1..3 like the demo's, and Ansible's fact
    # cache (one per state dir) is keyed by host name.
    os.environ.setdefault(
        "MPICTL_STATE_DIR", str(Path.home() / ".local" / "state" / "mpictl-bench-mixed")
    )
    from mpictl import provision

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="leave the sandbox running")
    args = parser.parse_args()
    out: dict[str, Any] = {"nodes": OS_OF}
    with tempfile.TemporaryDirectory() as tmp:
        inv = make_inventory(Path(tmp) / "inventory")
        extravars = source_vars()
        cuda = ["--cuda"] if Path("/usr/local/cuda/bin/nvcc").exists() else []
        try:
            t = time.monotonic()
            up = mpictl("sandbox", "up", "-i", str(inv), *cuda)
            out["sandbox_up_s"] = round(time.monotonic() - t, 1)
            if up.returncode != 0:
                raise SystemExit(f"sandbox up failed: {up.stderr[-2000:]}")
            t = time.monotonic()
            _, first = provision.provision(inv, extravars=extravars)
            out["provision_s"] = round(time.monotonic() - t, 1)
            out["provision_ok"] = first.ok
            out["builds"] = builds(first)
            if not first.ok:
                raise SystemExit(f"provision failed: rc={first.rc} {first.private_data_dir}")
            for launcher in ("mpirun", "slurm"):
                t = time.monotonic()
                smoke = mpictl("smoke", "-i", str(inv), "--suite", "mpi", "--launcher", launcher)
                out[f"smoke_{launcher}"] = {
                    "rc": smoke.returncode,
                    "s": round(time.monotonic() - t, 1),
                    "tail": smoke.stdout.strip().splitlines()[-3:],
                }
            doctor = mpictl("doctor", "-i", str(inv), "--json")
            report = json.loads(doctor.stdout) if doctor.stdout.strip().startswith("{") else {}
            out["doctor"] = {
                "rc": doctor.returncode,
                "failed": [c for c in report.get("checks", []) if c.get("result") != "ok"],
                "per_release": sorted(
                    {c["check"] for c in report.get("checks", []) if "(debian " in c["check"]}
                )[:12],
            }
            out["sinfo_version"] = {h: ssh(inv, h, "sinfo --version").stdout.strip() for h in OS_OF}
            out["os_release"] = {
                h: ssh(inv, h, ". /etc/os-release; echo $PRETTY_NAME").stdout.strip() for h in OS_OF
            }
            # mpi4py's allreduce on the three nodes, across both releases, started by Slurm's
            # PMIx and by mpirun inside an allocation
            for key, launch in (
                ("srun_pmix_allreduce", "srun --mpi=pmix -N3 --ntasks-per-node=1"),
                ("mpirun_in_allocation_allreduce", "salloc -N3 --ntasks-per-node=1 mpirun"),
            ):
                job = ssh(inv, "node1", f'cd /tmp && {launch} {VENV_PY} -c "{ALLREDUCE}"', "mpi")
                out[key] = job.stdout.split("\n").count("sum 6") == 3
            t = time.monotonic()
            _, again = provision.provision(inv, extravars=extravars)
            out["no_change_rerun"] = {
                "s": round(time.monotonic() - t, 1),
                "ok": again.ok,
                "changed": sum(s.changed for s in again.stats.values()),
            }
        finally:
            if not args.keep:
                mpictl("sandbox", "down", "-i", str(inv))
    write_result("mixed_os", out)
    good = (
        out.get("provision_ok")
        and not out["builds"]["problems"]
        and all(out.get(f"smoke_{k}", {}).get("rc") == 0 for k in ("mpirun", "slurm"))
        and out.get("doctor", {}).get("rc") == 0
        and len(set(out.get("sinfo_version", {}).values())) == 1
        and out.get("srun_pmix_allreduce")
        and out.get("mpirun_in_allocation_allreduce")
        and out.get("no_change_rerun", {}).get("changed") == 0
    )
    return 0 if good else 1


if __name__ == "__main__":
    raise SystemExit(main())
