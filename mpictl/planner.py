"""The plan of a job whatever launches it (pure): validate what the user asked for and decide
the nodes, placement, ranks, environment, transport variables and what every rank runs.

The launchers build on it side by side: :mod:`mpictl.mpirun_plan` (the mpirun command line) and
:mod:`mpictl.slurm_plan` (the Slurm batch script); a third launcher is one more such module.
Nothing here touches a node or the job records; anything wrong raises :class:`UsageError` (one
line) before anything starts. Executing a plan is :mod:`mpictl.executor`'s job;
:mod:`mpictl.submit` ties it to a job record.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from mpictl import inputs
from mpictl import settings as cluster_settings
from mpictl.container import Container
from mpictl.errors import UsageError
from mpictl.inventory import Cluster, Node
from mpictl.network import Network
from mpictl.transport import Transport

DEFAULT_MASTER_PORT = 29500
# --tf: the first of the ports TensorFlow's workers listen on (one per rank: the base plus the
# rank's local rank on its node), as MPICTL_TF_PORT (scripts/mpictl-tf-env).
DEFAULT_TF_PORT = 23456
_MCA_NAME = re.compile(r"[A-Za-z0-9_^-]+")


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
    tf: bool = False  # --tf: TF_CONFIG for MultiWorkerMirroredStrategy (scripts/mpictl-tf-env)
    tf_port: int = DEFAULT_TF_PORT
    wdir: str | None = None  # where every rank starts (the synced workdir's path on the nodes)
    chdir: str | None = None  # --chdir: a directory already on every node (a shared filesystem)
    container: Container | None = None  # --container: every rank in this image (container.py)


@dataclass(frozen=True)
class LaunchPlan:
    """The validated job: the launcher's argv and what it will occupy."""

    mpirun: list[str]  # the launcher (mpirun) and its options, without the user's command
    command: list[str]  # what every rank runs (the torch wrapper included)
    hosts: list[tuple[str, int]]  # (address, ranks it may hold) in mapping order
    ranks: int
    network: Network | None
    job_id: str
    torch: bool = False
    container: str = ""  # the image every rank runs in (--container); "" on the host
    script: str = ""  # the batch script a scheduler runs the job from (Slurm); "" for mpirun
    launcher: str = "mpirun"
    transport: Transport | None = None  # the cluster's choice (a user's --mca pml still wins)

    @property
    def argv(self) -> list[str]:
        return [*self.mpirun, *self.command]

    @property
    def display(self) -> str:
        return shlex.join(self.argv)


@dataclass(frozen=True)
class Placement:
    """Where the ranks go: the nodes, each node's ranks and slots, the rank count."""

    nodes: list[Node]
    per_host: dict[str, int]  # node name -> ranks it may hold
    slots: dict[str, int]  # node name -> its slots
    ranks: int


def parse_env(items: Sequence[str]) -> list[str]:
    """``-x NAME`` or ``-x NAME=VALUE``: the name whole (a final newline is not part of a name),
    the value one line (it becomes an ``export`` line of a Slurm batch script)."""
    for item in items:
        name, _, value = item.partition("=")
        if not inputs.fullmatch(inputs.ENV_NAME, name) or _multiline(value):
            raise UsageError(f"-x {inputs.quoted(item)}: expected NAME or NAME=VALUE (one line)")
    return list(items)


def parse_mca(items: Sequence[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not inputs.fullmatch(_MCA_NAME, key) or value == "" or _multiline(value):
            raise UsageError(
                f"--mca {inputs.quoted(item)}: expected KEY=VALUE, one line "
                "(e.g. btl_tcp_if_include=eth0)"
            )
        out.append((key, value))
    return out


def _multiline(value: str) -> bool:
    return any(c in value for c in "\n\r\x00")


def select_nodes(cluster: Cluster, hosts: Sequence[str] | None) -> list[Node]:
    """The nodes of ``--hosts`` (inventory names or addresses), or every node."""
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


def check_numbers(options: LaunchOptions) -> None:
    if not options.command or not options.command[0].strip():
        raise UsageError("no command to run: give it after `--` (e.g. mpictl run -- hostname)")
    if options.np is not None and options.np <= 0:
        raise UsageError(f"-np must be a positive number of ranks, got {options.np}")
    if options.ppn is not None and options.ppn <= 0:
        raise UsageError(f"--ppn must be a positive number of ranks per node, got {options.ppn}")
    inputs.seconds("--timeout", options.timeout)
    if options.chdir is not None:
        inputs.node_path("--chdir", options.chdir)
    if not 0 < options.master_port < 65536:
        raise UsageError(f"--master-port must be a TCP port, got {options.master_port}")
    if options.tf and options.torch:
        raise UsageError(
            "--tf and --torch: one framework's rendezvous per job (--torch: torch.distributed; "
            "--tf: TensorFlow's MultiWorkerMirroredStrategy)"
        )
    if not 0 < options.tf_port < 65536:
        raise UsageError(f"--tf-port must be a TCP port, got {options.tf_port}")


def place(cluster: Cluster, options: LaunchOptions) -> Placement:
    """The nodes and rank counts of a job; refuses more ranks than slots unless oversubscribed."""
    nodes = select_nodes(cluster, options.hosts)
    slots = {n.name: s for n, s in cluster.require_slots()}
    if options.ppn is not None:
        over = [n.name for n in nodes if options.ppn > slots[n.name]]
        if over and not options.oversubscribe:
            raise UsageError(
                f"--ppn {options.ppn} exceeds the slots of {', '.join(over)} "
                f"({', '.join(str(slots[n]) for n in over)}); add --oversubscribe to allow it"
            )
        per_host = {n.name: options.ppn for n in nodes}
    else:
        per_host = {n.name: slots[n.name] for n in nodes}
    capacity = sum(per_host.values())
    ranks = options.np if options.np is not None else capacity
    if ranks > capacity and not options.oversubscribe:
        where = ", ".join(n.name for n in nodes)
        if options.ppn:
            room = f"--ppn {options.ppn} x {len(nodes)} host(s) = {capacity} ({where})"
        else:
            room = f"the {capacity} slots of {where}"
        raise UsageError(f"-np {ranks} is more ranks than {room}; add --oversubscribe to allow it")
    return Placement(nodes=nodes, per_host=per_host, slots=slots, ranks=ranks)


def launch_plan(
    where: Placement,
    options: LaunchOptions,
    job_id: str,
    network: Network | None,
    transport: Transport | None,
    *,
    launcher_argv: list[str],
    command: list[str],
    script: str = "",
    launcher: str = "mpirun",
) -> LaunchPlan:
    """The :class:`LaunchPlan` of a placed job: what every launcher fills the same way (hosts,
    ranks, network, job id, torch, container, transport) from ``where`` and ``options``, and the
    launcher's own argv, rank command and batch script."""
    return LaunchPlan(
        mpirun=launcher_argv,
        command=command,
        hosts=[(n.address, where.per_host[n.name]) for n in where.nodes],
        ranks=where.ranks,
        network=network,
        job_id=job_id,
        torch=options.torch,
        container=options.container.image if options.container else "",
        script=script,
        launcher=launcher,
        transport=transport,
    )


def mca_args(
    mca: list[tuple[str, str]], network: Network | None, transport: Transport | None = None
) -> list[str]:
    argv: list[str] = []
    user_mca = {k for k, _ in mca}
    pml = transport.pml if transport is not None else "ob1"
    # Defaults a user's own --mca of the same key replaces (mpirun refuses a key given twice).
    for key, value in (("pml", pml), ("btl", "^openib")):
        if key not in user_mca:
            argv += ["--mca", key, value]
    # OpenMPI's ucx pml declines to run (even when forced) unless UCX offers one of the verbs or
    # mlx5 transports on an mlx* device (pml_ucx_tls, pml_ucx_devices): UCX over TCP, RoCE ports
    # of other names, ... Which devices UCX uses is UCX_NET_DEVICES' business.
    if (dict(mca).get("pml") or pml) == "ucx":
        for key in ("pml_ucx_tls", "pml_ucx_devices"):
            if key not in user_mca:
                argv += ["--mca", key, "any"]
    if network is not None and not user_mca & {"btl_tcp_if_include", "btl_tcp_if_exclude"}:
        argv += ["--mca", "btl_tcp_if_include", network.btl_tcp_if_include]
    # GPU jobs: MPI collectives through UCC (its priority above OpenMPI's own components).
    if transport is not None and transport.coll == "ucc":
        for key, value in (("coll_ucc_enable", "1"), ("coll_ucc_priority", "100")):
            if key not in user_mca:
                argv += ["--mca", key, value]
    for key, value in mca:
        argv += ["--mca", key, value]
    return argv


def user_names(env: Sequence[str]) -> set[str]:
    """The names a user's ``-x NAME`` / ``-x NAME=VALUE`` items set."""
    return {item.split("=", 1)[0] for item in env}


def job_env(
    options: LaunchOptions,
    env: list[str],
    network: Network | None,
    job_id: str,
    master_addr: str | None,
    transport: Transport | None = None,
    shared_dir: str = "",
    tf_nodes: Sequence[Node] = (),
) -> list[str]:
    """What every rank gets, as ``NAME=VALUE`` (or a user's bare ``NAME``), whatever launches
    it: the job id, the network's variables, the transport's (``UCX_NET_DEVICES`` where the pml
    is ucx, ``NCCL_IB_HCA`` where every node has the same RDMA ports), torch's rendezvous
    (``MASTER_ADDR`` where the launcher knows it now) or TensorFlow's (``MPICTL_TF_HOSTS``: the
    addresses of ``tf_nodes``, the nodes the job may get; ``MPICTL_TF_PORT``), then the user's
    ``-x`` items; a user's own name wins over a default.
    """
    items = [f"MPICTL_JOB_ID={job_id}"]
    user_env = user_names(env)
    if shared_dir and "MPICTL_SHARED_DIR" not in user_env:  # the site's shared filesystem
        items.append(f"MPICTL_SHARED_DIR={shared_dir}")
    if transport is not None:
        if transport.pml == "ucx" and transport.ucx_devices and "UCX_NET_DEVICES" not in user_env:
            items.append(f"UCX_NET_DEVICES={transport.ucx_devices}")
        if transport.nccl_hcas and "NCCL_IB_HCA" not in user_env:
            items.append(f"NCCL_IB_HCA={transport.nccl_hcas}")
    # NCCL picks the first interface it likes, often docker0 or a management NIC; name the
    # one MPI uses. Passed on every job (nothing reads it where NCCL is absent), so the job
    # record shows exactly what ran, and a user's own -x NCCL_SOCKET_IFNAME wins.
    if network is not None and "NCCL_SOCKET_IFNAME" not in user_env:
        items.append(f"NCCL_SOCKET_IFNAME={network.nccl_socket_ifname}")
    if options.torch:
        if network is not None and len(network.names) == 1 and "GLOO_SOCKET_IFNAME" not in user_env:
            items.append(f"GLOO_SOCKET_IFNAME={network.names[0]}")
        if master_addr is not None and "MASTER_ADDR" not in user_env:
            items.append(f"MASTER_ADDR={master_addr}")
        if "MASTER_PORT" not in user_env:
            items.append(f"MASTER_PORT={options.master_port}")
    if options.tf:
        if "MPICTL_TF_HOSTS" not in user_env:
            items.append("MPICTL_TF_HOSTS=" + ",".join(tf_hosts(tf_nodes)))
        if "MPICTL_TF_PORT" not in user_env:
            items.append(f"MPICTL_TF_PORT={options.tf_port}")
    return items + list(env)


def tf_hosts(nodes: Sequence[Node]) -> list[str]:
    """``--tf``'s MPICTL_TF_HOSTS: the addresses of ``nodes``. TensorFlow's worker list holds
    ``HOST:PORT`` entries, which an IPv6 literal cannot be written into: refused."""
    for node in nodes:
        if ":" in node.address:
            raise UsageError(
                f"--tf: {node.name}'s address {node.address} is an IPv6 literal, which "
                "TensorFlow's worker list (HOST:PORT) cannot hold; give the node a DNS name or "
                "an IPv4 address (mpi_address)"
            )
    return [n.address for n in nodes]


def rank_command(options: LaunchOptions, settings: cluster_settings.ClusterSettings) -> list[str]:
    """What every rank runs: the user's command, behind the torch wrapper with ``--torch`` or
    the TensorFlow one (a Python program of the cluster venv: it asks the ranks through mpi4py)
    with ``--tf``. The container (mpirun's wrapper) is
    :func:`mpictl.mpirun_plan.mpirun_command`'s."""
    command = list(options.command)
    if options.tf:
        return [settings.venv_python, settings.tf_env, *command]
    return [settings.torch_env, *command] if options.torch else command
