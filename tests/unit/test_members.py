"""The cluster's members across provisions (mpictl.members): what a full run reports as new,
replaced and removed, what partial runs leave alone, and the host keys read from the node probe's
ansible-runner event recorded on the sandbox (tests/data/recordings/ansible)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from mpictl import members
from mpictl.runner import HostStats, RunResult

EVENT = json.loads(
    (
        Path(__file__).parents[1] / "data" / "recordings" / "ansible" / "node_probe_event.json"
    ).read_text()
)


def keys_event(host: str, keys: list[str]) -> dict[str, Any]:
    event = copy.deepcopy(EVENT)
    event["event_data"]["host"] = host
    answer = json.loads(event["event_data"]["res"]["stdout"])
    event["event_data"]["res"]["stdout"] = json.dumps({**answer, "host_keys": keys})
    return event


def run(events: list[dict[str, Any]], rc: int = 0) -> RunResult:
    stats = {e["event_data"]["host"]: HostStats(ok=1) for e in events}
    return RunResult(rc, "successful" if rc == 0 else "failed", "id", Path("/x"), stats, events)


def test_host_keys_come_from_the_node_probes_recorded_event() -> None:
    keys = members.host_keys_of(run([EVENT]))
    assert list(keys) == ["node2"]
    assert [k.split()[0] for k in keys["node2"]] == ["ecdsa-sha2-nistp256", "ssh-ed25519"]
    # an answer that is not the probe's JSON, or a failed probe, gives no keys
    broken = copy.deepcopy(EVENT)
    broken["event_data"]["res"]["stdout"] = "Welcome to node2\n"
    failed = {**copy.deepcopy(EVENT), "event": "runner_on_failed"}
    assert members.host_keys_of(run([broken, failed])) == {}


def test_changes_name_new_replaced_and_removed_nodes_in_order() -> None:
    before = {"node1": ["k1"], "node2": ["k2"], "node3": ["k3"], "node5": ["k5"]}
    found = members.changes(
        before, ["node1", "node2", "node3", "node4"], {"node1": ["k1"], "node2": ["k2b"]}
    )
    assert [str(c) for c in found] == ["node2: replaced", "node4: new", "node5: removed"]
    # node3's probe gave no keys this run: not replaced


def test_a_full_run_reports_against_the_last_one_and_partial_runs_leave_the_record(
    tmp_path: Path,
) -> None:
    inventory = tmp_path / "inv"
    inventory.mkdir()
    three = ["node1", "node2", "node3"]
    first = run([keys_event(n, [f"ssh-ed25519 {n}"]) for n in three])
    assert members.update(inventory, three, first, full_run=True) == []  # the first: a record
    assert members.load(inventory) == {n: [f"ssh-ed25519 {n}"] for n in three}

    grown = ["node1", "node2", "node4"]
    second = run([keys_event("node2", ["ssh-ed25519 reimaged"]), keys_event("node4", ["x y"])])
    record = members.record_path(inventory).read_text()
    # a --limit/--tags/--check run, or a failed one, neither reports nor writes
    assert members.update(inventory, grown, second, full_run=False) == []
    assert members.update(inventory, grown, run(second.events, rc=2), full_run=True) == []
    assert members.record_path(inventory).read_text() == record

    found = members.update(inventory, grown, second, full_run=True)
    assert [str(c) for c in found] == ["node2: replaced", "node4: new", "node3: removed"]
    assert members.load(inventory) == {
        "node1": ["ssh-ed25519 node1"],  # no probe answer this run: the recorded keys stay
        "node2": ["ssh-ed25519 reimaged"],
        "node4": ["x y"],
    }
    assert members.update(inventory, grown, run([]), full_run=True) == []  # nothing changed


def test_an_unreadable_record_is_a_first_run(tmp_path: Path) -> None:
    inventory = tmp_path / "inv"
    path = members.record_path(inventory)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert members.load(inventory) is None
    assert members.update(inventory, ["node1"], run([]), full_run=True) == []
    assert members.load(inventory) == {"node1": []}


def test_the_node_probe_reads_each_public_host_key_without_its_comment(tmp_path: Path) -> None:
    from tests.unit.loader import load as load_module

    root = Path(__file__).resolve().parents[2]
    probe = load_module("mpictl_node_state", root / "playbooks" / "files" / "mpictl_node_state.py")
    (tmp_path / "ssh_host_ed25519_key.pub").write_text("ssh-ed25519 AAAAed root@node2\n")
    (tmp_path / "ssh_host_ecdsa_key.pub").write_text("ecdsa-sha2-nistp256 AAAAec\n")
    (tmp_path / "ssh_host_ed25519_key").write_text("PRIVATE\n")  # never read
    (tmp_path / "ssh_host_dsa_key.pub").write_text("broken\n")
    assert probe.host_keys(str(tmp_path)) == ["ecdsa-sha2-nistp256 AAAAec", "ssh-ed25519 AAAAed"]
    assert probe.host_keys(str(tmp_path / "none")) == []


def test_a_record_that_cannot_be_written_is_one_error_naming_it(tmp_path: Path) -> None:
    import pytest

    from mpictl.errors import MpictlError

    inventory = tmp_path / "inv"
    path = members.record_path(inventory)
    path.parent.parent.mkdir(parents=True, exist_ok=True)
    path.parent.write_text("a file where the directory goes")
    with pytest.raises(MpictlError, match="cannot write the cluster's member record"):
        members.update(inventory, ["node1"], run([]), full_run=True)
