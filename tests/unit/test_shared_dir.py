"""A shared filesystem (``mpi_shared_dir``, issue 26): the head's setting, what jobs get
(``MPICTL_SHARED_DIR``, ``mpictl run --chdir``), doctor's token check (pure, and the probe's
side run as a program on this machine) and the sandbox's bind mount."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mpictl import cli, mpirun_plan, network, planner, sandbox, settings, slurm_plan
from mpictl.doctor import shared
from mpictl.errors import InventoryError, UsageError
from mpictl.inventory import load_inventory
from mpictl.sandbox import Runtime, SandboxNode, SandboxSpec
from tests.unit.jobside import cluster, facts, forbid_processes, node

PROBE = Path(__file__).resolve().parents[2] / "mpictl" / "scripts" / "doctor_probe.py"


def head_with(**head_vars: object):  # type: ignore[no-untyped-def]
    return cluster(
        node("node1", facts=facts("10.0.0.11"), vars=head_vars),
        node("node2", facts=facts("10.0.0.12")),
        node("node3", facts=facts("10.0.0.13")),
    )


def test_the_heads_mpi_shared_dir_is_read_and_checked() -> None:
    assert settings.for_cluster(head_with()).shared_dir == ""
    assert settings.for_cluster(head_with(mpi_shared_dir="/lustre/proj/")).shared_dir == (
        "/lustre/proj"
    )
    for bad in ("relative/dir", "/", "/a b", "/x/../etc", "/$(id)", 7):
        with pytest.raises(
            InventoryError, match="node1: mpi_shared_dir .*: must be '' or an absolute"
        ):
            settings.for_cluster(head_with(mpi_shared_dir=bad))


def plan(c, launcher: str = "mpirun", **kw):  # type: ignore[no-untyped-def]
    options = planner.LaunchOptions(command=["python", "t.py"], **kw)
    net = network.derive_network(c)
    if launcher == "slurm":
        return slurm_plan.plan(c, options, "J1", net)
    return mpirun_plan.plan(c, options, "J1", net)


def test_jobs_get_the_shared_dir_and_start_in_chdir_under_both_launchers() -> None:
    c = head_with(mpi_shared_dir="/shared")
    argv = plan(c, chdir="/shared/proj").mpirun
    assert argv[argv.index("--wdir") + 1] == "/shared/proj"
    assert "MPICTL_SHARED_DIR=/shared" in argv
    script = plan(c, "slurm", chdir="/shared/proj").script
    assert "#SBATCH --chdir=/shared/proj" in script.splitlines()
    assert "export MPICTL_SHARED_DIR=/shared" in script.splitlines()
    # the user's own value wins; without mpi_shared_dir, nothing
    argv = plan(c, env=["MPICTL_SHARED_DIR=/scratch"]).mpirun
    assert [a for a in argv if a.startswith("MPICTL_SHARED_DIR")] == ["MPICTL_SHARED_DIR=/scratch"]
    assert not any("MPICTL_SHARED_DIR" in a for a in plan(head_with()).mpirun)


@pytest.mark.parametrize("bad", ["rel/dir", "/a b", "/x/../y", "/x;rm", "/x\n"])
def test_a_chdir_that_is_not_a_plain_absolute_path_is_refused(bad: str) -> None:
    with pytest.raises(UsageError, match="--chdir: .* is not an absolute path on the nodes"):
        plan(head_with(), chdir=bad)


def test_chdir_with_workdir_is_refused_before_any_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text("mpi_nodes:\n  hosts:\n    node1:\n")
    load_inventory(inv)  # importing Ansible runs ldconfig once: not the command reaching a node
    spawned = forbid_processes(monkeypatch)
    code = cli.main(["run", "-i", str(inv), "--chdir", "/shared", "--workdir", str(tmp_path),
                     "--", "hostname"])  # fmt: skip
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and "--chdir and --workdir" in err[0]
    assert spawned == []


# --- doctor -----------------------------------------------------------------------------------


def probe_shared(directory: Path, token_file: str) -> dict:
    """The probe's ``shared`` section, run as the probe runs on a node."""
    program = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('p', {str(PROBE)!r})\n"
        "p = importlib.util.module_from_spec(spec); spec.loader.exec_module(p)\n"
        "print(json.dumps(p.shared(sys.argv[1], sys.argv[2])))\n"
    )
    out = subprocess.run([sys.executable, "-c", program, str(directory), token_file],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return json.loads(out)


def test_the_probe_reads_the_token_and_names_the_mount(tmp_path: Path) -> None:
    (tmp_path / ".mpictl-doctor-ab").write_text("cafe")
    got = probe_shared(tmp_path, ".mpictl-doctor-ab")
    assert got["dir"] and got["token"] == "cafe" and got["writable"]
    assert got["mount"][0] and Path(str(tmp_path)).is_relative_to(got["mount"][0])
    assert probe_shared(tmp_path / "gone", "x") == {"dir": False}


def test_the_longest_mount_holding_the_path_is_the_one() -> None:
    spec = importlib.util.spec_from_file_location("probe", PROBE)
    assert spec is not None and spec.loader is not None
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    mounts = (
        "overlay / overlay rw 0 0\n"
        "10.0.0.5:/export/proj /shared nfs4 rw 0 0\n"
        "tmpfs /shared/tmp tmpfs rw 0 0\n"
        "/dev/sdb1 /shared2 ext4 rw 0 0\n"
    )
    assert probe.mount_of("/shared/proj", mounts) == ["/shared", "nfs4", "10.0.0.5:/export/proj"]
    assert probe.mount_of("/shared2x", mounts) == ["/", "overlay", "overlay"]


def test_doctor_names_the_node_without_the_heads_filesystem() -> None:
    c = head_with(mpi_shared_dir="/shared")
    s = settings.for_cluster(c)
    nfs = ["/shared", "nfs4", "10.0.0.5:/export/proj"]
    data = {
        "node1": {"shared": {"dir": True, "token": "T", "writable": True, "mount": nfs}},
        "node2": {"shared": {"dir": True, "token": None, "writable": True,
                             "mount": ["/", "overlay", "overlay"]}},
        "node3": {"shared": {"dir": False}},
    }  # fmt: skip
    got = {ch.node: ch for ch in shared.checks(c, data, s, "T", "")}
    assert got["node1"].ok and "nfs4 10.0.0.5:/export/proj at /shared" in got["node1"].detail
    assert not got["node2"].ok and got["node2"].detail == (
        "/shared is not the head's filesystem: the head's token is not there (here it is "
        "overlay overlay at /)"
    )
    assert got["node3"].detail == "/shared does not exist here"
    assert "mount the shared filesystem at /shared" in got["node3"].fix
    data["node2"]["shared"] = {**data["node1"]["shared"], "writable": False}
    assert shared.checks(c, data, s, "T", "")[1].detail == "/shared is not writable by mpi"
    (only,) = shared.checks(c, data, s, "T", "Permission denied")
    assert (only.node, only.ok) == ("node1", False) and "cannot write to /shared as mpi" in (
        only.detail
    )


# --- the sandbox's shared filesystem ----------------------------------------------------------


def test_the_sandbox_mounts_one_host_directory_in_every_node(isolated_state: Path) -> None:
    spec = SandboxSpec("unit-sbx", "10.90.0.0/24", (SandboxNode("a", 2301, "10.90.0.11"),),
                       shared="/shared")  # fmt: skip
    args = sandbox.node_run_args(spec, spec.nodes[0], Runtime("runc"), "img")
    assert f"{spec.shared_host_dir()}:/shared" in [args[i + 1] for i, a in enumerate(args)
                                                   if a == "-v"]  # fmt: skip
    plain = SandboxSpec("unit-sbx", "10.90.0.0/24", spec.nodes)
    assert "-v" not in sandbox.node_run_args(plain, plain.nodes[0], Runtime("runc"), "img")
