"""Jobs the way users run them (issue 13) on the provisioned 3-node sandbox: their code on every
node (--workdir), detached jobs that outlive the controller, follow and cancel, per-rank output,
and the examples' training runs. Everything through the real CLI, as a user types it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mpictl.inventory import Cluster
from tests.integration.conftest import provision_run
from tests.integration.nodes import ROOT, run_cli, ssh, ssh_mpi

TRAIN = """\
import json, os, socket
with open("data.txt") as fh:
    rows = fh.read().split()
print(json.dumps({"host": socket.gethostname(), "cwd": os.getcwd(), "rows": len(rows),
                  "ignored_here": os.path.exists("secret.log"),
                  "link_here": os.path.lexists("outside")}), flush=True)
"""


def ok(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    proc = run_cli(*args, timeout=timeout)
    assert proc.returncode == 0, f"mpictl {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def job_of(stderr: str) -> str:
    line = next(x for x in stderr.splitlines() if x.startswith("mpictl: job "))
    return line.split()[2]


def record(job: str) -> dict[str, Any]:
    return json.loads(ok("jobs", "show", job).stdout)


def lines_json(stdout: str) -> list[dict[str, Any]]:
    out = []
    for line in stdout.splitlines():
        text = line.split(": ", 1)[-1] if line.startswith("[") else line
        if text.startswith("{"):
            out.append(json.loads(text))
    return out


def no_job_processes(cluster: Cluster, job: str) -> dict[str, str]:
    probe = (
        "for e in /proc/[0-9]*/environ; do "
        f"tr '\\0' '\\n' < $e 2>/dev/null | grep -qx 'MPICTL_JOB_ID={job}' && "
        'p=${e%/environ}; echo "${p#/proc/} $(tr "\\0" " " < $p/cmdline)"; done; true'
    )
    left = {}
    for node in cluster.nodes:
        out = ssh(node, probe).stdout.strip()
        if out:
            left[node.name] = out
    return left


def test_workdir_reaches_every_node_without_ignored_files_or_outside_links(
    inventory: Path, cluster: Cluster, tmp_path: Path
) -> None:
    work = tmp_path / "project"
    work.mkdir()
    (work / "train.py").write_text(TRAIN)
    (work / "data.txt").write_text(" ".join(str(i) for i in range(1000)))
    (work / "secret.log").write_text("not for the nodes\n")
    (work / ".mpictlignore").write_text("*.log\n")
    outside = tmp_path / "outside-target.txt"
    outside.write_text("TARGET-7f3a9c\n")  # a text no file of the tree holds
    (work / "outside").symlink_to(outside)
    args = ["run", "-i", str(inventory), "-np", "3", "--workdir", str(work), "--",
            "python3", "train.py"]  # fmt: skip
    first = ok(*args)
    reports = lines_json(first.stdout)
    assert len({r["host"] for r in reports}) == 3, first.stdout
    assert {r["rows"] for r in reports} == {1000}
    assert not any(r["ignored_here"] or r["link_here"] for r in reports)
    path = reports[0]["cwd"]
    assert {r["cwd"] for r in reports} == {path} and "/.mpictl/workdirs/project-" in path
    for node in cluster.nodes:  # nothing of what was left out, anywhere on the node
        found = ssh_mpi(node, f"ls -A {path}; grep -rl TARGET-7f3a9c {path} || true").stdout.split()
        assert sorted(found) == [".mpictlignore", "data.txt", "train.py"], (node.name, found)
    meta = record(job_of(first.stderr))["extra"]["workdir"]
    assert meta["path"] == path and len(meta["digest"]) == 64 and meta["files"] == 3
    assert meta["controller"]["files"] == 3 and len(meta["fanout"]) == 2
    # A second run of the unchanged tree moves no file content anywhere (rsync's own figures).
    again = record(job_of(ok(*args).stderr))["extra"]["workdir"]
    assert again["digest"] == meta["digest"]
    assert again["controller"]["files"] == 0 and again["controller"]["content_bytes"] == 0
    assert all(
        f["stats"]["files"] == 0 and f["stats"]["content_bytes"] == 0 for f in again["fanout"]
    )
    assert again["moved_content"] == 0


def test_detached_job_outlives_the_controller_follow_and_cancel(
    inventory: Path, cluster: Cluster
) -> None:
    script = (
        "import time\nfor i in range(60):\n    print('tick', i, flush=True)\n    time.sleep(1)\n"
    )
    started = time.monotonic()
    proc = ok("run", "-i", str(inventory), "--detach", "--", "python3", "-u", "-c", script)
    took = time.monotonic() - started
    job = proc.stdout.strip()
    assert job and record(job)["status"] == "running", proc.stderr
    # The controller side is gone (mpictl returned; kill any ssh it might have left): the job
    # goes on, its output grows on the head.
    subprocess.run(["pkill", "-f", f"mpictl-detached start .mpictl/jobs/{job}"], check=False)
    time.sleep(4)
    first = ok("jobs", "logs", job).stdout.count("tick")
    time.sleep(3)
    second = ok("jobs", "logs", job).stdout.count("tick")
    assert 0 < first < second, (first, second)
    # -f streams new lines as they come
    follow = subprocess.Popen(
        [sys.executable, "-m", "mpictl", "jobs", "logs", "-f", job],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    assert follow.stdout is not None
    # what the record held, then new lines as the job prints them (mpirun may add a warning
    # line of its own to the output: only the ticks are counted)
    ticks, deadline = 0, time.monotonic() + 30
    while ticks < second + 3 and time.monotonic() < deadline:
        line = follow.stdout.readline()
        assert line, "jobs logs -f ended while the job ran"
        ticks += "tick" in line
    assert ticks == second + 3
    t0 = time.monotonic()
    cancelled = ok("jobs", "cancel", job)
    assert time.monotonic() - t0 < 25, cancelled.stdout
    assert follow.wait(timeout=30) == 143  # -f ends with the job, and exits with its code
    assert no_job_processes(cluster, job) == {}
    listed = {r["id"]: r for r in json.loads(ok("jobs", "list", "--json").stdout)}
    assert (listed[job]["status"], listed[job]["exit_code"]) == ("cancelled", 143)
    print(f"detach: job id after {took:.2f} s")


def test_a_detached_job_that_exits_3_is_failed_with_3(inventory: Path) -> None:
    job = ok("run", "-i", str(inventory), "--detach", "--", "sh", "-c", "sleep 2; exit 3").stdout
    job = job.strip()
    follow = run_cli("jobs", "logs", "-f", job, timeout=120)
    assert follow.returncode == 3, follow.stderr
    listed = {r["id"]: r for r in json.loads(ok("jobs", "list", "--json").stdout)}
    assert (listed[job]["status"], listed[job]["exit_code"]) == ("failed", 3)


def test_output_dir_keeps_each_ranks_lines(inventory: Path, tmp_path: Path) -> None:
    out = tmp_path / "ranks"
    cmd = 'echo "out of $OMPI_COMM_WORLD_RANK"; echo "err of $OMPI_COMM_WORLD_RANK" >&2'
    proc = ok("run", "-i", str(inventory), "-np", "3", "--output-dir", str(out), "--",
              "sh", "-c", cmd)  # fmt: skip
    for rank in range(3):
        assert (out / f"rank.{rank}" / "stdout").read_text() == f"out of {rank}\n"
        assert (out / f"rank.{rank}" / "stderr").read_text() == f"err of {rank}\n"
    job = job_of(proc.stderr)
    assert ok("jobs", "logs", job, "--rank", "2").stdout == "out of 2\nerr of 2\n"
    bad = run_cli("jobs", "logs", job, "--rank", "7")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--rank 7" in bad.stderr


def losses(stdout: str) -> list[float]:
    return [r["loss"] for r in lines_json(stdout) if "loss" in r]


def test_the_ddp_example_trains_across_three_nodes(inventory: Path) -> None:
    proc = ok("run", "-i", str(inventory), "-np", "3", "--torch", "--workdir",
              str(ROOT / "examples"), "--", "python", "train_ddp.py", "--steps", "25",
              timeout=900)  # fmt: skip
    curve = losses(proc.stdout)
    assert len(curve) == 25 and all(r["world_size"] == 3 for r in lines_json(proc.stdout)[:25])
    assert sum(curve[-5:]) / 5 < 0.8 * sum(curve[:5]) / 5, curve


def test_the_horovod_example_trains_across_three_nodes(inventory: Path) -> None:
    proc = ok("run", "-i", str(inventory), "-np", "3", "--workdir", str(ROOT / "examples"),
              "--", "python", "train_horovod.py", "--steps", "25", timeout=900)  # fmt: skip
    curve = losses(proc.stdout)
    assert len(curve) == 25
    assert sum(curve[-5:]) / 5 < 0.8 * sum(curve[:5]) / 5, curve


def assert_trained_together(stdout: str, size_key: str) -> None:
    """A TensorFlow example's output: 25 steps on 3 replicas, the loss down to under 0.8x, three
    ranks on three different shards ending with the same weights (only a working allreduce of
    the shards' gradients gives that)."""
    records = lines_json(stdout)
    steps = [r for r in records if "loss" in r]
    curve = [r["loss"] for r in steps]
    assert len(curve) == 25 and all(r[size_key] == 3 for r in steps), stdout
    assert sum(curve[-5:]) / 5 < 0.8 * sum(curve[:5]) / 5, curve
    ends = {r["rank"]: r for r in records if "checksum" in r}
    assert sorted(ends) == [0, 1, 2] and all(r["size"] == 3 for r in ends.values()), stdout
    assert len({r["shard"] for r in ends.values()}) == 3, ends
    assert len({r["checksum"] for r in ends.values()}) == 1, ends


def test_the_tensorflow_horovod_example_trains_across_three_nodes(inventory: Path) -> None:
    proc = ok("run", "-i", str(inventory), "-np", "3", "--workdir", str(ROOT / "examples"),
              "--", "python", "train_tf_horovod.py", "--steps", "25", timeout=900)  # fmt: skip
    assert_trained_together(proc.stdout, "world_size")


def test_the_tensorflow_multiworker_example_trains_across_three_nodes(inventory: Path) -> None:
    proc = ok("run", "-i", str(inventory), "-np", "3", "--tf", "--workdir",
              str(ROOT / "examples"), "--", "python", "train_tf_multiworker.py", "--steps", "25",
              timeout=900)  # fmt: skip
    assert_trained_together(proc.stdout, "num_replicas_in_sync")


def test_extra_requirements_come_resolved_against_the_same_torch(
    inventory: Path, cluster: Cluster, source_vars: dict[str, Any]
) -> None:
    """horovod_extra_requirements brings a package that depends on torch into the cluster venv
    (torchmetrics: pure Python; no CPU build of torchvision exists to install here), resolved
    against the torch already there: torch's version does not move."""
    venv_py = "/opt/mpictl/venv/bin/python"
    before = ssh(cluster.head, f"{venv_py} -c 'import torch; print(torch.__version__)'").stdout
    result = provision_run(
        inventory, {**source_vars, "horovod_extra_requirements": ["torchmetrics"]},
        tags="horovod",
    )  # fmt: skip
    assert result.ok
    code = "import torch, torchmetrics; print(torch.__version__, torchmetrics.__version__)"
    for node in cluster.nodes:
        got = ssh(node, f"{venv_py} -c {code!r}")
        assert got.returncode == 0, (node.name, got.stderr)
        assert got.stdout.split()[0] == before.strip()


def test_bad_workdir_input_is_one_line_and_starts_nothing(inventory: Path, tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.mkdir()
    (big / "blob").write_bytes(os.urandom(4096))
    for args, text in (
        (["--workdir", str(tmp_path / "nope")], "no such directory"),
        (["--workdir", str(big / "blob")], "not a directory"),
        (["--workdir", str(big), "--max-workdir-size", "1K"], "over the 1.0 KiB cap"),
    ):
        before = set(Path(os.environ["MPICTL_STATE_DIR"], "jobs").glob("*"))
        proc = run_cli("run", "-i", str(inventory), *args, "--", "true")
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert text in proc.stderr
        assert set(Path(os.environ["MPICTL_STATE_DIR"], "jobs").glob("*")) == before
    for args in (["jobs", "cancel", "nope"], ["jobs", "logs", "nope"]):
        proc = run_cli(*args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
