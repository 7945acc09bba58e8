"""Sandbox logic that needs no podman: inventory reading, runtime choice, mirrors, commands."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from mpictl import sandbox
from mpictl.errors import InventoryError, SandboxError
from mpictl.sandbox import Runtime, SandboxNode, SandboxSpec

ROOT = Path(__file__).resolve().parents[2]

HOSTS = """\
all:
  children:
    mpi_nodes:
      hosts:
        a: {ansible_port: 2301, sandbox_ip: 10.90.0.11}
        b: {ansible_port: 2302, sandbox_ip: 10.90.0.12}
        c: {ansible_port: 2303, sandbox_ip: 10.90.0.13}
"""
GROUP_VARS = """\
sandbox_name: unit-sbx
sandbox_subnet: 10.90.0.0/24
sandbox_state_dir: "{{ lookup('env', 'MPICTL_STATE_DIR') }}/sandbox/{{ sandbox_name }}"
ansible_ssh_private_key_file: "{{ sandbox_state_dir }}/id_ed25519"
"""


def write_inventory(tmp_path: Path, hosts: str = HOSTS, group_vars: str = GROUP_VARS) -> Path:
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text(hosts)
    (inv / "group_vars" / "all.yml").write_text(group_vars)
    return inv


SPEC = SandboxSpec(
    name="unit-sbx",
    subnet="10.90.0.0/24",
    nodes=(
        SandboxNode("a", 2301, "10.90.0.11"),
        SandboxNode("b", 2302, "10.90.0.12"),
        SandboxNode("c", 2303, "10.90.0.13"),
    ),
)


# ---- inventory ----------------------------------------------------------------------------


def test_committed_sandbox_inventory() -> None:
    spec = sandbox.read_sandbox(ROOT / "inventories" / "sandbox")
    assert (spec.name, spec.subnet) == ("mpictl", "10.89.42.0/24")
    assert [(n.name, n.ssh_port, n.ip) for n in spec.nodes] == [
        ("node1", 2221, "10.89.42.11"),
        ("node2", 2222, "10.89.42.12"),
        ("node3", 2223, "10.89.42.13"),
    ]


def test_read_inventory_copy_in_order(tmp_path: Path, isolated_state: Path) -> None:
    spec = sandbox.read_sandbox(write_inventory(tmp_path))
    assert spec == SPEC
    assert spec.container(spec.nodes[1]) == "unit-sbx-b"
    assert spec.key_path() == isolated_state.resolve() / "sandbox" / "unit-sbx" / "id_ed25519"
    assert spec.known_hosts_path().parent == spec.key_path().parent


def test_read_hosts_file_picks_up_group_vars_next_to_it(tmp_path: Path) -> None:
    assert sandbox.read_sandbox(write_inventory(tmp_path) / "hosts.yml") == SPEC


def test_up_and_down_lock_the_sandbox_and_the_nodes_provision_locks() -> None:
    # `sandbox up` and a provision of the same nodes exclude each other (mpictl.lock).
    from mpictl.inventory import load_inventory

    spec = sandbox.read_sandbox(ROOT / "inventories" / "sandbox")
    keys = spec.lock_keys()
    assert keys == ["sandbox:mpictl", "127.0.0.1:2221", "127.0.0.1:2222", "127.0.0.1:2223"]
    assert load_inventory(ROOT / "inventories" / "sandbox").endpoints == keys[1:]


def test_missing_inventory(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="no such inventory"):
        sandbox.read_sandbox(tmp_path / "nope")


def test_unparsable_inventory_is_one_quiet_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    inv = write_inventory(tmp_path, hosts="all:\n  children: [unclosed\n")
    with pytest.raises(InventoryError, match="cannot parse inventory") as info:
        sandbox.read_sandbox(inv / "hosts.yml")
    assert "\n" not in str(info.value)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_inventory_without_mpi_nodes(tmp_path: Path) -> None:
    inv = write_inventory(tmp_path, hosts="all:\n  hosts:\n    x: {ansible_port: 2301}\n")
    with pytest.raises(InventoryError, match="mpi_nodes"):
        sandbox.read_sandbox(inv)


@pytest.mark.parametrize(
    ("hosts_edit", "vars_edit", "message"),
    [
        (None, ("sandbox_name: unit-sbx", "x: 1"), "sandbox_name is not set"),
        (None, ("sandbox_subnet:", "x:"), "sandbox_subnet is not set"),
        (None, ("unit-sbx", "'{{ foo }}'"), "sandbox_name must be a literal"),
        (None, ("unit-sbx", "Bad Name"), "sandbox_name must be lower-case"),
        (None, ("unit-sbx", '"unit-sbx\\n"'), r"sandbox_name must be .* \(got 'unit-sbx\\n'\)"),
        (None, ("10.90.0.0/24", '"10.90.0.0/24\\n"'), "sandbox_subnet must be a network"),
        (("2302", "'²'"), None, "host b: ansible_port must be a port 1024..65535 \\(got '²'\\)"),
        (("2302", "2302.5"), None, "host b: ansible_port must be a port"),
        (("10.90.0.12", '"10.90.0.12\\n"'), None, "host b: sandbox_ip must be an IPv4"),
        (None, ("10.90.0.0/24", "10.90.0.5/24"), "sandbox_subnet must be a network"),
        (None, ("10.90.0.0/24", "10.90.0.0/30"), "/29 or wider"),
        (("2302", "2301"), None, "host b: ansible_port 2301 is also used by a"),
        (("2302", "80"), None, "host b: ansible_port must be a port"),
        (("2302", "two"), None, "host b: ansible_port must be a port"),
        (("10.90.0.12", "10.91.0.12"), None, "host b: sandbox_ip 10.91.0.12 is not a usable"),
        (("10.90.0.12", "10.90.0.1"), None, r"10.90.0.1 is the gateway"),
        (("10.90.0.12", "10.90.0.11"), None, "host b: sandbox_ip 10.90.0.11 is also used by a"),
        (("10.90.0.12", "nowhere"), None, "host b: sandbox_ip must be an IPv4 address"),
    ],
)
def test_bad_sandbox_values(
    tmp_path: Path,
    hosts_edit: tuple[str, str] | None,
    vars_edit: tuple[str, str] | None,
    message: str,
) -> None:
    hosts = HOSTS.replace(*hosts_edit) if hosts_edit else HOSTS
    group_vars = GROUP_VARS.replace(*vars_edit, 1) if vars_edit else GROUP_VARS
    with pytest.raises(InventoryError, match=message) as info:
        sandbox.read_sandbox(write_inventory(tmp_path, hosts, group_vars))
    assert "\n" not in str(info.value)
    assert str(tmp_path / "inv") in str(info.value)


# ---- host inspection ----------------------------------------------------------------------

HYBRID = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
UNIFIED = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n"
LEGACY = HYBRID.replace("cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n", "")


def test_cgroup_modes() -> None:
    assert sandbox.cgroup_mode(HYBRID) == "hybrid"
    assert sandbox.cgroup_mode(UNIFIED) == "unified"
    assert sandbox.cgroup_mode(LEGACY) == "legacy"


def test_runtime_choice() -> None:
    assert sandbox.choose_runtime(HYBRID, env={}) == Runtime("runc")
    assert sandbox.choose_runtime(LEGACY, env={}) == Runtime("runc")
    assert sandbox.choose_runtime(UNIFIED, env={}) == Runtime("default")
    forced = {"MPICTL_SANDBOX_RUNTIME": "runc"}
    assert sandbox.choose_runtime(UNIFIED, env=forced) == Runtime("runc")
    with pytest.raises(SandboxError, match="MPICTL_SANDBOX_RUNTIME"):
        sandbox.choose_runtime(UNIFIED, env={"MPICTL_SANDBOX_RUNTIME": "crun"})


def test_runtime_arguments() -> None:
    assert Runtime("runc").global_args == ("--runtime", "runc")
    assert Runtime("runc").run_args == sandbox.LOWERED_ULIMITS
    assert Runtime("default").global_args == ()
    assert Runtime("default").run_args == ()


DEB822 = """\
Types: deb
URIs: http://security.example.org/debian-security
Suites: bookworm-security
Components: main

Types: deb-src
URIs: http://src.example.org/debian
Suites: bookworm

Types: deb
# a comment
URIs: http://mirror.example.org/debian
Suites: bookworm bookworm-updates
Components: main
"""


def test_mirror_from_deb822() -> None:
    assert sandbox.parse_deb822_mirror(DEB822) == "http://mirror.example.org/debian"
    assert sandbox.parse_deb822_mirror("Types: deb-src\nURIs: http://x/\nSuites: a\n") is None


def test_mirror_from_sources_list() -> None:
    text = (
        "# deb http://old.example.org/debian bookworm main\n"
        "deb http://security.example.org/debian-security bookworm-security main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example.org/debian bookworm main\n"
    )
    assert sandbox.parse_sources_list_mirror(text) == "http://mirror.example.org/debian"


def test_debian_mirror_lookup_order(tmp_path: Path) -> None:
    apt = tmp_path / "etc" / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    with pytest.raises(SandboxError, match="MPICTL_DEBIAN_MIRROR"):
        sandbox.debian_mirror(env={}, root=tmp_path)
    (apt / "sources.list").write_text("deb http://list.example.org/debian bookworm main\n")
    assert sandbox.debian_mirror(env={}, root=tmp_path) == "http://list.example.org/debian"
    (apt / "sources.list.d" / "debian.sources").write_text(DEB822)
    assert sandbox.debian_mirror(env={}, root=tmp_path) == "http://mirror.example.org/debian"
    env = {"MPICTL_DEBIAN_MIRROR": "http://env.example.org/debian"}
    assert sandbox.debian_mirror(env=env, root=tmp_path) == "http://env.example.org/debian"


def test_recipe_hash_follows_content(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe"
    recipe.mkdir()
    (recipe / "packages").write_text("openssh-server\n")
    first = sandbox.recipe_hash(recipe)
    assert sandbox.recipe_hash(recipe) == first
    (recipe / "packages").write_text("openssh-server\nsudo\n")
    assert sandbox.recipe_hash(recipe) != first
    assert sandbox.image_tag(recipe) == f"localhost/mpictl-node:{sandbox.recipe_hash(recipe)}"


def test_shipped_recipe_is_complete() -> None:
    names = {p.name for p in sandbox.RECIPE_DIR.iterdir()}
    assert {
        "build.sh",
        "hostkeys.sh",
        "mpictl-hostkeys.service",
        "packages",
        "sshd_config",
    } <= names
    packages = (sandbox.RECIPE_DIR / "packages").read_text().split()
    assert {"openssh-server", "python3", "systemd-sysv", "sudo"} <= set(packages)
    build = (sandbox.RECIPE_DIR / "build.sh").read_text()
    assert "debootstrap" in build and "podman import" in build
    assert "://" not in build  # the mirror comes from the host's apt configuration


# ---- commands -----------------------------------------------------------------------------


def _option_values(args: list[str], option: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == option]


def test_node_run_args_runc() -> None:
    args = sandbox.node_run_args(SPEC, SPEC.nodes[1], Runtime("runc"), "img:1")
    assert args[:2] == ["run", "-d"]
    assert args[-1] == "img:1"
    assert _option_values(args, "--name") == ["unit-sbx-b"]
    assert _option_values(args, "--hostname") == ["b"]
    assert _option_values(args, "--network") == ["unit-sbx"]
    assert _option_values(args, "--ip") == ["10.90.0.12"]
    assert _option_values(args, "-p") == ["127.0.0.1:2302:22"]
    assert _option_values(args, "--add-host") == ["a:10.90.0.11", "c:10.90.0.13"]
    assert _option_values(args, "--ulimit") == ["nofile=1024:1024", "nproc=4096:4096"]
    assert _option_values(args, "--mac-address") == ["02:6d:0a:5a:00:0c"]
    labels = _option_values(args, "--label")
    assert "io.mpictl.sandbox=unit-sbx" in labels
    assert "io.mpictl.node=b" in labels
    assert "io.mpictl.runtime=runc" in labels
    assert "-v" not in args


def test_node_run_args_default_runtime_and_cuda(tmp_path: Path) -> None:
    real = tmp_path / "cuda-13.0"
    real.mkdir()
    link = tmp_path / "cuda"
    link.symlink_to(real)
    args = sandbox.node_run_args(SPEC, SPEC.nodes[0], Runtime("default"), "img:1", link)
    assert "--ulimit" not in args
    assert "io.mpictl.runtime=default" in _option_values(args, "--label")
    assert _option_values(args, "-v") == [f"{real}:{link}:ro", f"{real}:{real}:ro"]


def test_config_label_ignores_image_but_not_inventory() -> None:
    node = SPEC.nodes[0]
    base = sandbox.config_label(sandbox.node_run_args(SPEC, node, Runtime("runc"), "img:1"))
    same = sandbox.config_label(sandbox.node_run_args(SPEC, node, Runtime("runc"), "img:2"))
    assert base == same
    moved = SandboxNode("a", 2399, node.ip)
    other = sandbox.config_label(sandbox.node_run_args(SPEC, moved, Runtime("runc"), "img:1"))
    assert other != base


def test_plan_actions() -> None:
    runtime = Runtime("runc")
    current = {
        n.name: sandbox.config_label(sandbox.node_run_args(SPEC, n, runtime, "img"))
        for n in SPEC.nodes
    }
    found = {
        "unit-sbx-a": {"State": "running", "Labels": {"io.mpictl.config": current["a"]}},
        "unit-sbx-b": {"State": "exited", "Labels": {"io.mpictl.config": current["b"]}},
    }
    steps = sandbox.plan(SPEC, found, runtime, "img")
    assert [(n.name, action) for n, action, _ in steps] == [
        ("a", "unchanged"),
        ("b", "started"),
        ("c", "created"),
    ]
    found["unit-sbx-a"]["Labels"]["io.mpictl.config"] = "stale"
    assert sandbox.plan(SPEC, found, runtime, "img")[0][1] == "recreated"


GROWN = dataclasses.replace(SPEC, nodes=(*SPEC.nodes, SandboxNode("d", 2304, "10.90.0.14")))


def test_a_node_added_or_removed_leaves_the_others_as_they_are() -> None:
    runtime = Runtime("runc")
    labels = {
        n.name: sandbox.config_label(sandbox.node_run_args(SPEC, n, runtime, "img"))
        for n in SPEC.nodes
    }
    found = {f"unit-sbx-{n}": {"State": "running", "Labels": {"io.mpictl.config": label}}
             for n, label in labels.items()}  # fmt: skip
    steps = sandbox.plan(GROWN, found, runtime, "img")
    assert [(n.name, a) for n, a, _ in steps] == [
        ("a", "unchanged"), ("b", "unchanged"), ("c", "unchanged"), ("d", "created")
    ]  # fmt: skip
    # a new node still knows the others from its creation
    assert "c:10.90.0.13" in _option_values(steps[3][2], "--add-host")
    # shrunk back: d's container is one to remove, the others stay
    found["unit-sbx-d"] = {"State": "running", "Labels": {}}
    assert sandbox.removed(SPEC, found) == ["unit-sbx-d"]
    assert [a for _, a, _ in sandbox.plan(SPEC, found, runtime, "img")] == ["unchanged"] * 3


def test_nodes_made_before_keep_their_label_until_their_peers_change() -> None:
    runtime = Runtime("runc")
    node = SPEC.nodes[0]
    old = sandbox.config_label(sandbox.node_run_args(SPEC, node, runtime, "img", legacy_peers=True))
    found = {"unit-sbx-a": {"State": "running", "Labels": {"io.mpictl.config": old}}}
    assert sandbox.plan(SPEC, found, runtime, "img")[0][1] == "unchanged"


def test_hosts_text_follows_the_nodes_and_keeps_the_rest() -> None:
    current = (
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n"
        "10.90.0.11\ta unit-sbx-a\n10.90.0.12\tb\n10.90.0.14\td\n"
        "10.90.0.1\thost.containers.internal\n192.168.1.5\tmirror # the site's\n"
    )
    got = sandbox.hosts_text(current, "a", SPEC.subnet, {"b": "10.90.0.12", "c": "10.90.0.13"})
    assert got.splitlines() == [
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost",
        "10.90.0.11\ta unit-sbx-a",
        "10.90.0.1\thost.containers.internal",
        "192.168.1.5\tmirror # the site's",
        "10.90.0.12\tb",
        "10.90.0.13\tc",
    ]
    # already right: the same text, so up writes nothing, also in the order podman writes a new
    # node's file (its --add-host lines first)
    peers = {"b": "10.90.0.12", "c": "10.90.0.13"}
    assert sandbox.hosts_text(got, "a", SPEC.subnet, peers) == got
    podman_made = "10.90.0.12\tb\n10.90.0.13\tc\n127.0.0.1\tlocalhost\n10.90.0.11\ta unit-sbx-a\n"
    assert sandbox.hosts_text(podman_made, "a", SPEC.subnet, peers) == podman_made


def test_plain_up_keeps_cuda_and_cuda_up_adds_it(tmp_path: Path) -> None:
    runtime = Runtime("runc")
    node = SPEC.nodes[0]
    with_cuda = sandbox.config_label(sandbox.node_run_args(SPEC, node, runtime, "img", tmp_path))
    plain = sandbox.config_label(sandbox.node_run_args(SPEC, node, runtime, "img"))
    found = {"unit-sbx-a": {"State": "running", "Labels": {"io.mpictl.config": with_cuda}}}
    assert sandbox.plan(SPEC, found, runtime, "img", None, tmp_path)[0][1] == "unchanged"
    found["unit-sbx-a"]["Labels"]["io.mpictl.config"] = plain
    assert sandbox.plan(SPEC, found, runtime, "img", tmp_path, tmp_path)[0][1] == "recreated"
    assert sandbox.plan(SPEC, found, runtime, "img", None, tmp_path)[0][1] == "unchanged"


def test_known_hosts_lines() -> None:
    text = (
        "ssh-ed25519 AAAAC3Nza root@b\n"
        "ecdsa-sha2-nistp256 AAAAE2Vj root@b\n"
        "cat: /etc/ssh/ssh_host_rsa_key.pub: No such file\n"
    )
    assert sandbox.known_hosts_lines(2302, text) == [
        "[127.0.0.1]:2302 ssh-ed25519 AAAAC3Nza",
        "[127.0.0.1]:2302 ecdsa-sha2-nistp256 AAAAE2Vj",
    ]


def test_pinned_by_port() -> None:
    text = (
        "[127.0.0.1]:2301 ssh-ed25519 AAAA1\n"
        "[127.0.0.1]:2302 ssh-ed25519 AAAA2\n"
        "[127.0.0.1]:2301 ecdsa-sha2-nistp256 BBBB1\n"
        "node1 ssh-ed25519 CCCC\n"
        "garbage\n"
    )
    assert sandbox.pinned_by_port(text) == {
        2301: ["[127.0.0.1]:2301 ssh-ed25519 AAAA1", "[127.0.0.1]:2301 ecdsa-sha2-nistp256 BBBB1"],
        2302: ["[127.0.0.1]:2302 ssh-ed25519 AAAA2"],
    }


def test_ssh_check_is_strict() -> None:
    args = sandbox.ssh_check_args(SPEC, SPEC.nodes[2])
    assert "StrictHostKeyChecking=yes" in args
    assert "BatchMode=yes" in args
    assert f"UserKnownHostsFile={SPEC.known_hosts_path()}" in args
    assert args[args.index("-p") + 1] == "2303"


def test_mac_for_ip() -> None:
    assert sandbox.mac_for_ip("10.89.42.11") == "02:6d:0a:59:2a:0b"


# ---- errors before anything runs ----------------------------------------------------------


def test_up_cuda_without_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "CUDA_PATH", tmp_path / "no-cuda")
    monkeypatch.setenv("PATH", str(tmp_path))  # any podman call would fail differently
    with pytest.raises(SandboxError, match="--cuda: .*no-cuda does not exist"):
        sandbox.up(write_inventory(tmp_path), cuda=True)


def test_status_without_podman(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxError, match="podman is not installed"):
        sandbox.status(write_inventory(tmp_path))


def test_clone_inventory_with_a_node_count(tmp_path: Path) -> None:
    from mpictl.sandbox.spec import read_sandbox

    inv = sandbox.clone_inventory(tmp_path / "six", "mpictl-six", "10.89.50.0/24", 2271, count=6)
    spec = read_sandbox(inv)
    assert [n.name for n in spec.nodes] == [f"node{i}" for i in range(1, 7)]
    assert [n.ssh_port for n in spec.nodes] == list(range(2271, 2277))
    assert spec.nodes[-1].ip == "10.89.50.16" and spec.name == "mpictl-six"
    with pytest.raises(SandboxError, match="1..200 nodes"):
        sandbox.clone_inventory(tmp_path / "none", "x", "10.89.51.0/24", 2300, count=0)


# ---- sandbox_os: Debian 13 nodes beside Debian 12 ones ---------------------------------------


def test_sandbox_os_per_host_default_bookworm(tmp_path: Path) -> None:
    hosts = HOSTS.replace(
        "b: {ansible_port: 2302, sandbox_ip: 10.90.0.12}",
        "b: {ansible_port: 2302, sandbox_ip: 10.90.0.12, sandbox_os: trixie}",
    )
    spec = sandbox.read_sandbox(write_inventory(tmp_path, hosts))
    assert [(n.name, n.os) for n in spec.nodes] == [
        ("a", "bookworm"),
        ("b", "trixie"),
        ("c", "bookworm"),
    ]


@pytest.mark.parametrize("value", ["sid", "trixie\n", "Trixie", "{{ os }}", "12"])
def test_sandbox_os_must_be_a_known_release(tmp_path: Path, value: str) -> None:
    hosts = HOSTS.replace(
        "a: {ansible_port: 2301, sandbox_ip: 10.90.0.11}",
        f"a: {{ansible_port: 2301, sandbox_ip: 10.90.0.11, sandbox_os: {json.dumps(value)}}}",
    )
    with pytest.raises(InventoryError, match="sandbox_os"):
        sandbox.read_sandbox(write_inventory(tmp_path, hosts))


def test_each_release_has_its_image_and_a_node_changing_release_is_recreated() -> None:
    recipe = sandbox.RECIPE_DIR
    bookworm, trixie = sandbox.image_tag(recipe), sandbox.image_tag(recipe, "trixie")
    assert bookworm == f"localhost/mpictl-node:{sandbox.recipe_hash(recipe)}"  # as before
    assert trixie == f"localhost/mpictl-node:trixie-{sandbox.recipe_hash(recipe)}"
    runtime = Runtime("runc")
    node = SPEC.nodes[0]
    moved = dataclasses.replace(node, os="trixie")
    old = sandbox.config_label(sandbox.node_run_args(SPEC, node, runtime, bookworm))
    found = {"unit-sbx-a": {"State": "running", "Labels": {"io.mpictl.config": old}}}
    spec = dataclasses.replace(SPEC, nodes=(moved, *SPEC.nodes[1:]))
    steps = sandbox.plan(spec, found, runtime, lambda release: f"img:{release}")
    assert steps[0][1] == "recreated" and steps[0][2][-1] == "img:trixie"
    assert [s[2][-1] for s in steps[1:]] == ["img:bookworm", "img:bookworm"]
