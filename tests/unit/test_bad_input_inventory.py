"""Bad inventories and bad ``provision`` input, as a careless or hostile user gives them, with no
cluster at all (the harness: :mod:`tests.unit.hostile`): every case is refused through the CLI
with exit 2 and one line naming the host and the variable, before any process, node, lock or
ansible-runner run (``<state>/runs`` stays empty), and nothing is written outside the test's
folders.

The inventory contract is checked on what Ansible will use: the inventory with the ``-e``
variables merged over it. ``hostfile``, ``provision`` and ``run`` all load it the same way.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mpictl import lock
from mpictl.inventory import load_inventory
from tests.unit.hostile import Hostile

COMMANDS = {
    "hostfile": ("hostfile", "-i", "{inv}"),
    "provision": ("provision", "-i", "{inv}"),
    "run": ("run", "-i", "{inv}", "--", "hostname"),
}


def argv(command: str, inventory: Path) -> list[str]:
    return [part.format(inv=inventory) for part in COMMANDS[command]]


def write(hostile: Hostile, text: str, name: str = "custom.yml") -> Path:
    path = hostile.root / name
    path.write_text(text)
    return path


def with_node1(hostile: Hostile, entries: str) -> Path:
    """The harness's inventory with ``entries`` (YAML flow entries) in node1's variables, each
    replacing the harness's own value of that variable."""
    node1 = {"ansible_host": "127.0.0.1", "ansible_port": "1", "mpi_slots": "1"}
    kept = [f"{k}: {v}" for k, v in node1.items() if not re.search(rf"\b{k}:", entries)]
    return write(
        hostile,
        "mpi_nodes:\n  hosts:\n"
        f"    node1: {{{', '.join([*kept, entries])}}}\n"
        "    node2: {ansible_host: 127.0.0.2, ansible_port: 1, mpi_slots: 1}\n",
        "bad.yml",
    )


# --------------------------------------------------------------------------- security defect 3
# `-e` bypassed the name rules: `-e '{"ansible_host": "-oProxyCommand=…"}'` reached ssh's argv
# as an option (Ansible's ssh puts the host before the command, as one argument). The contract
# is now checked on the inventory with the -e variables merged, before ansible-runner starts.


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ('{"ansible_host": "-oProxyCommand=touch /tmp/pwned"}', "ansible_host (-e)"),
        ("ansible_host=-oProxyCommand=x", "ansible_host (-e) '-oProxyCommand=x'"),
        # Ansible's ssh reads ansible_ssh_host after ansible_host: the alias is checked too.
        ("ansible_ssh_host=-oProxyCommand=x", "ansible_ssh_host (-e) '-oProxyCommand=x'"),
        ('{"ansible_host": ["a", "b"]}', "ansible_host (-e) '['a', 'b']'"),
        ('{"ansible_host": "n1\\nProxyCommand x"}', "ansible_host (-e) 'n1\\nProxyCommand x'"),
        ("ansible_user=-oProxyCommand=x", "ansible_user (-e) '-oProxyCommand=x'"),
        ('{"ansible_ssh_user": "a b"}', "host 'node1': ansible_ssh_user (-e) 'a b'"),
        ("ansible_port=abc", "ansible_port (-e) 'abc': not a port"),
        ("ansible_ssh_port=0", "ansible_ssh_port (-e) '0': not a port"),
        ("ansible_become_user=-x", "ansible_become_user (-e) '-x'"),
        ("ansible_ssh_private_key_file=-oProxyCommand=x", "ansible_ssh_private_key_file (-e)"),
        ("ansible_python_interpreter=-c", "ansible_python_interpreter (-e) '-c'"),
        ('{"ansible_shell_executable": "/bin/sh\\n-c"}', "ansible_shell_executable (-e)"),
        ('{"mpi_address": "x y"}', "mpi_address (-e) 'x y'"),
        ("mpi_slots=²", "mpi_slots (-e) '²'"),
        ("mpi_network_interface=eth0;reboot", "mpi_network_interface (-e): 'eth0;reboot'"),
        ("mpi_user=-oProxyCommand=x", "mpi_user (-e): '-oProxyCommand=x'"),
        # One address for every node: two hosts reached at the same ansible_host:port.
        ("ansible_host=127.0.0.9", "are both reached at 127.0.0.9:1"),
    ],
)
def test_extra_vars_are_checked_with_the_inventory(hostile: Hostile, extra: str, says: str) -> None:
    hostile.refused("provision", "-i", str(hostile.inventory), "-e", extra, says=(says,))


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ('{"a b": 1}', "-e: 'a b' is not a variable name"),
        ('{"1x": 1}', "-e: '1x' is not a variable name"),
        ('{"ä": 1}', "-e: 'ä' is not a variable name"),
        ('{"x\\n": 1}', "-e: 'x\\n' is not a variable name"),
        ("a-b=1", "-e expects key=value with a variable name as key, got 'a-b=1'"),
        # ssh's own options and programs, and the connection: the inventory's, never -e's.
        ('{"ansible_ssh_common_args": "-oProxyCommand=x"}', "ansible_ssh_common_args cannot be"),
        ("ansible_ssh_extra_args=-oProxyCommand=x", "-e: ansible_ssh_extra_args cannot be set"),
        ("ansible_ssh_args=-F/tmp/x", "-e: ansible_ssh_args cannot be set"),
        ("ansible_ssh_executable=/tmp/evil", "-e: ansible_ssh_executable cannot be set"),
        ("ansible_ssh_pkcs11_provider=/tmp/x.so", "-e: ansible_ssh_pkcs11_provider cannot be"),
        ("ansible_connection=local", "-e: ansible_connection cannot be set"),
        ('{"x": 1', "not valid YAML"),
        # YAML types JSON cannot carry to ansible-runner (it failed after making a run dir)
        ('{"d": 2020-01-01}', "-e: d: '2020-01-01' (date) cannot be passed to Ansible"),
        ('{"b": [1, !!binary aGk=]}', "-e: b: 'b'hi'' (bytes) cannot be passed"),
        ('{"m": {1: x}}', "-e: m: '1' (int) cannot be passed to Ansible"),
        ("@/nonexistent/vars.yml", "-e @/nonexistent/vars.yml: cannot read"),
    ],
)
def test_extra_vars_names_and_connection_internals(hostile: Hostile, extra: str, says: str) -> None:
    hostile.refused("provision", "-i", str(hostile.inventory), "-e", extra, says=(says,))


def test_an_extra_vars_file_that_is_not_text(hostile: Hostile) -> None:
    bad = hostile.root / "vars.yml"
    bad.write_bytes(b"x: \xff\xfe\n")
    hostile.refused(
        "provision", "-i", str(hostile.inventory), "-e", f"@{bad}", says=("not UTF-8 text",)
    )


@pytest.mark.parametrize(
    ("limit", "says"),
    [
        ("", "an empty --limit would mean every node"),
        (" ", "--limit ' '"),
        ("node1 node2", "--limit 'node1 node2'"),
        ("node1\n", "--limit 'node1\\n'"),
        ("node1,\tnode2", "--limit 'node1,\\tnode2'"),
        ("-x", "a pattern does not start with '-'"),
    ],
)
def test_a_limit_that_is_empty_or_holds_whitespace(hostile: Hostile, limit: str, says: str) -> None:
    hostile.refused("provision", "-i", str(hostile.inventory), f"--limit={limit}", says=(says,))


# --------------------------------------------------------------------------- the inventory itself
# Each case through hostfile, provision and run: refused while loading, naming host and variable.

NODE1_VARS = [  # node1's extra variables (YAML flow entries) -> text of the one error line
    ("ansible_host: '-oProxyCommand=x'", "host 'node1': ansible_host '-oProxyCommand=x'"),
    ("ansible_host: [a, b]", "host 'node1': ansible_host '['a', 'b']'"),
    ('ansible_host: "a\\nb"', "host 'node1': ansible_host 'a\\nb'"),
    ("ansible_ssh_host: '-oProxyCommand=x'", "host 'node1': ansible_ssh_host '-oProxyCommand=x'"),
    # two hosts, one machine: node2 is 127.0.0.2:1
    ("ansible_host: 127.0.0.2", "hosts 'node1' and 'node2' are both reached at 127.0.0.2:1"),
    ("ansible_host: 127.0.0.2, ansible_port: '01'", "are both reached at 127.0.0.2:1"),
    ("ansible_port: abc", "host 'node1': ansible_port 'abc': not a port (an integer 1..65535)"),
    ("ansible_port: 0", "ansible_port '0': not a port"),
    ("ansible_port: 70000", "ansible_port '70000': not a port"),
    ("ansible_port: '²'", "ansible_port '²': not a port"),
    ("ansible_port: '٢٢'", "ansible_port '٢٢': not a port"),
    ("ansible_port: true", "ansible_port 'True': not a port"),
    ("ansible_port: 22.5", "ansible_port '22.5': not a port"),
    ("ansible_port: '22 '", "ansible_port '22 ': not a port"),
    ("ansible_port: [22]", "ansible_port '[22]': not a port"),
    ("ansible_ssh_port: x", "ansible_ssh_port 'x': not a port"),
    ("mpi_slots: '²'", "host 'node1': mpi_slots '²': not a slot count (an integer 1..4096)"),
    ("mpi_slots: 99999999999", "mpi_slots '99999999999': not a slot count"),
    ("mpi_slots: 4097", "mpi_slots '4097': not a slot count"),
    ("mpi_slots: 1.5", "mpi_slots '1.5': not a slot count"),
    ("mpi_slots: '1 '", "mpi_slots '1 ': not a slot count"),
    ("mpi_slots: true", "mpi_slots 'True': not a slot count"),
    ("mpi_slots: [1]", "mpi_slots '[1]': not a slot count"),
    ("mpi_slots: 0", "mpi_slots '0': not a slot count"),
    ("mpi_network_interface: 'eth0;reboot'", "mpi_network_interface: 'eth0;reboot' is not a"),
    ("mpi_network_interface: 'a b'", "mpi_network_interface: 'a b' is not a network interface"),
    ('mpi_network_interface: "eth0\\n"', "mpi_network_interface: 'eth0\\n' is not a network"),
    ("mpi_network_interface: [eth0]", "mpi_network_interface: '['eth0']' is not a network"),
    ("mpi_network_interface: abcdefghijklmnop", "'abcdefghijklmnop' is not a network interface"),
    ("mpi_user: 'x y'", "host 'node1': mpi_user: 'x y' is not a user name"),
    ("mpi_user: '-oProxyCommand=x'", "mpi_user: '-oProxyCommand=x' is not a user name"),
    ('mpi_user: "mpi\\n"', "mpi_user: 'mpi\\n' is not a user name"),
    ("mpi_user: Root", "mpi_user: 'Root' is not a user name"),
    ("ansible_user: 'a b'", "host 'node1': ansible_user 'a b': not a login name"),
    ('ansible_user: "deploy\\n"', "ansible_user 'deploy\\n': not a login name"),
    ("ansible_user: '-oProxyCommand=x'", "ansible_user '-oProxyCommand=x': not a login name"),
    ("ansible_user: [deploy]", "ansible_user '['deploy']': not a login name"),
    ("ansible_ssh_private_key_file: '-oProxyCommand=x'", "must not start with '-'"),
    ("ansible_ssh_common_args: '-o \"unclosed'", "ansible_ssh_common_args '-o \"unclosed'"),
    ("ansible_ssh_common_args: [-o, x]", "ansible_ssh_common_args '['-o', 'x']': must be a"),
    ("mpi_address: '-oProxyCommand=x'", "mpi_address '-oProxyCommand=x': not a valid DNS name"),
    ("mpi_transport: verbs", "host 'node1': mpi_transport: 'verbs' must be one of: auto, ucx, tcp"),
    ("mpi_transport: [ucx]", "mpi_transport: '['ucx']' must be one of: auto, ucx, tcp"),
    ('mpi_address: "n1\\x1b]0;pwned\\x07"', "mpi_address 'n1\\x1b]0;pwned\\x07'"),
]


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(("host_vars", "says"), NODE1_VARS, ids=[v for v, _ in NODE1_VARS])
def test_a_bad_variable_is_refused_naming_host_and_variable(
    hostile: Hostile, command: str, host_vars: str, says: str
) -> None:
    inventory = with_node1(hostile, host_vars)
    got = hostile.refused(*argv(command, inventory), says=(says,))
    assert got.err_lines[0].startswith(f"mpictl: error: {inventory}: host")


HOST_NAMES = [  # node1's whole line of the inventory -> the error line's text
    ('"node\\n1": {ansible_host: 10.0.0.1}', "host 'node\\n1': not a valid host name"),
    ('"-oProxyCommand=x": {}', "host '-oProxyCommand=x': not a valid host name"),
    ('"n1;reboot": {}', "host 'n1;reboot': not a valid host name"),
    ('"n\\x1b]0;pwned\\x07": {}', "host 'n\\x1b]0;pwned\\x07': not a valid host name"),
]


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(("line", "says"), HOST_NAMES, ids=range(len(HOST_NAMES)))
def test_a_bad_host_name_is_refused(hostile: Hostile, command: str, line: str, says: str) -> None:
    text = f"mpi_nodes:\n  hosts:\n    {line}\n    n2: {{ansible_port: 1}}\n"
    text += "  vars: {mpi_slots: 1}\n"
    hostile.refused(*argv(command, write(hostile, text)), says=(says,))


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_10000_character_host_name_is_refused_and_cut(hostile: Hostile, command: str) -> None:
    # YAML keys stop at 1024 characters; an INI inventory takes any length.
    text = f"[mpi_nodes]\n{'n' * 10000} ansible_port=1 mpi_slots=1\n"
    got = hostile.refused(*argv(command, write(hostile, text, "long.ini")))
    assert "not a valid host name" in got.err_lines[0]
    assert len(got.err_lines[0]) < 600, got.err_lines[0]


def test_the_extra_vars_win_over_the_inventory(hostile: Hostile) -> None:
    # A bad inventory value that -e replaces is what Ansible would never use: not refused there.
    inventory = with_node1(hostile, "mpi_slots: 0")
    hostile.refused("provision", "-i", str(inventory), says=("mpi_slots '0'",))
    cluster = load_inventory(inventory, extravars={"mpi_slots": "3"})
    assert [n.slots for n in cluster.nodes] == [3, 3]


# --------------------------------------------------------------------------- hostfiles and IPv6
# MPICH's hydra (strtok at ':') and Horovod's -H (split(':') into two) parse host:N only: an IPv6
# address cannot be written there, bracketed or not.


@pytest.mark.parametrize("fmt", ["mpich", "horovod"])
def test_an_ipv6_address_is_refused_in_the_host_colon_n_formats(hostile: Hostile, fmt: str) -> None:
    inventory = hostile.write_inventory(extra_host_vars="mpi_address: '2001:db8::1'", name="v6.yml")
    hostile.refused(
        "hostfile",
        "-i",
        str(inventory),
        "-f",
        fmt,
        says=("'node1': its address (mpi_address) '2001:db8::1' is an IPv6 address", fmt),
    )
    got = hostile.call("hostfile", "-i", str(inventory), "-f", "openmpi")
    assert (got.code, got.out) == (0, "2001:db8::1 slots=1\nnode2 slots=1\n"), got.describe()


def test_an_unknown_hostfile_format_is_shown_escaped(hostile: Hostile) -> None:
    hostile.refused(
        "hostfile", "-i", str(hostile.inventory), "-f", "x\x1b]0;t", says=("'x\\x1b]0;t'",)
    )


# --------------------------------------------------------------------------- the sandbox
# sandbox_name and the other literals reach podman's argv: checked whole before podman runs.

SANDBOX_HOSTS = """\
mpi_nodes:
  hosts:
    a: {{ansible_port: {port}, sandbox_ip: {ip}}}
    b: {{ansible_port: 2302, sandbox_ip: 10.90.0.12}}
  vars:
    sandbox_name: {name}
    sandbox_subnet: {subnet}
"""
SANDBOX_OK = {"port": "2301", "ip": "10.90.0.11", "name": "unit-sbx", "subnet": "10.90.0.0/24"}


@pytest.mark.parametrize("command", ["up", "down", "status"])
@pytest.mark.parametrize(
    ("edit", "says"),
    [
        ({"name": '"unit-sbx\\n"'}, "sandbox_name must be lower-case"),
        ({"name": '"unit-sbx\\n--network=host"'}, "(got 'unit-sbx\\n--network=host')"),
        ({"name": "-x"}, "sandbox_name must be lower-case"),
        ({"name": "[a]"}, "sandbox_name must be lower-case"),
        ({"name": "x" * 42}, "sandbox_name must be lower-case"),
        ({"subnet": '"10.90.0.0/24\\n"'}, "sandbox_subnet must be a network"),
        ({"port": "'²'"}, "host a: ansible_port must be a port 1024..65535 (got '²')"),
        ({"port": "2301.5"}, "ansible_port must be a port 1024..65535 (got '2301.5')"),
        ({"port": "true"}, "ansible_port must be a port"),
        ({"port": "' 2301'"}, "ansible_port must be a port"),
        ({"port": "80"}, "ansible_port must be a port"),
        ({"ip": '"10.90.0.11\\n"'}, "sandbox_ip must be an IPv4 address"),
    ],
)
def test_sandbox_literals_are_checked_before_podman(
    hostile: Hostile, command: str, edit: dict[str, str], says: str
) -> None:
    inventory = write(hostile, SANDBOX_HOSTS.format(**{**SANDBOX_OK, **edit}), "sandbox.yml")
    hostile.refused("sandbox", command, "-i", str(inventory), says=(says,))


# --------------------------------------------------------------------------- locks and state dir


def test_provision_finds_its_nodes_locked_by_another_inventory(hostile: Hostile) -> None:
    # The same nodes through another file (here a copy): the lock is the nodes', not the path's.
    copy = write(hostile, hostile.inventory.read_text(), "copy.yml")
    with lock.hold(load_inventory(copy).endpoints, "provision", source=copy):
        got = hostile.call("provision", "-i", str(hostile.inventory))
    assert got.code == 1, got.describe()
    assert got.err_lines == [
        "mpictl: error: another mpictl provision is running on node 127.0.0.1:1 (pid "
        + got.err_lines[0].split("(pid ", 1)[1]
    ]
    assert f"inventory {copy}); wait for it to finish" in got.err_lines[0]
    assert (got.runs, got.shim_calls, got.outside) == ([], [], [])


def test_a_state_dir_under_a_regular_file_is_one_line(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = hostile.root / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("MPICTL_STATE_DIR", str(blocker / "state"))
    hostile.refused(
        "provision",
        "-i",
        str(hostile.inventory),
        says=(f"locks: the state dir '{blocker}/state'", "is a file, not a directory"),
    )


# --------------------------------------------------------------------------- review follow-ups
@pytest.mark.parametrize(
    "extra",
    [
        # pinned host keys switched off: Ansible's -o StrictHostKeyChecking=no comes first
        "ansible_host_key_checking=false",
        "ansible_ssh_host_key_checking=false",
        "ansible_paramiko_host_key_checking=false",
        '{"ansible_paramiko_proxy_command": "touch /tmp/x"}',
        "ansible_ssh_transfer_method=piped",
        "ansible_pipelining=true",
    ],
)
def test_extra_vars_set_only_the_connection_basics(hostile: Hostile, extra: str) -> None:
    name = extra.split("=", 1)[0].strip('{"').split('"')[0]
    hostile.refused(
        "provision", "-i", str(hostile.inventory), "-e", extra, says=(f"-e: {name} cannot be set",)
    )


def test_extra_vars_may_set_where_and_as_whom_the_connection_goes() -> None:
    from mpictl.inventory import check_extravars

    allowed = {"ansible_user": "deploy", "ansible_port": 2222, "ansible_become": True, "x": 1}
    assert check_extravars(allowed) == allowed


def test_extra_vars_cannot_reach_ssh_through_an_inventory_template(hostile: Hostile) -> None:
    inv = write(
        hostile,
        "all:\n  vars:\n    jump: bastion\n"
        "    ansible_ssh_common_args: '-o ProxyJump={{ jump }}'\n"
        "mpi_nodes:\n  hosts:\n"
        "    node1: {ansible_host: 127.0.0.1, ansible_port: 1, mpi_slots: 1}\n"
        "    node2: {ansible_host: 127.0.0.2, ansible_port: 1, mpi_slots: 1}\n",
    )
    evil = '{"jump": "bastion -oProxyCommand=touch /tmp/x"}'
    hostile.refused(
        "provision", "-i", str(inv), "-e", evil,
        says=("ansible_ssh_common_args", "-e changes it through the inventory's template"),
    )  # fmt: skip
    # the template itself, and -e that leaves it alone, are fine
    assert load_inventory(inv).head.ssh_common_args == "-o ProxyJump=bastion"
    assert load_inventory(inv, extravars={"other": "x"}).head.ssh_common_args == (
        "-o ProxyJump=bastion"
    )


def test_inventory_templates_see_groups_and_their_host(hostile: Hostile) -> None:
    inv = write(
        hostile,
        "mpi_nodes:\n  vars:\n"
        "    ansible_host: 127.0.0.1\n"
        "    ansible_port: \"{{ 2200 + groups['mpi_nodes'].index(inventory_hostname) }}\"\n"
        "    mpi_slots: 1\n"
        "  hosts:\n    node1:\n    node2.example:\n"
        '      mpi_address: "{{ inventory_hostname_short }}"\n',
    )
    cluster = load_inventory(inv)
    assert [n.ssh_port for n in cluster.nodes] == [2200, 2201]
    assert cluster.nodes[1].address == "node2"
