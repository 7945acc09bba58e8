"""The one checker of role and cluster variables (mpictl/role_vars.py), over every declared
variable: a value of the wrong type, a number out of range, a path, version, URL or checksum that
breaks its rule, each refused with one line naming the host, the variable and the rule; every role
default passes; and the same check through ``mpictl provision`` and plain ``ansible-playbook``,
with no node contacted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mpictl import paths, role_vars
from tests.unit.hostile import Hostile

ROLES = paths.roles_dir()
SPECS = role_vars.load_specs(ROLES)

#: Strings with no rule but their spec's type: names, free text and command lines the roles pass
#: on as they are. A new variable must get a rule or be listed here (a decision, not a default).
FREE_TEXT = {
    "build_once_name", "build_once_ext", "build_once_compiler_command", "health_driver",
    "horovod_torch_requirement", "horovod_tensorflow_requirement", "nccl_release",
    "slurm_release", "slurm_cluster_name", "slurm_partition_name",
    "slurm_health_check_node_state", "monitoring_server",
}  # fmt: skip
#: Declared ``raw``: several types by design; checked by the role after gathering facts.
RAW = {"health_fabric_manager", "health_rdma_ports", "health_dcgm_diag",
       "monitoring_dcgm_exporter", "slurm_build_jobs"}  # fmt: skip


def bad_values(spec: role_vars.Spec) -> list[Any]:
    """Values that must be refused for ``spec``: one of the wrong type, and one that breaks
    its rule where it has one."""
    kind = spec.option.get("type", "str")
    elements = spec.option.get("elements")
    if kind == "int":
        low, high = role_vars._number_rule(spec.name)
        return ["ten", low - 1] + ([high + 1] if high != float("inf") else [])
    if kind == "float":
        low, high = role_vars._number_rule(spec.name)
        return ["fast", -1.0] + ([high * 10] if high != float("inf") else [])
    if kind == "bool":
        return ["maybe", 7]
    if kind == "dict":
        return [7]
    if kind == "list":
        if elements == "int":
            return [["x"], [-5]]
        if "choices" in spec.option:
            return [["bogus-choice"]]
        return [{"a": 1}]
    if "choices" in spec.option:
        return ["bogus-choice"]
    rule = role_vars._string_rule(spec)
    if rule is None:
        return []
    examples = {
        "a release number": ["v1.2", "1.2 beta", ""],
        "an http(s):// or file:// URL": ["ftp://x/y", "https://a b", "relative/x"],
        "a sha256": ["abc", "X" * 64],
        "an absolute path": ["relative/x", "/a/../b", "/a\nb"],
        "a login name": ["-oProxyCommand=x", "A B"],
        "a group name": ["x y"],
        "an interface name": ["eth0;reboot", "x" * 16],
        "a file mode": ["rw-r--r--", "0999"],
        "a Prometheus duration": ["15 seconds", "1x"],
        "a Prometheus size": ["10 GB", "10"],
        "auto or an IP address": ["somewhere", "1.2.3"],
        "'' or an absolute path on the nodes other than /": ["/", "rel"],
        "an absolute path on the nodes of plain characters, $(id": ["rel/$(id -u)", "/a/$(rm -rf)"],
        "mksquashfs options": ["-comp lzo; reboot", "$(x)"],
    }
    for start, values in examples.items():
        if rule[0].startswith(start):
            return values
    raise AssertionError(f"{spec.name}: rule {rule[0]!r} has no bad examples in this test")


def test_every_declared_variable_has_a_rule_or_is_named() -> None:
    free = {
        name
        for name, spec in SPECS.items()
        if spec.option.get("type", "str") == "str"
        and "choices" not in spec.option
        and role_vars._string_rule(spec) is None
    }
    raw = {name for name, spec in SPECS.items() if spec.option.get("type") == "raw"}
    assert free == FREE_TEXT
    assert raw == RAW


@pytest.mark.parametrize("name", sorted(set(SPECS) - FREE_TEXT - RAW))
def test_every_declared_variable_refuses_a_bad_value(name: str) -> None:
    spec = SPECS[name]
    values = bad_values(spec)
    assert values, name
    for value in values:
        found = role_vars.problems({"node7": {name: value}}, ROLES)
        assert len(found) == 1, (name, value, found)
        assert found[0].startswith(f"node7: {name} "), found[0]
        assert found[0].endswith(f"({spec.where})")
        assert "\n" not in found[0]


def role_defaults() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in sorted(ROLES.glob("*/defaults/main.yml")):
        out.update(yaml.safe_load(path.read_text()) or {})
    return out


def test_every_role_default_passes_its_rule() -> None:
    defaults = {k: v for k, v in role_defaults().items() if k in SPECS}
    assert role_vars.problems({"defaults": defaults}, ROLES) == []


@pytest.mark.parametrize(
    ("variables", "says"),
    [
        ({"ucx_enabled": "maybe"}, "ucx_enabled 'maybe': must be one of: auto, true, false"),
        ({"horovod_frameworks": ["caffe"]}, "must be one or more of: pytorch, tensorflow"),
        ({"mpi_shared_dir": "relative"}, "mpi_shared_dir 'relative': must be '' or an absolute"),
        ({"slurm_health_check_interval": -5}, "must be a number from 0 up to 604800"),
        ({"monitoring_prometheus_port": "70000"}, "must be a number from 1 up to 65535"),
        ({"openmpi_build_jobs": 0}, "openmpi_build_jobs '0': must be a number from 1"),
        ({"mpi_slots": "four"}, "mpi_slots 'four': must be an integer"),
        ({"health_enabled": "maybe"}, "must be a boolean (true or false)"),
    ],
)
def test_the_issue_examples(variables: dict[str, Any], says: str) -> None:
    assert says in role_vars.problems({"node1": variables}, ROLES)[0]


def test_good_values_convert_as_ansible_converts_them() -> None:
    ok = {"mpi_slots": "8", "ucx_enabled": True, "horovod_frameworks": "pytorch,tensorflow",
          "slurm_enabled": "yes", "mpi_transport": "TCP", "mpi_link_gbps": "400",
          "openmpi_prefix": "/opt/openmpi/5.0.7/", "horovod_python": ""}  # fmt: skip
    assert role_vars.problems({"n": ok}, ROLES) == []
    assert role_vars.converted(SPECS["horovod_frameworks"], "pytorch")[1] == ["pytorch"]


def test_templates_are_left_to_the_validation_play_and_facts_to_the_preflight() -> None:
    late = {"openmpi_build_jobs": "{{ ansible_processor_vcpus }}", "ucx_prefix": "{{ x }}/ucx"}
    assert role_vars.problems({"n": late}, ROLES) == []
    assert role_vars.problems({"n": late}, ROLES, skip_templates=False) != []


def test_provision_refuses_a_bad_role_variable_before_contact(hostile: Hostile) -> None:
    got = hostile.refused(
        "provision", "-i", str(hostile.inventory), "-e", "ucx_enabled=maybe",
        says=("node1: ucx_enabled 'maybe': must be one of: auto, true, false",),
    )  # fmt: skip
    assert "(and 1 more)" in got.err  # node2 has the same value


def test_the_validation_play_refuses_it_under_plain_ansible_playbook(tmp_path: Path) -> None:
    # Nodes on a closed loopback port, and an ssh that logs any call: nothing may reach them.
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"mpi_nodes": {"hosts": {
        "node1": {"ansible_host": "127.0.0.1", "ansible_port": 1},
        "node2": {"ansible_host": "127.0.0.2", "ansible_port": 1,
                  "horovod_frameworks": ["caffe"]},
    }}}}}))  # fmt: skip
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "ssh.log"
    for shim in ("ssh", "scp", "sftp"):
        (bindir / shim).write_text(f'#!/bin/sh\necho "$0 $*" >> {log}\nexit 255\n')
        (bindir / shim).chmod(0o755)
    playbook = Path(sys.executable).parent / "ansible-playbook"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}",
           "ANSIBLE_FILTER_PLUGINS": str(root / "filter_plugins"),
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "ANSIBLE_HOME": str(tmp_path / "home"),
           "PYTHONPATH": str(root)}  # fmt: skip
    site = str(root / "playbooks" / "site.yml")
    proc = subprocess.run([str(playbook), "-i", str(inventory), site],
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-2000:]
    fatal = [line for line in proc.stdout.splitlines() if line.startswith("fatal:")]
    assert len(fatal) == 1 and "node2: horovod_frameworks '['caffe']'" in fatal[0], proc.stdout
    assert not log.exists()


class _Lazy(list):  # type: ignore[type-arg]
    """Stands in for Ansible 2.19's lazy list: copying it whole also copies its templar and every
    variable it reaches (seconds a run), so the checker must never be handed one."""

    def __deepcopy__(self, memo: Any) -> Any:
        raise AssertionError("a lazy container was deep-copied")


class _LazyDict(dict):  # type: ignore[type-arg]
    def __deepcopy__(self, memo: Any) -> Any:
        raise AssertionError("a lazy container was deep-copied")


def test_the_validation_plays_filter_checks_plain_copies_of_lazy_values() -> None:
    sys.path.insert(0, str(ROLES.parent))
    from filter_plugins.mpictl_vars import mpictl_var_problems

    hostvars = {
        "node1": {"containers_hooks_off": _Lazy(["10-cgroups.sh"]),
                  "slurm_config_extra": _LazyDict({"AuthInfo": "cred_expire=10"})},
        "node2": {"horovod_frameworks": _Lazy(["caffe"]), "mpi_slots": 0},
    }  # fmt: skip
    found = mpictl_var_problems(hostvars, ["node1", "node2"], str(ROLES))
    assert [line.split(":")[0] for line in found] == ["node2", "node2"], found
    assert any("horovod_frameworks" in line and "caffe" in line for line in found), found
    assert any("mpi_slots '0': must be a number from 1" in line for line in found), found
