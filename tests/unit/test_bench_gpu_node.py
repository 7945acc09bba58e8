"""bench/gpu_node.sh's helpers (issue 23, defect 9): the sshd start on a machine without `ss`,
`service` or systemd, the figures read through mpirun's rank tags, and a failed compile that is
reported as failed."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

from bench import build_times, gpu_results

ROOT = Path(__file__).resolve().parents[2]

# /proc/net/tcp as the kernel writes it: a header, then one socket per line (local address in
# hex; state 0A is LISTEN). 0016 is port 22, 0CEA port 3306.
TCP_HEADER = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid"
    "  timeout inode\n"
)
LISTEN_22 = (
    "   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0 0 1\n"
)
LISTEN_OTHER = (
    "   1: 0100007F:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0 0 2\n"
)
CONNECTED_22 = (
    "   2: 0100007F:0016 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000  0 0 3\n"
)


def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f'#!/bin/sh\necho "{name} $*" >> "$STUB_LOG"\n' + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _machine(tmp_path: Path, *, tcp: str, user_exists: bool, keys: bool, listens: bool):
    """A bare machine: PATH has only stubs (no ss, no service, no systemctl) and the system
    tools the script needs; sshd, when started, makes port 22 listen in the fake /proc/net."""
    bin_dir, proc, etc, run = (tmp_path / d for d in ("bin", "proc", "etc_ssh", "run_sshd"))
    for d in (bin_dir, proc, etc):
        d.mkdir()
    (proc / "tcp").write_text(TCP_HEADER + tcp)
    if keys:
        (etc / "ssh_host_ed25519_key").write_text("key")
    for tool in ("awk", "ls", "mkdir", "chmod", "sleep", "cat", "cp"):
        (bin_dir / tool).symlink_to(
            subprocess.check_output(["sh", "-c", f"command -v {tool}"], text=True).strip()
        )
    _stub(bin_dir, "getent", "exit 0\n" if user_exists else "exit 2\n")
    _stub(bin_dir, "useradd", "exit 0\n")
    _stub(bin_dir, "ssh-keygen", "exit 0\n")
    _stub(
        bin_dir, "sshd", f'printf "%s" "{LISTEN_22}" >> "{proc}/tcp"\n' if listens else "exit 0\n"
    )
    env = {
        "PATH": str(bin_dir),
        "STUB_LOG": str(tmp_path / "calls.log"),
        "START_SSHD_PROC_NET": str(proc),
        "START_SSHD_ETC": str(etc),
        "START_SSHD_RUN_DIR": str(run),
        "START_SSHD_BIN": str(bin_dir / "sshd"),
        "START_SSHD_WAIT": "1",
        # the package's default sshd_config: absent unless a test writes it
        "START_SSHD_DEFAULT_CONFIG": str(tmp_path / "default_sshd_config"),
    }
    return env, run


def _start(tmp_path: Path, **machine) -> tuple[subprocess.CompletedProcess[str], list[str], Path]:
    env, run = _machine(tmp_path, **machine)
    proc = subprocess.run(
        ["/bin/sh", str(ROOT / "bench" / "start_sshd.sh")], env=env, capture_output=True, text=True
    )
    log = Path(env["STUB_LOG"])
    calls = log.read_text().splitlines() if log.exists() else []
    return proc, calls, run


def test_sshd_is_started_on_a_bare_machine_with_keys_user_and_run_dir_made(tmp_path: Path) -> None:
    proc, calls, run = _start(
        tmp_path, tcp=LISTEN_OTHER + CONNECTED_22, user_exists=False, keys=False, listens=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [c.split()[0] for c in calls] == ["ssh-keygen", "getent", "useradd", "sshd"], calls
    assert "ssh-keygen -A" in calls and any(
        c.endswith(" sshd") for c in calls if c.startswith("useradd")
    )
    assert run.is_dir() and stat.S_IMODE(run.stat().st_mode) == 0o755
    assert "listens on port 22" in proc.stdout


def test_an_unpacked_server_gets_the_packages_default_sshd_config(tmp_path: Path) -> None:
    # an openssh-server .deb unpacked without its maintainer scripts has no /etc/ssh/sshd_config
    # (sshd then refuses to start: seen on the H200 node)
    (tmp_path / "default_sshd_config").write_text("Include /etc/ssh/sshd_config.d/*.conf\n")
    proc, _, _ = _start(tmp_path, tcp="", user_exists=True, keys=True, listens=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "etc_ssh" / "sshd_config").read_text().startswith("Include ")
    assert "sshd_config from the package's default" in proc.stdout


def test_nothing_is_started_when_port_22_already_listens(tmp_path: Path) -> None:
    proc, calls, _ = _start(tmp_path, tcp=LISTEN_22, user_exists=False, keys=False, listens=True)
    assert proc.returncode == 0 and calls == [], calls
    assert "already listens" in proc.stdout


def test_an_existing_setup_only_starts_sshd(tmp_path: Path) -> None:
    proc, calls, _ = _start(tmp_path, tcp="", user_exists=True, keys=True, listens=True)
    assert proc.returncode == 0, proc.stderr
    assert [c.split()[0] for c in calls] == ["getent", "sshd"], calls


def test_an_sshd_that_never_listens_is_a_failure_that_says_so(tmp_path: Path) -> None:
    proc, _, _ = _start(tmp_path, tcp="", user_exists=True, keys=True, listens=False)
    assert proc.returncode == 1
    assert "nothing listens on port 22" in proc.stderr


def test_no_sshd_at_all_names_the_package(tmp_path: Path) -> None:
    env, _ = _machine(tmp_path, tcp="", user_exists=True, keys=True, listens=True)
    env["START_SSHD_BIN"] = str(tmp_path / "missing" / "sshd")
    proc = subprocess.run(
        ["/bin/sh", str(ROOT / "bench" / "start_sshd.sh")], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 1 and "install openssh-server" in proc.stderr


# What `mpictl run -np 1 -- all_reduce_perf -b 8 -e 4G -f 2 -g 1` prints, every line tagged by
# mpirun: nccl-tests' table layout with the figures the H100 run reported (1513 GB/s algbw at
# 4 GiB); an abridged log written in that format, not a recording.
ALL_REDUCE_PERF = (
    Path(__file__).parent / "data" / "nccl_tests" / "all_reduce_perf_tagged.log"
).read_text()


def test_the_nccl_tests_table_is_read_through_mpiruns_rank_tags(tmp_path: Path) -> None:
    (tmp_path / "all-reduce-perf.log").write_text(ALL_REDUCE_PERF)
    (tmp_path / "torch-nccl.log").write_text(
        '[1,0]<stdout>: {"check": "allreduce", "rank": 0, "size": 1, "ok": true}\n'
        "[1,0]<stderr>: a warning\n"
    )
    (tmp_path / "horovod-gpu.log").write_text(
        '[1,0]<stdout>: {"rank": 0, "size": 1, "device": "cuda:0", "allreduce": true}\n'
    )
    assert gpu_results.main([str(tmp_path)]) == 0
    text = (tmp_path / "results.txt").read_text().splitlines()
    assert text[0] == '{"check": "allreduce", "rank": 0, "size": 1, "ok": true}'
    assert text[1].startswith('{"rank": 0')
    assert [line.split()[0] for line in text[2:5]] == ["1073741824", "2147483648", "4294967296"]
    assert text[5] == "# Avg bus bandwidth    : 0.0"
    perf = gpu_results.collect(tmp_path)["all_reduce_perf"]
    assert len(perf["rows"]) == 4 and perf["rows"][-1]["algbw_GBps"] == 1513.0


def test_device_buffer_runs_are_read_per_transport(tmp_path: Path) -> None:
    # bench/device_buffers.c's line format through mpirun's tags (written here, not a recording)
    head = '{"devices": 1, "device": "GPU", "ranks": 2, "pml": "ucx", "coll_ucc_enable": "1"}'
    rows = [
        '{"op": "allreduce", "bytes": 8, "iters": 1000, "time_us": 21.5, "ok": true}',
        '{"op": "allreduce", "bytes": 16, "iters": 1000, "time_us": 22.0, "ok": true}',
        '{"op": "sendrecv", "bytes": 268435456, "iters": 5, "bw_GBps": 310.2, "ok": true}',
    ]
    (tmp_path / "device-ucx.log").write_text(
        "".join(f"[1,0]<stdout>: {line}\n" for line in [head, *rows]) + "[1,1]<stderr>: x\n"
    )
    assert gpu_results.main([str(tmp_path)]) == 0
    got = gpu_results.collect(tmp_path)["device_buffers"]
    assert got["device-ob1"] == {"ran": None, "rows": []}
    assert got["device-ucx"]["ran"]["pml"] == "ucx"
    assert [r["bytes"] for r in got["device-ucx"]["rows"]] == [8, 16, 268435456]
    text = (tmp_path / "results.txt").read_text().splitlines()
    assert text[0].startswith('device-ucx: {"devices": 1')
    # only the sizes the targets name reach results.txt
    assert [line.split('"bytes": ')[1].split(",")[0] for line in text[1:]] == ["8", "268435456"]


H200_PHASE_A = ROOT / "tests" / "data" / "recordings" / "h200-ubuntu2404" / "phase-a-20261128"


def test_the_recorded_h200_device_runs_are_read_per_transport(tmp_path: Path) -> None:
    # the real H200 run's logs (recorded, unchanged): OpenMPI's own pml staged device buffers
    # through host memory, UCX's cuda_ipc did not
    for log in H200_PHASE_A.glob("*.log"):
        (tmp_path / log.name).write_bytes(log.read_bytes())
    assert gpu_results.main([str(tmp_path)]) == 0
    runs = gpu_results.collect(tmp_path)["device_buffers"]

    def rate(run: str, op: str) -> float:
        row = next(r for r in runs[run]["rows"] if r["op"] == op and r["bytes"] == 1 << 28)
        assert row["ok"] is True
        return row.get("bw_GBps", row.get("algbw_GBps"))

    assert {run: runs[run]["ran"]["pml"] for run in runs} == {
        "device-mpictl": "ob1", "device-ucx": "ucx", "device-ob1": "ob1"}  # fmt: skip
    assert rate("device-ucx", "sendrecv") == 1907.347
    assert rate("device-mpictl", "sendrecv") < 2 < 100 < rate("device-ucx", "sendrecv")
    assert rate("device-ob1", "allreduce") < 1 < 20 < rate("device-mpictl", "allreduce")
    lines = (tmp_path / "results.txt").read_text().splitlines()
    assert lines == (H200_PHASE_A / "results.txt").read_text().splitlines()


def test_a_run_without_nccl_tests_has_no_table(tmp_path: Path) -> None:
    assert gpu_results.main([str(tmp_path)]) == 0
    assert (tmp_path / "results.txt").read_text() == ""
    assert gpu_results.main([str(tmp_path / "missing")]) == 2


def _event(kind: str, task: str, host: str, start: str, end: str) -> dict:
    data = {"task": task, "host": host, "start": start, "end": end}
    return {"event": kind, "event_data": data}


def test_a_failed_compile_is_reported_failed_not_not_compiled() -> None:
    events = [
        _event(
            "runner_on_ok",
            "Compile OpenMPI on the builder node",
            "gpu-node",
            "2026-11-25T10:00:00",
            "2026-11-25T10:03:35",
        ),
        _event(
            "runner_on_failed",
            "Compile Horovod on the builder node",
            "gpu-node",
            "2026-11-25T10:10:00",
            "2026-11-25T10:11:02",
        ),
    ]
    got = build_times.compile_times(events)
    assert got["seconds"]["OpenMPI"] == {"gpu-node": 215.0}
    assert got["steps"] == {"OpenMPI": {"compile": 215.0}}
    assert got["seconds"]["Horovod"].startswith("FAILED")
    assert got["failed"] == {"Horovod": {"gpu-node": 62.0}}
    assert got["seconds"]["NCCL"].startswith("not compiled")


def test_every_compiled_component_has_its_steps() -> None:
    spread = "build_once : Spread the artifact from the seed node over the SSH mesh for ucx"
    timeline = [  # task, start, end (minutes:seconds after 10:00)
        ("Configure UCX on the builder node", "00:00", "00:30"),
        ("Compile UCX on the builder node", "00:30", "02:00"),
        ("Install UCX into a staging tree on the builder node", "02:00", "02:05"),
        (spread, "02:10", "02:12"),
        ("Compile nccl-tests on the builder node", "03:00", "04:57"),
        ("Compile Slurm on the builder node", "05:00", "07:05"),
        ("Compile mpi4py on the builder node", "08:00", "10:46"),
    ]
    day = "2026-11-25T10:"
    events = [_event("runner_on_ok", t, "n1", day + a, day + b) for t, a, b in timeline]
    got = build_times.compile_times(events)
    assert got["steps"] == {
        "UCX": {"configure": 30.0, "compile": 90.0, "install": 5.0, "fanout": 2.0},
        "nccl-tests": {"compile": 117.0},
        "Slurm": {"compile": 125.0},
        "mpi4py": {"compile": 166.0},
    }
    assert got["seconds"]["UCC"].startswith("not compiled")
