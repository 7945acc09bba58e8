"""The job side (issue 6) on the provisioned 3-node sandbox: run, smoke, doctor, bench, jobs.

Everything goes through the real CLI (``python -m mpictl``) against the session's sandbox, as a
user would type it; assertions read structured output (--json, job records), never guess.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mpictl import smoke
from mpictl.inventory import Cluster
from tests.integration.nodes import ROOT, ssh

VENV_PY = "/opt/mpictl/venv/bin/python"


def mpictl(
    *args: str, timeout: float = 900, check: bool = False
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "mpictl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    if check:
        assert proc.returncode == 0, f"mpictl {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
    return proc


def job_id_of(stderr: str) -> str:
    for line in stderr.splitlines():
        if line.startswith("mpictl: job "):
            return line.split()[2]
    raise AssertionError(f"no job id announced in: {stderr}")


def leftovers(cluster: Cluster, job_id: str) -> dict[str, str]:
    """Per node, what is left of a finished job (as root): processes that carry its id in their
    environment (ranks and their children), and any mpirun or PRRTE daemon of the MPI user
    (the tests run one job at a time). Daemons get 5 s to finish exiting."""
    probe = (
        "for e in /proc/[0-9]*/environ; do "
        f"tr '\\0' '\\n' < $e 2>/dev/null | grep -qx 'MPICTL_JOB_ID={job_id}' && "
        'p=${e%/environ}; echo "${p#/proc/} $(tr "\\0" " " < $p/cmdline)"; done; '
        "pgrep -u mpi -a -x 'prted|mpirun|prterun'; true"
    )
    out: dict[str, str] = {}
    for _ in range(5):
        out = {}
        for node in cluster.nodes:
            proc = ssh(node, probe)
            assert proc.returncode == 0, proc.stderr
            if proc.stdout.strip():
                out[node.name] = proc.stdout.strip()
        if not out:
            break
        time.sleep(1)
    return out


def horovod_installed(cluster: Cluster) -> bool:
    proc = ssh(cluster.head, f"{VENV_PY} -c 'import horovod.torch'")
    return proc.returncode == 0


# ----------------------------------------------------------------------------- smoke


def test_smoke_passes_with_ranks_on_all_three_nodes(inventory: Path, cluster: Cluster) -> None:
    proc = mpictl("smoke", "-i", str(inventory), "--json", check=True)
    report = json.loads(proc.stdout)
    assert report["ok"] is True
    ran = [r for r in report["results"] if r["result"] != "skipped"]
    names = {r["test"] for r in ran}
    assert {
        "point_to_point",
        "broadcast",
        "scatter",
        "gather",
        "reduce_sum",
        "reduce_max",
        "allreduce",
    } <= names
    # site.yml installs Horovod (horovod_enabled defaults to true): its suite must have run.
    assert horovod_installed(cluster)
    assert {"hvd_allreduce", "hvd_broadcast", "hvd_allgather"} <= names
    # the session sandbox's Horovod is built for TensorFlow too: its suite ran under both
    assert {"hvd_tf_allreduce", "hvd_tf_broadcast", "hvd_tf_allgather"} <= names
    hostnames = {ssh(n, "hostname").stdout.strip() for n in cluster.nodes}
    for r in ran:
        assert r["result"] == "pass", r
        assert set(r["hosts"]) == hostnames, r
        assert r["ranks"] == sum(n.slots or 0 for n in cluster.nodes)
    # the table form
    table = mpictl("smoke", "-i", str(inventory), "--suite", "mpi", check=True).stdout
    assert "mpi/allreduce" in table and "pass" in table


def test_doctor_passes_on_the_healthy_cluster(inventory: Path, cluster: Cluster) -> None:
    proc = mpictl("doctor", "-i", str(inventory), "--json", timeout=300)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, [c for c in report["checks"] if c["result"] == "FAIL"]
    checks = {c["check"] for c in report["checks"]}
    assert {"ssh from head", "non-interactive env", "openmpi version", "common network"} <= checks
    assert {"tcp reachability", "slots"} <= checks
    # the node health program, run as root on every node (issue 27)
    health = [c for c in report["checks"] if c["check"] == "node health"]
    assert sorted(c["node"] for c in health) == sorted(cluster.names), health
    assert all(c["detail"].startswith("healthy") for c in health), health
    # Every build-once component's fingerprint is compared across the nodes.
    fingerprints = {c["check"] for c in report["checks"] if c["check"].startswith("fingerprint ")}
    components = {"/opt/openmpi/", "/opt/mpictl/venv/"}
    if Path("/usr/local/cuda").is_dir():  # the sandbox builds NCCL where CUDA is mounted
        components.add("/usr/local/nccl-")
    for component in components:
        assert any(component in f for f in fingerprints), (component, fingerprints)


# ----------------------------------------------------------------------------- run

TORCH_SCRIPT = """
import json, os, socket, torch, torch.distributed as dist
dist.init_process_group("gloo")
r, w = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(r + 1)])
dist.all_reduce(t)
print(json.dumps({"rank": r, "world": w, "sum": t.item(), "want": w * (w + 1) / 2,
                  "host": socket.gethostname(), "local_rank": int(os.environ["LOCAL_RANK"]),
                  "local_world": int(os.environ["LOCAL_WORLD_SIZE"]),
                  "master": os.environ["MASTER_ADDR"]}), flush=True)
dist.destroy_process_group()
"""


def test_run_torch_gloo_allreduce_across_three_nodes(inventory: Path, cluster: Cluster) -> None:
    # Two ranks per node (the sandbox has one slot per node), so LOCAL_RANK 0 and 1 both occur.
    proc = mpictl(
        "run", "-i", str(inventory), "--torch", "--ppn", "2", "--oversubscribe", "--timeout",
        "300", "--", VENV_PY, "-c", TORCH_SCRIPT, timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = [
        json.loads(line[line.index("{") :]) for line in proc.stdout.splitlines() if "{" in line
    ]
    world = 2 * len(cluster.nodes)
    assert len(records) == world
    assert sorted(r["rank"] for r in records) == list(range(world))
    assert all(r["sum"] == r["want"] == world * (world + 1) / 2 for r in records)
    assert len({r["host"] for r in records}) == 3
    assert {r["master"] for r in records} == {cluster.nodes[0].address}
    assert all(r["local_world"] == 2 for r in records)
    by_host: dict[str, set[int]] = {}
    for r in records:
        by_host.setdefault(r["host"], set()).add(r["local_rank"])
    assert all(ranks == {0, 1} for ranks in by_host.values()), by_host


# Each rank: its TF_CONFIG (from mpictl-tf-env), the addresses its own node holds, and what its
# own worker's host resolves to there (inventory addresses may be names).
TF_CONFIG_SCRIPT = (
    "import json, os, socket, subprocess\n"
    "config = json.loads(os.environ['TF_CONFIG'])\n"
    "mine = subprocess.run(['hostname', '-I'], capture_output=True, text=True).stdout.split()\n"
    "worker = config['cluster']['worker'][config['task']['index']].rsplit(':', 1)[0]\n"
    "print(json.dumps({'config': config, 'addresses': mine, 'host': socket.gethostname(),\n"
    "                  'resolved': socket.gethostbyname(worker),\n"
    "                  'local_rank': int(os.environ['OMPI_COMM_WORLD_LOCAL_RANK'])}))\n"
)


def assert_tf_configs(records: list[dict[str, Any]], ranks: int, per_node: int) -> None:
    """Every rank holds the same worker list, in rank order, with its own index; each rank's
    worker is an address of its own node, at the base port plus its local rank."""
    assert len(records) == ranks
    workers = records[0]["config"]["cluster"]["worker"]
    assert len(workers) == ranks and len(set(workers)) == ranks, workers
    for r in records:
        index = r["config"]["task"]["index"]
        assert r["config"] == {
            "cluster": {"worker": workers},
            "task": {"type": "worker", "index": index},
        }
        port = workers[index].rsplit(":", 1)[1]
        assert r["resolved"] in r["addresses"], (r, workers)
        assert int(port) == 23456 + r["local_rank"] and r["local_rank"] < per_node
    assert sorted(r["config"]["task"]["index"] for r in records) == list(range(ranks))
    assert len({r["host"] for r in records}) == ranks // per_node


def test_run_tf_gives_every_rank_the_worker_list_of_where_the_ranks_run(
    inventory: Path, cluster: Cluster
) -> None:
    """`--tf` under mpirun with two ranks per node (mpirun puts its own node first: the list
    comes from the ranks, not from a guess)."""
    proc = mpictl(
        "run", "-i", str(inventory), "--tf", "--ppn", "2", "--oversubscribe", "--timeout", "300",
        "--", VENV_PY, "-c", TF_CONFIG_SCRIPT, timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = [
        json.loads(line[line.index("{") :]) for line in proc.stdout.splitlines() if "{" in line
    ]
    assert_tf_configs(records, 2 * len(cluster.nodes), 2)
    both = mpictl("run", "-i", str(inventory), "--tf", "--torch", "--", "true")
    assert both.returncode == 2 and "--tf and --torch" in both.stderr


FAIL_SCRIPT = (  # the last rank (on the last node) fails
    "import os, sys, time\n"
    "if os.environ['OMPI_COMM_WORLD_RANK'] == str(int(os.environ['OMPI_COMM_WORLD_SIZE']) - 1):\n"
    "    time.sleep(3); print('last rank exits 1', flush=True); sys.exit(1)\n"
    "time.sleep(300)\n"
)


def test_a_failing_rank_ends_the_job_everywhere_within_10s(
    inventory: Path, cluster: Cluster
) -> None:
    """Measured from the moment the last rank exits (its last line arrives) to mpictl's exit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mpictl", "run", "-i", str(inventory), "--", VENV_PY, "-c",
         FAIL_SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout is not None
    failed_at = None
    for line in proc.stdout:
        if "last rank exits 1" in line:
            failed_at = time.monotonic()
            break
    assert failed_at is not None, "the last rank never ran"
    rc = proc.wait(timeout=60)
    elapsed = time.monotonic() - failed_at
    stderr = proc.stderr.read() if proc.stderr else ""
    assert rc != 0, stderr
    assert elapsed < 10, f"mpictl exited {elapsed:.1f} s after the rank failed"
    job = job_id_of(stderr)
    assert leftovers(cluster, job) == {}
    record = json.loads(mpictl("jobs", "show", job, check=True).stdout)
    assert record["exit_code"] == rc and record["status"] == "failed"


def test_timeout_ends_the_job_on_every_node(inventory: Path, cluster: Cluster) -> None:
    start = time.monotonic()
    proc = mpictl(
        "run", "-i", str(inventory), "--timeout", "5", "--", VENV_PY, "-c", "import time; "
        "time.sleep(300)", timeout=120,
    )  # fmt: skip
    assert proc.returncode == 124, proc.stderr
    assert time.monotonic() - start < 45
    assert leftovers(cluster, job_id_of(proc.stderr)) == {}


def test_ctrl_c_ends_the_job_on_every_node(inventory: Path, cluster: Cluster) -> None:
    script = "import time, os; print('started', flush=True); time.sleep(300)"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mpictl", "run", "-i", str(inventory), "--", VENV_PY, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    seen, world = 0, sum(n.slots or 0 for n in cluster.nodes)
    while seen < world:  # every rank printed: the job runs on every node
        line = proc.stdout.readline()
        assert line, "job ended early"
        seen += "started" in line
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=60)
    stderr = proc.stderr.read() if proc.stderr else ""
    assert rc == 130, stderr
    job = job_id_of(stderr)
    assert leftovers(cluster, job) == {}
    assert json.loads(mpictl("jobs", "show", job, check=True).stdout)["status"] == "interrupted"


def test_sigterm_ends_the_job_and_finalizes_its_record(inventory: Path, cluster: Cluster) -> None:
    """`timeout 20 mpictl run -- sleep 60`: SIGTERM ends the job on every node as Ctrl-C does,
    and the record says interrupted with 143 (not running forever)."""
    start = time.monotonic()
    proc = subprocess.run(
        ["timeout", "--preserve-status", "20", sys.executable, "-m", "mpictl", "run", "-i",
         str(inventory), "--", "sleep", "60"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 143, proc.stderr
    assert time.monotonic() - start < 50
    job = job_id_of(proc.stderr)
    assert leftovers(cluster, job) == {}
    listed = json.loads(mpictl("jobs", "list", "--json", check=True).stdout)
    record = next(r for r in listed if r["id"] == job)
    assert (record["status"], record["exit_code"]) == ("interrupted", 143)


def test_run_streams_output_records_the_job_and_keeps_the_exit_code(
    inventory: Path, cluster: Cluster
) -> None:
    shown = ["hostname"]
    proc = mpictl("run", "-i", str(inventory), "--ppn", "1", "--", *shown, check=True)
    hostnames = {ssh(n, "hostname").stdout.strip() for n in cluster.nodes}
    assert {line.rsplit(":", 1)[-1].strip() for line in proc.stdout.splitlines()} == hostnames
    job = job_id_of(proc.stderr)
    listed = json.loads(mpictl("jobs", "list", "--json", check=True).stdout)
    assert job in [j["id"] for j in listed]
    record = json.loads(mpictl("jobs", "show", job, check=True).stdout)
    assert record["ranks"] == 3 and record["exit_code"] == 0 and record["command"] == shown
    assert record["end"] >= record["start"]
    logs = mpictl("jobs", "logs", job, check=True).stdout
    assert all(h in logs for h in hostnames)
    # MPI's TCP interface comes from the nodes' facts, and NCCL is told the same one.
    argv = shlex.split(record["mpirun"])
    iface = argv[argv.index("btl_tcp_if_include") + 1]
    assert f"NCCL_SOCKET_IFNAME={iface}" in argv
    env = mpictl("run", "-i", str(inventory), "--ppn", "1", "--", "sh", "-c",
                 'echo "$NCCL_SOCKET_IFNAME"', check=True)  # fmt: skip
    assert [line.rsplit(":", 1)[-1].strip() for line in env.stdout.splitlines()] == [iface] * 3
    sub = mpictl("run", "-i", str(inventory), "--hosts", "node2,node3", "-np", "2", "--", "sh",
                 "-c", "exit 3")  # fmt: skip
    assert sub.returncode == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-np", "0"], "-np must be a positive"),
        (["-np", "1000"], "more ranks than"),
        (["--hosts", "node1,nodeX"], "unknown host 'nodeX'"),
    ],
)
def test_bad_run_input_fails_before_anything_starts(
    inventory: Path, cluster: Cluster, args: list[str], message: str
) -> None:
    before = {p.name for p in (Path(os.environ["MPICTL_STATE_DIR"]) / "jobs").glob("*")}
    proc = mpictl("run", "-i", str(inventory), *args, "--", "hostname")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and message in proc.stderr
    after = {p.name for p in (Path(os.environ["MPICTL_STATE_DIR"]) / "jobs").glob("*")}
    assert after == before


def test_smoke_program_fails_when_its_ranks_stay_on_one_host(
    inventory: Path, cluster: Cluster
) -> None:
    """A pass must prove cross-node traffic: the same program on one host fails every test."""
    proc = mpictl("run", "-i", str(inventory), "--hosts", "node2", "-np", "2",
                  "--oversubscribe", "--", VENV_PY, "-u",
                  "/opt/mpictl/share/jobs/smoke_mpi.py", timeout=300)  # fmt: skip
    assert proc.returncode != 0, proc.stdout
    results = smoke.parse_results(proc.stdout, "mpi")
    assert len(results) == len(smoke.MPI_TESTS), proc.stdout
    hostname = ssh(cluster.node("node2"), "hostname").stdout.strip()
    for r in results:
        assert not r.ok and r.hosts == [hostname], r
        assert "did not cross nodes" in r.failures[-1]["error"], r


# ----------------------------------------------------------------------------- bench


def test_bench_table_png_busbw_and_link_limit(
    inventory: Path, cluster: Cluster, tmp_path: Path
) -> None:
    png = tmp_path / "bench.png"
    proc = mpictl("bench", "-i", str(inventory), "--plot", str(png), timeout=900)
    assert proc.returncode == 0, proc.stderr
    # The table: one row per power of two from 8 B to 256 MiB, then the summary line.
    assert "busbw (GB/s)" in proc.stdout
    sizes = re.findall(r"^\W*(\d+ (?:B|KiB|MiB)) ", proc.stdout, re.M)
    assert len(sizes) == 26 and sizes[0] == "8 B" and sizes[-1] == "256 MiB", sizes
    assert "busbw at 64 MiB: " in proc.stdout and "(iperf3): " in proc.stdout, proc.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The figures are kept with the job record.
    results = Path(next(ln for ln in proc.stdout.splitlines() if ln.startswith("results: "))[9:])
    data = json.loads(results.read_text())
    assert results.parent.name == data["job"]
    sizes_b = [p["bytes"] for p in data["points"]]
    assert sizes_b == [8 * 2**i for i in range(26)]
    assert all(p["ok"] and p["busbw_GBps"] > 0 for p in data["points"][1:])
    assert data["busbw_64MiB_GBps"] > 0
    assert data["link"]["GBps"] and data["link"]["GBps"] > 0
    assert data["ratio_64MiB"] > 0
    print(
        f"\nbench: busbw@64MiB={data['busbw_64MiB_GBps']:.3f} GB/s, "
        f"iperf3={data['link']['GBps']:.3f} GB/s, ratio={data['ratio_64MiB']:.2f}"
    )


# ----------------------------------------------------------------------------- broken nodes
# (last: they break and repair nodes)


@pytest.fixture
def broken_node3(cluster: Cluster) -> Iterator[str]:
    """node3's cluster venv python made unusable (as root), restored afterwards."""
    node = cluster.node("node3")
    venv_py = "/opt/mpictl/venv/bin/python3"
    proc = ssh(node, f"mv {venv_py} {venv_py}.off && ln -s /nonexistent {venv_py}")
    assert proc.returncode == 0, proc.stderr
    try:
        yield node.name
    finally:
        ssh(node, f"rm -f {venv_py} && mv {venv_py}.off {venv_py}")


def test_smoke_and_doctor_name_a_broken_node(
    inventory: Path, cluster: Cluster, broken_node3: str
) -> None:
    smoke = mpictl("smoke", "-i", str(inventory), "--suite", "mpi", timeout=300)
    assert smoke.returncode == 1
    err_lines = [line for line in smoke.stderr.splitlines() if line.startswith("mpictl: error")]
    assert len(err_lines) == 1 and broken_node3 in err_lines[0], smoke.stderr
    assert "Traceback" not in smoke.stderr
    doctor = mpictl("doctor", "-i", str(inventory), "--json", timeout=300)
    assert doctor.returncode == 1
    failed = [c for c in json.loads(doctor.stdout)["checks"] if c["result"] == "FAIL"]
    assert failed and {c["node"] for c in failed} == {broken_node3}, failed
    assert all(c["fix"] for c in failed)


def test_smoke_and_doctor_name_a_stopped_node(inventory: Path, cluster: Cluster) -> None:
    from mpictl import sandbox

    name = [n for n in sandbox.status(inventory) if n.name == "node2"][0].container
    stop = subprocess.run(
        ["podman", "--runtime", "runc", "stop", "-t", "2", name],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if stop.returncode != 0:  # hosts where podman's default runtime is fine
        stop = subprocess.run(["podman", "stop", "-t", "2", name], capture_output=True, text=True)
    assert stop.returncode == 0, stop.stderr
    try:
        smoke = mpictl("smoke", "-i", str(inventory), "--suite", "mpi", timeout=300)
        assert smoke.returncode == 1
        assert "node2" in smoke.stderr.splitlines()[-1], smoke.stderr
        doctor = mpictl("doctor", "-i", str(inventory), "--json", timeout=300)
        assert doctor.returncode == 1
        failed = json.loads(doctor.stdout)["checks"]
        ssh_fail = [c for c in failed if c["result"] == "FAIL" and c["check"] == "ssh from head"]
        assert [c["node"] for c in ssh_fail] == ["node2"], failed
        # the doctor's srun left node2 out (Slurm would give it an allocation it cannot end
        # until it notices node2 down) and left no job behind
        srun = [c for c in failed if c["result"] == "FAIL" and c["check"] == "srun on every node"]
        assert [c["node"] for c in srun] == ["node2"], failed
        assert "not asked (no ssh from the head): node2" in srun[0]["detail"], srun
        queue = ssh(cluster.head, "squeue -h -o %j")
        assert queue.returncode == 0, queue.stderr
        assert not [j for j in queue.stdout.split() if j.startswith("mpictl-doctor-")], queue.stdout
    finally:
        sandbox.up(inventory)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and ssh(cluster.node("node2"), "true").returncode:
            time.sleep(2)
        # node2's slurmd registers again once its container is back; until every node is idle
        # in sinfo, a job on all three nodes would wait (4 min at most, seconds measured)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            states = ssh(cluster.head, "sinfo -h -N -o %T").stdout.split()
            if states and all(state == "idle" for state in states):
                break
            time.sleep(3)
    assert mpictl("doctor", "-i", str(inventory), timeout=300).returncode == 0
