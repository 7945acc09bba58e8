"""Terminal presentation of results (rich). Library modules never print; the CLI uses this."""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console, ConsoleDimensions
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from mpictl.runner import RESULT_EVENTS, RunResult

if TYPE_CHECKING:
    from mpictl.bench import BenchReport
    from mpictl.doctor import DoctorReport
    from mpictl.fabric import FabricReport
    from mpictl.jobs import JobRecord
    from mpictl.smoke import SmokeReport
    from mpictl.status import StatusReport

STYLES = {
    "ok": "green",
    "changed": "yellow",
    "failed": "bold red",
    "unreachable": "bold red",
    "skipped": "cyan",
}

DEBUG_ACTIONS = ("debug", "ansible.builtin.debug", "ansible.legacy.debug")

# Width of a table written to a file or a pipe (a log, CI): wide enough that no cell is ever cut
# or folded; a terminal keeps its own width.
LOG_WIDTH = 100_000


class _Console(Console):
    """A rich console that lays tables out for its terminal's width when it writes to one, and
    keeps every cell whole when it does not (rich would fold them to 80 columns, or to the width
    of whichever of the other standard streams is a terminal)."""

    @property
    def size(self) -> ConsoleDimensions:
        if self.is_terminal or self._width is not None:
            return super().size
        return ConsoleDimensions(LOG_WIDTH, 25)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


console = _Console(highlight=False)
err_console = _Console(stderr=True, highlight=False)


_CHANGED_KEY = "REMOTE HOST IDENTIFICATION HAS CHANGED"


def changed_host_key(message: str) -> str | None:
    """ssh's changed-host-key banner (a re-imaged node) as one line that keeps what it says
    to do, or None for any other message. The banner alone passes the length of a line."""
    if _CHANGED_KEY not in message:
        return None
    text = " ".join(message.split())
    seen = re.search(r"for the (\w+) key sent by the remote host is (SHA256:[A-Za-z0-9+/=]+)", text)
    kind = seen.group(1).lower() if seen else "ed25519"
    where = re.search(r"Offending \S+ key in (\S+)", text)
    remove = re.search(r"(ssh-keygen -f \S+ -R \S+)", text)
    return (
        "its SSH host key changed (a re-imaged or replaced machine, or someone in between) and is "
        "never replaced automatically: it now shows "
        f"{seen.group(2) if seen else 'another key'}; compare that with `ssh-keygen -lf "
        f"/etc/ssh/ssh_host_{kind}_key.pub` on the machine's console, then drop the old key "
        f"({where.group(1) if where else 'known_hosts'}) with "
        f"`{remove.group(1) if remove else 'ssh-keygen -R HOST'}`, pin the new one as at first "
        "contact (`mpictl init` shows how) and run provision again"
    )


def _result_message(res: Any) -> str:
    if not isinstance(res, dict):
        return ""
    changed = changed_host_key(str(res.get("msg") or ""))
    if changed is not None:
        return changed
    parts = [str(res.get("msg") or "").strip()]
    for item in res.get("results") or []:
        if isinstance(item, dict) and item.get("failed"):
            parts.append(str(item.get("msg") or "").strip())
    stderr = str(res.get("stderr") or "").strip()
    if stderr:
        parts.append(stderr.splitlines()[-1])
    return " | ".join(p for p in parts if p)[:400]


class ProgressPrinter:
    """Live progress per task and host from ansible-runner events."""

    def __init__(self, out: Console = console, show_skipped: bool = False) -> None:
        self.out = out
        self.show_skipped = show_skipped

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event", "")
        data = event.get("event_data", {})
        if kind == "playbook_on_play_start":
            self.out.print(f"[bold]PLAY[/bold] {escape(str(data.get('play', '')))}")
        elif kind == "playbook_on_task_start":
            self.out.print(f"  [dim]TASK[/dim] {escape(str(data.get('task', '')))}")
        elif kind in RESULT_EVENTS:
            status = RESULT_EVENTS[kind]
            res = data.get("res") or {}
            if status == "ok" and isinstance(res, dict) and res.get("changed"):
                status = "changed"
            if status == "skipped" and not self.show_skipped:
                return
            if status == "failed" and data.get("ignore_errors"):
                status = "failed (ignored)"
            line = (
                f"    {escape(str(data.get('host', '')))}: [{STYLES.get(status, 'red')}]{status}[/]"
            )
            if status in ("failed", "unreachable"):
                message = _result_message(res)
                if message:
                    line += f" - {escape(message)}"
            elif data.get("task_action") in DEBUG_ACTIONS and isinstance(res, dict):
                # A debug task is the roles' way to tell the operator something (the
                # StrictHostKeyChecking=no warning, a component skipped): show its message.
                message = str(res.get("msg") or "").strip()
                if message:
                    line += f" - {escape(message)}"
            self.out.print(line, markup=True, soft_wrap=True)
        elif kind == "warning":
            self.out.print(f"  [yellow]WARNING[/] {escape(event.get('stdout', '').strip())}")


def recap_table(result: RunResult) -> Table:
    table = Table(title=f"Recap ({result.run_id}, {result.duration_s:.0f} s)")
    for column in ("host", "ok", "changed", "failed", "unreachable", "skipped"):
        table.add_column(column, justify="left" if column == "host" else "right")
    for host, stats in sorted(result.stats.items()):
        bad = stats.failed or stats.unreachable
        table.add_row(
            f"[red]{host}[/]" if bad else host,
            str(stats.ok),
            str(stats.changed),
            str(stats.failed),
            str(stats.unreachable),
            str(stats.skipped),
        )
    return table


def failure_summary(result: RunResult) -> str:
    """One line: which hosts failed, and the first failed task's own message; when Ansible
    stopped outside any task (a playbook that does not parse, a missing role, an undefined
    variable in a play), Ansible's own error and the run's artifacts instead."""
    hosts = ", ".join(result.failed_hosts)
    line = f"provision failed (rc={result.rc}) on: {hosts or 'see the artifacts'}"
    for task in result.task_results():
        if task.status in ("failed", "unreachable") and not task.ignore_errors:
            message = _result_message(dict(task.result)).replace("\n", " ")
            return f"{line}: {task.host}: {task.task}: {message}"[:800]
    error = result.ansible_error
    if error is None:
        return line
    where = f" on: {hosts}" if hosts else ""
    return (
        f"provision failed (rc={result.rc}){where}: {error[:300]} "
        f"(artifacts: {result.private_data_dir})"
    )


def _table(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    right: Sequence[str] = (),
    **kwargs: Any,
) -> Table:
    """A table of plain-text cells; the columns named in ``right`` are right-justified."""
    table = Table(**kwargs)
    for column in columns:
        table.add_column(column, overflow="fold", justify="right" if column in right else "left")
    for row in rows:
        table.add_row(*(Text(str(cell)) for cell in row))  # [host] in a cell is text, not markup
    return table


def _one_line(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def nodes_table(nodes: Sequence[Any]) -> Table:
    """Sandbox nodes (``sandbox up``/``status``)."""
    return _table(
        ("node", "container", "state", "ssh", "ip", "action"),
        [
            (
                n.name,
                n.container,
                n.state,
                f"127.0.0.1:{n.ssh_port}" if n.ssh_port else "-",
                str(n.ip) or "-",
                n.action or "-",
            )  # fmt: skip
            for n in nodes
        ],
    )


def jobs_table(records: Sequence[JobRecord]) -> Table:
    """Recorded jobs; a record that does not read is a row with its id, status ``unreadable``
    and why in the command column."""
    from mpictl.inputs import shown

    return _table(
        ("id", "status", "exit", "ranks", "hosts", "start", "seconds", "command"),
        [
            (
                r.id,
                r.status,
                "" if r.exit_code is None else str(r.exit_code),
                "" if "unreadable" in r.extra else str(r.ranks),
                ",".join(h["host"] for h in r.hosts),
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.start)),
                "" if r.duration_s is None else f"{r.duration_s:.1f}",
                shown(r.extra["unreadable"], 300)
                if "unreadable" in r.extra
                else _one_line(shlex.join(r.command)),
            )
            for r in records
        ],
    )


def smoke_table(report: SmokeReport) -> Table:
    return _table(
        ("test", "ranks", "hosts", "result", "time"),
        [
            (
                f"{r.suite}/{r.test}",
                str(r.ranks) if r.ranks else "",
                ",".join(r.hosts),
                r.result if r.ok or r.skipped else f"{r.result}: {r.message}",
                "" if r.time_s is None else f"{r.time_s * 1000:.1f} ms",
            )
            for r in report.results
        ],
    )


def doctor_table(report: DoctorReport) -> Table:
    return _table(
        ("check", "node", "result", "detail", "fix"),
        [(c.check, c.node, c.result, c.detail, c.fix) for c in report.checks],
    )


def status_table(report: StatusReport, rows: Sequence[Sequence[str]]) -> Table:
    """``mpictl status``: one row per node (``status.table_rows``), read from Prometheus (net in
    MB/s)."""

    return _table(
        (
            "node",
            "exporter",
            "load/cpus",
            "memory",
            "disk /",
            "rx MB/s",
            "tx MB/s",
            "GPUs",
            "slurm",
        ),
        rows,
        right=("load/cpus", "disk /", "rx MB/s", "tx MB/s"),
        title=f"Prometheus {report.prometheus or '?'} on {report.server or '?'}",
    )


def bench_table(report: BenchReport, rows: Sequence[Sequence[str]]) -> Table:
    """``mpictl bench``: one row per message size (``bench.table_rows``)."""
    table = Table(title=f"allreduce, {report.points[0].ranks} ranks on {', '.join(report.hosts)}")
    for column in ("size", "latency (us)", "algbw (GB/s)", "busbw (GB/s)"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*row)
    return table


def fabric_table(report: FabricReport, pair_rows: Sequence[tuple[str, ...]]) -> Table:
    """Every pair of ``mpictl fabric`` (``fabric.table_rows``): MPI both ways, latency, iperf3,
    NCCL on GPU nodes, expectation, verdict."""

    numbers = (
        "a->b (GB/s)",
        "b->a (GB/s)",
        "latency (us)",
        "TCP a->b (GB/s)",
        "NCCL (GB/s)",
        "expected (Gbit/s)",
        "ratio",
    )
    title = f"point-to-point, {len(report.nodes)} nodes, {report.rounds} rounds"
    columns, rows = ("pair", *numbers, "verdict"), list(pair_rows)
    if not any(p.nccl for p in report.pairs):  # no GPU pair: no NCCL column
        drop = columns.index("NCCL (GB/s)")
        columns = columns[:drop] + columns[drop + 1 :]
        rows = [row[:drop] + row[drop + 1 :] for row in rows]
    return _table(columns, rows, numbers, title=title)


def cache_table(found: Sequence[Any]) -> Table:
    """``mpictl cache list``: one row per cached artifact."""
    rows = [[e.component, e.version, e.platform, e.fingerprint[:12], f"{e.size / 1e6:.1f} MB",
             time.strftime("%Y-%m-%d %H:%M", time.localtime(e.mtime))] for e in found]  # fmt: skip
    return _table(["component", "version", "platform", "fingerprint", "size", "cached"], rows)


def host_check_table(rows: Sequence[Sequence[str]]) -> Table:
    """The hosts `mpictl init` checked (rows from ``hostcheck.table_rows``)."""
    return _table(("host", "reachable", "sudo", "OS", "Python", "CPUs", "GPUs", "note"), rows)
