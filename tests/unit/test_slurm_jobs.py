"""``--launcher slurm``: the batch script (slurm_plan), the record side (slurm), the head's
program (scripts/slurm_job.sh) against a one-host fake Slurm (tests/unit/fake_slurm.py), srun's
labels (ranks) and the torch wrapper's Slurm variables."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from mpictl import jobs, network, programs, ranks, slurm, slurm_plan, submit
from mpictl.errors import UsageError
from mpictl.planner import LaunchOptions
from tests.unit.jobside import three

FAKE = Path(__file__).with_name("fake_slurm.py")
SCRIPTS = Path(__file__).resolve().parents[2] / "mpictl" / "scripts"


def build(**kw):  # type: ignore[no-untyped-def]
    c = three()
    options = LaunchOptions(command=kw.pop("command", ["python", "train.py"]), **kw)
    return slurm_plan.plan(c, options, "J1", network.derive_network(c))


def sbatch_flags(script: str) -> list[str]:
    return [line.split(None, 1)[1] for line in script.splitlines() if line.startswith("#SBATCH ")]


# --------------------------------------------------------------------------------------------
# The batch script


def test_default_job_fills_every_slot_of_every_node() -> None:
    p = build()
    flags = sbatch_flags(p.script)
    assert "--ntasks=6" in flags and "--nodes=3" in flags
    assert not any(f.startswith("--nodelist") for f in flags)
    assert p.launcher == "slurm" and p.ranks == 6
    assert p.mpirun[:2] == ["srun", "--mpi=pmix"] and "--label" in p.mpirun
    assert shlex.join(p.argv) in p.script
    assert "export OMPI_MCA_pml=ob1" in p.script
    assert "export OMPI_MCA_btl_tcp_if_include=eth0" in p.script
    assert "export MPICTL_JOB_ID=J1" in p.script
    assert "export NCCL_SOCKET_IFNAME=eth0" in p.script
    assert '"$dir/exit_code"' in p.script and '"$dir/pid"' in p.script


def test_np_alone_lets_slurm_choose_the_nodes() -> None:
    flags = sbatch_flags(build(np=4).script)
    assert "--ntasks=4" in flags
    assert not any(f.startswith("--nodes") for f in flags)


def test_hosts_ppn_and_oversubscribe_map_to_the_allocation() -> None:
    p = build(hosts=["node2", "node3"], ppn=1)
    flags = sbatch_flags(p.script)
    assert {"--ntasks=2", "--nodes=2", "--nodelist=node2,node3", "--ntasks-per-node=1"} <= set(
        flags
    )
    over = build(np=12, oversubscribe=True)
    assert "--overcommit" in sbatch_flags(over.script) and "--overcommit" in over.mpirun


def test_the_planner_refuses_what_mpirun_would_refuse() -> None:
    with pytest.raises(UsageError, match="more ranks than"):
        build(np=7)
    with pytest.raises(UsageError, match="unknown host"):
        build(hosts=["nosuch"])
    with pytest.raises(UsageError, match="no command"):
        build(command=[])


def test_user_env_and_mca_are_exported_and_win() -> None:
    p = build(env=["FOO=a b", "NCCL_SOCKET_IFNAME=ib0"], mca=["btl_tcp_if_include=ib0"])
    assert "export FOO='a b'" in p.script
    assert "export NCCL_SOCKET_IFNAME=eth0" not in p.script
    assert "export OMPI_MCA_btl_tcp_if_include=ib0" in p.script
    assert p.script.count("OMPI_MCA_btl_tcp_if_include") == 1


def test_torch_wraps_the_command_and_sets_master_to_the_first_nodes_address() -> None:
    p = build(torch=True, wdir="/home/mpi/.mpictl/workdirs/x")
    assert p.command[0].endswith("/mpictl-torch-env")
    assert "node1) MASTER_ADDR=node1 ;;" in p.script  # three(): addresses are the names
    assert "export MASTER_PORT=29500" in p.script
    assert "--chdir=/home/mpi/.mpictl/workdirs/x" in sbatch_flags(p.script)


def test_the_script_runs_and_keeps_its_files_where_the_head_reads_them(tmp_path: Path) -> None:
    script = slurm_plan.batch_script(
        ["--ntasks=1"], ["export A=1"], ["sh", "-c", "echo $A; exit 3"], "J9"
    )
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    proc = subprocess.run(
        ["bash", str(path)], env={**os.environ, "HOME": str(tmp_path)}, check=False
    )
    assert proc.returncode == 3
    directory = tmp_path / slurm_plan.remote_dir("J9")
    assert (directory / "output.log").read_text() == "1\n"
    assert (directory / "exit_code").read_text() == "3\n"
    assert (directory / "pid").read_text().strip().isdigit()


# --------------------------------------------------------------------------------------------
# States and records


def test_parse_state() -> None:
    s = slurm.parse_state("12 failed 3 node1 node1,node2")
    assert (s.slurm_id, s.state, s.exit_code, s.batch_host, s.nodes) == (
        "12",
        "failed",
        3,
        "node1",
        ["node1", "node2"],
    )
    assert slurm.parse_state("12 pending - - -").ended is False
    for bad in ("12 running", "12 odd - - -", "12 failed x node1 -"):
        with pytest.raises(ValueError):
            slurm.parse_state(bad)


J5 = "20260105-000000-0000a5"


def _record(status: str = jobs.RUNNING) -> jobs.JobRecord:
    record = jobs.create(
        J5, command=["x"], launch_line="srun x", inventory="/i", head="node1", hosts=[], ranks=2
    )
    record.extra["slurm"] = {"id": "12", "dir": f".mpictl/slurm/{J5}"}
    jobs.save(record)
    return record


@pytest.mark.parametrize(
    ("line", "status", "code"),
    [
        ("12 completed 0 node1 node1", jobs.SUCCEEDED, 0),
        ("12 failed 3 node1 node1", jobs.FAILED, 3),
        ("12 cancelled 0 node1 node1", jobs.CANCELLED, 143),
        ("12 timeout 0 node1 node1", "timeout", 124),
        ("12 lost - node1 -", jobs.UNKNOWN, -1),
    ],
)
def test_settle_finishes_the_record_from_slurms_state(line: str, status: str, code: int) -> None:
    record = slurm.settle(_record(), slurm.parse_state(line))
    assert (record.status, record.exit_code) == (status, code)
    assert jobs.load(J5).extra["slurm"]["batch_host"] == "node1"


def test_settle_leaves_a_running_job_and_a_finished_record_alone() -> None:
    record = slurm.settle(_record(), slurm.parse_state("12 running - node2 node2,node3"))
    assert record.status == jobs.RUNNING
    assert record.extra["slurm"]["nodes"] == ["node2", "node3"]
    jobs.finish(record, exit_code=130, status="interrupted")
    again = slurm.settle(record, slurm.parse_state("12 cancelled 0 node2 -"))
    assert (again.status, again.exit_code) == ("interrupted", 130)


def test_a_slurm_record_whose_controller_died_is_not_unknown() -> None:
    record = _record()
    record.controller = {"host": "elsewhere", "pid": 1}
    jobs.save(record)
    assert jobs.resolved(jobs.load(J5)).status == jobs.RUNNING


def test_unknown_launcher_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--launcher 'nosuch': choose one of mpirun, slurm"):
        submit.launcher("nosuch")
    assert isinstance(submit.launcher("slurm"), slurm.SlurmLauncher)


def test_srun_labels_split_into_ranks() -> None:
    text = "0: a\n 1: b\nsrun: error: x\n0: c\n"
    assert ranks.of_rank(text, 0, 2, launcher="slurm") == "a\nc\n"
    assert ranks.of_rank(text, 1, 2, launcher="slurm") == "b\n"
    assert ranks.of_rank("[1,0]<stdout>: a\n", 0, 1) == "a\n"


# --------------------------------------------------------------------------------------------
# scripts/slurm_job.sh on a one-host fake Slurm


class Head:
    def __init__(self, tmp_path: Path, with_slurm: bool = True) -> None:
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.slurm_dir = tmp_path / "slurm"
        bindir = tmp_path / "bin"
        bindir.mkdir()
        if with_slurm:
            for name in ("sbatch", "scontrol", "scancel", "srun"):
                (bindir / name).symlink_to(FAKE)
        self.env = {
            **os.environ,
            "HOME": str(self.home),
            "PATH": f"{bindir}:{os.environ['PATH']}",
            "FAKE_SLURM_DIR": str(self.slurm_dir),
        }

    def run(
        self, *args: str, stdin: str = "", timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", programs.source("slurm_job.sh"), "mpictl-slurm", *args],
            env=self.env,
            cwd=self.home,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def submit(self, command: list[str], job_id: str = "J1") -> str:
        script = slurm_plan.batch_script(["--ntasks=1"], [], ["srun", "--label", *command], job_id)
        proc = self.run("submit", slurm_plan.remote_dir(job_id), stdin=script)
        assert proc.returncode == 0, proc.stderr
        words = proc.stdout.split()
        assert words[0] == "submitted"
        return words[1]


def test_slurm_job_program_is_package_data() -> None:
    assert programs.source("slurm_job.sh") == (SCRIPTS / "slurm_job.sh").read_text()


def test_check_names_the_fix_where_slurm_is_missing(tmp_path: Path) -> None:
    proc = Head(tmp_path, with_slurm=False).run("check")
    assert proc.returncode == 3
    assert "slurm_enabled: true" in proc.stderr


def test_submit_follow_and_state_of_a_job_that_fails(tmp_path: Path) -> None:
    head = Head(tmp_path)
    sid = head.submit(["sh", "-c", "echo one; sleep 1; echo two; exit 5"])
    d = slurm_plan.remote_dir("J1")
    proc = head.run("logs", sid, d, "-", "0", "follow")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "0: one\n0: two\n"
    state = slurm.parse_state(proc.stderr.strip().splitlines()[-1].removeprefix("mpictl-state "))
    assert (state.state, state.exit_code) == ("failed", 5)
    # from an offset: only what is new
    again = head.run("logs", sid, d, "-", str(len("0: one\n")))
    assert again.stdout == "0: two\n"
    # slurmctld forgot it: the exit code file on the batch host answers
    (head.slurm_dir / "forgotten").write_text(sid)
    host = state.batch_host
    line = head.run("state", f"{sid}:{d}:{host}").stdout.strip()
    assert line.split()[1:3] == ["failed", "5"]
    assert head.run("state", f"{sid}:{d}:-").stdout.split()[1] == "lost"
    # the batch host never recorded: every candidate node is asked (an unknown one fails fast)
    found = head.run("state", f"{sid}:{d}:nosuch.invalid,{host}").stdout.split()
    assert found[1:4] == ["failed", "5", host]


def test_cancel_ends_a_running_job(tmp_path: Path) -> None:
    head = Head(tmp_path)
    sid = head.submit(["sleep", "60"])
    d = slurm_plan.remote_dir("J1")
    deadline = time.monotonic() + 10
    while head.run("state", f"{sid}:{d}:-").stdout.split()[1] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    proc = head.run("cancel", f"{sid}:{d}:-")
    assert proc.stdout.split()[1] == "cancelled"
    pid = int((head.home / d / "pid").read_text())
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}"):
        assert time.monotonic() < deadline, "the batch script still runs"
        time.sleep(0.1)


def test_sbatch_refusal_is_one_line(tmp_path: Path) -> None:
    head = Head(tmp_path)
    head.slurm_dir.mkdir()
    (head.slurm_dir / "refuse").write_text("")
    proc = head.run("submit", "d", stdin="#!/bin/bash\ntrue\n")
    assert proc.returncode == 1
    assert "Requested node configuration is not available" in proc.stderr


# --------------------------------------------------------------------------------------------
# The torch wrapper under srun


def _torch_env(env: dict[str, str]) -> dict[str, str]:
    proc = subprocess.run(
        ["sh", str(SCRIPTS / "mpictl-torch-env"), "env"],
        env={"PATH": os.environ["PATH"], "MPICTL_GPU_COUNT": "2", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def test_torch_wrapper_maps_slurms_variables() -> None:
    got = _torch_env(
        {
            "SLURM_PROCID": "3",
            "SLURM_NTASKS": "5",
            "SLURM_LOCALID": "1",
            "SLURM_NODEID": "1",
            "SLURM_STEP_TASKS_PER_NODE": "2(x2),1",
        }
    )
    assert [got[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")] == [
        "3",
        "5",
        "1",
        "2",
    ]
    assert got["CUDA_VISIBLE_DEVICES"] == "1"
    last = _torch_env(
        {
            "SLURM_PROCID": "4",
            "SLURM_NTASKS": "5",
            "SLURM_LOCALID": "0",
            "SLURM_NODEID": "2",
            "SLURM_STEP_TASKS_PER_NODE": "2(x2),1",
        }
    )
    assert last["LOCAL_WORLD_SIZE"] == "1"


def test_torch_wrapper_prefers_openmpis_variables_inside_an_allocation() -> None:
    got = _torch_env(
        {
            "OMPI_COMM_WORLD_RANK": "2",
            "OMPI_COMM_WORLD_SIZE": "3",
            "SLURM_PROCID": "0",
            "SLURM_NTASKS": "1",
        }
    )
    assert (got["RANK"], got["WORLD_SIZE"]) == ("2", "3")


def test_gpu_nodes_ask_for_their_gpus() -> None:
    from tests.unit.jobside import cluster, node

    gpu = cluster(node("g1", 8, gpus=8), node("g2", 4, gpus=4))
    p = slurm_plan.plan(gpu, LaunchOptions(command=["x"], ppn=1), "J1")
    assert "--gres=gpu:4" in sbatch_flags(p.script)
    assert not any(f.startswith("--gres") for f in sbatch_flags(build().script))


def test_a_node_failure_is_not_exit_0() -> None:
    record = slurm.settle(_record(), slurm.parse_state("12 failed 0 node1 node1"))
    assert (record.status, record.exit_code) == (jobs.FAILED, 1)
