"""NCCL and Horovod on the 3-node sandbox (issue 5, "Must show").

The session sandbox is started with the host's CUDA toolkit mounted (``sandbox up --cuda``) and
provisioned with the NCCL kernel subset (``TEST_VARS`` in conftest.py), so NCCL compiles on a
2-core CI machine. There is no GPU: Horovod gets its CPU build (MPI operations), and NCCL is
checked as a built, installed and loadable library (its collectives need a GPU).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from mpictl import paths, runner
from mpictl.inventory import Cluster, load_inventory
from tests.integration.conftest import assert_built_once
from tests.integration.nodes import ssh, ssh_mpi

NCCL_PREFIX = "/usr/local/nccl-{version}"
VENV = "/opt/mpictl/venv"
NCCL_COMPILE_TASK = "Compile NCCL on the builder node"
HOROVOD_BUILD_TASK = "Compile Horovod on the builder node"
NCCL_INSTALL_TASK = "Unpack the NCCL install tree from the artifact"
NCCL_TESTS_COMPILE_TASK = "Compile nccl-tests on the builder node"
NCCL_TESTS_INSTALL_TASK = "Unpack the nccl-tests programs from the artifact"
HOROVOD_INSTALL_TASK = "Install the Horovod wheel into the venv"

# One JSON line per rank: what each collective returned on that rank.
HOROVOD_PROGRAM = r"""
import json, socket
import torch
import horovod.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
total = hvd.allreduce(torch.tensor([float(rank)], dtype=torch.float32), op=hvd.Sum)
mine = torch.tensor([1000.0 + rank, -float(rank)], dtype=torch.float32)
root = hvd.broadcast(mine, root_rank=0)
gathered = hvd.allgather(torch.tensor([[float(rank), 10.0 * rank]], dtype=torch.float32))
print("HVDCHECK " + json.dumps({
    "rank": rank, "size": size, "host": socket.gethostname(),
    "allreduce": total.tolist(), "broadcast": root.tolist(), "allgather": gathered.tolist(),
}), flush=True)
"""


def _cuda_sandbox() -> bool:
    return Path("/usr/local/cuda/bin/nvcc").is_file()


def _cluster(inventory: Path) -> Cluster:
    return load_inventory(inventory)


def _nccl_prefix(source_vars: Mapping[str, Any]) -> str:
    return NCCL_PREFIX.format(version=source_vars.get("nccl_version", "2.29.7"))


def _ran(result: runner.RunResult, task: str) -> list[runner.TaskResult]:
    return [r for r in result.task_results(task) if r.status in ("ok", "changed")]


def test_nccl_compiled_once_and_installed_on_every_node(
    first_provision: runner.RunResult, inventory: Path, source_vars: Mapping[str, Any]
) -> None:
    if not _cuda_sandbox():
        pytest.skip("no CUDA toolkit at /usr/local/cuda on this host: the sandbox has no NCCL")
    assert_built_once(first_provision, "nccl", NCCL_COMPILE_TASK, NCCL_INSTALL_TASK)
    prefix = _nccl_prefix(source_vars)
    versions, markers = set(), set()
    for node in _cluster(inventory).nodes:
        lib = ssh(
            node, f"test -f {prefix}/lib/libnccl.so.2 && readlink -f {prefix}/lib/libnccl.so.2"
        )
        assert lib.returncode == 0, f"{node.name}: no {prefix}/lib/libnccl.so.2: {lib.stderr}"
        ld = ssh(node, "ldconfig -p | awk '$1 == \"libnccl.so.2\" {print $NF; exit}'")
        assert ld.stdout.strip() == f"{prefix}/lib/libnccl.so.2", f"{node.name}: {ld.stdout}"
        probe = (
            'python3 -c \'import ctypes; l = ctypes.CDLL("libnccl.so.2"); v = ctypes.c_int(); '
            "assert l.ncclGetVersion(ctypes.byref(v)) == 0; print(v.value)'"
        )
        version = ssh(node, probe)
        assert version.returncode == 0, f"{node.name}: {version.stderr}"
        versions.add(version.stdout.strip())
        header = ssh(node, "readlink -f /usr/include/nccl.h")
        assert header.stdout.strip() == f"{prefix}/include/nccl.h"
        markers.add(ssh(node, f"cat {prefix}/.mpictl-fingerprint").stdout.strip())
    assert versions == {"22907"}, versions
    assert len(markers) == 1 and "" not in markers, markers
    (fingerprint,) = markers
    cached = paths.cache_dir() / "artifacts" / "nccl" / f"{fingerprint}.tar.gz"
    # Compiled in this session, or taken from the persistent cache: either way it is there.
    assert cached.is_file(), f"artifact {cached} missing from the controller cache"


def test_nccl_tests_compiled_once_and_on_the_mpi_users_path_on_every_node(
    first_provision: runner.RunResult, inventory: Path, source_vars: Mapping[str, Any]
) -> None:
    """The programs the job side calls by name: on the PATH an SSH session of the MPI user gets
    (as mpirun's ranks do), linked against the NCCL and OpenMPI of the nodes (never run: no GPU)."""
    if not _cuda_sandbox():
        pytest.skip("no CUDA toolkit at /usr/local/cuda on this host: the sandbox has no NCCL")
    assert_built_once(
        first_provision, "nccl_tests", NCCL_TESTS_COMPILE_TASK, NCCL_TESTS_INSTALL_TASK
    )
    bin_dir = f"/usr/local/nccl-tests-{source_vars.get('nccl_tests_version', '2.19.6')}/bin"
    nccl_lib = f"{_nccl_prefix(source_vars)}/lib/libnccl.so.2"
    markers = set()
    for node in _cluster(inventory).nodes:
        found = ssh_mpi(node, "command -v sendrecv_perf; command -v all_reduce_perf")
        assert found.stdout.split() == [f"{bin_dir}/sendrecv_perf", f"{bin_dir}/all_reduce_perf"], (
            f"{node.name}: {found.stdout}{found.stderr}"
        )
        ldd = ssh(node, f"ldd {bin_dir}/all_reduce_perf")
        assert ldd.returncode == 0 and "not found" not in ldd.stdout, f"{node.name}: {ldd.stdout}"
        assert f"libnccl.so.2 => {nccl_lib} " in ldd.stdout, f"{node.name}: {ldd.stdout}"
        markers.add(ssh(node, f"cat {bin_dir}/../.mpictl-fingerprint").stdout.strip())
    assert len(markers) == 1 and "" not in markers, markers


def test_horovod_built_once_and_check_build_lists_both_frameworks_and_mpi(
    first_provision: runner.RunResult, inventory: Path
) -> None:
    assert_built_once(first_provision, "horovod", HOROVOD_BUILD_TASK, HOROVOD_INSTALL_TASK)
    markers = set()
    for node in _cluster(inventory).nodes:
        proc = ssh(node, f"{VENV}/bin/horovodrun --check-build")
        assert proc.returncode == 0, f"{node.name}: {proc.stdout}{proc.stderr}"
        out = proc.stdout
        frameworks = out.split("Available Frameworks:")[1].split("Available Controllers:")[0]
        controllers = out.split("Available Controllers:")[1].split("Available Tensor")[0]
        assert "[X] PyTorch" in frameworks, f"{node.name}:\n{out}"
        # the session sandbox chooses both frameworks (conftest.IT_FRAMEWORKS)
        assert "[X] TensorFlow" in frameworks, f"{node.name}:\n{out}"
        assert "[X] MPI" in controllers, f"{node.name}:\n{out}"
        markers.add(ssh(node, f"cat {VENV}/.mpictl-horovod-fingerprint").stdout.strip())
    assert len(markers) == 1 and "" not in markers, markers


def test_horovod_collectives_across_three_nodes_as_the_mpi_user(
    first_provision: runner.RunResult, inventory: Path
) -> None:
    cluster = _cluster(inventory)
    head = cluster.head
    size = len(cluster.nodes)
    command = (
        f"mpirun --hostfile /etc/mpictl/hostfile -np {size} --map-by node "
        f"{VENV}/bin/python -c {shlex.quote(HOROVOD_PROGRAM)}"
    )
    proc = ssh_mpi(head, command, timeout=600)
    assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr}"
    ranks = {}
    for line in proc.stdout.splitlines():
        if line.startswith("HVDCHECK "):
            record = json.loads(line.removeprefix("HVDCHECK "))
            ranks[record["rank"]] = record
    assert sorted(ranks) == list(range(size)), proc.stdout
    assert {r["host"] for r in ranks.values()} == {n.name for n in cluster.nodes}
    expected_sum = float(sum(range(size)))
    for rank, record in ranks.items():
        assert record["size"] == size
        assert record["allreduce"] == [expected_sum], (rank, record)
        assert record["broadcast"] == [1000.0, 0.0], (rank, record)
        assert record["allgather"] == [[float(i), 10.0 * i] for i in range(size)], (rank, record)


def test_second_provision_changes_nothing_in_nccl_and_horovod(
    second_provision: runner.RunResult,
) -> None:
    changed = []
    for event in second_provision.events:
        data = event.get("event_data", {})
        if event.get("event") != "runner_on_ok" or not (data.get("res") or {}).get("changed"):
            continue
        if data.get("role") in ("nccl", "horovod", "build_once"):
            changed.append(f"{data.get('host')}: {data.get('role')}: {data.get('task')}")
    assert changed == []
    assert not _ran(second_provision, NCCL_COMPILE_TASK)
    assert not _ran(second_provision, HOROVOD_BUILD_TASK)
