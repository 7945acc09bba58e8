from __future__ import annotations

from pathlib import Path

import pytest

from mpictl.errors import InventoryError, UsageError
from mpictl.hostfile import (
    HostEntry,
    entries_for_cluster,
    entries_from_hostvars,
    render,
)
from mpictl.inventory import load_inventory

ENTRIES = [HostEntry("n1", 4), HostEntry("n2", 2)]


def test_openmpi_format() -> None:
    assert render(ENTRIES, "openmpi") == "n1 slots=4\nn2 slots=2\n"


def test_mpich_format() -> None:
    assert render(ENTRIES, "mpich") == "n1:4\nn2:2\n"


def test_horovod_format() -> None:
    assert render(ENTRIES, "horovod") == "-H n1:4,n2:2\n"


def test_header_comes_first() -> None:
    assert render(ENTRIES[:1], "openmpi", header="# managed") == "# managed\nn1 slots=4\n"


def test_unknown_format() -> None:
    with pytest.raises(UsageError, match="unknown hostfile format 'slurm'"):
        render(ENTRIES, "slurm")


def test_cluster_entries_use_mpi_address(data: Path) -> None:
    cluster = load_inventory(data / "cluster.ini")
    assert entries_for_cluster(cluster) == [HostEntry("n1", 4), HostEntry("n2", 2)]


def test_hostvars_entries_share_slot_resolution() -> None:
    hostvars = {
        "a": {"mpi_slots": 3},
        "b": {"mpi_gpu_count": "2", "ansible_processor_vcpus": 32, "mpi_address": "b.net"},
        "c": {"mpi_gpu_count": 0, "ansible_processor_vcpus": 6},
    }
    assert entries_from_hostvars(["a", "b", "c"], hostvars) == [
        HostEntry("a", 3),
        HostEntry("b.net", 2),
        HostEntry("c", 6),
    ]


def test_hostvars_without_slots_or_facts() -> None:
    with pytest.raises(InventoryError, match="^x: mpi_slots is not set"):
        entries_from_hostvars(["x"], {"x": {}})


def test_filter_plugin_uses_the_same_renderer() -> None:
    import importlib.util

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location(
        "mpictl_hostfile_filter", root / "filter_plugins" / "mpictl_hostfile.py"
    )
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    rendered = module.FilterModule().filters()["mpictl_hostfile"](
        ["a"], {"a": {"mpi_slots": 2}}, "mpich"
    )
    assert rendered == render([HostEntry("a", 2)], "mpich")


def test_ipv6_cannot_stand_in_the_host_colon_n_formats() -> None:
    # MPICH's hydra reads `host:N` with strtok(":"), Horovod's -H with split(':') into two: an
    # IPv6 address is unparseable there, bracketed or not. OpenMPI's `host slots=N` carries it.
    entries = [HostEntry("n1", 2), HostEntry("2001:db8::2", 4, "n2")]
    assert render(entries, "openmpi") == "n1 slots=2\n2001:db8::2 slots=4\n"
    for fmt in ("mpich", "horovod"):
        with pytest.raises(InventoryError) as caught:
            render(entries, fmt)
        assert str(caught.value).startswith(
            f"'n2': its address (mpi_address) '2001:db8::2' is an IPv6 address, which the {fmt} "
            "hostfile format (host:N) cannot carry"
        )
    hostvars = {"a": {"mpi_slots": 1, "mpi_address": "::1"}}
    with pytest.raises(InventoryError, match="^'a': its address"):
        render(entries_from_hostvars(["a"], hostvars), "mpich")  # the role's filter plugin
