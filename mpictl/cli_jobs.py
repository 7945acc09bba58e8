"""Typer glue of the job commands: ``mpictl run`` and ``mpictl jobs list|show|logs|cancel``.

Logic lives in :mod:`mpictl.submit` (plan, workdir, record, execute or start) and
:mod:`mpictl.jobops` (the records and the heads); these functions parse, print and return the
job's exit code.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from mpictl.cli_options import InventoryOpt, JsonOpt, LauncherOpt, echo_stream, inventory_path

jobs_app = typer.Typer(help="Jobs of `mpictl run`: list, show, logs, cancel.", no_args_is_help=True)
JobIdArg = Annotated[
    str,
    typer.Argument(
        metavar="ID", help="Job id, YYYYMMDD-HHMMSS-xxxxxx (a unique prefix is enough)."
    ),
]


def register(app: typer.Typer) -> None:
    app.command(
        # The command starts at the first argument that is not an option (or after `--`); an
        # unknown option before it is an error, never part of the command.
        context_settings={"allow_interspersed_args": False},
    )(run)
    app.add_typer(jobs_app, name="jobs")


def _note(text: str) -> None:
    print(f"mpictl: {text}", file=sys.stderr)


def run(
    command: Annotated[list[str], typer.Argument(help="The command every rank runs (after --).")],
    inventory: InventoryOpt = None,
    np: Annotated[
        int | None, typer.Option("-np", "--np", "-n", help="Ranks (default: all slots).")
    ] = None,
    ppn: Annotated[int | None, typer.Option("--ppn", help="Ranks per node.")] = None,
    hosts: Annotated[
        str | None, typer.Option("--hosts", help="Only these hosts: a,b (inventory names).")
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option("-x", help="Export NAME or NAME=VALUE to every rank.")
    ] = None,
    mca: Annotated[list[str] | None, typer.Option("--mca", help="MCA parameter k=v.")] = None,
    torch: Annotated[
        bool, typer.Option("--torch", help="Set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...")
    ] = False,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="End the job after S seconds.")
    ] = None,
    oversubscribe: Annotated[
        bool, typer.Option("--oversubscribe", help="Allow more ranks than slots.")
    ] = False,
    master_port: Annotated[int, typer.Option(help="MASTER_PORT with --torch.")] = 29500,
    tf: Annotated[
        bool,
        typer.Option(
            "--tf", help="Set TF_CONFIG for MultiWorkerMirroredStrategy (one worker per rank)."
        ),
    ] = False,
    tf_port: Annotated[
        int | None,
        typer.Option(
            help="With --tf: the first worker port (plus each rank's local rank). [default: 23456]"
        ),
    ] = None,
    workdir: Annotated[
        str | None,
        typer.Option(
            "--workdir",
            metavar="DIR",
            help="Sync this directory to every node; every rank starts in it.",
        ),
    ] = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option("--exclude", help="Leave out (gitignore pattern; repeatable)."),
    ] = None,
    chdir: Annotated[
        str | None,
        typer.Option(
            "--chdir",
            metavar="DIR",
            help="Every rank starts in DIR, already on every node (a shared filesystem); no copy.",
        ),
    ] = None,
    max_workdir_size: Annotated[
        str | None,
        typer.Option(help="Refuse a --workdir larger than this (e.g. 2G, 500M). [default: 2G]"),
    ] = None,
    detach: Annotated[
        bool, typer.Option("--detach", help="Start the job on the head and return its id.")
    ] = False,
    output_dir: Annotated[
        str | None,
        typer.Option(
            "--output-dir",
            metavar="DIR",
            help="Each rank's stdout/stderr in DIR/rank.N/ (at the end).",
        ),
    ] = None,
    container: Annotated[
        str | None,
        typer.Option(
            "--container",
            metavar="IMAGE",
            help="Every rank in this squashfs image (a path on every node; enroot, pyxis).",
        ),
    ] = None,
    container_mount: Annotated[
        list[str] | None,
        typer.Option(
            "--container-mounts",
            metavar="SRC:DST[:ro|rw][,...]",
            help="With --container: also mount these host directories (as pyxis; repeatable).",
        ),
    ] = None,
    launcher: LauncherOpt = "mpirun",
) -> None:
    """Run CMD with mpirun on the head node, or through Slurm (mpictl run -- CMD...)."""
    from mpictl import container as container_mod
    from mpictl import submit
    from mpictl import workdir as workdir_mod
    from mpictl.errors import UsageError
    from mpictl.inventory import load_inventory
    from mpictl.planner import DEFAULT_TF_PORT, LaunchOptions, LaunchPlan

    if output_dir is not None and not output_dir.strip():
        raise UsageError("--output-dir '': expected a directory")
    if exclude and workdir is None:
        raise UsageError("--exclude applies to --workdir")
    if tf_port is not None and not tf:
        raise UsageError("--tf-port applies to --tf")
    if max_workdir_size is not None and workdir is None:
        raise UsageError("--max-workdir-size applies to --workdir")
    if chdir is not None and workdir is not None:
        raise UsageError("--chdir and --workdir: one place to start in (--chdir: already on the "
                         "nodes; --workdir: copied there)")  # fmt: skip
    via = submit.launcher(launcher)
    cluster = load_inventory(inventory_path(inventory))
    options = LaunchOptions(
        command=command,
        np=np,
        ppn=ppn,
        hosts=hosts.split(",") if hosts is not None else None,
        env=env or [],
        mca=mca or [],
        torch=torch,
        timeout=timeout,
        oversubscribe=oversubscribe,
        master_port=master_port,
        tf=tf,
        tf_port=DEFAULT_TF_PORT if tf_port is None else tf_port,
        chdir=chdir,
        container=container_mod.parse(container, container_mount or []),
    )
    request = submit.JobRequest(
        workdir=None
        if workdir is None
        else submit.WorkdirRequest(
            workdir,
            exclude or [],
            workdir_mod.parse_size("2G" if max_workdir_size is None else max_workdir_size),
        ),
        output_dir=None if output_dir is None else Path(output_dir),
    )

    def announce(plan: LaunchPlan, record: object) -> None:
        where = "Slurm, submitted on " if plan.launcher == "slurm" else ""
        _note(f"job {plan.job_id} on {where}{cluster.head.name}: {plan.display}")
        if plan.transport is not None:
            _note(f"transport: {plan.transport.text}")
        if plan.container:
            _note(f"container: {plan.container} (checked on every node)")
        if plan.network is None:
            _note(
                "note: no network shared by the job's nodes is known from the fact cache, "
                "so mpirun picks interfaces itself (run `mpictl provision`, or set "
                "mpi_network_interface per host)"
            )

    def synced(report: object) -> None:
        from mpictl.transfer import SyncReport
        from mpictl.workdir import human_size

        assert isinstance(report, SyncReport)
        _note(
            f"workdir {report.local} -> {report.path} on {1 + len(report.fanout)} node(s): "
            f"{report.files} files, {human_size(report.bytes)}, "
            f"{human_size(report.moved_content)} moved in {report.seconds:.1f} s"
        )

    if detach:
        record = submit.submit_detached(
            cluster, options, via=via, request=request, on_plan=announce, on_sync=synced
        )
        typer.echo(record.id)
        _note(f"follow: mpictl jobs logs -f {record.id}; end: mpictl jobs cancel {record.id}")
        return
    result, _ = submit.submit(
        cluster,
        options,
        via=via,
        request=request,
        on_output=echo_stream,
        on_plan=announce,
        on_sync=synced,
    )
    if result.exit_code != 0:
        _note(
            f"job {result.job_id} {result.status} (exit {result.exit_code}); "
            f"output: mpictl jobs logs {result.job_id}"
        )
    raise typer.Exit(result.exit_code)


@jobs_app.command("list")
def jobs_list(as_json: JsonOpt = False) -> None:
    """List recorded jobs, oldest first (running detached jobs: their head is asked)."""
    import json

    from mpictl import jobops, jobs, ui

    records, notes = jobops.refresh(jobs.list_jobs())
    if as_json:
        typer.echo(json.dumps([r.to_json() for r in records], indent=2))
    else:
        ui.console.print(ui.jobs_table(records))
    for note in notes:
        _note(note)


@jobs_app.command("show")
def jobs_show(job_id: JobIdArg) -> None:
    """Show one job's record (JSON)."""
    import json

    from mpictl import jobops, jobs

    record = jobops.refresh([jobs.load(job_id)])[0][0]
    typer.echo(json.dumps({**record.to_json(), "output": str(record.output_path)}, indent=2))


@jobs_app.command("logs")
def jobs_logs(
    job_id: JobIdArg,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Follow until the job ends; exit with its code.")
    ] = False,
    rank: Annotated[
        str | None, typer.Option("--rank", metavar="N", help="Only this rank's output.")
    ] = None,
) -> None:
    """Print a job's output (detached jobs: fetched from the head)."""
    from mpictl import inputs, jobops

    def out(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    number = None if rank is None else inputs.integer("--rank", rank, minimum=0)
    code = jobops.logs(job_id, follow=follow, rank=number, out=out)
    if follow and code is not None:
        raise typer.Exit(code)


@jobs_app.command("cancel")
def jobs_cancel(job_id: JobIdArg) -> None:
    """End a running job on every node."""
    from mpictl import jobops

    result = jobops.cancel(job_id)
    typer.echo(f"job {result['job']}: {result['status']} ({result['cleanup']})")
