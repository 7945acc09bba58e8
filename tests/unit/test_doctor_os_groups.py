"""doctor on a cluster that mixes OS releases (issue 26, day 2: upgraded node by node): builds and
the venv's packages are compared within each release, the versions that must talk to each other
(OpenMPI, mpi4py, Horovod, NCCL) across releases too. The probe's reading of /etc/os-release."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mpictl.doctor.nodes import build_checks
from tests.unit.loader import load

ROOT = Path(__file__).resolve().parents[2]
probe = load("doctor_probe", ROOT / "mpictl" / "scripts" / "doctor_probe.py")

BOOKWORM = "debian bookworm"
TRIXIE = "debian trixie"
MARKER = "/opt/openmpi/5.0.7/.mpictl-fingerprint"


def node(os: str, fingerprint: str, **versions: str) -> dict[str, Any]:
    base = {
        "openmpi": "mpirun (Open MPI) 5.0.7",
        "mpi4py": "4.1.2",
        "mpi4py_library": f"Open MPI v5.0.7, package: Open MPI root@{fingerprint} Distribution",
        "torch": "2.13.0+cpu" if os == BOOKWORM else "2.13.0",
    }
    return {"os": os, "versions": {**base, **versions}, "markers": {MARKER: fingerprint}}


def failed(checks: list[Any]) -> list[tuple[str, str]]:
    return [(c.check, c.node) for c in checks if not c.ok]


def test_a_mixed_cluster_with_one_build_per_release_passes() -> None:
    data = {
        "node1": node(BOOKWORM, "fp12"),
        "node2": node(BOOKWORM, "fp12"),
        "node3": node(TRIXIE, "fp13"),
    }
    checks = build_checks(data, "provision")
    assert failed(checks) == []
    labels = {c.check for c in checks}
    assert f"fingerprint {MARKER} (debian bookworm)" in labels
    assert f"fingerprint {MARKER} (debian trixie)" in labels
    assert "openmpi version across OS releases" in labels
    assert f"{MARKER} across OS releases" in labels
    # torch is the venv's (2.13.0+cpu on one release, 2.13.0 on the other): within each only
    torch = {c.check: c.detail for c in checks if c.check.startswith("torch version")}
    assert torch == {
        "torch version (debian bookworm)": "2.13.0+cpu",
        "torch version (debian trixie)": "2.13.0",
    }


def test_a_local_version_suffix_does_not_split_releases() -> None:
    data = {
        "node1": node(BOOKWORM, "fp12", horovod="0.28.1+local"),
        "node2": node(TRIXIE, "fp13", horovod="0.28.1"),
    }
    checks = {c.check: c for c in build_checks(data, "provision")}
    assert checks["horovod version across OS releases"].ok
    assert checks["horovod version across OS releases"].detail == "0.28.1"


def test_a_component_missing_from_a_whole_release_is_named() -> None:
    trixie = node(TRIXIE, "fp13")
    del trixie["markers"][MARKER]
    data = {
        "node1": node(BOOKWORM, "fp12", horovod="0.28.1"),
        "node2": node(BOOKWORM, "fp12", horovod="0.28.1"),
        "node3": trixie,
    }
    bad = [c for c in build_checks(data, "provision") if not c.ok]
    assert [(c.check, c.node) for c in bad] == [
        ("horovod version across OS releases", "node3"),
        (f"{MARKER} across OS releases", "node3"),
    ]
    assert bad[0].detail == "missing; other nodes: 0.28.1"


def test_a_node_whose_build_differs_from_its_releases_is_named() -> None:
    data = {
        "node1": node(BOOKWORM, "fp12"),
        "node2": node(BOOKWORM, "old12"),
        "node3": node(BOOKWORM, "fp12"),
        "node4": node(TRIXIE, "fp13"),
    }
    assert failed(build_checks(data, "provision")) == [
        ("mpi4py_library version (debian bookworm)", "node2"),
        (f"fingerprint {MARKER} (debian bookworm)", "node2"),
    ]


def test_an_openmpi_release_that_differs_across_os_releases_fails() -> None:
    data = {
        "node1": node(BOOKWORM, "fp12"),
        "node2": node(BOOKWORM, "fp12"),
        "node3": node(TRIXIE, "fp13", openmpi="mpirun (Open MPI) 5.0.8"),
    }
    bad = [c for c in build_checks(data, "provision") if not c.ok]
    assert [(c.check, c.node) for c in bad] == [("openmpi version across OS releases", "node3")]
    assert "mpirun (Open MPI) 5.0.8; other nodes: mpirun (Open MPI) 5.0.7" in bad[0].detail


def test_one_release_keeps_the_cluster_wide_labels() -> None:
    data = {"node1": node(BOOKWORM, "fp12"), "node2": node(BOOKWORM, "other")}
    assert failed(build_checks(data, "provision")) == [
        ("mpi4py_library version", "node2"),
        (f"fingerprint {MARKER}", "node2"),
    ]


def test_the_probe_reads_the_release_as_builds_are_keyed() -> None:
    debian = 'PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nID=debian\nVERSION_ID="13"\n'
    assert probe.os_release(debian + "VERSION_CODENAME=trixie\n") == TRIXIE
    assert probe.os_release(debian) == "debian 13"
    assert probe.os_release('ID="ubuntu"\nVERSION_CODENAME=noble\n') == "ubuntu noble"
    assert probe.os_release(None) == "unknown"
