"""The ``mpictl`` command line: thin Typer glue over the importable modules.

Only this module turns ``MpictlError`` into an exit code and a one-line message. Heavy imports
(Ansible, ansible-runner) happen inside the commands so ``mpictl --help`` stays fast.

Size: one function per command, each only its options and its printing; the file grows with the
commands, not with logic.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Annotated, Any

import typer

from mpictl import __version__, cli_jobs
from mpictl.cli_options import InventoryOpt, JsonOpt, LauncherOpt, echo_stream, inventory_path
from mpictl.errors import MpictlError, ProvisionError, UsageError
from mpictl.inputs import shown

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


@app.command()
def version() -> None:
    """Print mpictl's version."""
    typer.echo(__version__)


@app.command()
def provision(
    inventory: InventoryOpt = None,
    limit: Annotated[str | None, typer.Option("--limit", "-l", help="Hosts or groups.")] = None,
    tags: Annotated[
        str | None, typer.Option(help="Only these components, e.g. openmpi,mpi4py (--list-tags).")
    ] = None,
    skip_tags: Annotated[str | None, typer.Option(help="Skip these components.")] = None,
    list_tags: Annotated[
        bool, typer.Option("--list-tags", help="Print the playbook's tags and exit.")
    ] = False,
    extra_vars: Annotated[
        list[str] | None,
        typer.Option("--extra-vars", "-e", help="Extra variable key=value (repeatable)."),
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="Dry run, change nothing.")] = False,
    playbook: Annotated[
        str, typer.Option(help="One of mpictl's playbooks (a file name in playbooks/).")
    ] = "site.yml",
) -> None:
    """Provision the cluster: run playbooks/site.yml through ansible-runner."""
    from mpictl import ui
    from mpictl.provision import parse_extravars, play_tags, resolve_playbook
    from mpictl.provision import provision as run_provision

    if list_tags:
        for tag, plays in play_tags(resolve_playbook(playbook)).items():
            typer.echo(f"{tag:<12} {'; '.join(plays)}")
        return
    from mpictl import members

    source = inventory_path(inventory)
    cluster, result = run_provision(
        source,
        playbook=playbook,
        limit=limit,
        tags=tags,
        skip_tags=skip_tags,
        extravars=parse_extravars(extra_vars or []),
        check=check,
        on_event=ui.ProgressPrinter(),
    )
    ui.console.print(ui.recap_table(result))
    full = playbook == "site.yml" and not (limit or tags or skip_tags or check)
    try:
        for change in members.update(source, cluster.names, result, full_run=full):
            ui.console.print(str(change), markup=False)
    except MpictlError as exc:  # the run itself succeeded: say it, and go on
        ui.console.print(f"warning: {exc}", markup=False)
    ui.console.print(f"artifacts: {result.private_data_dir}", markup=False)
    if not result.ok:
        raise ProvisionError(ui.failure_summary(result))


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
    cluster = load_inventory(inventory_path(inventory))
    typer.echo(render(entries_for_cluster(cluster), fmt), nl=False)


@app.command(no_args_is_help=True)
def init(
    hosts: Annotated[
        list[str],
        typer.Argument(
            help="[NAME=]HOST[:PORT] per machine, e.g. gpu01, gpu02=10.0.0.2, n1=127.0.0.1:2221, "
            "[::1]:2222; localhost is this machine (Ansible's local connection).",
            metavar="HOST",
            show_default=False,
        ),
    ],
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="ssh login user (ansible_user).")
    ] = None,
    head: Annotated[
        str | None, typer.Option("--head", help="The head node (mpi_head): one of the NAMEs.")
    ] = None,
    slots: Annotated[int | None, typer.Option("--slots", help="mpi_slots of every node.")] = None,
    output: Annotated[
        str, typer.Option("--output", "-o", help="Inventory file to write; '-' prints it.")
    ] = "hosts.yml",
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    ssh_key: Annotated[
        Path | None,
        typer.Option(
            "--ssh-key",
            metavar="PATH",
            help="Private key of the login (ansible_ssh_private_key_file).",
        ),
    ] = None,
    ssh_option: Annotated[
        list[str] | None,
        typer.Option(
            "--ssh-option",
            metavar="KEY=VALUE",
            help="ssh -o KEY=VALUE (repeatable; ansible_ssh_common_args).",
        ),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check/--no-check", help="Check each host with your own ssh.")
    ] = True,
) -> None:
    """Write a starter inventory for your own machines, then check each one with your own ssh.

    Each HOST is [NAME=]HOST[:PORT]: NAME is the inventory name (default: HOST; a DNS name or an
    IP address, since other nodes reach the node by it), HOST is where ssh connects
    (ansible_host), PORT its ssh port (ansible_port); an IPv6 HOST with a port goes in brackets,
    [::1]:2222. The check runs `ssh -o BatchMode=yes -o StrictHostKeyChecking=yes HOST sh -s`
    with your ssh config, agent and known_hosts: reachable, passwordless sudo, OS, Python, CPUs,
    GPUs (localhost, this machine, runs it with `sh -s`). An unknown host key is never accepted;
    the table says how to check and pin it. Exit 1 when a host is unreachable or lacks
    passwordless sudo (the inventory is written either way).
    """
    from mpictl import hostcheck, ui
    from mpictl import init as starter_inventory
    from mpictl.errors import CheckFailed

    starter = starter_inventory.plan(
        hosts, head=head, user=user, slots=slots, ssh_key=ssh_key, ssh_options=ssh_option or []
    )
    text = starter_inventory.render(starter)
    out = ui.console
    if output == "-":
        typer.echo(text, nl=False)
        out, written = ui.err_console, "the inventory was printed"
    else:
        starter_inventory.write(text, Path(output), force=force)
        written = f"{output} was written"
        out.print(f"wrote {output}", markup=False)
    if not check:
        return
    checks = hostcheck.check_hosts(starter.targets)
    out.print(ui.host_check_table(hostcheck.table_rows(checks)))
    problem = hostcheck.summary(checks)
    if problem:
        raise CheckFailed(f"init: {written}, but {problem}")
    next_step = "" if output == "-" else f": mpictl provision -i {output}"
    out.print(f"every host is ready{next_step}", markup=False)


@sandbox_app.command("up")
def sandbox_up(
    inventory: InventoryOpt = None,
    cuda: Annotated[
        bool, typer.Option("--cuda", help="Mount the host's /usr/local/cuda read-only.")
    ] = False,
) -> None:
    """Start the sandbox nodes (builds the node image on first use)."""
    from mpictl import lock, sandbox

    inv = inventory_path(inventory)
    keys = sandbox.read_sandbox(inv).lock_keys()  # checked whole before podman or a lock
    with lock.hold(keys, "sandbox up", source=inv):
        _print_nodes(sandbox.up(inv, cuda=cuda))


@sandbox_app.command("down")
def sandbox_down(inventory: InventoryOpt = None) -> None:
    """Remove the sandbox's containers and network (image and keys stay)."""
    from mpictl import lock, sandbox

    inv = inventory_path(inventory)
    keys = sandbox.read_sandbox(inv).lock_keys()  # checked whole before podman or a lock
    with lock.hold(keys, "sandbox down", source=inv):
        removed = sandbox.down(inv)
    typer.echo("removed: " + (", ".join(removed) if removed else "nothing"))


@sandbox_app.command("status")
def sandbox_status(inventory: InventoryOpt = None) -> None:
    """List the sandbox nodes and their state."""
    from mpictl import sandbox

    _print_nodes(sandbox.status(inventory_path(inventory)))


def _print_nodes(nodes: list) -> None:
    from mpictl import ui

    ui.console.print(ui.nodes_table(nodes))


# --------------------------------------------------------------------------- the artifact cache
cache_app = typer.Typer(
    help="The artifact cache: list, export, import and prune built artifacts.",
    no_args_is_help=True,
)
app.add_typer(cache_app, name="cache")


@cache_app.command("list")
def cache_list(as_json: JsonOpt = False) -> None:
    """What the cache holds: component, version, platform, fingerprint, size."""
    import json

    from mpictl import cache, ui

    found = cache.entries()
    if as_json:
        rows = [{"component": e.component, "version": e.version, "platform": e.platform,
                 "fingerprint": e.fingerprint, "size": e.size, "mtime": e.mtime,
                 "sha256": e.sha256, "path": str(e.path)} for e in found]  # fmt: skip
        typer.echo(json.dumps(rows, indent=2))
        return
    ui.console.print(ui.cache_table(found))
    typer.echo(f"wheels (downloads): {cache.wheels_size() / 1e6:.0f} MB")


@cache_app.command("export")
def cache_export(
    target: Annotated[Path, typer.Argument(help="The archive to write (.tar.gz).")],
    component: Annotated[
        list[str] | None,
        typer.Option("--component", "-c", help="Only this component (repeatable)."),
    ] = None,
) -> None:
    """Pack built artifacts (all, or --component) with their checksums into one file."""
    from mpictl import cache

    done = cache.export(target, component or [])
    typer.echo(f"exported {len(done)} artifact(s) to {shown(target)}")


@cache_app.command("import")
def cache_import(
    source: Annotated[Path, typer.Argument(help="An archive of `mpictl cache export`.")],
    inventory: Annotated[
        Path | None,
        typer.Option(
            "--inventory", "-i", help="Refuse artifacts none of this cluster's nodes can use."
        ),
    ] = None,
) -> None:
    """Check an exported archive whole (members, sha256, platform), then add it to the cache."""
    from mpictl import cache
    from mpictl.inventory import load_inventory

    facts = None
    if inventory is not None:
        facts = [n.facts or {} for n in load_inventory(inventory).nodes]
    done = cache.import_archive(source, node_facts=facts)
    typer.echo(f"imported {len(done)} artifact(s) from {shown(source)}")


@cache_app.command("prune")
def cache_prune(
    older_than: Annotated[
        float | None, typer.Option("--older-than", help="Remove artifacts older than DAYS.")
    ] = None,
    keep: Annotated[
        int | None, typer.Option("--keep", help="Keep the N newest of each component.")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would go.")] = False,
) -> None:
    """Remove old artifacts (a later provision builds what it needs again)."""
    from mpictl import cache

    gone = cache.prune(older_than, keep, dry_run)
    verb = "would remove" if dry_run else "removed"
    for entry in gone:
        typer.echo(f"{verb} {entry.component} {entry.version} {entry.fingerprint[:12]}")
    typer.echo(f"{verb} {len(gone)} artifact(s), {sum(e.size for e in gone) / 1e6:.0f} MB")


# --------------------------------------------------------------------------- job side
# Logic lives in mpictl.submit / jobops / smoke / doctor / bench; these functions only parse,
# print and map results to exit codes. `run` and `jobs` are in cli_jobs.
cli_jobs.register(app)


@app.command()
def smoke(
    inventory: InventoryOpt = None,
    suite: Annotated[str, typer.Option(help="mpi | horovod | all")] = "all",
    as_json: JsonOpt = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Stream mpirun output.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds per suite.")] = 300.0,
    launcher: LauncherOpt = "mpirun",
) -> None:
    """Verify point-to-point and collectives (and Horovod) across nodes."""
    import json

    from mpictl import smoke as smoke_mod
    from mpictl import ui
    from mpictl.errors import CheckFailed
    from mpictl.inputs import quoted, seconds
    from mpictl.inventory import load_inventory
    from mpictl.submit import LAUNCHERS

    if suite not in smoke_mod.SUITES:
        raise UsageError(
            f"unknown suite {quoted(suite)} (choose from {', '.join(smoke_mod.SUITES)})"
        )
    if launcher not in LAUNCHERS:
        raise UsageError(f"--launcher {quoted(launcher)}: choose one of {', '.join(LAUNCHERS)}")
    seconds("--timeout", timeout)
    cluster = load_inventory(inventory_path(inventory))

    def announce(name: str, plan: object) -> None:
        print(f"mpictl: smoke {name}: {getattr(plan, 'display', '')}", file=sys.stderr)

    report = smoke_mod.run_smoke(
        cluster,
        suite,
        timeout=timeout,
        launcher=launcher,
        on_output=echo_stream if verbose else None,
        on_suite=None if as_json else announce,
    )
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        if report.results:
            ui.console.print(ui.smoke_table(report))
        for error in report.errors:
            print(f"mpictl: {error}", file=sys.stderr)
    if not report.ok:
        failed = [r for r in report.results if not r.ok and not r.skipped]
        nodes = report.failed_nodes
        first = (
            report.errors[0]
            if report.errors
            else (
                f"{failed[0].suite}/{failed[0].test}: {failed[0].message}"
                if failed
                else "no test ran"
            )
        )
        where = f" (nodes: {', '.join(nodes)})" if nodes else ""
        raise CheckFailed(f"smoke failed{where}: {first}")


@app.command()
def doctor(inventory: InventoryOpt = None, as_json: JsonOpt = False) -> None:
    """Preflight checks: SSH mesh, environment, identical builds, network, slots."""
    import json

    from mpictl import doctor as doctor_mod
    from mpictl import ui
    from mpictl.errors import CheckFailed
    from mpictl.inventory import load_inventory

    report = doctor_mod.run_doctor(load_inventory(inventory_path(inventory)))
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        ui.console.print(ui.doctor_table(report))
    if not report.ok:
        first = report.failed[0]
        nodes = sorted({c.node for c in report.failed})
        raise CheckFailed(
            f"doctor: {len(report.failed)} check(s) failed on {', '.join(nodes)}; first: "
            f"{first.node}: {first.check}: {first.detail} (fix: {first.fix})"
        )


@app.command()
def status(inventory: InventoryOpt = None, as_json: JsonOpt = False) -> None:
    """One screen of every node from Prometheus (monitoring_enabled): up, load, memory, disk,
    network, GPUs, Slurm state."""
    import json

    from mpictl import settings, ui
    from mpictl import status as status_mod
    from mpictl.errors import CheckFailed
    from mpictl.inventory import load_inventory

    cluster = load_inventory(inventory_path(inventory))
    report = status_mod.collect(cluster, settings.for_cluster(cluster))
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        ui.console.print(ui.status_table(report, status_mod.table_rows(report)))
        for note in report.notes:
            typer.echo(f"note: {note}", err=True)
    if report.problems:
        raise CheckFailed(f"status: {'; '.join(report.problems)}")


def _echo_report(data: dict[str, Any], plot: Path | None, results: Path | None) -> None:
    """``--json`` of bench and fabric: the report, the plot's path and the kept results' path."""
    import json

    extra = {"plot": str(plot) if plot else None, "results": str(results) if results else None}
    typer.echo(json.dumps({**data, **extra}, indent=2))


@app.command()
def bench(
    inventory: InventoryOpt = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a PNG plot here.")] = None,
    as_json: JsonOpt = False,
    max_size: Annotated[int, typer.Option(help="Largest message in bytes.")] = 256 * 1024 * 1024,
    ppn: Annotated[
        int | None,
        typer.Option(help="Ranks per node (default: 1 for mpi, one per GPU for nccl)."),
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            help="auto (nccl-tests where every node has GPUs and all_reduce_perf is installed), "
            "mpi (mpi4py, host memory) or nccl.",
        ),
    ] = "auto",
) -> None:
    """Allreduce sweep (8 B..256 MiB): latency, algbw, busbw; iperf3 link limit; PNG plot."""

    from mpictl import bench as bench_mod
    from mpictl import ui
    from mpictl.inventory import load_inventory

    if plot is not None:  # before the sweep, not after it
        bench_mod.check_plot_path(plot)
        bench_mod.check_plotting()
    report = bench_mod.run_bench(
        load_inventory(inventory_path(inventory)), max_bytes=max_size, ppn=ppn, engine=engine
    )
    if plot is not None:
        bench_mod.plot(report, plot)
    if as_json:
        _echo_report(report.to_json(), plot, report.results_path)
        return
    ui.console.print(ui.bench_table(report, bench_mod.table_rows(report)))
    typer.echo(f"measured: {bench_mod.ENGINE_TEXT.get(report.engine, report.engine)}")
    if report.transport:
        typer.echo(f"transport: {report.transport}")
    typer.echo(bench_mod.summary(report))
    if plot is not None:
        typer.echo(f"plot: {plot}")
    typer.echo(f"results: {report.results_path}")


@app.command()
def fabric(
    inventory: InventoryOpt = None,
    hosts: Annotated[
        str | None, typer.Option("--hosts", help="Only these nodes: a,b,c (inventory names).")
    ] = None,
    expect: Annotated[
        float | None,
        typer.Option(
            "--expect",
            metavar="GBIT",
            help="Every link's expected rate in Gbit/s (default: mpi_link_gbps, else the NIC's "
            "speed, else the median of the pairs).",
        ),
    ] = None,
    threshold: Annotated[
        float, typer.Option(help="A pair below this share of its expected rate is slow.")
    ] = 0.8,
    size: Annotated[int, typer.Option(help="Message size in bytes.")] = 4 * 1024 * 1024,
    seconds: Annotated[float, typer.Option(help="Seconds per direction and pair.")] = 1.0,
    tcp: Annotated[
        bool, typer.Option("--tcp/--no-tcp", help="Measure each pair with iperf3 too.")
    ] = True,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write a PNG heat-map of the pairs here.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Measure every pair of nodes (MPI point-to-point both ways, latency, iperf3) in rounds of
    disjoint pairs, judge each against its expected rate, and name the slow node or link.
    Exit 0 when every pair is ok, 1 otherwise."""

    from mpictl import bench as bench_mod
    from mpictl import fabric as fabric_mod
    from mpictl import ui
    from mpictl.errors import CheckFailed
    from mpictl.inventory import load_inventory

    if plot is not None:  # before the measurement, not after it
        bench_mod.check_plot_path(plot)
        bench_mod.check_plotting()
    report = fabric_mod.run_fabric(
        load_inventory(inventory_path(inventory)),
        hosts=hosts.split(",") if hosts is not None else None,
        expect=expect,
        threshold=threshold,
        size=size,
        seconds=seconds,
        tcp=tcp,
    )
    if plot is not None:
        fabric_mod.plot(report, plot)
    if as_json:
        _echo_report(report.to_json(), plot, report.results_path)
    else:
        ui.console.print(ui.fabric_table(report, fabric_mod.table_rows(report)))
        for line in fabric_mod.summary(report):
            typer.echo(line)
        if report.transport:
            typer.echo(f"transport: {report.transport}")
        if plot is not None:
            typer.echo(f"plot: {plot}")
        if report.results_path is not None:
            typer.echo(f"results: {report.results_path}")
    if not report.ok:
        slow = [f.text for f in report.findings if f.kind != "ok"]
        raise CheckFailed(f"fabric: {slow[0] if slow else 'not every pair is ok'}")


DEBUG_ENV = "MPICTL_DEBUG"


def _error(text: str) -> None:
    """One line on stderr: user text inside it escaped (a newline cannot split it, an escape
    sequence cannot reach the terminal)."""
    print(f"mpictl: error: {shown(text, limit=2000)}", file=sys.stderr)


class _CtrlC:
    """Whether SIGINT arrived while a command ran (Typer answers it with a silent exit 130;
    a command that handles SIGINT itself, as a job does, replaces this handler meanwhile)."""

    def __init__(self) -> None:
        self.seen = False
        self.previous: Any = None
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.getsignal(signal.SIGINT)
            if self.previous is signal.default_int_handler:
                signal.signal(signal.SIGINT, self._handler)

    def _handler(self, signum: int, frame: Any) -> None:
        self.seen = True
        raise KeyboardInterrupt

    def __bool__(self) -> bool:
        return self.seen

    def restore(self) -> None:
        if self.previous is signal.default_int_handler:
            signal.signal(signal.SIGINT, self.previous)


def _watch_ctrl_c() -> _CtrlC:
    return _CtrlC()


def _debug() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app, turn errors into one line on stderr and an exit code.

    Nothing escapes as a traceback: an ``MpictlError`` is its own line and exit code; an
    ``OSError`` (a file or directory mpictl could not use) names the path, exit 1; anything else
    is a bug in mpictl, one line, exit 1. ``MPICTL_DEBUG=1`` adds the traceback of the last two.
    """
    interrupted = _watch_ctrl_c()
    try:
        rv = app(args=argv, prog_name="mpictl", standalone_mode=False)
    except MpictlError as exc:
        _error(str(exc))
        code = exc.exit_code
    except (KeyboardInterrupt, typer.Abort):
        print("mpictl: interrupted", file=sys.stderr)
        code = 130
    except typer.Exit as exc:
        code = exc.exit_code
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        _error(f"{where}{exc.strerror or exc} (MPICTL_DEBUG=1 shows where)")
        code = 1
        if _debug():
            traceback.print_exc()
    except Exception as exc:
        if hasattr(exc, "format_message"):
            # Typer's (vendored click) usage errors: one line, exit 2.
            code = int(getattr(exc, "exit_code", 2))
            if type(exc).__name__ == "NoArgsIsHelpError":
                print(exc.format_message(), file=sys.stderr)
            else:
                _error(exc.format_message())
        else:
            _error(
                f"internal error: {type(exc).__name__}: {exc} (a bug in mpictl: please report "
                f"it with the output of {DEBUG_ENV}=1 mpictl ...)"
            )
            code = 1
            if _debug():
                traceback.print_exc()
    else:
        code = rv if isinstance(rv, int) else 0
        if interrupted and code == 130:  # Typer turns Ctrl-C into a silent exit 130
            print("mpictl: interrupted", file=sys.stderr)
    finally:
        interrupted.restore()
    if argv is None:
        sys.exit(code)
    return code
