"""The ``mpictl`` command line: thin Typer glue over the importable modules.

Only this module turns ``MpictlError`` into an exit code and a one-line message. Heavy imports
(Ansible, ansible-runner) happen inside the commands so ``mpictl --help`` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from mpictl import __version__, paths
from mpictl.errors import MpictlError, ProvisionError

app = typer.Typer(
    name="mpictl",
    help="Provision bare-metal Linux machines into an MPI cluster for distributed deep learning.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
sandbox_app = typer.Typer(
    help="The local sandbox cluster (podman containers).", no_args_is_help=True
)
app.add_typer(sandbox_app, name="sandbox")

InventoryOpt = Annotated[
    Path | None,
    typer.Option(
        "--inventory",
        "-i",
        help="Ansible inventory (file, directory or script). Default: the sandbox inventory.",
        show_default=False,
    ),
]


def _inventory(value: Path | None) -> Path:
    return value if value is not None else paths.sandbox_inventory()


@app.command()
def version() -> None:
    """Print mpictl's version."""
    typer.echo(__version__)


@app.command()
def provision(
    inventory: InventoryOpt = None,
    limit: Annotated[str | None, typer.Option("--limit", "-l", help="Hosts or groups.")] = None,
    tags: Annotated[str | None, typer.Option(help="Only tasks with these tags.")] = None,
    skip_tags: Annotated[str | None, typer.Option(help="Skip these tags.")] = None,
    extra_vars: Annotated[
        list[str] | None,
        typer.Option("--extra-vars", "-e", help="Extra variable key=value (repeatable)."),
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="Dry run, change nothing.")] = False,
    playbook: Annotated[str, typer.Option(help="Playbook under playbooks/.")] = "site.yml",
) -> None:
    """Provision the cluster: run playbooks/site.yml through ansible-runner."""
    from mpictl import ui
    from mpictl.provision import parse_extravars
    from mpictl.provision import provision as run_provision

    _, result = run_provision(
        _inventory(inventory),
        playbook=playbook,
        limit=limit,
        tags=tags,
        skip_tags=skip_tags,
        extravars=parse_extravars(extra_vars or []),
        check=check,
        on_event=ui.ProgressPrinter(),
    )
    ui.console.print(ui.recap_table(result))
    ui.console.print(f"artifacts: {result.private_data_dir}")
    if not result.ok:
        hosts = ", ".join(result.failed_hosts) or "see the artifacts"
        raise ProvisionError(f"provision failed (rc={result.rc}) on: {hosts}")


@app.command()
def hostfile(
    inventory: InventoryOpt = None,
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="openmpi | mpich | horovod")
    ] = "openmpi",
) -> None:
    """Print the MPI hostfile of the inventory's mpi_nodes."""
    from mpictl.hostfile import check_format, entries_for_cluster, render
    from mpictl.inventory import load_inventory

    check_format(fmt)
    cluster = load_inventory(_inventory(inventory))
    typer.echo(render(entries_for_cluster(cluster), fmt), nl=False)


@sandbox_app.command("up")
def sandbox_up(
    inventory: InventoryOpt = None,
    cuda: Annotated[
        bool, typer.Option("--cuda", help="Mount the host's /usr/local/cuda read-only.")
    ] = False,
) -> None:
    """Start the sandbox nodes (builds the node image on first use)."""
    from mpictl import sandbox

    _print_nodes(sandbox.up(_inventory(inventory), cuda=cuda))


@sandbox_app.command("down")
def sandbox_down(inventory: InventoryOpt = None) -> None:
    """Remove the sandbox's containers and network (image and keys stay)."""
    from mpictl import sandbox

    removed = sandbox.down(_inventory(inventory))
    typer.echo("removed: " + (", ".join(removed) if removed else "nothing"))


@sandbox_app.command("status")
def sandbox_status(inventory: InventoryOpt = None) -> None:
    """List the sandbox nodes and their state."""
    from mpictl import sandbox

    _print_nodes(sandbox.status(_inventory(inventory)))


def _print_nodes(nodes: list) -> None:
    from rich.table import Table

    from mpictl import ui

    table = Table()
    for column in ("node", "container", "state", "ssh", "ip"):
        table.add_column(column)
    for n in nodes:
        table.add_row(n.name, n.container, n.state, f"127.0.0.1:{n.ssh_port}", str(n.ip))
    ui.console.print(table)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app, turn errors into one line on stderr and an exit code."""
    try:
        rv = app(args=argv, prog_name="mpictl", standalone_mode=False)
    except MpictlError as exc:
        print(f"mpictl: error: {exc}", file=sys.stderr)
        code = exc.exit_code
    except (KeyboardInterrupt, typer.Abort):
        print("mpictl: interrupted", file=sys.stderr)
        code = 130
    except typer.Exit as exc:
        code = exc.exit_code
    except Exception as exc:
        # Typer's (vendored click) usage errors: one line, exit 2. Anything else is a bug and
        # keeps its traceback.
        if not hasattr(exc, "format_message"):
            raise
        code = int(getattr(exc, "exit_code", 2))
        if type(exc).__name__ == "NoArgsIsHelpError":
            print(exc.format_message(), file=sys.stderr)
        else:
            print(f"mpictl: error: {exc.format_message()}", file=sys.stderr)
    else:
        code = rv if isinstance(rv, int) else 0
    if argv is None:
        sys.exit(code)
    return code
