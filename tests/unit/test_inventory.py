from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpictl.errors import InventoryError
from mpictl.hostnames import host_problem
from mpictl.inventory import load_inventory, parse_slots, resolve_slots


def test_yaml_inventory_nodes_in_order_with_head_group(data: Path) -> None:
    cluster = load_inventory(data / "cluster.yml")
    assert cluster.names == ["gpu1", "gpu2", "cpu1"]
    assert cluster.head.name == "gpu2"
    gpu2 = cluster.node("gpu2")
    assert gpu2.address == "gpu2.cluster"
    assert gpu2.ssh_host == "10.0.0.2"
    assert (gpu2.slots, gpu2.slots_source) == (8, "mpi_slots")
    # No mpi_slots and no cached facts: unknown, never guessed.
    assert cluster.node("cpu1").slots is None


def test_ini_inventory_head_defaults_to_first_node(data: Path) -> None:
    cluster = load_inventory(data / "cluster.ini")
    assert cluster.names == ["n1", "n2"]
    assert cluster.head.name == "n1"
    assert [n.slots for n in cluster.nodes] == [4, 2]
    assert cluster.total_slots == 6


def test_directory_inventory_with_group_and_host_vars(data: Path) -> None:
    cluster = load_inventory(data / "dirinv")
    assert {n.name: n.slots for n in cluster.nodes} == {"a": 3, "b": 5}


def test_dynamic_inventory_script(data: Path) -> None:
    cluster = load_inventory(data / "dynamic.py")
    assert {n.name: n.slots for n in cluster.nodes} == {"d1": 2, "d2": 6}


def test_slots_default_from_fact_cache_gpus_then_vcpus(data: Path, isolated_state: Path) -> None:
    facts = isolated_state / "facts"
    facts.mkdir(parents=True)
    (facts / "cpu1").write_text(json.dumps({"ansible_processor_vcpus": 16, "mpi_gpu_count": 0}))
    cluster = load_inventory(data / "cluster.yml")
    assert (cluster.node("cpu1").slots, cluster.node("cpu1").slots_source) == (16, "vcpus")
    (facts / "cpu1").write_text(json.dumps({"ansible_processor_vcpus": 16, "mpi_gpu_count": 4}))
    cluster = load_inventory(data / "cluster.yml")
    assert (cluster.node("cpu1").slots, cluster.node("cpu1").slots_source) == (4, "gpus")


def test_fact_cache_of_ansible_core_2_19(data: Path, isolated_state: Path) -> None:
    # 2.19 names the file s<N>_<host> and stores the facts as a JSON payload with data tags.
    facts = isolated_state / "facts"
    facts.mkdir(parents=True)
    tagged = {"__ansible_type": "_AnsibleTaggedInt", "value": 3, "tags": []}
    payload = json.dumps({"ansible_processor_vcpus": 12, "mpi_gpu_count": tagged})
    (facts / "s1_cpu1").write_text(json.dumps({"__payload__": payload}))
    node = load_inventory(data / "cluster.yml").node("cpu1")
    assert (node.slots, node.slots_source, node.gpus, node.vcpus) == (3, "gpus", 3, 12)


def test_require_slots_names_the_node_without_slots(data: Path) -> None:
    cluster = load_inventory(data / "cluster.yml")
    with pytest.raises(InventoryError, match=r"^cpu1: mpi_slots is not set"):
        cluster.require_slots()


@pytest.mark.parametrize(
    "value", [0, -1, "four", 2.5, True, None, "", "-3", 4097, "99999999999", "²", "1 ", " 1", "+1"]
)
def test_bad_slot_values_are_rejected(value: object) -> None:
    with pytest.raises(InventoryError, match=r"^n1: mpi_slots must be a positive integer"):
        parse_slots("n1", value)


@pytest.mark.parametrize(("value", "expected"), [(1, 1), (64, 64), ("8", 8), (4096, 4096)])
def test_good_slot_values(value: object, expected: int) -> None:
    assert parse_slots("n1", value) == expected


def test_resolve_slots_prefers_explicit_value() -> None:
    assert resolve_slots("h", {"mpi_slots": 2, "mpi_gpu_count": 8}) == (2, "mpi_slots")
    assert resolve_slots("h", {}) == (None, None)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_missing_inventory_file(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="nope.yml: inventory not found"):
        load_inventory(tmp_path / "nope.yml")


def test_inventory_without_mpi_nodes(tmp_path: Path) -> None:
    inv = _write(tmp_path, "inv.yml", "all:\n  hosts:\n    a:\n")
    with pytest.raises(InventoryError, match=r"inv.yml: group 'mpi_nodes' is missing or empty"):
        load_inventory(inv)


def test_duplicate_host_key_in_yaml(tmp_path: Path) -> None:
    inv = _write(
        tmp_path, "dup.yml", "mpi_nodes:\n  hosts:\n    a: {mpi_slots: 1}\n    a: {mpi_slots: 2}\n"
    )
    with pytest.raises(InventoryError, match=r"dup.yml: cannot parse inventory: .*"):
        load_inventory(inv)


def test_duplicate_host_by_address(tmp_path: Path) -> None:
    inv = _write(tmp_path, "dup.yml", "mpi_nodes:\n  hosts:\n    a:\n    b: {mpi_address: A}\n")
    with pytest.raises(InventoryError, match=r"duplicate host: 'b' and 'a'"):
        load_inventory(inv)


@pytest.mark.parametrize("value", ["0", "-1", "four", "4097", "'1 '", "'²'", "1.5", "true"])
def test_bad_slots_in_inventory_names_host_and_variable(tmp_path: Path, value: str) -> None:
    inv = _write(tmp_path, "inv.yml", f"mpi_nodes:\n  hosts:\n    n7: {{mpi_slots: {value}}}\n")
    with pytest.raises(InventoryError) as caught:
        load_inventory(inv)
    assert str(caught.value).startswith(f"{inv}: host 'n7': mpi_slots ")
    assert str(caught.value).endswith(": not a slot count (an integer 1..4096)")


def test_head_outside_mpi_nodes(tmp_path: Path) -> None:
    inv = _write(tmp_path, "inv.yml", "mpi_nodes:\n  hosts:\n    a:\nmpi_head:\n  hosts:\n    z:\n")
    with pytest.raises(InventoryError, match="head 'z'"):
        load_inventory(inv)


def test_unparsable_inventory(tmp_path: Path) -> None:
    inv = _write(tmp_path, "broken.yml", "mpi_nodes: [unclosed\n")
    with pytest.raises(InventoryError, match=r"broken.yml: cannot parse inventory"):
        load_inventory(inv)


# --------------------------------------------------------------------------- names and addresses
# They end up in hostfiles, known_hosts and ssh command lines: refused while loading.


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        ('"a;touch /tmp/x":', "host 'a;touch /tmp/x': not a valid host name, IPv4 or IPv6 address"),
        ('"a b":', "host 'a b': not a valid host name"),
        ('"-oProxyCommand=x":', "host '-oProxyCommand=x': not a valid host name"),
        ('"10.0.0.256":', "host '10.0.0.256': not a valid host name"),
        (f'"{"a" * 64}":', "not a valid host name"),
        ('a: {mpi_address: "x y"}', "host 'a': mpi_address 'x y': not a valid DNS name"),
        ('a: {mpi_address: "n$(id)"}', "host 'a': mpi_address 'n$(id)': not a valid DNS name"),
        ('a: {mpi_address: "fe80::1%eth0"}', "mpi_address 'fe80::1%eth0'"),
        ('a: {mpi_address: "my_node"}', "host 'a': mpi_address 'my_node': not a valid DNS"),
        ('a: {ansible_host: "h;reboot"}', "host 'a': ansible_host 'h;reboot': not a valid host"),
        ('a: {ansible_host: "h\\nx"}', "host 'a': ansible_host 'h\\nx'"),
        ("gpu_01:", "host 'gpu_01': the name is its default mpi_address"),
    ],
)
def test_bad_names_and_addresses_name_host_and_value(
    tmp_path: Path, hosts: str, message: str
) -> None:
    inv = _write(tmp_path, "inv.yml", f"mpi_nodes:\n  hosts:\n    {hosts}\n")
    with pytest.raises(InventoryError) as caught:
        load_inventory(inv)
    assert str(caught.value).startswith(f"{inv}: host ")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_good_names_and_addresses(tmp_path: Path) -> None:
    inv = _write(
        tmp_path,
        "inv.yml",
        "mpi_nodes:\n  hosts:\n"
        "    gpu-01.example.com: {ansible_host: 192.0.2.1}\n"
        "    gpu_02: {mpi_address: 10.0.0.2, ansible_host: my_ssh_alias}\n"
        "    '2001:db8::3': {}\n"
        "    n4: {mpi_address: '2001:db8::4', ansible_host: '::1'}\n"
        "    N5: {mpi_address: node-5.cluster}\n"
        "  vars: {mpi_slots: 1}\n",
    )
    cluster = load_inventory(inv)
    assert [n.address for n in cluster.nodes] == [
        "gpu-01.example.com",
        "10.0.0.2",
        "2001:db8::3",
        "2001:db8::4",
        "node-5.cluster",
    ]
    assert cluster.node("gpu_02").ssh_host == "my_ssh_alias"


@pytest.mark.parametrize(
    ("value", "underscore", "ok"),
    [
        ("node1", False, True),
        ("a.b-c.d", False, True),
        ("x" * 63, False, True),
        (".".join(["x" * 63] * 4)[:253], False, True),
        ("x" * 64, False, False),
        (".".join(["x" * 63] * 4), False, False),  # 255 characters
        ("a..b", False, False),
        ("a.", False, False),
        ("-a", False, False),
        ("a-", False, False),
        ("a_b", False, False),
        ("a_b", True, True),
        ("_a", True, True),
        ("1.2.3.4", False, True),
        ("1.2.3", False, False),
        ("::1", False, True),
        ("[::1]", False, False),
        ("fe80::1%eth0", True, False),
        ("a:b", True, False),
        ("ä", True, False),
        ("", True, False),
        (None, True, False),
        (7, True, False),
    ],
)
def test_host_problem(value: object, underscore: bool, ok: bool) -> None:
    assert (host_problem(value, underscore=underscore) is None) is ok


# --------------------------------------------------------------------------- the merged view
# The contract is checked on what Ansible uses: the inventory with -e merged over it, and for the
# connection the variable Ansible's ssh reads last (ansible_ssh_host over ansible_host).


def test_the_connection_is_what_ansible_uses(tmp_path: Path) -> None:
    inv = _write(
        tmp_path,
        "inv.yml",
        "mpi_nodes:\n  hosts:\n"
        "    a: {ansible_host: 10.0.0.1, ansible_ssh_host: 10.0.0.9, ansible_ssh_port: '2222',\n"
        "        ansible_user: Deploy, ansible_ssh_user: first.last@corp,\n"
        "        mpi_network_interface: ''}\n"
        "    b: {ansible_host: '{{ site_net }}.2', ansible_port: 22}\n"
        "  vars: {mpi_slots: 2, site_net: 10.0.0, ansible_python_interpreter: auto_silent,\n"
        "         ansible_become_user: root, ansible_ssh_private_key_file: ~/.ssh/my key}\n",
    )
    a, b = load_inventory(inv).nodes
    assert (a.ssh_host, a.ssh_port, a.ssh_user, a.interface) == (
        "10.0.0.9",
        2222,
        "first.last@corp",
        None,
    )
    assert (b.ssh_host, b.endpoint, b.ssh_key) == ("10.0.0.2", "10.0.0.2:22", "~/.ssh/my key")
    merged = load_inventory(inv, extravars={"ansible_port": "2200", "mpi_slots": 8})
    assert [(n.endpoint, n.slots) for n in merged.nodes] == [
        ("10.0.0.9:2222", 8),  # ansible_ssh_port still wins over -e ansible_port, as in Ansible
        ("10.0.0.2:2200", 8),
    ]
    assert merged.nodes[1].vars["mpi_slots"] == 8


def test_two_hosts_reached_at_one_endpoint(tmp_path: Path) -> None:
    inv = _write(
        tmp_path,
        "inv.yml",
        "mpi_nodes:\n  hosts:\n    a: {ansible_host: '::1'}\n"
        "    b: {ansible_host: '0:0::1', ansible_port: 22}\n  vars: {mpi_slots: 1}\n",
    )
    with pytest.raises(InventoryError) as caught:
        load_inventory(inv)
    assert str(caught.value) == (
        f"{inv}: hosts 'a' and 'b' are both reached at [::1]:22 (ansible_host:ansible_port): one "
        "machine, one host"
    )
    other_port = inv.read_text().replace("ansible_port: 22", "ansible_port: 2222")
    inv.write_text(other_port)
    assert load_inventory(inv).endpoints == ["[::1]:22", "[::1]:2222"]
