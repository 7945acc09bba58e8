"""A shared filesystem (issue 26, ``mpi_shared_dir``) on the provisioned 3-node sandbox, whose
inventory mounts one host directory at /shared in every node (``sandbox_shared_dir``): doctor
proves it is one filesystem and names the node where it is not, and mpi4py's own MPI-IO test
(test/test_io.py of the sdist the cluster was built from) passes on 3 ranks on 3 nodes with its
files there (its basic COMM_WORLD suite: rank 0 makes each file, every rank opens it), started
in it with ``mpictl run --chdir`` (no copy)."""

from __future__ import annotations

import json
import re
import shutil
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mpictl import sandbox
from mpictl.inventory import Cluster
from mpictl.sandbox import podman
from tests.integration.nodes import run_cli
from tests.integration.test_jobs import VENV_PY

SHARED = "/shared"
RUN_WORLD_SUITES = (
    "import runpy, sys; sys.modules['numpy'] = None; "
    "sys.argv = ['test_io.py', '-v', 'TestIOBasicWorld']; "
    "runpy.run_path('test_io.py', run_name='__main__')"
)


@contextmanager
def mount_hidden(cluster: Cluster, name: str) -> Iterator[None]:
    """``name``'s /shared covered by an empty tmpfs (as a node where the mount is missing)."""
    spec = sandbox.read_sandbox(cluster.source)
    container = spec.container(name)
    runtime = podman.entry_runtime(podman.containers(spec.name)[container])
    exec_ = ["exec", "--privileged", container]
    podman.run([*exec_, "mount", "-t", "tmpfs", "tmpfs", SHARED], runtime=runtime)
    try:
        yield
    finally:
        podman.run([*exec_, "umount", SHARED], runtime=runtime)


def doctor(cluster: Cluster) -> tuple[int, list[dict[str, Any]]]:
    proc = run_cli("doctor", "-i", str(cluster.source), "--json", timeout=300)
    return proc.returncode, json.loads(proc.stdout)["checks"]


def test_doctor_proves_one_filesystem_and_names_the_node_without_it(cluster: Cluster) -> None:
    rc, checks = doctor(cluster)
    shared = {c["node"]: c for c in checks if c["check"] == "shared dir"}
    assert sorted(shared) == cluster.names and all(c["ok"] for c in shared.values()), shared
    assert rc == 0, [c for c in checks if not c["ok"]]
    with mount_hidden(cluster, "node3"):
        rc, checks = doctor(cluster)
    failed = [(c["check"], c["node"]) for c in checks if not c["ok"]]
    assert rc == 1 and failed == [("shared dir", "node3")], checks
    (node3,) = [c for c in checks if not c["ok"]]
    assert node3["detail"].startswith(f"{SHARED} is not the head's filesystem: the head's token")
    # the head's token is gone again
    left = list(sandbox.read_sandbox(cluster.source).shared_host_dir().glob(".mpictl-doctor-*"))
    assert left == []


def test_mpi4pys_io_test_passes_on_three_nodes_in_the_shared_dir(
    cluster: Cluster, source_vars: dict[str, Any]
) -> None:
    host_dir = sandbox.read_sandbox(cluster.source).shared_host_dir() / "mpi4py-test"
    shutil.rmtree(host_dir, ignore_errors=True)
    (host_dir / "tmp").mkdir(parents=True)
    (host_dir / "tmp").chmod(0o1777)
    with tarfile.open(source_vars["mpi4py_source_local"]) as sdist:
        for member in sdist.getmembers():
            parts = Path(member.name).parts
            if len(parts) == 3 and parts[1] == "test" and member.isfile():
                (host_dir / parts[2]).write_bytes(sdist.extractfile(member).read())  # type: ignore[union-attr]
    proc = run_cli(
        "run", "-i", str(cluster.source), "-np", "3", "--ppn", "1",
        "--chdir", f"{SHARED}/mpi4py-test", "-x", f"TMPDIR={SHARED}/mpi4py-test/tmp",
        # its basic suite on COMM_WORLD (the Self ones use no second node), with Python's own
        # arrays only (as its runner's --no-numpy does): the whole file took 12 minutes here,
        # both COMM_WORLD suites 3.5
        "--", VENV_PY, "-c", RUN_WORLD_SUITES,
        timeout=900,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    # every rank ran the whole suite (rank 0 makes each file under TMPDIR, all ranks open it:
    # it passes only where they all see the same file) and said OK
    ran = dict(re.findall(r"^\[1,(\d+)\]<stderr>: Ran (\d+) tests", out, re.MULTILINE))
    assert sorted(ran) == ["0", "1", "2"] and all(int(n) >= 10 for n in ran.values()), out[-4000:]
    finals = re.findall(r"^\[1,\d+\]<stderr>: OK\b", out, re.MULTILINE)
    assert len(finals) == 3 and "FAILED" not in out, out[-4000:]
