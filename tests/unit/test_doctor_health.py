"""doctor's node health (mpictl.doctor.health): the health program's JSON, as the one ad hoc
Ansible run returns it per node, turned into one check per node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mpictl import runner, settings
from mpictl.doctor import health
from tests.unit.jobside import cluster, node, three

PROVISION = "run `mpictl provision -i /inv/hosts.yml`"
MISSING = "[Errno 2] No such file or directory: b'/opt/mpictl/sbin/mpictl-health'"
SETTINGS = settings.ClusterSettings("mpi", "/v", "/h", "/t", "/b", "/opt/mpictl/sbin/mpictl-health")


def result(tasks: list[tuple[str, str, dict[str, Any]]]) -> runner.RunResult:
    events = [
        {
            "event": f"runner_on_{status}",
            "event_data": {"host": host, "task": "command", "res": res},
        }  # fmt: skip
        for host, status, res in tasks
    ]
    return runner.RunResult(rc=0, status="successful", run_id="x", private_data_dir=Path("/x"),
                            stats={}, events=events)  # fmt: skip


def test_each_nodes_answer_is_read_and_a_missing_program_is_said(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    seen: dict[str, Any] = {}

    def fake(inventory: Path, pattern: str, module: str, args: str = "", **kw: Any):  # type: ignore[no-untyped-def]
        seen.update(pattern=pattern, module=module, args=args, kw=kw)
        bad = {"failed": [["disk", "/tmp has 3 MiB free, below 512 MiB"]], "warnings": [],
               "passed": ["load"]}  # fmt: skip
        return result([
            ("node1", "ok", {"rc": 0, "stdout": json.dumps({"failed": [], "warnings": [],
                                                             "passed": ["disk"]})}),
            ("node2", "failed", {"rc": 1, "stdout": json.dumps(bad)}),
            ("node3", "failed", {"rc": 2, "stdout": "", "msg": MISSING}),
        ])  # fmt: skip

    monkeypatch.setattr(runner, "run_module", fake)
    got = health.collect(three(), SETTINGS)
    assert seen["pattern"] == "node1,node2,node3" and seen["module"] == "ansible.builtin.command"
    assert seen["args"] == "/opt/mpictl/sbin/mpictl-health --json"
    assert seen["kw"] == {}  # as root through the inventory's own connection, not as the MPI user
    assert got["node1"]["passed"] == ["disk"]
    assert got["node2"]["failed"] == [["disk", "/tmp has 3 MiB free, below 512 MiB"]]
    assert got["node3"].startswith("exit 2: [Errno 2] No such file or directory")
    checks = health.checks(three(), got, SETTINGS, PROVISION)
    assert [(c.node, c.ok) for c in checks] == [("node1", True), ("node2", False), ("node3", False)]
    assert checks[1].detail == "disk: /tmp has 3 MiB free, below 512 MiB"
    assert "--ack-xid" in checks[1].fix
    assert checks[2].detail.startswith("/opt/mpictl/sbin/mpictl-health did not run: exit 2")
    assert checks[2].fix == PROVISION


def test_warnings_are_shown_on_a_healthy_node_and_beside_failures() -> None:
    c = cluster(node("a"), node("b"))
    got = {
        "a": {"failed": [], "warnings": [["xid", "dmesg failed: Operation not permitted"]]},
        "b": {
            "failed": [["gpu", "7 GPUs visible, 8 expected"]],
            "warnings": [["xid", "dmesg failed"]],
        },  # fmt: skip
    }
    a, b = health.checks(c, got, SETTINGS, PROVISION)
    assert a.ok and a.detail == "healthy (warnings: xid: dmesg failed: Operation not permitted)"
    assert not b.ok and b.detail == "gpu: 7 GPUs visible, 8 expected (warnings: xid: dmesg failed)"


def test_a_node_that_never_answered_fails() -> None:
    (check,) = health.checks(cluster(node("a")), {}, SETTINGS, PROVISION)
    assert not check.ok and check.detail.endswith("did not run: no answer")


@pytest.mark.parametrize(
    ("value", "on"),
    # as the role's `health_enabled | bool` reads it
    [(None, True), ("false", False), (False, False), (True, True), ("off", False), ("yes", True)],
)
def test_health_is_asked_unless_the_head_turns_it_off(value: object, on: bool) -> None:
    head_vars = {} if value is None else {"health_enabled": value}
    assert health.enabled(cluster(node("a", vars=head_vars))) is on
