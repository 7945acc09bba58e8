"""Benchmark: provisioning at cluster scale (issue 16) on sandboxes of 3, 6 and 12 nodes.

python bench/scale.py [--nodes 3,6,12] [--distribution fanout|controller] [--plot FILE.png]
                      [--strategy linear|mitogen] [--noop-runs N] [--keep] [--reuse]

For each node count: a sandbox of that many nodes (a copy of the sandbox inventory, its own name,
subnet and ports, `mpi_slots: 1`, CUDA mounted as in the demo, no libcuda: OpenMPI without
CUDA, the demo's build), brought up, then provisioned with the components OpenMPI + mpi4py + the
job tools (the plays ssh, environment, hostfile, openmpi, mpi4py, jobs; NCCL, Horovod and Slurm
off: the whole stack on 12 nodes does not fit a 2-core machine) from the warm artifact cache,
then provisioned again with nothing to change, twice over: on the cluster's short path (the
default: one probe per node, components converged everywhere skipped) and with
`mpictl_short_path: false` (every role runs its own short path: the figures before the cluster's
short path existed); then torn down.

Per node count it reports the fresh install's wall time, the no-change re-run's wall time and
task results (every runner_on_ok/changed/skipped/failed event of the run), and the bytes the
controller sent to the nodes during each: the tx_bytes counter of the sandbox network's bridge
on this host, read before and after (frames this host sent into the cluster network: the
controller's SSH sessions; node-to-node traffic is switched between the nodes' ports and never
passes the bridge's own interface). That total also holds what the nodes fetch from Debian's
mirror through this host (apt) and Ansible's own traffic, the same for both distributions;
`--distribution controller` measures the old way (the controller copies every artifact to
every node), so the difference between the two runs is the artifacts' share.

`--noop-runs N` repeats the no-change run and reports the median; `--strategy mitogen` runs the
no-change runs under Mitogen's linear strategy (`pip install mitogen`; measured, not adopted:
see docs/ARCHITECTURE.md); `--keep` leaves the sandboxes up and `--reuse` measures kept,
provisioned ones again without a fresh install (their fresh columns then read 0).

Each sandbox has a state directory of its own (fact cache, keys), so its nodes' facts never mix
with another cluster's nodes of the same names. The artifact cache must be warm (run
`bash scripts/demo.sh` or the test suite once). Writes JSON to bench/out/scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mpictl import paths, provision, sandbox  # noqa: E402
from mpictl.sandbox import podman  # noqa: E402

TAGS = "ssh,environment,hostfile,ucx,ucc,openmpi,mpi4py,jobs"
OFF = {"nccl_enabled": False, "horovod_enabled": False, "slurm_enabled": False}
TASK_EVENTS = ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable")


def bridge_tx(name: str) -> int:
    """Bytes this host has sent into sandbox ``name``'s network (its bridge's tx_bytes)."""
    net = podman.network(name) or {}
    interface = net.get("network_interface")
    if not interface:
        raise SystemExit(f"no bridge interface for podman network {name}")
    return int(Path(f"/sys/class/net/{interface}/statistics/tx_bytes").read_text())


def source_vars() -> dict[str, Any]:
    path = paths.cache_dir() / "sources" / "test-sources.yml"
    if not path.is_file():
        raise SystemExit(f"{path} is missing: run `bash scripts/fetch-test-sources.sh` first")
    return dict(yaml.safe_load(path.read_text()))


def strategy_env(strategy: str) -> dict[str, str]:
    """The environment that selects Ansible's strategy for the runs (``mitogen``: Mitogen's
    linear strategy, from the installed ``mitogen`` package)."""
    if strategy == "linear":
        return {}
    try:
        import ansible_mitogen
    except ImportError:
        raise SystemExit("--strategy mitogen: `pip install mitogen` first") from None
    plugins = Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": "mitogen_linear"}


def timed_provision(inv: Path, name: str, extravars: dict[str, Any]) -> dict[str, Any]:
    before = bridge_tx(name)
    start = time.perf_counter()
    _, result = provision.provision(inv, tags=TAGS, extravars=extravars)
    wall = time.perf_counter() - start
    sent = bridge_tx(name) - before
    if not result.ok:
        why = [
            f"{r.host}: {r.task}: {r.result.get('msg')}"
            for r in result.task_results()
            if r.status in ("failed", "unreachable")
        ]
        raise SystemExit(f"{inv}: provision failed on {result.failed_hosts}: {why[:3]}")
    tasks = sum(1 for e in result.events if e.get("event") in TASK_EVENTS)
    changed = sum(s.changed for s in result.stats.values())
    return {"seconds": round(wall, 1), "tasks": tasks, "changed": changed, "bytes": sent}


def measure(
    count: int, args: argparse.Namespace, base: Path, strategy: dict[str, str]
) -> dict[str, Any]:
    name = f"mpictl-scale{count}"
    subnet = f"10.89.{100 + count}.0/24"  # clear of the tests' and Molecule's sandboxes
    # a state dir of its own: its fact cache, cluster key and sandbox keys (node names repeat)
    os.environ["MPICTL_STATE_DIR"] = str(base / f"{name}-state")
    inv = sandbox.clone_inventory(base / name, name, subnet, 2600 + count * 20, count=count)
    extravars = {**source_vars(), **OFF, "build_once_distribution": args.distribution}
    reuse = args.reuse and (base / f"{name}-state" / "provisioned").is_file()
    up = 0.0
    fresh: dict[str, Any] = {"seconds": 0.0, "tasks": 0, "changed": 0, "bytes": 0}
    try:
        if not reuse:
            sandbox.down(inv)
            start = time.perf_counter()
            sandbox.up(inv, cuda=Path("/usr/local/cuda").is_dir())
            up = time.perf_counter() - start
            fresh = timed_provision(inv, name, extravars)
            (base / f"{name}-state" / "provisioned").touch()
        os.environ.update(strategy)
        runs = [timed_provision(inv, name, extravars) for _ in range(args.noop_runs)]
        per_role = {**extravars, "mpictl_short_path": False}
        role_runs = [timed_provision(inv, name, per_role) for _ in range(args.noop_runs)]
    finally:
        for key in strategy:
            os.environ.pop(key, None)
        if not args.keep:
            sandbox.down(inv)
            (base / f"{name}-state" / "provisioned").unlink(missing_ok=True)
    noop = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
    roles = sorted(role_runs, key=lambda r: r["seconds"])[len(role_runs) // 2]
    return {
        "nodes": count,
        "distribution": args.distribution,
        "strategy": args.strategy,
        "up_s": round(up, 1),
        "fresh": fresh,
        "noop": noop,
        "noop_runs_s": [r["seconds"] for r in runs],
        "roles": roles,
        "roles_runs_s": [r["seconds"] for r in role_runs],
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'nodes':>5} {'distribution':>12} {'strategy':>8} {'fresh (s)':>10} "
        f"{'fresh MB sent':>14} "
        f"{'no-change (s)':>14} {'tasks':>6} {'changed':>8} {'no-change MB':>13} "
        f"{'roles (s)':>10} {'tasks':>6}"
    ]
    for r in rows:
        f, n = r["fresh"], r["noop"]
        lines.append(
            f"{r['nodes']:>5} {r['distribution']:>12} {r['strategy']:>8} {f['seconds']:>10.1f} "
            f"{f['bytes'] / 1e6:>14.1f} {n['seconds']:>14.1f} {n['tasks']:>6} "
            f"{n['changed']:>8} {n['bytes'] / 1e6:>13.2f} {r['roles']['seconds']:>10.1f} "
            f"{r['roles']['tasks']:>6}"
        )
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        ratio = last["noop"]["seconds"] / first["noop"]["seconds"]
        roles = last["roles"]["seconds"] / first["roles"]["seconds"]
        lines.append(
            f"no-change run, {last['nodes']} vs {first['nodes']} nodes: {ratio:.2f}x"
            f" (roles' short path alone: {roles:.2f}x)"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nodes = [r["nodes"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.plot(nodes, [r["fresh"]["seconds"] for r in rows], "o-", label="fresh install")
    a.plot(nodes, [r["noop"]["seconds"] for r in rows], "o-", label="no-change run")
    a.plot(nodes, [r["roles"]["seconds"] for r in rows], "o-", label="no-change, every role")
    a.set_xlabel("nodes")
    a.set_ylabel("seconds")
    a.legend()
    b.plot(nodes, [r["fresh"]["bytes"] / 1e6 for r in rows], "o-", label="fresh install")
    b.set_xlabel("nodes")
    b.set_ylabel("MB the controller sent")
    b.legend()
    fig.suptitle(f"mpictl provision ({rows[0]['distribution']} distribution)")
    fig.tight_layout()
    fig.savefig(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="3,6,12")
    parser.add_argument("--distribution", choices=("fanout", "controller"), default="fanout")
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--strategy", choices=("linear", "mitogen"), default="linear")
    parser.add_argument("--noop-runs", type=int, default=1, help="no-change runs (median shown)")
    parser.add_argument("--keep", action="store_true", help="leave the sandboxes up")
    parser.add_argument(
        "--reuse", action="store_true", help="a kept, provisioned sandbox: no-change runs only"
    )
    args = parser.parse_args()
    if args.noop_runs < 1:
        parser.error("--noop-runs must be at least 1")
    strategy = strategy_env(args.strategy)  # a missing Mitogen stops here, before any sandbox
    rows = []
    base = paths.state_dir() / "bench-scale"
    base.mkdir(parents=True, exist_ok=True)
    for count in (int(n) for n in args.nodes.split(",")):
        rows.append(measure(count, args, base, strategy))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    print(table(rows))
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "scale.json").write_text(json.dumps(rows, indent=2) + "\n")
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
