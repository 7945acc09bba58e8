"""Structured results from ansible-runner events (no stdout parsing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpictl.runner import HostStats, RunResult, _stats, iter_task_results
from mpictl.ui import failure_summary

RECORDINGS = Path(__file__).parents[1] / "data" / "recordings"


def event(kind: str, host: str, task: str, **res: object) -> dict[str, object]:
    return {"event": kind, "event_data": {"host": host, "task": task, "res": res}}


EVENTS = [
    {"event": "playbook_on_task_start", "event_data": {"task": "Install"}},
    event("runner_on_ok", "n1", "Install", changed=True),
    event("runner_on_ok", "n2", "Install", changed=False),
    event("runner_on_skipped", "n3", "Install"),
    event("runner_on_failed", "n3", "Configure", msg="boom", stderr="line1\nlast line"),
]


def result(events: list[dict[str, object]], rc: int = 2) -> RunResult:
    stats = {"n1": HostStats(ok=1, changed=1), "n3": HostStats(failed=1)}
    return RunResult(rc, "failed", "id", Path("/tmp/x"), stats, events)


def test_task_results_classify_changed_ok_skipped_failed() -> None:
    statuses = [(r.host, r.task, r.status) for r in iter_task_results(EVENTS)]
    assert statuses == [
        ("n1", "Install", "changed"),
        ("n2", "Install", "ok"),
        ("n3", "Install", "skipped"),
        ("n3", "Configure", "failed"),
    ]
    res = result(EVENTS)
    assert [r.host for r in res.changed_tasks()] == ["n1"]
    assert [r.status for r in res.task_results("Configure")] == ["failed"]
    assert res.failed_hosts == ["n3"] and not res.ok


def test_recap_stats_from_runner_stats() -> None:
    raw = {"ok": {"a": 3}, "changed": {"a": 1}, "failures": {"b": 1}, "dark": {"c": 1}}
    stats = _stats(raw)
    assert stats["a"] == HostStats(ok=3, changed=1)
    assert stats["b"].failed == 1 and stats["c"].unreachable == 1


def test_failure_summary_is_one_line_with_the_task_message() -> None:
    line = failure_summary(result(EVENTS))
    assert "\n" not in line
    assert line == "provision failed (rc=2) on: n3: n3: Configure: boom | last line"


def test_a_changed_host_key_keeps_what_ssh_says_to_do() -> None:
    # issue 26: a re-imaged node; ssh's banner (recorded from OpenSSH 9.2, Debian 12) used to
    # fill the line before its "remove with" part
    stderr = (RECORDINGS / "ssh" / "changed-host-key.stderr").read_text()
    events = [event("runner_on_unreachable", "node2", "Gathering Facts", unreachable=True,
                    msg=f"Failed to connect to the host via ssh: {stderr}")]  # fmt: skip
    stats = {"node2": HostStats(unreachable=1)}
    line = failure_summary(RunResult(4, "failed", "id", Path("/tmp/x"), stats, events))
    assert "\n" not in line and line.startswith(
        "provision failed (rc=4) on: node2: node2: Gathering Facts: its"
    )
    assert "its SSH host key changed (a re-imaged or replaced machine" in line
    assert "it now shows SHA256:V/S2dQD+7GQZJR4ZZU9k3RnkuBsCMNbXbsZcMWv7iAo;" in line
    assert line.endswith(
        '(/tmp/kh_test:1) with `ssh-keygen -f "/tmp/kh_test" -R "[127.0.0.1]:2211"`, pin the new '
        "one as at first contact (`mpictl init` shows how) and run provision again"
    )


def _printed(events: list[dict]) -> str:
    from io import StringIO

    from rich.console import Console

    from mpictl.ui import ProgressPrinter

    buf = StringIO()
    printer = ProgressPrinter(out=Console(file=buf, width=400, color_system=None))
    for event in events:
        printer(event)
    return buf.getvalue()


def test_progress_shows_failure_messages_with_brackets_verbatim() -> None:
    out = _printed(
        [
            {"event": "playbook_on_task_start", "event_data": {"task": "Copy [x] to /etc"}},
            {
                "event": "runner_on_failed",
                "event_data": {
                    "host": "node2",
                    "res": {"msg": "[Errno 2] No such file: [/etc/foo]"},
                },
            },
        ]
    )
    assert "TASK Copy [x] to /etc" in out
    assert "node2: failed - [Errno 2] No such file: [/etc/foo]" in out


def test_progress_shows_debug_messages_of_roles() -> None:
    warning = "WARNING: mpi_ssh_strict_host_key_checking=no: ssh trusts any host key"
    out = _printed(
        [
            {
                "event": "runner_on_ok",
                "event_data": {
                    "host": "node1",
                    "task_action": "ansible.builtin.debug",
                    "res": {"msg": warning, "changed": False},
                },
            },
            {
                "event": "runner_on_ok",
                "event_data": {
                    "host": "node1",
                    "task_action": "ansible.builtin.command",
                    "res": {"msg": "", "stdout": "secret-ish output", "changed": True},
                },
            },
        ]
    )
    assert f"node1: ok - {warning}" in out
    assert "node1: changed\n" in out
    assert "secret-ish" not in out


def test_a_limit_keeps_the_controller_for_the_validation_plays() -> None:
    from mpictl.runner import with_controller

    assert with_controller("node1") == "node1,localhost"
    assert with_controller("node1:node2") == "node1:node2,localhost"
    assert with_controller("mpi_nodes,localhost") == "mpi_nodes,localhost"
    assert with_controller("all") == "all"


def test_a_run_ansible_runner_cancelled_is_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ansible-runner answers Ctrl-C with its own handler and a "canceled" run: mpictl says so
    # (exit 130), instead of "provision failed (rc=254)".
    import types

    import ansible_runner

    from mpictl import runner
    from mpictl.errors import Interrupted

    def cancelled(**kwargs: object) -> object:
        return types.SimpleNamespace(rc=254, status="canceled", stats={})

    monkeypatch.setattr(ansible_runner, "run", cancelled)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("mpi_nodes:\n  hosts:\n    a:\n")
    with pytest.raises(Interrupted, match=r"^site interrupted \(Ctrl-C or SIGTERM\)") as caught:
        runner.run_playbook(Path("playbooks/site.yml"), inventory)
    assert caught.value.exit_code == 130
