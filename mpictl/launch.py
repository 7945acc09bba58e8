"""``mpictl run``: build the mpirun command line and run it on the head node as the MPI user.

The controller logs in to the head over SSH (see :mod:`mpictl.remote`) and runs a small bash
session script there that starts mpirun in its own process group with stdin from /dev/null. The
session watches the SSH channel: when the controller closes it (Ctrl-C, ``--timeout``) or the
connection drops, the session sends SIGTERM (then SIGKILL) to mpirun's process group, and mpirun
takes the job down on every node. Afterwards the controller runs a cleanup from the head that
kills, on every node, any process still carrying the job's ``MPICTL_JOB_ID`` in its environment,
and reports what it found.

Output streams live (stdout and stderr separately, through a callback) and is recorded in the job
record (:mod:`mpictl.jobs`); the exit code is mpirun's.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mpictl import jobs, remote
from mpictl.errors import JobError, UsageError
from mpictl.inventory import Cluster, Node

OutputHandler = Callable[[str, str], None]  # (stream "stdout"|"stderr", line with newline)

DEFAULT_MASTER_PORT = 29500
TIMEOUT_EXIT = 124
INTERRUPT_EXIT = 130
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MCA_NAME = re.compile(r"^[A-Za-z0-9_^-]+$")


@dataclass(frozen=True)
class LaunchOptions:
    """What the user asked for (``mpictl run`` options)."""

    command: Sequence[str]
    np: int | None = None
    ppn: int | None = None
    hosts: Sequence[str] | None = None
    env: Sequence[str] = ()
    mca: Sequence[str] = ()
    torch: bool = False
    timeout: float | None = None
    oversubscribe: bool = False
    master_port: int = DEFAULT_MASTER_PORT


@dataclass(frozen=True)
class Network:
    """The TCP network MPI (and NCCL) traffic uses: per-node interfaces and the shared subnet."""

    interfaces: Mapping[str, str]  # node name -> interface name
    subnet: str | None  # e.g. "10.89.46.0/24" when known from facts

    @property
    def names(self) -> list[str]:
        return sorted(set(self.interfaces.values()))

    @property
    def btl_tcp_if_include(self) -> str:
        """One name when every node uses the same one, else the subnet, else the names."""
        if len(self.names) == 1:
            return self.names[0]
        return self.subnet or ",".join(self.names)

    @property
    def nccl_socket_ifname(self) -> str:
        return ",".join(self.names)


@dataclass(frozen=True)
class LaunchPlan:
    """The validated job: mpirun's argv and what it will occupy."""

    mpirun: list[str]  # mpirun and its options, without the user's command
    command: list[str]  # what every rank runs (the torch wrapper included)
    hosts: list[tuple[str, int]]  # (address, ranks it may hold) in mapping order
    ranks: int
    network: Network | None
    job_id: str
    torch: bool = False

    @property
    def argv(self) -> list[str]:
        return [*self.mpirun, *self.command]

    @property
    def display(self) -> str:
        return shlex.join(self.argv)


# --------------------------------------------------------------------------- network from facts


def _node_networks(node: Node) -> dict[str, ipaddress.IPv4Network]:
    """interface -> IPv4 network of ``node`` from its cached facts (no loopback/link-local)."""
    out: dict[str, ipaddress.IPv4Network] = {}
    facts = node.facts or {}
    names = list(facts.get("ansible_interfaces") or [])
    default = facts.get("ansible_default_ipv4") or {}
    if default.get("interface") and default["interface"] not in names:
        names.append(default["interface"])
    for name in names:
        data = facts.get("ansible_" + str(name).replace("-", "_").replace(".", "_")) or {}
        ipv4 = data.get("ipv4") if isinstance(data, Mapping) else None
        if not ipv4 and default.get("interface") == name:
            ipv4 = default
        if not isinstance(ipv4, Mapping) or not ipv4.get("address"):
            continue
        try:
            iface = ipaddress.IPv4Interface(f"{ipv4['address']}/{ipv4.get('netmask', '32')}")
        except ValueError:
            continue
        if iface.ip.is_loopback or iface.ip.is_link_local:
            continue
        out[str(name)] = iface.network
    return out


def derive_network(cluster: Cluster, nodes: Sequence[Node] | None = None) -> Network | None:
    """The interface each node uses for MPI traffic, and the subnet they share.

    ``mpi_network_interface`` on a host wins for that host. Otherwise the subnet common to all
    nodes is taken from the fact cache (preferring the one of the head's default route) and each
    node uses its interface on that subnet. None when facts are missing and no override is set,
    or when the nodes share no subnet (``mpictl doctor`` reports that).
    """
    nodes = list(nodes or cluster.nodes)
    per_node = {n.name: _node_networks(n) for n in nodes}
    overrides = {n.name: str(n.interface) for n in nodes if n.interface}

    def candidates(node: Node) -> set[ipaddress.IPv4Network]:
        nets = per_node[node.name]
        if node.name in overrides:
            net = nets.get(overrides[node.name])
            return {net} if net else set()
        return set(nets.values())

    common: set[ipaddress.IPv4Network] | None = None
    for node in nodes:
        if node.name in overrides and not per_node[node.name]:
            continue  # override without facts: trusted, cannot take part in the subnet match
        nets = candidates(node)
        common = nets if common is None else common & nets
    subnet: ipaddress.IPv4Network | None = None
    if common:
        head_default = (cluster.head.facts or {}).get("ansible_default_ipv4") or {}
        preferred = [
            net
            for net in common
            if head_default.get("address") and ipaddress.IPv4Address(head_default["address"]) in net
        ]
        subnet = (preferred or sorted(common, key=str))[0]

    interfaces: dict[str, str] = {}
    for node in nodes:
        if node.name in overrides:
            interfaces[node.name] = overrides[node.name]
            continue
        if subnet is None:
            return None
        name = next(i for i, net in per_node[node.name].items() if net == subnet)
        interfaces[node.name] = name
    if not interfaces:
        return None
    return Network(interfaces=interfaces, subnet=str(subnet) if subnet else None)


# --------------------------------------------------------------------------- validation + argv


def _parse_env(items: Sequence[str]) -> list[str]:
    out = []
    for item in items:
        name = item.split("=", 1)[0]
        if not _ENV_NAME.match(name):
            raise UsageError(f"-x {item!r}: expected NAME or NAME=VALUE")
        out.append(item)
    return out


def _parse_mca(items: Sequence[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not _MCA_NAME.match(key) or value == "":
            raise UsageError(f"--mca {item!r}: expected KEY=VALUE (e.g. btl_tcp_if_include=eth0)")
        out.append((key, value))
    return out


def _select_nodes(cluster: Cluster, hosts: Sequence[str] | None) -> list[Node]:
    if not hosts:
        return list(cluster.nodes)
    chosen: list[Node] = []
    known = {n.name: n for n in cluster.nodes} | {n.address: n for n in cluster.nodes}
    for raw in hosts:
        name = raw.strip()
        if not name:
            raise UsageError("--hosts: empty host name")
        node = known.get(name)
        if node is None:
            raise UsageError(
                f"--hosts: unknown host '{name}' (the inventory's mpi_nodes are: "
                f"{', '.join(cluster.names)})"
            )
        if node in chosen:
            raise UsageError(f"--hosts: host '{name}' given twice")
        chosen.append(node)
    return chosen


def rank0_host(cluster: Cluster, nodes: Sequence[Node]) -> Node:
    """Where mpirun places rank 0: the node mpirun runs on (the head) when it is part of the
    allocation (PRRTE puts its own node first), else the first host given."""
    return cluster.head if cluster.head in nodes else nodes[0]


def plan(
    cluster: Cluster,
    options: LaunchOptions,
    job_id: str,
    network: Network | None = None,
) -> LaunchPlan:
    """Validate ``options`` against the inventory and build the mpirun command line.

    Raises UsageError (one line) for anything wrong, before anything starts.
    """
    command = list(options.command)
    if not command:
        raise UsageError("no command to run: give it after `--` (e.g. mpictl run -- hostname)")
    if options.np is not None and options.np <= 0:
        raise UsageError(f"-np must be a positive number of ranks, got {options.np}")
    if options.ppn is not None and options.ppn <= 0:
        raise UsageError(f"--ppn must be a positive number of ranks per node, got {options.ppn}")
    if options.timeout is not None and options.timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {options.timeout}")
    if not 0 < options.master_port < 65536:
        raise UsageError(f"--master-port must be a TCP port, got {options.master_port}")
    env = _parse_env(options.env)
    mca = _parse_mca(options.mca)
    nodes = _select_nodes(cluster, options.hosts)
    slots = {n.name: s for n, s in cluster.require_slots()}

    if options.ppn is not None:
        over = [n.name for n in nodes if options.ppn > slots[n.name]]
        if over and not options.oversubscribe:
            raise UsageError(
                f"--ppn {options.ppn} exceeds the slots of {', '.join(over)} "
                f"({', '.join(str(slots[n]) for n in over)}); add --oversubscribe to allow it"
            )
        capacity = options.ppn * len(nodes)
        per_host = {n.name: options.ppn for n in nodes}
    else:
        capacity = sum(slots[n.name] for n in nodes)
        per_host = {n.name: slots[n.name] for n in nodes}
    ranks = options.np if options.np is not None else capacity
    if ranks > capacity and not options.oversubscribe:
        where = ", ".join(n.name for n in nodes)
        if options.ppn:
            room = f"--ppn {options.ppn} x {len(nodes)} host(s) = {capacity} ({where})"
        else:
            room = f"the {capacity} slots of {where}"
        raise UsageError(f"-np {ranks} is more ranks than {room}; add --oversubscribe to allow it")

    mapping = f"ppr:{options.ppn}:node" if options.ppn else "slot"
    if options.oversubscribe:
        mapping += ":OVERSUBSCRIBE"
    argv = ["mpirun"]
    if options.hosts:
        argv += ["--host", ",".join(f"{n.address}:{slots[n.name]}" for n in nodes)]
    else:
        argv += ["--hostfile", remote.HOSTFILE]
    argv += ["-np", str(ranks), "--bind-to", "none", "--map-by", mapping]
    argv += ["-x", "PATH", "-x", "LD_LIBRARY_PATH"]
    user_mca = {k for k, _ in mca}
    # Defaults a user's own --mca of the same key replaces (mpirun refuses a key given twice).
    for key, value in (("pml", "ob1"), ("btl", "^openib")):
        if key not in user_mca:
            argv += ["--mca", key, value]
    if (
        network is not None
        and "btl_tcp_if_include" not in user_mca
        and "btl_tcp_if_exclude" not in user_mca
    ):
        argv += ["--mca", "btl_tcp_if_include", network.btl_tcp_if_include]
    for key, value in mca:
        argv += ["--mca", key, value]
    argv += ["--tag-output"]
    argv += ["-x", f"MPICTL_JOB_ID={job_id}"]
    user_env = {item.split("=", 1)[0] for item in env}
    # NCCL picks the first interface it likes, often docker0 or a management NIC; name the
    # one MPI uses. Passed on every job (nothing reads it where NCCL is absent), so the job
    # record shows exactly what ran, and a user's own -x NCCL_SOCKET_IFNAME wins.
    if network is not None and "NCCL_SOCKET_IFNAME" not in user_env:
        argv += ["-x", f"NCCL_SOCKET_IFNAME={network.nccl_socket_ifname}"]
    if options.torch:
        if network is not None and len(network.names) == 1 and "GLOO_SOCKET_IFNAME" not in user_env:
            argv += ["-x", f"GLOO_SOCKET_IFNAME={network.names[0]}"]
        if "MASTER_ADDR" not in user_env:
            argv += ["-x", f"MASTER_ADDR={rank0_host(cluster, nodes).address}"]
        if "MASTER_PORT" not in user_env:
            argv += ["-x", f"MASTER_PORT={options.master_port}"]
    for item in env:
        argv += ["-x", item]
    if options.torch:
        command = [remote.TORCH_ENV, *command]
    return LaunchPlan(
        mpirun=argv,
        command=command,
        hosts=[(n.address, per_host[n.name]) for n in nodes],
        ranks=ranks,
        network=network,
        job_id=job_id,
        torch=options.torch,
    )


# --------------------------------------------------------------------------- remote session

# Runs on the head as the MPI user: `bash -c SESSION mpictl-job N MPIRUN_OPTS... -- CMD...`.
# Job control (set -m) puts mpirun in a process group of its own; the watcher waits for EOF on
# the SSH channel (stdin) and then ends that group.
SESSION_SCRIPT = r"""
set -m
n=$1; shift
opts=("${@:1:n}"); shift "$n"
command -v mpirun >/dev/null 2>&1 || {
  echo "mpictl: mpirun not found on $(hostname) in PATH=$PATH (run mpictl provision)" >&2
  exit 127
}
exec 3>&2 2>/dev/null  # the shell's own job notices go nowhere; mpirun's stderr stays
mpirun "${opts[@]}" "$@" </dev/null 2>&3 3>&- &
job=$!
( cat >/dev/null 2>&1
  kill -TERM -- "-$job" 2>/dev/null || exit 0
  for _ in 1 2 3 4 5 6 7 8 9 10; do sleep 1; kill -0 -- "-$job" 2>/dev/null || exit 0; done
  kill -KILL -- "-$job" 2>/dev/null ) 3>&- &
watcher=$!
wait "$job"; rc=$?
kill -- "-$watcher" 2>/dev/null
exit "$rc"
"""

# Runs on every node (python3, as the MPI user): kill what still carries MPICTL_JOB_ID=<id> in its
# environment (the ranks, and anything they started), then print "<found> <left>".
CLEANUP_PROBE = r"""
import os, signal, sys, time
job = ("MPICTL_JOB_ID=" + sys.argv[1]).encode()
def find():
    me, out = os.getpid(), []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        if job in env:
            out.append(int(pid))
    return out
found = find()
for sig in (signal.SIGTERM, signal.SIGKILL):
    pids = find()
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    if pids:
        time.sleep(1)
print(len(found), len(find()))
"""


@dataclass
class CleanupReport:
    per_host: list[dict[str, Any]] = field(default_factory=list)

    @property
    def killed(self) -> int:
        return sum(int(r.get("found") or 0) for r in self.per_host)

    @property
    def left(self) -> list[str]:
        return [r["host"] for r in self.per_host if not r.get("ok") or r.get("left")]


@dataclass
class JobResult:
    job_id: str
    exit_code: int
    status: str  # ok, failed, timeout, interrupted
    duration_s: float
    cleanup: CleanupReport | None = None


def session_command(plan: LaunchPlan) -> str:
    """The remote shell command line that runs ``plan`` on the head (any POSIX login shell)."""
    opts = plan.mpirun[1:]
    args = ["bash", "-c", SESSION_SCRIPT, "mpictl-job", str(len(opts)), *opts, *plan.command]
    return "exec " + shlex.join(args)


def cleanup(head: remote.HeadSSH, job_id: str, hosts: Sequence[str]) -> CleanupReport:
    """Kill leftovers of ``job_id`` on ``hosts`` (from the head, as the MPI user) and report."""
    outputs = remote.run_on_nodes(
        head, hosts, f"python3 - {shlex.quote(job_id)}", CLEANUP_PROBE, timeout=30
    )
    report = CleanupReport()
    for host in hosts:
        out = outputs.get(host)
        parts = out.stdout.split() if out else []
        if out is not None and out.ok and len(parts) == 2 and all(p.isdigit() for p in parts):
            report.per_host.append(
                {"host": host, "ok": True, "found": int(parts[0]), "left": int(parts[1])}
            )
        else:
            error = out.error if out is not None else "no answer"
            report.per_host.append({"host": host, "ok": False, "error": error})
    return report


def _pump(stream: Any, name: str, sink: Callable[[str, str], None]) -> None:
    for raw in iter(stream.readline, b""):
        sink(name, raw.decode("utf-8", errors="replace"))
    stream.close()


def execute(
    cluster: Cluster,
    plan: LaunchPlan,
    *,
    on_output: OutputHandler | None = None,
    timeout: float | None = None,
    record: jobs.JobRecord | None = None,
    head: remote.HeadSSH | None = None,
) -> JobResult:
    """Run ``plan`` on the head, streaming output; end the job on timeout or Ctrl-C.

    KeyboardInterrupt during the run is handled here (the job is ended and cleaned up) and then
    reported as ``status="interrupted"`` with exit code 130.
    """
    head = head or remote.HeadSSH.for_cluster(cluster)
    record = record or jobs.create(cluster, plan)
    lock = threading.Lock()
    log = record.output_path.open("ab")

    def sink(stream: str, line: str) -> None:
        with lock:
            log.write(line.encode())
            log.flush()
            if on_output is not None:
                on_output(stream, line)

    started = time.monotonic()
    proc = subprocess.Popen(
        head.argv(session_command(plan)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the terminal's Ctrl-C reaches us, not ssh
    )
    threads = [
        threading.Thread(target=_pump, args=(proc.stdout, "stdout", sink), daemon=True),
        threading.Thread(target=_pump, args=(proc.stderr, "stderr", sink), daemon=True),
    ]
    for t in threads:
        t.start()
    status = ""
    try:
        while proc.poll() is None:
            if timeout is not None and time.monotonic() - started > timeout:
                status = "timeout"
                break
            time.sleep(0.1)
    except KeyboardInterrupt:
        status = "interrupted"
    report: CleanupReport | None = None
    if status:
        sink("stderr", f"mpictl: {status}: ending job {plan.job_id} on every node\n")
        _hang_up(proc)
    rc = proc.wait()
    for t in threads:
        t.join(timeout=5)
    if status or rc != 0:
        try:
            report = cleanup(head, plan.job_id, [h for h, _ in plan.hosts])
        except JobError as exc:
            report = CleanupReport([{"host": head.node.name, "ok": False, "error": str(exc)}])
        if report.killed:
            sink("stderr", f"mpictl: cleanup ended {report.killed} leftover process(es)\n")
        if report.left:
            sink("stderr", f"mpictl: cleanup could not verify {', '.join(report.left)}\n")
    log.close()
    if status == "timeout":
        exit_code = TIMEOUT_EXIT
    elif status == "interrupted":
        exit_code = INTERRUPT_EXIT
    else:
        exit_code = rc
        status = "ok" if rc == 0 else "failed"
    duration = time.monotonic() - started
    jobs.finish(record, exit_code=exit_code, status=status)
    return JobResult(plan.job_id, exit_code, status, duration, report)


def _hang_up(proc: subprocess.Popen[bytes]) -> None:
    """Close the SSH channel's stdin (the remote session then ends mpirun), then wait."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=25)
    except subprocess.TimeoutExpired:
        proc.kill()


def run(
    cluster: Cluster,
    options: LaunchOptions,
    *,
    on_output: OutputHandler | None = None,
    on_plan: Callable[[LaunchPlan, jobs.JobRecord], None] | None = None,
) -> JobResult:
    """Validate, record and run one job (``mpictl run``)."""
    job_id = jobs.new_id()
    launch_plan = plan(cluster, options, job_id, derive_network(cluster))
    head = remote.HeadSSH.for_cluster(cluster)
    record = jobs.create(cluster, launch_plan, user_command=list(options.command))
    if on_plan is not None:
        on_plan(launch_plan, record)
    return execute(
        cluster,
        launch_plan,
        on_output=on_output,
        timeout=options.timeout,
        record=record,
        head=head,
    )
