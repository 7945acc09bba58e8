"""Containers on the provisioned 3-node session sandbox (issue 40): the smoke suite's MPI
collectives (``smoke_mpi.py``) in an image made without a registry (``scripts/container-image.sh``
from the node image, through podman, with a marker only the image has), on 3 nodes, under
mpirun (every rank behind the containers role's wrapper, enroot) and under Slurm (pyxis); each
rank shows the marker, each test passes on every rank, the job record names the image; bad
images are one line before anything starts; doctor checks enroot and pyxis on every node and
names a node without enroot."""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from mpictl import jobs, sandbox
from mpictl.inventory import Cluster
from mpictl.sandbox import image as node_image
from tests.integration.nodes import ROOT, run_cli, ssh, ssh_mpi
from tests.integration.test_jobs import VENV_PY, job_id_of
from tests.integration.test_shared_dir import mount_hidden

SHARED = "/shared"
SMOKE = "/opt/mpictl/share/jobs/smoke_mpi.py"
# What the image can do without (the node image's compilers, headers, docs): a smaller image,
# faster to make and to unpack on every node.
LEAVE_OUT = (
    "usr/share/doc/*", "usr/include/*", "usr/lib/gcc/*", "usr/libexec/gcc/*",
    "usr/share/locale/*", "usr/share/man/*", "usr/lib/x86_64-linux-gnu/perl*",
    "usr/share/perl*", "var/cache/*", "var/lib/apt/*",
)  # fmt: skip


@pytest.fixture(scope="module")
def image(cluster: Cluster) -> tuple[str, str]:
    """The image on the sandbox's shared filesystem, and its marker."""
    marker = f"mpictl-smoke-{secrets.token_hex(4)}"
    host_dir = sandbox.read_sandbox(cluster.source).shared_host_dir() / "images"
    host_dir.mkdir(parents=True, exist_ok=True)
    excludes = [a for pattern in LEAVE_OUT for a in ("--exclude", pattern)]
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "container-image.sh"), "--marker", marker, *excludes,
         f"podman:{node_image.image_tag()}", str(host_dir / "smoke.sqsh")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return f"{SHARED}/images/smoke.sqsh", marker


CONTAINER_CHECKS = ("enroot version", "pyxis version", "container start")
# Each rank: the image's marker, then the smoke suite in the same process tree.
IN_IMAGE = (
    'echo "inside $(cat /etc/mpictl-image) on $(hostname)"; '
    # the node's driver library (the sandbox's stub libcuda, where the host has CUDA) in the image
    f'{VENV_PY} -c \'import ctypes; ctypes.CDLL("libcuda.so.1"); print("driver loaded")\'; '
    f"exec {VENV_PY} {SMOKE}"
)
# The session's nodes have the stub driver (tests/integration/stub_libcuda.py) where the host
# has a CUDA toolkit (conftest: sandbox up --cuda).
STUB_DRIVER = Path("/usr/local/cuda").is_dir()


def check_smoke(out: str, marker: str, cluster: Cluster) -> None:
    inside = re.findall(rf"inside {marker} on (\S+)", out)
    assert sorted(inside) == sorted(cluster.names), out[-3000:]
    lines = [json.loads(m) for m in re.findall(r'(\{"suite": "mpi".*\})', out)]
    results = [r for r in lines if "test" in r]
    # the node's driver reaches the image under both launchers (mpictl-container)
    # (a rank's line ends with it; the announced command line holds the words too)
    loaded = re.findall(r"driver loaded$", out, re.MULTILINE)
    assert len(loaded) == (3 if STUB_DRIVER else 0), out[-3000:]
    assert len(results) >= 5 and all(r["ok"] for r in results), out[-3000:]
    assert all(r["ranks"] == 3 and len(r["hosts"]) == 3 for r in results), results


def test_the_marker_is_only_in_the_image(cluster: Cluster, image: tuple[str, str]) -> None:
    for name in cluster.names:
        assert ssh(cluster.node(name), "test ! -e /etc/mpictl-image").returncode == 0, name


@pytest.mark.parametrize("launcher", ["mpirun", "slurm"])
def test_the_smoke_collectives_run_in_the_image_on_three_nodes(
    cluster: Cluster, image: tuple[str, str], launcher: str
) -> None:
    path, marker = image
    proc = run_cli(
        "run", "-i", str(cluster.source), "--launcher", launcher, "-np", "3", "--ppn", "1",
        "--container", path, "--", "sh", "-c", IN_IMAGE,
        timeout=600,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    check_smoke(out, marker, cluster)
    record = jobs.load(job_id_of(proc.stderr))
    assert record.extra.get("container") == path, record.extra
    assert record.exit_code == 0


def test_a_new_file_at_the_images_path_replaces_its_unpack_on_every_node(
    cluster: Cluster, image: tuple[str, str]
) -> None:
    path, _ = image
    host_dir = sandbox.read_sandbox(cluster.source).shared_host_dir() / "images"
    copy = host_dir / "replaced.sqsh"
    shutil.copyfile(host_dir / Path(path).name, copy)
    shared = f"{SHARED}/images/{copy.name}"

    def unpacks() -> dict[str, list[str]]:
        proc = run_cli(
            "run", "-i", str(cluster.source), "-np", "3", "--ppn", "1", "--container", shared,
            "--", "true", timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return {n.name: ssh_mpi(n, "enroot list").stdout.split() for n in cluster.nodes}

    try:
        before = unpacks()
        os.utime(copy, (copy.stat().st_mtime + 60,) * 2)  # a new file at the same path
        after = unpacks()
    finally:
        copy.unlink()
    for node in cluster.names:
        (old,) = set(before[node]) - set(after[node])  # the earlier version's unpack is gone
        (new,) = set(after[node]) - set(before[node])
        assert old.rpartition("-")[0] == new.rpartition("-")[0], (old, new)  # the same path's


# Another user of the cluster than the MPI user (the same uid on every node, as a directory
# service gives it), who runs containers through Slurm only.
OTHER, OTHER_UID = "ada", 2345
OTHER_DIRS = (f"/run/enroot/user-{OTHER_UID}", f"/var/cache/enroot/user-{OTHER_UID}",
              f"/var/lib/enroot/data/user-{OTHER_UID}")  # fmt: skip


def test_another_user_runs_the_image_through_slurm_in_directories_the_prolog_made(
    cluster: Cluster, image: tuple[str, str]
) -> None:
    """enroot's directories of a user the role never saw: made by the containers role's Slurm
    prolog (the user's own, 0700), the runtime directory removed by its epilog after the
    user's last job on the node, the imported image's cache and the data directory kept, and
    pyxis's container of the job gone."""
    path, marker = image
    add = f"groupadd -g {OTHER_UID} {OTHER} && useradd -m -u {OTHER_UID} -g {OTHER} {OTHER}"
    for node in cluster.nodes:
        assert ssh(node, add).returncode == 0, node.name
    try:
        for node in cluster.nodes:  # a user never seen: none of the directories exist yet
            absent = f"for d in {' '.join(OTHER_DIRS)}; do test ! -e $d || exit 1; done"
            assert ssh(node, absent).returncode == 0, node.name
        says = shlex.quote('echo "$(id -u) in $(cat /etc/mpictl-image)"')
        proc = ssh(
            cluster.head,
            f"cd /home/{OTHER} && runuser -u {OTHER} -- srun -N3 --ntasks-per-node=1"
            f" --container-image={path} sh -c {says}",
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.splitlines() == [f"{OTHER_UID} in {marker}"] * 3, proc.stdout
        stat = f"stat -c '%n %U %a' {' '.join(OTHER_DIRS[1:])}; ls -A {OTHER_DIRS[2]}"
        kept = [f"{d} {OTHER} 700" for d in OTHER_DIRS[1:]]
        for node in cluster.nodes:
            deadline = time.monotonic() + 30  # the epilog runs after srun returned
            while ssh(node, f"test -e {OTHER_DIRS[0]}").returncode == 0:
                assert time.monotonic() < deadline, f"{node.name}: {OTHER_DIRS[0]} stays"
                time.sleep(1)
            proc = ssh(node, stat)
            assert proc.stdout.splitlines() == kept, (node.name, proc.stdout, proc.stderr)
    finally:
        for node in cluster.nodes:
            ssh(node, f"userdel -r {OTHER} 2>/dev/null; rm -rf {' '.join(OTHER_DIRS)}")


def test_a_rank_that_fails_in_the_image_fails_the_job_with_its_code(
    cluster: Cluster, image: tuple[str, str]
) -> None:
    path, _ = image
    proc = run_cli(
        "run", "-i", str(cluster.source), "-np", "3", "--ppn", "1", "--container", path,
        "--", "sh", "-c", 'test "$OMPI_COMM_WORLD_RANK" != 1 || exit 5',
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 5, proc.stdout + proc.stderr


def test_a_bad_image_is_one_line_and_starts_nothing(
    cluster: Cluster, image: tuple[str, str]
) -> None:
    before = len(jobs.list_jobs())
    path, _ = image
    cases = {
        f"{SHARED}/images/missing.sqsh": "no such file",
        "/etc/hostname": "not a squashfs image",
        "images/smoke.sqsh": "--container 'images/smoke.sqsh'",
    }
    for bad, said in cases.items():
        proc = run_cli("run", "-i", str(cluster.source), "--container", bad, "--", "true")
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and said in lines[0], proc.stderr
        if bad.startswith("/"):  # checked on the nodes: each one named
            assert all(f"{n}: " in lines[0] for n in cluster.names), lines[0]
    # an image one node does not see (its /shared covered): that node alone is named
    with mount_hidden(cluster, "node3"):
        proc = run_cli("run", "-i", str(cluster.source), "--container", path, "--", "true")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "node3: " in lines[0] and "node1: " not in lines[0] and "no such file" in lines[0]
    assert len(jobs.list_jobs()) == before


def test_doctor_checks_enroot_and_pyxis_everywhere_and_names_a_node_without_enroot(
    cluster: Cluster,
) -> None:
    proc = run_cli("doctor", "-i", str(cluster.source), "--json", timeout=300)
    checks = json.loads(proc.stdout)["checks"]
    ours = {c["check"]: c for c in checks if c["check"] in CONTAINER_CHECKS}
    assert sorted(ours) == sorted(CONTAINER_CHECKS), checks
    assert all(c["ok"] and c["node"] == "all" for c in ours.values()), ours
    assert ours["enroot version"]["detail"] == "4.1.2"
    node3 = cluster.node("node3")
    assert ssh(node3, "mv /usr/local/bin/enroot /usr/local/bin/enroot.off").returncode == 0
    try:
        proc = run_cli("doctor", "-i", str(cluster.source), "--json", timeout=300)
    finally:
        ssh(node3, "mv /usr/local/bin/enroot.off /usr/local/bin/enroot")
    failed = {
        (c["check"], c["node"])
        for c in json.loads(proc.stdout)["checks"]
        if not c["ok"] and c["check"] in CONTAINER_CHECKS
    }
    assert proc.returncode == 1
    assert failed == {("enroot version", "node3"), ("container start", "node3")}
