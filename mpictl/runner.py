"""Every ansible-runner call of mpictl goes through this module.

Runs keep their private data directory (artifacts, job events, stdout) under
``<state>/runs/<id>/``. Results are structured: the return code, the per-host recap and the job
events, so callers never parse Ansible's text output.
"""

from __future__ import annotations

import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpictl import paths
from mpictl.errors import Interrupted, MpictlError

EventHandler = Callable[[dict[str, Any]], None]

# Event names of task results, mapped to the status we report.
RESULT_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_skipped": "skipped",
    "runner_on_unreachable": "unreachable",
}


@dataclass
class HostStats:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0


@dataclass
class TaskResult:
    host: str
    task: str
    status: str  # ok, changed, failed, skipped, unreachable
    result: Mapping[str, Any] = field(default_factory=dict, repr=False)
    ignore_errors: bool = False


@dataclass
class RunResult:
    rc: int
    status: str
    run_id: str
    private_data_dir: Path
    stats: dict[str, HostStats]
    events: list[dict[str, Any]] = field(repr=False)
    duration_s: float = 0.0

    @property
    def failed_hosts(self) -> list[str]:
        return sorted(h for h, s in self.stats.items() if s.failed or s.unreachable)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.failed_hosts

    def task_results(self, task: str | None = None) -> list[TaskResult]:
        """Results of tasks (every task, or those whose name ends with ``task``)."""
        return [r for r in iter_task_results(self.events) if task is None or r.task.endswith(task)]

    def changed_tasks(self) -> list[TaskResult]:
        return [r for r in self.task_results() if r.status == "changed"]

    @property
    def ansible_error(self) -> str | None:
        """Ansible's own error when it stopped outside any task (see ``first_error``)."""
        return first_error(self.events)


def iter_task_results(events: Sequence[Mapping[str, Any]]) -> list[TaskResult]:
    results = []
    for event in events:
        status = RESULT_EVENTS.get(event.get("event", ""))
        if status is None:
            continue
        data = event.get("event_data", {})
        res = data.get("res") or {}
        if status == "ok" and isinstance(res, Mapping) and res.get("changed"):
            status = "changed"
        results.append(
            TaskResult(
                host=str(data.get("host", "")),
                task=str(data.get("task", "")),
                status=status,
                result=res if isinstance(res, Mapping) else {},
                ignore_errors=bool(data.get("ignore_errors")),
            )
        )
    return results


# Events that carry Ansible's messages outside tasks: a playbook that does not parse, a missing
# role, an undefined variable in a play keyword. Their stdout is Ansible's text, in color.
MESSAGE_EVENTS = ("error", "verbose")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
ERROR_LINE = re.compile(r"^(?:\[ERROR\]:|ERROR!)\s*(.+)$")
# Where the error is: "Origin: FILE:LINE:COL" (>= 2.19) or "The error appears to be in 'FILE':
# line L, column C" (older), a few lines below the error line.
ORIGIN = re.compile(
    r"^Origin:\s*(\S+)|^The error appears to be in '([^']+)': line (\d+), column (\d+)"
)


def first_error(events: Sequence[Mapping[str, Any]]) -> str | None:
    """The first error line Ansible printed outside a task (ansible-core >= 2.19 ``[ERROR]: ...``,
    older ``ERROR! ...``) and where it is (``file:line:column``) when Ansible says; None if the
    run has none. Failed tasks have their own events (``runner_on_failed``) and are not read."""
    lines = [
        ANSI.sub("", line).strip()
        for event in events
        if event.get("event") in MESSAGE_EVENTS
        for line in str(event.get("stdout") or "").splitlines()
    ]
    for index, line in enumerate(lines):
        match = ERROR_LINE.match(line)
        if match is None:
            continue
        origin = _origin(lines[index + 1 : index + 4])
        return match.group(1).strip() + (f" ({origin})" if origin else "")
    return None


def _origin(lines: Sequence[str]) -> str | None:
    for line in lines:
        match = ORIGIN.match(line)
        if match and match.group(1):
            return match.group(1)
        if match:
            return ":".join(match.group(2, 3, 4))
    return None


def _stats(raw: Mapping[str, Mapping[str, int]] | None) -> dict[str, HostStats]:
    keys = {
        "ok": "ok",
        "changed": "changed",
        "failures": "failed",
        "dark": "unreachable",
        "skipped": "skipped",
        "rescued": "rescued",
        "ignored": "ignored",
    }
    stats: dict[str, HostStats] = {}
    for raw_key, attr in keys.items():
        for host, count in (raw or {}).get(raw_key, {}).items():
            setattr(stats.setdefault(host, HostStats()), attr, int(count))
    return stats


def environment() -> dict[str, str]:
    """Environment of every Ansible process mpictl starts.

    mpictl's own settings, roles and filter plugins are named explicitly (absolute paths), so
    neither the current directory nor a stray ``ansible.cfg`` or ``ANSIBLE_*`` path of the
    user's shell changes what mpictl runs. No bytecode is written next to the content (an
    installed package may be read-only, and nothing is ever written under it).
    """
    root = paths.project_root()
    bin_dir = str(Path(sys.executable).parent)
    return {
        "ANSIBLE_CONFIG": str(paths.ansible_cfg()),
        "ANSIBLE_ROLES_PATH": str(paths.roles_dir()),
        "ANSIBLE_FILTER_PLUGINS": str(paths.filter_plugins_dir()),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "MPICTL_ROOT": str(root),
        "MPICTL_STATE_DIR": str(paths.state_dir()),
        "MPICTL_CACHE_DIR": str(paths.cache_dir()),
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        # the filter plugin imports mpictl: the directory that holds this very package
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(paths.package_dir().parent), os.environ.get("PYTHONPATH")])
        ),
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def new_run_dir(kind: str) -> tuple[str, Path]:
    run_id = time.strftime("%Y%m%d-%H%M%S") + f"-{kind}-{uuid.uuid4().hex[:6]}"
    run_dir = paths.runs_dir() / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_id, run_dir


def _run(kind: str, on_event: EventHandler | None, **kwargs: Any) -> RunResult:
    import ansible_runner

    run_id, run_dir = new_run_dir(kind)
    paths.facts_dir().mkdir(parents=True, exist_ok=True)
    events: list[dict[str, Any]] = []

    def handler(event: dict[str, Any]) -> bool:
        events.append(event)
        if on_event is not None:
            on_event(event)
        return True

    started = time.monotonic()
    try:
        runner = ansible_runner.run(
            private_data_dir=str(run_dir),
            ident="run",
            envvars=environment(),
            fact_cache_type="jsonfile",
            fact_cache=str(paths.facts_dir()),
            quiet=True,
            event_handler=handler,
            **kwargs,
        )
    except Exception as exc:  # ansible-runner raises plain exceptions for setup problems
        raise MpictlError(f"ansible-runner could not start: {exc}") from None
    if str(runner.status) == "canceled":
        # ansible-runner's own SIGINT/SIGTERM handler stopped Ansible (Ctrl-C): say so, 130.
        raise Interrupted(
            f"{kind} interrupted (Ctrl-C or SIGTERM): Ansible was stopped mid-run; run it again "
            f"to finish (artifacts: {run_dir})",
            130,
        )
    return RunResult(
        rc=int(runner.rc if runner.rc is not None else 1),
        status=str(runner.status),
        run_id=run_id,
        private_data_dir=run_dir,
        stats=_stats(runner.stats),
        events=events,
        duration_s=time.monotonic() - started,
    )


def with_controller(limit: str) -> str:
    """``limit`` plus the controller: the validation plays run on localhost, and a limit that
    left it out would skip them silently (Ansible drops plays whose hosts the limit excludes)."""
    patterns = [p.strip() for p in limit.replace(":", ",").split(",") if p.strip()]
    if any(p in ("localhost", "all", "*") for p in patterns):
        return limit
    return f"{limit},localhost"


def run_playbook(
    playbook: Path,
    inventory: Path,
    *,
    limit: str | None = None,
    tags: str | None = None,
    skip_tags: str | None = None,
    extravars: Mapping[str, Any] | None = None,
    check: bool = False,
    verbosity: int = 0,
    on_event: EventHandler | None = None,
) -> RunResult:
    """Run ``playbook`` against ``inventory`` and return its structured result."""
    kwargs: dict[str, Any] = {
        "playbook": str(Path(playbook).resolve()),
        "inventory": str(Path(inventory).resolve()),
        "extravars": dict(extravars or {}),
    }
    if limit:
        kwargs["limit"] = with_controller(limit)
    if tags:
        kwargs["tags"] = tags
    if skip_tags:
        kwargs["skip_tags"] = skip_tags
    if check:
        kwargs["cmdline"] = "--check"
    if verbosity:
        kwargs["verbosity"] = verbosity
    return _run(Path(playbook).stem, on_event, **kwargs)


def run_module(
    inventory: Path,
    pattern: str,
    module: str,
    args: str = "",
    *,
    become: bool = False,
    extravars: Mapping[str, Any] | None = None,
    on_event: EventHandler | None = None,
) -> RunResult:
    """Run one module ad hoc on the hosts matching ``pattern``."""
    kwargs: dict[str, Any] = {
        "inventory": str(Path(inventory).resolve()),
        "host_pattern": pattern,
        "module": module,
        "module_args": args,
        "extravars": dict(extravars or {}),
    }
    if become:
        kwargs["cmdline"] = "--become"
    return _run("adhoc", on_event, **kwargs)
