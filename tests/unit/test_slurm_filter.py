"""filter_plugins/mpictl_slurm.py: the slurm role's node lines, gres lines and the choice of
process tracking, from plain hostvars."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_filters() -> Any:
    spec = importlib.util.spec_from_file_location(
        "mpictl_slurm_filter", ROOT / "filter_plugins" / "mpictl_slurm.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


slurm = load_filters()


def facts(**extra: Any) -> dict[str, Any]:
    base = {
        "hostname": "gpu01",
        "processor_vcpus": 32,
        "processor_count": 2,
        "processor_cores": 8,
        "processor_threads_per_core": 2,
        "memtotal_mb": 257000,
    }
    base.update(extra)
    return base


HOSTVARS: dict[str, Any] = {
    "gpu01": {"ansible_facts": facts(), "mpi_address": "10.10.0.11", "mpi_gpu_count": 8},
    # facts injected as ansible_* variables only, no mpi_address, no GPU count fact
    "cpu01": {
        "ansible_hostname": "cpu01",
        "ansible_processor_vcpus": 4,
        "ansible_processor_count": 1,
        "ansible_processor_cores": 4,
        "ansible_processor_threads_per_core": 1,
        "ansible_memtotal_mb": 7900,
    },
}


def test_nodes_from_facts_address_rule_and_gpus() -> None:
    nodes = slurm.slurm_nodes(["gpu01", "cpu01"], HOSTVARS)
    assert [n["name"] for n in nodes] == ["gpu01", "cpu01"]
    assert nodes[0]["address"] == "10.10.0.11" and nodes[1]["address"] == "cpu01"
    assert (nodes[0]["gpus"], nodes[1]["gpus"]) == (8, 0)
    assert slurm.slurm_node_line(nodes[0]) == (
        "NodeName=gpu01 NodeHostname=gpu01 NodeAddr=10.10.0.11 CPUs=32 Sockets=2"
        " CoresPerSocket=8 ThreadsPerCore=2 RealMemory=257000 Gres=gpu:8 State=UNKNOWN"
    )
    assert slurm.slurm_node_line(nodes[1]) == (
        "NodeName=cpu01 NodeHostname=cpu01 NodeAddr=cpu01 CPUs=4 Sockets=1"
        " CoresPerSocket=4 ThreadsPerCore=1 RealMemory=7900 State=UNKNOWN"
    )


def test_memory_headroom_and_a_host_name_other_than_the_inventory_name() -> None:
    hostvars = {"n1": {"ansible_facts": facts(hostname="n1-real")}}
    (node,) = slurm.slurm_nodes(["n1"], hostvars, 1000)
    assert node["real_memory"] == 256000 and node["hostname"] == "n1-real"
    with pytest.raises(slurm.SlurmFilterError, match="^n1: memory headroom"):
        slurm.slurm_nodes(["n1"], hostvars, 257000)


def test_missing_facts_name_the_node() -> None:
    with pytest.raises(slurm.SlurmFilterError, match="^x: fact memtotal_mb is None"):
        slurm.slurm_nodes(["x"], {"x": {}})


def test_gres_lines() -> None:
    nodes = slurm.slurm_nodes(["gpu01", "cpu01"], HOSTVARS)
    assert slurm.slurm_gres_line(nodes[0]) == "NodeName=gpu01 Name=gpu File=/dev/nvidia[0-7]"
    assert slurm.slurm_gres_line(nodes[1]) == ""
    assert (
        slurm.slurm_gres_line({"name": "g", "gpus": 1}) == "NodeName=g Name=gpu File=/dev/nvidia0"
    )


@pytest.mark.parametrize(
    ("requested", "writable", "want"),
    [
        ("auto", [True, True], "cgroup"),
        ("auto", [True, False], "linuxproc"),
        ("auto", ["True", "true"], "cgroup"),  # as a templated fact may arrive
        ("auto", [], "linuxproc"),
        ("cgroup", [False], "cgroup"),
        ("linuxproc", [True], "linuxproc"),
    ],
)
def test_proctrack_choice(requested: str, writable: list[Any], want: str) -> None:
    assert slurm.slurm_proctrack(requested, writable) == want


def test_proctrack_refuses_other_values_and_task_plugins_match() -> None:
    with pytest.raises(slurm.SlurmFilterError, match="slurm_proctrack_type must be one of"):
        slurm.slurm_proctrack("pgid", [True])
    assert slurm.slurm_task_plugin("cgroup") == "task/cgroup,task/affinity"
    assert slurm.slurm_task_plugin("linuxproc") == ""


def test_filter_module_exports() -> None:
    names = set(slurm.FilterModule().filters())
    assert names == {
        "mpictl_slurm_nodes",
        "mpictl_slurm_node_line",
        "mpictl_slurm_gres_line",
        "mpictl_slurm_proctrack",
        "mpictl_slurm_task_plugin",
    }
