"""doctor's "node keys" check (issue 26, day 2): every node's own key is admitted by every other
node's authorized_keys (a node added with --limit is not, until a run over every node); the
probe's reading of authorized_keys and .pub texts. Keys here are made-up strings in the formats
OpenSSH writes."""

from __future__ import annotations

from pathlib import Path

from mpictl.doctor.nodes import key_checks
from tests.unit.loader import load

ROOT = Path(__file__).resolve().parents[2]
probe = load("doctor_probe", ROOT / "mpictl" / "scripts" / "doctor_probe.py")

KEY = {n: f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{n}" for n in ("node1", "node2", "node3", "node4")}
CONTROLLER = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIcontroller"


def node(name: str, admits: list[str]) -> dict:  # type: ignore[type-arg]
    return {"ssh_keys": {"own": KEY[name], "authorized": [CONTROLLER, *(KEY[n] for n in admits)]}}


def test_a_cluster_whose_nodes_all_know_each_other_passes() -> None:
    names = ["node1", "node2", "node3"]
    data = {n: node(n, names) for n in names}
    checks = key_checks(data, "mpictl provision")
    assert [(c.check, c.node, c.ok) for c in checks] == [("node keys", "all", True)]


def test_a_node_added_with_limit_is_named_with_the_nodes_that_do_not_know_it() -> None:
    old = ["node1", "node2", "node3"]
    data = {n: node(n, old) for n in old}  # their authorized_keys predate node4
    data["node4"] = node("node4", [*old, "node4"])  # its own file was written whole
    checks = key_checks(data, "mpictl provision -i inv")
    assert [(c.node, c.ok) for c in checks] == [("node4", False)]
    assert "not in the MPI user's authorized_keys on node1, node2, node3" in checks[0].detail
    assert checks[0].fix.startswith("mpictl provision -i inv over every node")


def test_a_node_without_its_own_key_is_named_and_old_probes_are_left_out() -> None:
    data = {"node1": node("node1", ["node1", "node2"]), "node2": {"ssh_keys": {"own": None,
            "authorized": [KEY["node1"]]}}, "node3": {"hostname": "node3"}}  # fmt: skip
    checks = key_checks(data, "mpictl provision")
    assert [(c.node, c.ok) for c in checks] == [("node2", False)]
    assert "no ~/.ssh/id_ed25519.pub" in checks[0].detail
    assert key_checks({"node3": {"hostname": "node3"}}, "p") == []


def test_the_probe_reads_keys_past_options_and_comments(tmp_path: Path) -> None:
    text = (
        f"# a comment line\n{CONTROLLER} mpictl-controller\n"
        f'from="10.0.0.0/8",no-pty {KEY["node2"]} mpi@node2\n\n'
        "ecdsa-sha2-nistp256 AAAAE2VjZHNh mpi@node3\nnot a key line\n"
    )
    assert probe.public_keys(text) == [
        CONTROLLER,
        KEY["node2"],
        "ecdsa-sha2-nistp256 AAAAE2VjZHNh",
    ]
    ssh = tmp_path / ".ssh"
    ssh.mkdir()
    (ssh / "id_ed25519.pub").write_text(f"{KEY['node1']} mpi@node1\n")
    (ssh / "authorized_keys").write_text(text)
    got = probe.ssh_keys(str(tmp_path))
    assert got == {"own": KEY["node1"], "authorized": probe.public_keys(text)}
    assert probe.ssh_keys(str(tmp_path / "nobody")) == {"own": None, "authorized": []}
