"""The batch script of a Slurm job (pure): what ``mpictl run --launcher slurm`` submits.

``-np`` -> ``--ntasks``, ``--ppn`` -> ``--ntasks-per-node``, ``--hosts`` -> ``--nodelist`` (and
``--nodes`` = their number, or every node when neither ``-np`` nor ``--hosts`` narrows the job, as
plain ``run`` fills every slot), ``--oversubscribe`` -> ``--overcommit``, ``--workdir`` ->
``--chdir``; on nodes that all have GPUs, ``--gres=gpu:N`` (N: the fewest any of them has, so
the cgroup device rules do not hide them); ``--mca k=v`` -> ``OMPI_MCA_k=v`` and the network's
variables exported as mpirun's plan passes them; ``-x`` exported; ``--torch``: ``MASTER_ADDR``
is the address of the allocation's first node (where srun puts rank 0); ``--tf``: the addresses
of the nodes the job may get (scripts/mpictl-tf-env asks the ranks which one each holds). The one
step is ``srun --mpi=pmix --label``. The script keeps its output, pid and srun's exit code in
``~/.mpictl/slurm/<id>/`` on its batch host.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from mpictl import network, planner
from mpictl import settings as cluster_settings
from mpictl.inventory import Cluster
from mpictl.planner import LaunchOptions, LaunchPlan
from mpictl.transport import Transport, for_job

REMOTE_BASE = ".mpictl/slurm"  # relative to the MPI user's home on the batch host


def remote_dir(job_id: str) -> str:
    return f"{REMOTE_BASE}/{job_id}"


def allocation(cluster: Cluster, options: LaunchOptions) -> tuple[list[str], planner.Placement]:
    """The ``#SBATCH`` options of a job and its placement (UsageError for bad options)."""
    where = planner.place(cluster, options)
    flags = [f"--ntasks={where.ranks}"]
    if options.hosts:
        flags += [
            f"--nodes={len(where.nodes)}",
            "--nodelist=" + ",".join(n.name for n in where.nodes),
        ]
    elif options.np is None:
        flags.append(f"--nodes={len(where.nodes)}")
    if options.ppn is not None:
        flags.append(f"--ntasks-per-node={options.ppn}")
    if options.oversubscribe:
        flags.append("--overcommit")
    gpus = [n.gpus or 0 for n in where.nodes]
    if gpus and min(gpus) > 0:  # the slurm role declares Gres=gpu:N; cgroups hide what is not asked
        flags.append(f"--gres=gpu:{min(gpus)}")
    return flags, where


def _exports(
    cluster: Cluster,
    options: LaunchOptions,
    net: network.Network | None,
    job_id: str,
    transport: Transport | None = None,
    shared_dir: str = "",
) -> list[str]:
    """``export`` lines of the batch script: the job id, OpenMPI's MCA defaults (as mpirun's
    plan has them, the transport's pml included), the network, torch's rendezvous and the
    user's ``-x``."""
    env = planner.parse_env(options.env)
    mca = planner.parse_mca(options.mca)
    lines = []
    args = planner.mca_args(mca, net, transport)
    for key, value in zip(args[1::3], args[2::3], strict=True):
        lines.append(f"export OMPI_MCA_{key}={shlex.quote(value)}")
    # --tf: every node Slurm may choose (each rank finds its own address among them)
    nodes = planner.select_nodes(cluster, options.hosts)
    for item in planner.job_env(options, env, net, job_id, None, transport, shared_dir, nodes):
        name, sep, value = item.partition("=")
        lines.append(f"export {name}={shlex.quote(value)}" if sep else f"export {name}")
    if options.torch and "MASTER_ADDR" not in planner.user_names(env):
        # rank 0 runs on the allocation's first node, known only once Slurm chose the nodes
        cases = " ".join(
            f"{n.name}) MASTER_ADDR={shlex.quote(n.address)} ;;" for n in cluster.nodes
        )
        lines += [
            'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            f"case $first in {cases} *) MASTER_ADDR=$first ;; esac",
            "export MASTER_ADDR",
        ]
    return lines


def batch_script(
    flags: Sequence[str],
    exports: Sequence[str],
    argv: Sequence[str],
    job_id: str,
    *,
    expanded: Sequence[str] = (),
) -> str:
    """The sbatch script: the allocation, the environment, srun, and the files the head reads.

    ``expanded``: options of ``argv[0]`` (srun) that the script's shell expands, each in double
    quotes right after it (``--container-mounts="$MPICTL_CONTAINER_MOUNTS,..."``)."""
    directory = remote_dir(job_id)
    line = shlex.join(argv)
    if expanded:
        inserted = " ".join(f'"{a}"' for a in expanded)
        line = f"{shlex.quote(argv[0])} {inserted} {shlex.join(argv[1:])}"
    return "\n".join(
        [
            "#!/bin/bash",
            f"#SBATCH --job-name=mpictl-{job_id}",
            "#SBATCH --output=/dev/null",
            *(f"#SBATCH {flag}" for flag in flags),
            f'dir="$HOME/{directory}"',
            'mkdir -p "$dir" && exec >"$dir/output.log" 2>&1',
            'echo "$$" >"$dir/pid"',
            *exports,
            line,
            "rc=$?",
            'echo "$rc" >"$dir/exit_code"',
            'exit "$rc"',
            "",
        ]
    )


def plan(
    cluster: Cluster,
    options: LaunchOptions,
    job_id: str,
    net: network.Network | None = None,
    settings: cluster_settings.ClusterSettings | None = None,
) -> LaunchPlan:
    """Validate ``options`` and build the batch script and its srun line."""
    planner.check_numbers(options)
    settings = settings or cluster_settings.for_cluster(cluster)
    flags, where = allocation(cluster, options)
    if options.wdir or options.chdir:
        flags.append(f"--chdir={options.wdir or options.chdir}")
    mca = planner.parse_mca(options.mca)
    env = planner.parse_env(options.env)
    transport = for_job(where.nodes, net, settings, mca, env)
    exports = _exports(cluster, options, net, job_id, transport, settings.shared_dir)
    srun = ["srun", "--mpi=pmix", "--label", "--kill-on-bad-exit=1"]
    if options.oversubscribe:
        srun.append("--overcommit")
    command = planner.rank_command(options, settings)
    expanded: list[str] = []
    if options.container is not None:  # pyxis; the cluster's directories from the batch host
        wrapper = shlex.quote(options.container.wrapper(settings.bin_dir))
        exports.append(f"MPICTL_CONTAINER_MOUNTS=$({wrapper} --mounts)")
        # what the image does not find by itself (ld.so.conf.d's /opt dirs, the driver)
        exports.append(f'export LD_LIBRARY_PATH="$({wrapper} --ld-library-path)"')
        exports.append(f'export PATH="$({wrapper} --path)"')
        expanded = options.container.srun_args("${MPICTL_CONTAINER_MOUNTS}")
    return planner.launch_plan(
        where,
        options,
        job_id,
        net,
        transport,
        launcher_argv=srun,
        command=command,
        script=batch_script(flags, exports, [*srun, *command], job_id, expanded=expanded),
        launcher="slurm",
    )
