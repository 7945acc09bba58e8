"""The node health program (mpictl/scripts/node_health.py), run as a process the way Slurm and
doctor run it, on fake nodes: a config file pointing at temporary paths, a stub ``nvidia-smi``,
kernel logs as files, and the recorded RDMA ports of real GPU nodes (tests/data/recordings/rdma/,
through tests/unit/recordings.py).

What is recorded and what is not: the RDMA ports are real machines' output. The ``nvidia-smi``
CSV lines are written in the format of ``--query-gpu=...--format=csv,noheader`` with the H100's
recorded bus id and driver version (tests/data/recordings/h200-ubuntu2404/machine.txt and
../shared's H100 recording give the rest); the kernel log lines follow the format real nodes print
(NVRM's one-line XID, and the three-line "fallen off the bus" of newer drivers), written here.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from mpictl import programs
from tests.unit import recordings

ROOT = Path(__file__).resolve().parents[2]
# The program as the health role installs it: its shared code (hca_ports.py) in place.
PROGRAM = Path(tempfile.mkdtemp(prefix="mpictl-health-")) / "node_health.py"
PROGRAM.write_text(programs.source("node_health.py"))
atexit.register(shutil.rmtree, PROGRAM.parent, True)
DRIVER = "580.159.04"  # the recorded H100's and H200's driver


def gpu_line(i: int, *, ecc: str = "0", retired: str = "No", pending: str = "No") -> str:
    return f"{i}, 00000000:{0x18 + i:02X}:00.0, {DRIVER}, {ecc}, {retired}, {pending}, No"


HEALTHY_8 = "\n".join(gpu_line(i) for i in range(8)) + "\n"


def nvidia_smi(tmp: Path, out: str, rc: int = 0, sleep: float = 0) -> str:
    path = tmp / "nvidia-smi"
    path.write_text(f"#!/bin/sh\nsleep {sleep}\ncat <<'EOF'\n{out}EOF\nexit {rc}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def health(tmp: Path, *args: str, **cfg: object) -> subprocess.CompletedProcess[str]:
    """Run the program with a config of ``cfg`` (state file and an empty kernel log in ``tmp``
    unless given)."""
    config = {"state": str(tmp / "state.json"), "kmsg": str(tmp / "kmsg"),
              "disk_min_free_mib": {str(tmp): 1}, **cfg}  # fmt: skip
    if not (tmp / "kmsg").exists():
        (tmp / "kmsg").write_text("")
    (tmp / "health.json").write_text(json.dumps(config))
    return subprocess.run(
        [sys.executable, str(PROGRAM), "--config", str(tmp / "health.json"), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def as_json(tmp: Path, **cfg: object) -> dict:
    proc = health(tmp, "--json", **cfg)
    assert proc.returncode in (0, 1), proc.stderr
    got = json.loads(proc.stdout)
    assert (proc.returncode == 1) == bool(got["failed"])
    return got


# --- the cluster environment, the MPI user, disk and load ---------------------------------------


def test_a_healthy_cpu_node_passes_every_check(tmp_path: Path) -> None:
    for name in ("mpirun", "python"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    (tmp_path / "hostfile").write_text("node1 slots=2\n")
    (tmp_path / "environment").write_text(f'PATH="{tmp_path}:/usr/bin"\n')
    proc = health(tmp_path, environment_file=str(tmp_path / "environment"), programs=["mpirun"],
                  venv_python=str(tmp_path / "python"),
                  hostfile=str(tmp_path / "hostfile"), mpi_user="root", ssh_files=[],
                  max_load_per_cpu=1000)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr
    got = as_json(tmp_path, mpi_user="root", max_load_per_cpu=1000)
    assert got["failed"] == [] and got["warnings"] == []
    assert set(got["passed"]) == {"environment", "mpi user", "disk", "load"}


def test_a_removed_hostfile_and_a_missing_ssh_key_are_named(tmp_path: Path) -> None:
    proc = health(tmp_path, hostfile=str(tmp_path / "gone"), mpi_user="root",
                  ssh_files=[str(tmp_path / "id_ed25519")], max_load_per_cpu=1000)  # fmt: skip
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        f"environment: the hostfile {tmp_path}/gone is missing",
        f"mpi user: root's {tmp_path}/id_ed25519 is missing",
    ]


def test_mpirun_must_be_on_the_path_every_rank_gets(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "environment").write_text(f'PATH="/usr/bin:{tmp_path}/bin"\nLANG=C\n')
    cfg = {"environment_file": str(tmp_path / "environment"), "programs": ["mpirun"],
           "max_load_per_cpu": 1000}  # fmt: skip
    got = as_json(tmp_path, **cfg)
    assert got["failed"] == [
        ["environment", f"mpirun is not on the PATH of {tmp_path}/environment"]
    ]
    (tmp_path / "bin" / "mpirun").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "mpirun").chmod(0o755)
    assert as_json(tmp_path, **cfg)["failed"] == []
    cfg["environment_file"] = str(tmp_path / "none")
    assert as_json(tmp_path, **cfg)["failed"][0][1].endswith(
        "none cannot be read: No such file or directory"
    )


def test_ssh_files_are_looked_for_in_the_mpi_users_home(tmp_path: Path) -> None:
    home = Path(os.path.expanduser("~root"))
    got = as_json(tmp_path, mpi_user="root", ssh_files=["~/.no-such-file"], max_load_per_cpu=1000)
    assert got["failed"] == [["mpi user", f"root's {home}/.no-such-file is missing"]]


def test_an_unknown_mpi_user_fails(tmp_path: Path) -> None:
    got = as_json(tmp_path, mpi_user="no-such-user-here", max_load_per_cpu=1000)
    assert got["failed"] == [["mpi user", "no user no-such-user-here"]]


def test_a_full_disk_and_a_stuck_load_fail_with_their_figures(tmp_path: Path) -> None:
    got = as_json(tmp_path, disk_min_free_mib={str(tmp_path): 1 << 40}, max_load_per_cpu=-1)
    (disk,) = [d for c, d in got["failed"] if c == "disk"]
    assert disk.startswith(f"{tmp_path} has ") and disk.endswith(f"below {1 << 40} MiB")
    (load,) = [d for c, d in got["failed"] if c == "load"]
    assert load.startswith("15-minute load ") and f"({os.cpu_count()} CPUs)" in load


def test_a_path_whose_space_cannot_be_read_warns(tmp_path: Path) -> None:
    got = as_json(tmp_path, disk_min_free_mib={str(tmp_path / "nowhere"): 1}, max_load_per_cpu=1000)
    assert got["warnings"] == [["disk", f"cannot read the free space of {tmp_path}/nowhere: "
                                        "No such file or directory"]]  # fmt: skip


# --- GPUs ---------------------------------------------------------------------------------------


def gpu_node(tmp: Path, smi_out: str = HEALTHY_8, rc: int = 0, **cfg: object) -> dict:
    cfg = {"gpus": 8, "driver": DRIVER, "max_load_per_cpu": 1000,
           "nvidia_smi": nvidia_smi(tmp, smi_out, rc), **cfg}  # fmt: skip
    return as_json(tmp, **cfg)


def test_a_healthy_eight_gpu_node_passes(tmp_path: Path) -> None:
    got = gpu_node(tmp_path)
    assert got["failed"] == [] and got["warnings"] == []
    assert {"gpu", "xid"} <= set(got["passed"])


def test_a_missing_gpu_ecc_errors_and_pending_retirements_fail_per_gpu(tmp_path: Path) -> None:
    lines = [gpu_line(i) for i in range(7)]
    lines[2] = gpu_line(2, ecc="3")
    lines[5] = gpu_line(5, retired="Yes", pending="Yes")
    got = gpu_node(tmp_path, "\n".join(lines) + "\n")
    assert [d for c, d in got["failed"] if c == "gpu"] == [
        "7 GPUs visible, 8 expected",
        "GPU 2 (00000000:1A:00.0): 3 uncorrectable ECC errors",
        "GPU 5 (00000000:1D:00.0): retired pages pending (reset the GPU)",
        "GPU 5 (00000000:1D:00.0): row remapping pending (reset the GPU)",
    ]


def test_gpus_without_ecc_reporting_are_not_failed(tmp_path: Path) -> None:
    # consumer GPUs and ECC off print [N/A]
    out = "".join(gpu_line(i, ecc="[N/A]", retired="[N/A]") + "\n" for i in range(2))
    assert gpu_node(tmp_path, out, gpus=2)["failed"] == []


def test_a_driver_upgraded_under_the_cluster_is_named(tmp_path: Path) -> None:
    got = gpu_node(tmp_path, driver="570.158.01")
    want = f"driver {DRIVER}, provisioned with 570.158.01 (reboot after a driver upgrade, or "
    assert got["failed"] == [["gpu", want + "provision again)"]]


def test_an_nvidia_smi_that_fails_or_hangs_fails_the_gpu_check(tmp_path: Path) -> None:
    got = gpu_node(tmp_path, "Unable to determine the device handle for GPU0000:1A:00.0: "
                   "Unknown Error\n", rc=9)  # fmt: skip
    want = "nvidia-smi failed (exit 9): Unable to determine the device handle for GPU0000:1A:00.0"
    assert got["failed"][0] == ["gpu", want + ": Unknown Error"]
    slow = nvidia_smi(tmp_path, HEALTHY_8, sleep=5)
    got = as_json(tmp_path, gpus=8, nvidia_smi=slow, nvidia_smi_timeout=1, max_load_per_cpu=1000)
    assert got["failed"][0] == ["gpu", "nvidia-smi failed (exit 124): no answer within 1 s"]


def test_a_cpu_node_never_runs_nvidia_smi(tmp_path: Path) -> None:
    got = as_json(tmp_path, gpus=0, nvidia_smi=str(tmp_path / "absent"), max_load_per_cpu=1000)
    assert got["failed"] == [] and "gpu" not in got["passed"] and "xid" not in got["passed"]


# --- XID errors in the kernel log ---------------------------------------------------------------

XID_79 = ("[ 5021.118402] NVRM: Xid (PCI:0000:1a:00): 79, pid=2291, name=python3, "
          "GPU has fallen off the bus.")  # fmt: skip
XID_13 = ("[ 4000.000001] NVRM: Xid (PCI:0000:1b:00): 13, pid=1771, name=python3, "
          "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address")  # fmt: skip
OFF_BUS = [
    "[ 6100.204117] NVRM: The NVIDIA GPU 0000:1c:00.0",
    "               NVRM: (PCI ID: 10de:2330) installed in this system has",
    "               NVRM: fallen off the bus and is not responding to commands.",
]
BOOT = [
    "[    0.000000] Linux version 6.8.0-49-generic",
    "[    2.112000] mlx5_core 0000:ab:00.0: ok",
]


def test_a_new_xid_fails_until_acknowledged_and_an_old_one_never_again(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("\n".join(BOOT) + "\n")
    assert "xid" in gpu_node(tmp_path)["passed"]  # the position is now past the boot lines
    kmsg.write_text("\n".join([*BOOT, XID_13, XID_79]) + "\n")
    want = [["xid", "XID 79 on PCI 0000:1a:00: pid=2291, name=python3, GPU has fallen off the bus"]]
    assert gpu_node(tmp_path)["failed"] == want  # XID 13 is the job's own
    assert gpu_node(tmp_path)["failed"] == want  # still, on the next look
    proc = health(tmp_path, "--ack-xid")
    assert proc.returncode == 0 and proc.stdout == "node_health: 1 XID failure(s) acknowledged\n"
    assert gpu_node(tmp_path)["failed"] == []
    kmsg.write_text("\n".join([*BOOT, XID_13, XID_79, *OFF_BUS]) + "\n")
    assert gpu_node(tmp_path)["failed"] == [
        ["xid", "XID 79 on PCI 0000:1c:00.0: GPU has fallen off the bus"]
    ]


def test_the_ring_dropping_old_lines_neither_hides_a_new_xid_nor_clears_an_old_one(
    tmp_path: Path,
) -> None:
    # dmesg is a ring buffer: once full, old lines leave as new ones come (same line count)
    ring = [f"[ {100 + i}.000000] eth0: link up" for i in range(6)]
    (tmp_path / "kmsg").write_text("\n".join(ring) + "\n")
    assert gpu_node(tmp_path)["failed"] == []
    mig = "[ 200.500000] NVRM: Xid (PCI:0000:3b:00 GPU-I:05): 94, pid=77, Contained ECC error."
    (tmp_path / "kmsg").write_text("\n".join([*ring[1:], mig]) + "\n")
    want = [["xid", "XID 94 on PCI 0000:3b:00: pid=77, Contained ECC error"]]
    assert gpu_node(tmp_path)["failed"] == want
    # the XID's line leaves the ring: the failure stays until it is acknowledged
    (tmp_path / "kmsg").write_text("\n".join(ring[:5] + ["[ 300.0] eth0: link up"]) + "\n")
    assert gpu_node(tmp_path)["failed"] == want
    assert health(tmp_path, "--ack-xid").stdout.startswith("node_health: 1 XID failure(s)")
    assert gpu_node(tmp_path)["failed"] == []


def test_one_fallen_gpu_is_one_failure(tmp_path: Path) -> None:
    # drivers follow the XID 79 line with their own sentence about the same GPU
    (tmp_path / "kmsg").write_text(
        XID_79 + "\n[ 5021.118500] NVRM: GPU 0000:1a:00.0: GPU has fallen off the bus.\n"
    )
    assert [c for c, _ in gpu_node(tmp_path)["failed"]] == ["xid"]


def test_a_log_whose_timestamps_went_back_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "kmsg").write_text("[ 9000.000000] eth0: link up\n")
    assert gpu_node(tmp_path)["failed"] == []
    (tmp_path / "kmsg").write_text(XID_79 + "\n")  # 5021 s: before the position
    assert gpu_node(tmp_path)["failed"][0][0] == "xid"


def test_a_kernel_log_that_cannot_be_read_warns_and_never_passes(tmp_path: Path) -> None:
    got = gpu_node(tmp_path, kmsg=str(tmp_path / "no-kmsg"))
    assert "xid" not in got["passed"]
    assert got["warnings"] == [
        ["xid", f"cannot read {tmp_path}/no-kmsg: No such file or directory"]
    ]
    proc = health(tmp_path, gpus=8, kmsg=str(tmp_path / "no-kmsg"), max_load_per_cpu=1000,
                  nvidia_smi=nvidia_smi(tmp_path, HEALTHY_8), driver=DRIVER)  # fmt: skip
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == [
        f"warning: xid: cannot read {tmp_path}/no-kmsg: No such file or directory"
    ]


# --- Fabric Manager on NVSwitch systems ---------------------------------------------------------


def systemctl(tmp: Path, state: str, rc: int) -> str:
    path = tmp / "systemctl"
    path.write_text(f"#!/bin/sh\necho {state}\nexit {rc}\n")
    path.chmod(0o755)
    return str(path)


def test_fabric_manager_must_be_active_where_nvswitches_are(tmp_path: Path) -> None:
    (tmp_path / "nvidia-nvswitch0").write_text("")
    nvswitch = str(tmp_path / "nvidia-nvswitch*")
    got = gpu_node(tmp_path, nvswitch_glob=nvswitch, systemctl=systemctl(tmp_path, "failed", 3))
    assert got["failed"] == [
        ["fabric manager", "nvidia-fabricmanager is failed on an NVSwitch system"]
    ]
    got = gpu_node(tmp_path, nvswitch_glob=nvswitch, systemctl=systemctl(tmp_path, "active", 0))
    assert got["failed"] == [] and "fabric manager" in got["passed"]
    # no NVSwitch (a PCIe or one-GPU node): not asked
    got = gpu_node(tmp_path, nvswitch_glob=str(tmp_path / "none*"))
    assert "fabric manager" not in got["passed"]
    got = gpu_node(tmp_path, nvswitch_glob=nvswitch, systemctl=str(tmp_path / "no-systemctl"))
    assert got["warnings"][0][0] == "fabric manager"


# --- RDMA ports: recorded real nodes -----------------------------------------------------------


def rails(tree: Path, hca_type: str) -> dict[str, int]:
    """Every port of an HCA type in a recorded tree, with the rate the node was built for."""
    out = {}
    for dev in sorted(tree.iterdir()):
        if (dev / "hca_type").exists() and (dev / "hca_type").read_text().strip() == hca_type:
            out[f"{dev.name}/1"] = 400
    return out


def test_the_recorded_h100_infiniband_rails_are_healthy(tmp_path: Path) -> None:
    tree = recordings.tree(recordings.H100_IB_IBSTAT, tmp_path / "ib")
    ports = rails(tree, "MT4129")
    assert len(ports) == 8
    got = as_json(tmp_path, rdma_ports=ports, sysfs_ib=str(tree), max_load_per_cpu=1000)
    assert got["failed"] == [] and "rdma" in got["passed"]


def test_the_recorded_roce_node_with_two_rails_down_names_them(tmp_path: Path) -> None:
    tree = recordings.tree(recordings.H100_ROCE_IBSTAT, tmp_path / "ib")
    ports = rails(tree, "MT4129")
    got = as_json(tmp_path, rdma_ports=ports, sysfs_ib=str(tree), max_load_per_cpu=1000)
    assert got["failed"] == [["rdma", "mlx5_11/1 is DOWN"], ["rdma", "mlx5_5/1 is DOWN"]]


def test_a_rail_that_came_up_slow_or_vanished_is_named(tmp_path: Path) -> None:
    tree = recordings.tree(recordings.ONE_RAIL_IBSTAT, tmp_path / "ib")  # mlx5_0 at 200, active
    got = as_json(tmp_path, rdma_ports={"mlx5_0/1": 400, "mlx5_9/1": 200}, sysfs_ib=str(tree),
                  max_load_per_cpu=1000)  # fmt: skip
    assert got["failed"] == [
        ["rdma", "mlx5_0/1 runs at 200 Gb/sec, 400 Gb/sec expected"],
        ["rdma", "mlx5_9/1 is missing"],
    ]


# --- usage --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_a_config_that_cannot_be_read_is_exit_2_with_one_line(tmp_path: Path, text: str) -> None:
    (tmp_path / "bad.json").write_text(text)
    proc = subprocess.run([sys.executable, str(PROGRAM), "--config", str(tmp_path / "bad.json")],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"node_health: cannot read {tmp_path}/bad.json: ")
    assert len(proc.stderr.splitlines()) == 1


# --- Slurm's HealthCheckProgram: drain and resume -----------------------------------------------


def scontrol(tmp: Path, state: str, reason: str = "", rc: int = 0) -> str:
    """A scontrol that answers `show node` in its one-line form and logs every call."""
    line = (f"NodeName=node2 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 State={state} "
            f"ThreadsPerCore=1 Partitions=main")  # fmt: skip
    if reason:
        line += f" Reason={reason} [root@2026-11-26T08:10:00]"
    path = tmp / "scontrol"
    path.write_text(
        f'#!/bin/sh\necho "$*" >> "{tmp}/scontrol.log"\n'
        f'if [ "$1" = show ]; then echo "{line}"; exit {rc}; fi\nexit 0\n'
    )
    path.chmod(0o755)
    (tmp / "scontrol.log").unlink(missing_ok=True)
    return str(path)


def updates(tmp: Path) -> list[str]:
    log = tmp / "scontrol.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [line for line in lines if line.startswith("update")]


def slurm_run(tmp: Path, stub: str, **cfg: object) -> subprocess.CompletedProcess[str]:
    return health(tmp, "--slurm", slurm_node="node2", scontrol=stub, max_load_per_cpu=1000, **cfg)


def test_a_failing_node_is_drained_with_the_check_as_reason(tmp_path: Path) -> None:
    stub = scontrol(tmp_path, "IDLE")
    proc = slurm_run(tmp_path, stub, hostfile=str(tmp_path / "gone"))
    assert proc.returncode == 0, proc.stderr
    reason = f"mpictl-health: environment: the hostfile {tmp_path}/gone is missing"
    assert updates(tmp_path) == [f"update NodeName=node2 State=DRAIN Reason={reason}"]
    assert proc.stdout == f"node_health: drained node2: {reason}\n"
    # the next look finds it drained for that same reason: nothing to do
    stub = scontrol(tmp_path, "IDLE+DRAIN", reason)
    slurm_run(tmp_path, stub, hostfile=str(tmp_path / "gone"))
    assert updates(tmp_path) == []


def test_a_repaired_node_is_resumed_but_never_an_operators_drain(tmp_path: Path) -> None:
    stub = scontrol(tmp_path, "IDLE+DRAIN", "mpictl-health: disk: /tmp has 3 MiB free")
    proc = slurm_run(tmp_path, stub)
    assert updates(tmp_path) == ["update NodeName=node2 State=RESUME"]
    assert proc.stdout.startswith("node_health: resumed node2 (was: mpictl-health: disk:")
    # drained by hand: left drained, whether the checks pass or fail
    stub = scontrol(tmp_path, "IDLE+DRAIN", "bad DIMM, ticket 4711")
    slurm_run(tmp_path, stub)
    assert updates(tmp_path) == []
    proc = slurm_run(tmp_path, stub, hostfile=str(tmp_path / "gone"))
    assert updates(tmp_path) == []
    assert "drained by someone else (bad DIMM, ticket 4711" in proc.stdout


def test_a_healthy_node_in_service_is_left_alone(tmp_path: Path) -> None:
    slurm_run(tmp_path, scontrol(tmp_path, "MIXED"))
    assert updates(tmp_path) == []


def test_several_failures_give_the_first_and_a_count(tmp_path: Path) -> None:
    stub = scontrol(tmp_path, "ALLOCATED")
    slurm_run(tmp_path, stub, hostfile=str(tmp_path / "gone"), mpi_user="no-such-user-here")
    (update,) = updates(tmp_path)
    assert update.endswith("the hostfile " + str(tmp_path) + "/gone is missing (+1 more)")


def test_a_slurm_that_does_not_answer_changes_nothing_and_says_so(tmp_path: Path) -> None:
    proc = slurm_run(tmp_path, scontrol(tmp_path, "IDLE", rc=1), hostfile=str(tmp_path / "gone"))
    assert proc.returncode == 1 and updates(tmp_path) == []
    assert proc.stderr.startswith("node_health: scontrol show node node2 failed")


# --- Slurm's Prolog (slurm_health_prolog) ---------------------------------------------------------


def prolog_run(tmp: Path, stub: str, **cfg: object) -> subprocess.CompletedProcess[str]:
    return health(tmp, "--prolog", slurm_node="node2", scontrol=stub, max_load_per_cpu=1000, **cfg)


def test_the_prolog_fails_a_bad_node_and_the_health_check_takes_slurms_drain_back(
    tmp_path: Path,
) -> None:
    gone = str(tmp_path / "gone")
    reason = f"mpictl-health: environment: the hostfile {gone} is missing"
    proc = prolog_run(tmp_path, scontrol(tmp_path, "ALLOCATED"), hostfile=gone)
    # exit 1: Slurm requeues the job and drains the node itself
    assert proc.returncode == 1, proc.stderr
    assert updates(tmp_path) == [f"update NodeName=node2 State=DRAIN Reason={reason}"]
    # slurmctld's own reason replaced ours: the next health check puts the failed check back
    slurm_run(tmp_path, scontrol(tmp_path, "IDLE+DRAIN", "Prolog error"), hostfile=gone)
    assert updates(tmp_path) == [f"update NodeName=node2 State=DRAIN Reason={reason}"]
    # repaired: that drain is its own, so it is resumed, and only once
    slurm_run(tmp_path, scontrol(tmp_path, "IDLE+DRAIN", "Prolog error"))
    assert updates(tmp_path) == ["update NodeName=node2 State=RESUME"]
    slurm_run(tmp_path, scontrol(tmp_path, "IDLE+DRAIN", "Prolog error"))
    assert updates(tmp_path) == []  # a later "Prolog error" is not its own any more


def test_a_healthy_prolog_passes_and_never_takes_another_prologs_drain(tmp_path: Path) -> None:
    # a node that passes asks Slurm nothing: a busy slurmctld never fails a healthy node's prolog
    proc = prolog_run(tmp_path, scontrol(tmp_path, "ALLOCATED", rc=1))
    assert proc.returncode == 0 and not (tmp_path / "scontrol.log").exists()
    # "Prolog error" without a failure of this program's prolog (another prolog of the site)
    slurm_run(tmp_path, scontrol(tmp_path, "IDLE+DRAIN", "Prolog error"))
    assert updates(tmp_path) == []
    # an operator's drain: the job is still refused while the node is bad, and a "Prolog
    # error" that follows is not this program's to resume
    proc = prolog_run(tmp_path, scontrol(tmp_path, "MIXED+DRAIN", "ticket 4711"), hostfile="/gone")
    assert proc.returncode == 1 and updates(tmp_path) == []
    slurm_run(tmp_path, scontrol(tmp_path, "IDLE+DRAIN", "Prolog error"))
    assert updates(tmp_path) == []


def test_a_failing_prolog_fails_even_when_slurm_does_not_answer(tmp_path: Path) -> None:
    proc = prolog_run(tmp_path, scontrol(tmp_path, "IDLE", rc=1), hostfile="/gone")
    assert proc.returncode == 1 and updates(tmp_path) == []
    # the "Prolog error" drain Slurm then sets is taken back once the node is repaired
    slurm_run(tmp_path, scontrol(tmp_path, "IDLE+DRAIN", "Prolog error"))
    assert updates(tmp_path) == ["update NodeName=node2 State=RESUME"]


# --- dcgmi diag (--dcgm, the prolog's) ------------------------------------------------------------
# dcgmi's table as DCGM 3.3 prints it (its source's DIAG_HEADER/DIAG_DATA rows, the 45-character
# result cell wrapping mid-word), with results as public reports of real nodes show them; written
# here, not recorded from a machine of this project (it has no DCGM).

FOOTER = "+---------------------------+------------------------------------------------+\n"
DCGM_TOP = """Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 3.3.9                                          |
| Driver Version Detected   | 580.159.04                                     |
| GPU Device IDs Detected   | 2330,2330,2330,2330,2330,2330,2330,2330        |
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
| NVML Library              | Pass                                           |
| CUDA Main Library         | Pass                                           |
| Permissions and OS Blocks | Pass                                           |
| Persistence Mode          | Pass                                           |
"""
DCGM_PASS = (
    DCGM_TOP
    + """| Environment Variables     | Pass                                           |
| Page Retirement/Row Remap | Pass                                           |
| Graphics Processes        | Pass                                           |
| Inforom                   | Pass                                           |
+---------------------------+------------------------------------------------+
"""
)
DCGM_ROW_REMAP = (
    DCGM_TOP
    + """| Environment Variables     | Pass                                           |
| Page Retirement/Row Remap | Fail                                           |
| Error                     | GPU 3 had uncorrectable memory errors and row  |
|                           |  remappings are pending                        |
| Graphics Processes        | Pass                                           |
+---------------------------+------------------------------------------------+
"""
)
DCGM_MEMORY = (
    DCGM_PASS.removesuffix(FOOTER)
    + """+-----  Hardware  ----------+------------------------------------------------+
| GPU Memory                | Pass - GPUs: 1, 2, 3, 4, 5, 6, 7               |
|                           | Fail - GPU: 0                                  |
| Warning                   | GPU 0 Thermal violations totaling 13.3 second  |
|                           | s started at 9.7 seconds into the test for GP  |
|                           | U 0                                            |
"""
    + FOOTER
)


def dcgmi(tmp: Path, out: str, rc: int = 0, sleep: float = 0) -> str:
    path = tmp / "dcgmi"
    path.write_text(f'#!/bin/sh\necho "$*" > "{tmp}/dcgmi.args"\nsleep {sleep}\n'
                    f"cat <<'EOF'\n{out}EOF\nexit {rc}\n")  # fmt: skip
    path.chmod(0o755)
    return str(path)


def dcgm_json(tmp: Path, **cfg: object) -> dict:
    proc = health(tmp, "--json", "--dcgm", max_load_per_cpu=1000, **cfg)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def test_a_passing_dcgm_diagnostic_passes_at_the_configured_level(tmp_path: Path) -> None:
    got = dcgm_json(tmp_path, dcgmi=dcgmi(tmp_path, DCGM_PASS), dcgm_diag_level=2)
    assert "dcgm" in got["passed"] and got["failed"] == []
    assert (tmp_path / "dcgmi.args").read_text().split() == ["diag", "-r", "2"]


def test_failed_dcgm_tests_are_named_with_the_error_under_them(tmp_path: Path) -> None:
    got = dcgm_json(tmp_path, dcgmi=dcgmi(tmp_path, DCGM_ROW_REMAP, rc=226))
    want = ("Page Retirement/Row Remap: Fail (Error: GPU 3 had uncorrectable memory errors and "
            "row remappings are pending)")  # fmt: skip
    assert got["failed"] == [["dcgm", want]]


def test_one_failed_gpu_in_a_test_and_its_warning(tmp_path: Path) -> None:
    got = dcgm_json(tmp_path, dcgmi=dcgmi(tmp_path, DCGM_MEMORY, rc=226))
    assert got["failed"] == [["dcgm", "GPU Memory: Pass - GPUs: 1, 2, 3, 4, 5, 6, 7 Fail - GPU: 0 "
                              "(Warning: GPU 0 Thermal violations totaling 13.3 seconds started "
                              "at 9.7 seconds into the test for GPU 0)"]]  # fmt: skip


def test_dcgmi_that_fails_without_a_table_or_hangs_fails_the_check(tmp_path: Path) -> None:
    got = dcgm_json(
        tmp_path, dcgmi=dcgmi(tmp_path, "Error: unable to connect to host engine\n", 255)
    )
    assert got["failed"] == [["dcgm", "dcgmi diag -r 1 exited 255: Error: unable to connect to "
                              "host engine"]]  # fmt: skip
    got = dcgm_json(tmp_path, dcgmi=dcgmi(tmp_path, DCGM_PASS, sleep=5), dcgm_timeout=1)
    assert got["failed"] == [["dcgm", "dcgmi diag -r 1 exited 124: no answer within 1 s"]]


def test_without_dcgmi_auto_skips_and_true_fails(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-dcgmi")
    got = dcgm_json(tmp_path, dcgmi=missing)
    assert "dcgm" not in got["passed"] and got["failed"] == []
    got = dcgm_json(tmp_path, dcgmi=missing, dcgm_diag=True)
    assert got["failed"] == [["dcgm", f"{missing} is not installed (dcgm_diag is true)"]]
    # and never without --dcgm (every health check would take a minute)
    got = as_json(tmp_path, dcgmi=dcgmi(tmp_path, DCGM_ROW_REMAP, rc=226), max_load_per_cpu=1000)
    assert "dcgm" not in got["passed"] and got["failed"] == []
