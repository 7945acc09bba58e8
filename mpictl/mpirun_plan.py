"""The mpirun launcher's plan (pure): :class:`~mpictl.planner.LaunchOptions` -> the mpirun
command line in a :class:`~mpictl.planner.LaunchPlan`, built on the launcher-neutral
:mod:`mpictl.planner` as :mod:`mpictl.slurm_plan` builds the Slurm batch script."""

from __future__ import annotations

from mpictl import settings as cluster_settings
from mpictl.inventory import Cluster
from mpictl.network import Network
from mpictl.planner import (
    LaunchOptions,
    LaunchPlan,
    check_numbers,
    job_env,
    launch_plan,
    mca_args,
    parse_env,
    parse_mca,
    place,
    rank0_host,
    rank_command,
)
from mpictl.transport import for_job as transport_for_job


def mpirun_command(options: LaunchOptions, settings: cluster_settings.ClusterSettings) -> list[str]:
    """What mpirun starts on every rank: :func:`rank_command`, in the container with
    ``--container`` (the containers role's wrapper; it needs the cluster's MPI in the image's
    view, which the wrapper mounts)."""
    command = rank_command(options, settings)
    if options.container is None:
        return command
    return [*options.container.mpirun_prefix(settings.bin_dir), *command]


def plan(
    cluster: Cluster,
    options: LaunchOptions,
    job_id: str,
    network: Network | None = None,
    settings: cluster_settings.ClusterSettings | None = None,
) -> LaunchPlan:
    """Validate ``options`` against the inventory and build the mpirun command line."""
    check_numbers(options)
    env = parse_env(options.env)
    mca = parse_mca(options.mca)
    where = place(cluster, options)
    settings = settings or cluster_settings.for_cluster(cluster)

    mapping = f"ppr:{options.ppn}:node" if options.ppn else "slot"
    if options.oversubscribe:
        mapping += ":OVERSUBSCRIBE"
    argv = ["mpirun"]
    if options.hosts:
        argv += ["--host", ",".join(f"{n.address}:{where.slots[n.name]}" for n in where.nodes)]
    else:
        argv += ["--hostfile", settings.hostfile]
    argv += ["-np", str(where.ranks), "--bind-to", "none", "--map-by", mapping]
    if options.wdir or options.chdir:
        argv += ["--wdir", options.wdir or options.chdir or ""]
    argv += ["-x", "PATH", "-x", "LD_LIBRARY_PATH"]
    transport = transport_for_job(where.nodes, network, settings, mca, env)
    argv += mca_args(mca, network, transport)
    argv += ["--tag-output"]
    master = rank0_host(cluster, where.nodes).address
    for item in job_env(
        options, env, network, job_id, master, transport, settings.shared_dir, where.nodes
    ):
        argv += ["-x", item]
    command = mpirun_command(options, settings)
    return launch_plan(
        where, options, job_id, network, transport, launcher_argv=argv, command=command
    )
