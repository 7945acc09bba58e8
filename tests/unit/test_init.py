"""``mpictl init``: host specs, the starter inventory (it loads as the inventory contract says),
never overwriting a file, ``-o -``, and the check of every host (fake ssh; a real closed port on
loopback)."""

from __future__ import annotations

import glob
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from mpictl import cli
from mpictl import init as starter_inventory
from mpictl.errors import UsageError
from mpictl.init import HostSpec
from mpictl.inventory import load_inventory
from tests.unit import fake_ssh

# --------------------------------------------------------------------------- host specs


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("gpu01", HostSpec("gpu01", "gpu01", None)),
        ("gpu01.example.com:2200", HostSpec("gpu01.example.com", "gpu01.example.com", 2200)),
        ("gpu02=10.0.0.2", HostSpec("gpu02", "10.0.0.2", None)),
        ("n1=127.0.0.1:2221", HostSpec("n1", "127.0.0.1", 2221)),
        ("n2=my_ssh_alias", HostSpec("n2", "my_ssh_alias", None)),
        ("10.0.0.7", HostSpec("10.0.0.7", "10.0.0.7", None)),
        ("[::1]:2222", HostSpec("::1", "::1", 2222)),
        ("::1", HostSpec("::1", "::1", None)),
        ("v6=[2001:db8::1]", HostSpec("v6", "2001:db8::1", None)),
    ],
)
def test_host_specs(text: str, spec: HostSpec) -> None:
    parsed = starter_inventory.parse_host_spec(text)
    assert (parsed.name, parsed.host, parsed.port) == (spec.name, spec.host, spec.port)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a;touch /tmp/x", "host 'a;touch /tmp/x': 'a;touch /tmp/x': not a valid host name"),
        ("n1=h$(id)", "host 'n1=h$(id)': 'h$(id)': not a valid host name"),
        ("-oProxyCommand=x", "not a valid DNS name"),
        ("n1=127.0.0.1:0", "port '0' is not a number in 1..65535"),
        ("n1=127.0.0.1:65536", "port '65536'"),
        ("n1=127.0.0.1:ssh", "port 'ssh'"),
        ("n1=127.0.0.1:", "port ''"),
        (":22", "'': not a valid host name"),
        ("n1=", "'': not a valid host name"),
        ("[gpu01]:22", "brackets hold an IPv6 address"),
        ("[::1", "brackets hold an IPv6 address"),
        ("[127.0.0.1]:22", "brackets hold an IPv6 address"),
        ("fe80::1%eth0", "not a valid host name"),
        ("my_alias", "name 'my_alias': not a valid DNS name, IPv4 or IPv6 address ('_' is not;"),
        ("a b=10.0.0.1", "name 'a b': not a valid DNS name"),
        ("a=b=c", "'b=c': not a valid host name"),
    ],
)
def test_bad_host_specs(text: str, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        starter_inventory.parse_host_spec(text)
    assert message in str(caught.value)


def test_names_are_distinct() -> None:
    with pytest.raises(UsageError, match=r"the inventory name '127.0.0.1' is already used by "):
        starter_inventory.parse_host_specs(["127.0.0.1:2221", "127.0.0.1:2222"])
    with pytest.raises(UsageError, match=r"name each one, e.g. NAME=127.0.0.1:2222"):
        starter_inventory.parse_host_specs(["127.0.0.1:2221", "127.0.0.1:2222"])
    with pytest.raises(UsageError, match=r"host 'A=y': the inventory name 'A' is already used"):
        starter_inventory.parse_host_specs(["a=x", "A=y"])
    with pytest.raises(UsageError, match="no hosts given"):
        starter_inventory.parse_host_specs([])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"head": "c"}, "--head 'c' is not one of the hosts (a, b)"),
        ({"head": "10.0.0.1"}, "--head '10.0.0.1' is not one of the hosts"),
        ({"user": "bad user"}, "--user 'bad user': not a login name"),
        ({"user": "-oProxyCommand=x"}, "not a login name"),
        ({"slots": 0}, "--slots must be a positive integer up to 4096, got 0"),
        ({"ssh_key": "/nonexistent/key"}, "--ssh-key '/nonexistent/key': no such file"),
        ({"ssh_options": ["novalue"]}, "--ssh-option 'novalue': expected KEY=VALUE"),
        ({"ssh_options": ["A=b\nc"]}, "expected KEY=VALUE"),
        ({"ssh_options": ["StrictHostKeyChecking=no"]}, "sets StrictHostKeyChecking itself"),
        ({"ssh_options": ["batchmode=no"]}, "sets batchmode itself"),
    ],
)
def test_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        starter_inventory.plan(["a=10.0.0.1", "b=10.0.0.2"], **kwargs)
    assert message in str(caught.value)


# --------------------------------------------------------------------------- the inventory


def test_render_round_trips_through_yaml_and_load_inventory(tmp_path: Path) -> None:
    key = tmp_path / "id_ed25519"
    key.write_text("key\n")
    starter = starter_inventory.plan(
        ["gpu01", "n2=127.0.0.1:2222", "v6=[2001:db8::5]:2200", "::1"],
        head="n2",
        user="deploy",
        slots=8,
        ssh_key=key,
        ssh_options=["UserKnownHostsFile=/k/known hosts", "IdentitiesOnly=yes"],
    )
    text = starter_inventory.render(starter)
    assert "Inventory contract" in text and "README.md" in text
    for variable in ("mpi_nodes", "mpi_head", "mpi_slots", "mpi_address", "ansible_host"):
        assert f"#   {variable}" in text or f"#   {variable}," in text
    data = yaml.safe_load(text)
    nodes = data["all"]["children"]["mpi_nodes"]
    assert nodes["vars"] == {
        "ansible_user": "deploy",
        "ansible_become": True,
        "ansible_ssh_private_key_file": str(key),
        "ansible_ssh_common_args": "-o 'UserKnownHostsFile=/k/known hosts' -o IdentitiesOnly=yes",
        "mpi_slots": 8,
    }
    assert nodes["hosts"] == {
        "gpu01": None,
        "n2": {"ansible_host": "127.0.0.1", "ansible_port": 2222},
        "v6": {"ansible_host": "2001:db8::5", "ansible_port": 2200},
        "::1": None,
    }
    assert data["all"]["children"]["mpi_head"] == {"hosts": {"n2": None}}

    inv = tmp_path / "hosts.yml"
    inv.write_text(text)
    cluster = load_inventory(inv)
    assert cluster.names == ["gpu01", "n2", "v6", "::1"]
    assert cluster.head.name == "n2"
    assert [(n.slots, n.slots_source) for n in cluster.nodes] == [(8, "mpi_slots")] * 4
    n2 = cluster.node("n2")
    assert (n2.ssh_host, n2.ssh_port, n2.ssh_user, n2.ssh_key) == (
        "127.0.0.1",
        2222,
        "deploy",
        str(key),
    )
    assert n2.ssh_common_args == "-o 'UserKnownHostsFile=/k/known hosts' -o IdentitiesOnly=yes"
    assert [n.address for n in cluster.nodes] == ["gpu01", "n2", "v6", "::1"]
    assert cluster.node("v6").ssh_port == 2200


def test_render_the_minimum(tmp_path: Path) -> None:
    text = starter_inventory.render(starter_inventory.plan(["a", "b"]))
    nodes = yaml.safe_load(text)["all"]["children"]["mpi_nodes"]
    assert nodes == {"vars": {"ansible_become": True}, "hosts": {"a": None, "b": None}}
    assert "mpi_head:" not in text
    inv = tmp_path / "hosts.yml"
    inv.write_text(text)
    cluster = load_inventory(inv)
    assert (cluster.names, cluster.head.name) == (["a", "b"], "a")
    assert cluster.node("a").slots is None and cluster.node("a").ssh_user is None
    # Logging in as root: no become.
    root = yaml.safe_load(starter_inventory.render(starter_inventory.plan(["a"], user="root")))
    assert root["all"]["children"]["mpi_nodes"]["vars"] == {"ansible_user": "root"}


def test_write_never_overwrites_without_force(tmp_path: Path) -> None:
    out = tmp_path / "hosts.yml"
    starter_inventory.write("one\n", out)
    assert out.read_text() == "one\n"
    with pytest.raises(UsageError, match=r"hosts.yml: already exists \(--force overwrites it\)"):
        starter_inventory.write("two\n", out)
    assert out.read_text() == "one\n"
    starter_inventory.write("two\n", out, force=True)
    assert out.read_text() == "two\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hosts.yml"]
    with pytest.raises(UsageError, match="is a directory"):
        starter_inventory.write("x\n", tmp_path, force=True)
    with pytest.raises(UsageError, match="no directory .*missing.* to write it in"):
        starter_inventory.write("x\n", tmp_path / "missing" / "hosts.yml")


# --------------------------------------------------------------------------- the command


def one_error_line(err: str, *fragments: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mpictl: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["a;touch /tmp/x"], ["host 'a;touch /tmp/x'", "not a valid host name"]),
        (["n1=x y"], ["'x y': not a valid host name"]),
        (["127.0.0.1:2221", "127.0.0.1:2222"], ["already used", "NAME="]),
        (["a", "b", "--head", "c"], ["--head 'c' is not one of the hosts (a, b)"]),
        (["a", "--slots", "0"], ["--slots must be a positive integer"]),
        (["a", "--ssh-option", "StrictHostKeyChecking=accept-new"], ["never accepted"]),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    fragments: list[str],
) -> None:
    log = fake_ssh.install(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["init", *args]) == 2
    one_error_line(capsys.readouterr().err, *fragments)
    assert not (tmp_path / "hosts.yml").exists()
    assert not log.exists()  # no ssh ran


def test_an_existing_file_is_refused_before_any_ssh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = fake_ssh.install(tmp_path, monkeypatch)
    out = tmp_path / "mine.yml"
    out.write_text("precious\n")
    assert cli.main(["init", "ready.example", "-o", str(out)]) == 2
    one_error_line(capsys.readouterr().err, f"{out}: already exists", "--force")
    assert out.read_text() == "precious\n" and not log.exists()
    assert cli.main(["init", "ready.example", "-o", str(out), "--force"]) == 0
    assert load_inventory(out).names == ["ready.example"]


def test_all_hosts_ready_exit_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = fake_ssh.install(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    code = cli.main(["init", "n1=ready.example:2222", "ready.example", "--user", "deploy"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "wrote hosts.yml" in out and "every host is ready" in out
    assert "2" in out and "yes" in out  # the GPUs and sudo columns
    assert load_inventory(tmp_path / "hosts.yml").names == ["n1", "ready.example"]
    lines = log.read_text().splitlines()
    assert sorted(lines) == sorted(
        [
            "-T -o BatchMode=yes -o ConnectTimeout=5 -o StrictHostKeyChecking=yes -l deploy "
            "-p 2222 -- ready.example sh -s",
            "-T -o BatchMode=yes -o ConnectTimeout=5 -o StrictHostKeyChecking=yes -l deploy "
            "-- ready.example sh -s",
        ]
    )


def test_failing_hosts_exit_1_and_the_inventory_is_written_anyway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_ssh.install(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "400")
    hosts = ["ready.example", "nosudo.example", "n3=newkey.example:2223", "closed.example"]
    code = cli.main(["init", *hosts, "--user", "deploy", "--head", "ready.example"])
    out, err = capsys.readouterr()
    assert code == 1
    one_error_line(
        err,
        "init: hosts.yml was written, but 3 of 4 hosts not ready: ",
        "nosudo.example (no passwordless sudo), n3 (host key unknown), "
        "closed.example (unreachable)",
    )
    assert "`ssh-keyscan -p 2223 newkey.example | ssh-keygen -lf -`" in out
    assert "`ssh -p 2223 deploy@newkey.example true`" in out
    assert "Connection refused" in out
    cluster = load_inventory(tmp_path / "hosts.yml")
    assert cluster.head.name == "ready.example" and len(cluster.nodes) == 4


def test_output_dash_prints_the_inventory_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_ssh.install(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["init", "a", "b", "--slots", "2", "-o", "-", "--no-check"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert yaml.safe_load(out)["all"]["children"]["mpi_nodes"]["vars"]["mpi_slots"] == 2
    assert list(tmp_path.glob("*.yml")) == []
    # With the check, stdout is still the inventory alone: the table goes to stderr.
    assert cli.main(["init", "ready.example", "closed.example", "-o", "-"]) == 1
    out, err = capsys.readouterr()
    assert set(yaml.safe_load(out)["all"]["children"]["mpi_nodes"]["hosts"]) == {
        "ready.example",
        "closed.example",
    }
    assert "reachable" in err and "the inventory was printed, but 1 of 2 hosts" in err


def test_help_documents_the_host_syntax() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mpictl", "init", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    for fragment in ("[NAME=]HOST[:PORT]", "[::1]:2222", "--ssh-option", "--force", "never"):
        assert fragment in text


def test_a_closed_port_on_loopback_is_unreachable_within_seconds(tmp_path: Path) -> None:
    """The real ssh against a port nothing listens on (loopback only)."""
    if subprocess.run(["sh", "-c", "command -v ssh"], capture_output=True).returncode != 0:
        pytest.skip("no ssh client")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "hosts.yml"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "mpictl", "init", f"n1=127.0.0.1:{port}", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "300"},
    )
    elapsed = time.monotonic() - started
    assert elapsed < 10, elapsed
    assert proc.returncode == 1, proc.stderr
    one_error_line(proc.stderr, "1 of 1 hosts not ready: n1 (unreachable)")
    assert "no: unreachable" in proc.stdout and "Connection refused" in proc.stdout
    assert load_inventory(out).node("n1").ssh_port == port


# --------------------------------------------------------------------------- this machine


def test_localhost_is_this_machine_through_the_local_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One GPU server, provisioned from itself: `mpictl init localhost`. Its name is the host
    name (Ansible keeps `localhost` for the controller), Ansible connects locally, and jobs log
    in over ssh to 127.0.0.1, the address of a one-node cluster."""
    monkeypatch.setattr(socket, "gethostname", lambda: "gpu01")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    (spec,) = starter_inventory.parse_host_specs(["localhost"])
    assert (spec.name, spec.host, spec.port, spec.local) == ("gpu01", "localhost", None, True)
    text = starter_inventory.render(starter_inventory.plan(["localhost"]))
    nodes = yaml.safe_load(text)["all"]["children"]["mpi_nodes"]
    assert nodes["hosts"] == {
        "gpu01": {
            "ansible_connection": "local",
            "ansible_host": "127.0.0.1",
            "mpi_address": "127.0.0.1",
        }
    }
    # Ansible becomes root with sudo, unless mpictl runs as root on the one machine it manages
    # (a bare GPU server may have no sudo at all).
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert (
        nodes["vars"]
        == {"ansible_become": True}
        == yaml.safe_load(starter_inventory.render(starter_inventory.plan(["localhost"])))["all"][
            "children"
        ]["mpi_nodes"]["vars"]
    )
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    as_root = starter_inventory.render(starter_inventory.plan(["localhost"]))
    assert "vars" not in yaml.safe_load(as_root)["all"]["children"]["mpi_nodes"]
    both = starter_inventory.render(starter_inventory.plan(["head=localhost", "gpu02"]))
    assert yaml.safe_load(both)["all"]["children"]["mpi_nodes"]["vars"] == {"ansible_become": True}
    inv = tmp_path / "hosts.yml"
    inv.write_text(text)
    (node,) = load_inventory(inv).nodes
    assert (node.name, node.local, node.ssh_host, node.ssh_port, node.address) == (
        "gpu01",
        True,
        "127.0.0.1",
        22,
        "127.0.0.1",
    )


def test_this_machine_in_a_larger_cluster_keeps_its_name_as_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "gpu01")
    starter = starter_inventory.plan(["head=localhost", "gpu02", "n3=127.0.0.1:2223"])
    assert [t.local for t in starter.targets] == [True, False, False]  # a port means ssh
    hosts = yaml.safe_load(starter_inventory.render(starter))["all"]["children"]["mpi_nodes"]
    assert hosts["hosts"] == {
        "head": {"ansible_connection": "local", "ansible_host": "127.0.0.1"},
        "gpu02": None,
        "n3": {"ansible_host": "127.0.0.1", "ansible_port": 2223},
    }
    inv = tmp_path / "hosts.yml"
    inv.write_text(starter_inventory.render(starter))
    cluster = load_inventory(inv)
    assert [(n.name, n.address, n.local) for n in cluster.nodes] == [
        ("head", "head", True),
        ("gpu02", "gpu02", False),
        ("n3", "n3", False),
    ]
    assert [t.display for t in starter.targets][0] == "head (this machine)"


@pytest.mark.parametrize(
    ("text", "hostname", "message"),
    [
        ("localhost=localhost", "gpu01", "the inventory name cannot be localhost"),
        ("localhost:2222", "gpu01", "e.g. gpu01=localhost:2222"),
        ("localhost", "gpu_01", "this machine's host name 'gpu_01' is not a valid DNS name"),
        ("localhost", "gpu_01", "e.g. gpu01=localhost"),
    ],
)
def test_localhost_needs_a_name_other_nodes_resolve(
    monkeypatch: pytest.MonkeyPatch, text: str, hostname: str, message: str
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: hostname)
    with pytest.raises(UsageError) as caught:
        starter_inventory.parse_host_spec(text)
    assert message in str(caught.value)


def test_init_localhost_probes_this_machine_without_ssh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The probe runs with `sh -s` here (the fake ssh is never called); this machine's host keys
    decide whether it is ready (jobs log in to it over ssh)."""
    log = fake_ssh.install(tmp_path, monkeypatch)
    monkeypatch.setattr(socket, "gethostname", lambda: "gpu01")
    monkeypatch.setenv("PATH", f"{tmp_path / 'fake-node-bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SUDO", "ok")
    monkeypatch.chdir(tmp_path)
    code = cli.main(["init", "localhost"])
    out, err = capsys.readouterr()
    assert not log.exists()
    assert "gpu01 (this machine)" in out
    assert load_inventory(tmp_path / "hosts.yml").nodes[0].local
    if glob.glob("/etc/ssh/ssh_host_*_key.pub"):
        assert code == 0, err
        assert "every host is ready" in out
    else:
        assert code == 1
        assert "gpu01 (no SSH server)" in err, err


def test_this_machine_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "gpu01")
    with pytest.raises(UsageError) as caught:
        starter_inventory.parse_host_specs(["localhost", "head=localhost"])
    assert str(caught.value) == (
        "hosts 'localhost', 'head=localhost': each is this machine (localhost): name it once"
    )
