"""The GPU path without a GPU (issue 15): a 2-node sandbox of its own (``mpictl-gpu``) whose nodes
answer ``nvidia-smi`` through the test stub (``stub_nvidia_smi.py``, installed here, never by a
role) and have the test stub of the driver's ``libcuda.so.1`` (``stub_libcuda.py``): node1 has
two 9.0 GPUs (H100), node2 eight 8.0 GPUs (A100), and no ``mpi_slots`` is set.

One provision (the module fixture; CUDA and the stub libcuda as in the session's sandbox, so
OpenMPI, mpi4py, NCCL for sm_80+sm_90 with the test kernel subset and nccl-tests come from the
artifact cache: the session builds them for those two architectures; this sandbox's variable
says ["90"] and only its Horovod, PyTorch-only with NCCL, is compiled here) proves: NCCL's
architectures come from the nodes' GPUs (one fat build, its library holds exactly those),
mpi_slots defaults to the GPU count, ``mpictl run --torch`` pins every local rank to its GPU
(round-robin when oversubscribed); OpenMPI is CUDA-aware (ompi_info) and its jobs run quietly on
nodes whose driver sees no GPU. Bad input (a driver that is not loaded, a dotted architecture, a
named Python environment that is missing, openmpi_cuda enabled on a node without libcuda) stops
the run in preflight, naming the node, with nothing changed; under openmpi_cuda auto such a node
builds without CUDA and the run says why. Horovod builds into an existing venv with its own
PyTorch."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mpictl import paths, provision, runner
from mpictl.inventory import Cluster, Node, load_inventory
from tests.integration import stub_libcuda
from tests.integration.conftest import describe_failures
from tests.integration.nodes import ROOT, clone_sandbox_inventory, run_cli, ssh, ssh_base

NAME = "mpictl-gpu"
SUBNET = "10.89.49.0/24"
PORT_BASE = 2261
STUB = Path(__file__).with_name("stub_nvidia_smi.py")
CUDA_ARCHS = ROOT / "roles" / "nccl" / "files" / "cuda_archs.py"
GPUS = {
    "node1": {"gpus": 2, "compute_cap": "9.0", "name": "NVIDIA H100 80GB HBM3"},
    "node2": {"gpus": 8, "compute_cap": "8.0", "name": "NVIDIA A100-SXM4-80GB"},
}
NCCL_LIB = "/usr/local/nccl-2.29.7/lib/libnccl.so.2.29.7"
USER_ENV = "/opt/userenv"

pytestmark = pytest.mark.skipif(
    not Path("/usr/local/cuda/bin/nvcc").is_file(),
    reason="no CUDA toolkit at /usr/local/cuda: the GPU-stub sandbox compiles NCCL",
)


class GpuSandbox:
    def __init__(self, inventory: Path, state: Path, extravars: dict[str, Any]) -> None:
        self.inventory, self.state, self.extravars = inventory, state, extravars
        self.env = {**os.environ, "MPICTL_STATE_DIR": str(state)}

    @contextlib.contextmanager
    def state_env(self) -> Iterator[None]:
        old = os.environ.get("MPICTL_STATE_DIR")
        os.environ["MPICTL_STATE_DIR"] = str(self.state)
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("MPICTL_STATE_DIR", None)
            else:
                os.environ["MPICTL_STATE_DIR"] = old

    def mpictl(self, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, env=self.env, timeout=timeout)

    def ok(self, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
        proc = self.mpictl(*args, timeout=timeout)
        assert proc.returncode == 0, f"mpictl {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
        return proc

    def provision(self, extra: dict[str, Any] | None = None, **kwargs: Any) -> runner.RunResult:
        with self.state_env():
            _, result = provision.provision(
                self.inventory, extravars={**self.extravars, **(extra or {})}, **kwargs
            )
        return result

    def cluster(self) -> Cluster:
        with self.state_env():
            return load_inventory(self.inventory)

    def node(self, name: str) -> Node:
        return next(n for n in self.cluster().nodes if n.name == name)


def put(node: Node, path: str, text: str, mode: str = "0644") -> None:
    """Write ``text`` to ``path`` on ``node`` as root."""
    command = f"mkdir -p $(dirname {path}) && cat > {path} && chmod {mode} {path}"
    proc = subprocess.run(
        [*ssh_base(node), command], input=text, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr


def set_gpus(node: Node, config: dict[str, Any]) -> None:
    put(node, "/etc/mpictl-test/nvidia-smi.json", json.dumps(config))


def lib_archs(node: Node) -> dict[str, list[str]]:
    proc = subprocess.run(
        [*ssh_base(node), f"python3 - {NCCL_LIB}"],
        input=CUDA_ARCHS.read_text(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, f"{node.name}: {proc.stderr}"
    return json.loads(proc.stdout)


def changed(result: runner.RunResult) -> list[str]:
    return [f"{r.host}: {r.task}" for r in result.changed_tasks()]


def failure_messages(result: runner.RunResult) -> dict[str, str]:
    return {
        r.host: str(r.result.get("msg", ""))
        for r in result.task_results()
        if r.status == "failed" and not r.ignore_errors
    }


@pytest.fixture(scope="module")
def gpu(
    tmp_path_factory: pytest.TempPathFactory, source_vars: dict[str, Any], warm_cache: None
) -> Iterator[GpuSandbox]:
    state = tmp_path_factory.mktemp("gpu-state")
    inv = clone_sandbox_inventory(state / "inventory", NAME, SUBNET, PORT_BASE)
    hosts_file = inv / "hosts.yml"
    hosts = yaml.safe_load(hosts_file.read_text())
    del hosts["all"]["children"]["mpi_nodes"]["hosts"]["node3"]
    hosts_file.write_text(yaml.safe_dump(hosts, sort_keys=False))
    # No mpi_slots: the default (the GPU count) is under test. nccl_cuda_archs is ["90"] here (the
    # session's 80+90 replaced): the nodes' own GPUs must win over it.
    group_vars = inv / "group_vars" / "all.yml"
    group_vars.write_text(re.sub(r"(?m)^mpi_slots:.*$", "", group_vars.read_text()))
    extravars = {**source_vars, "slurm_enabled": False, "nccl_cuda_archs": ["90"]}
    sbx = GpuSandbox(inv, state, extravars)
    sbx.mpictl("sandbox", "down", "-i", str(inv))
    sbx.ok("sandbox", "up", "-i", str(inv), "--cuda", timeout=900)
    try:
        stub_libcuda.install(inv)
        for node in sbx.cluster().nodes:
            put(node, "/usr/local/bin/nvidia-smi", STUB.read_text(), mode="0755")
            set_gpus(node, GPUS[node.name])
        result = sbx.provision()
        assert result.ok, describe_failures(result)
        sbx.first = result  # type: ignore[attr-defined]
        yield sbx
    finally:
        if not os.environ.get("MPICTL_KEEP_SANDBOX"):
            sbx.mpictl("sandbox", "down", "-i", str(inv))


def test_nccl_is_one_build_for_the_gpus_of_both_nodes(gpu: GpuSandbox) -> None:
    gencodes = {
        r.host: r.result.get("ansible_facts", {}).get("_nccl_gencode")
        for r in gpu.first.task_results("Assemble the NCCL build settings of the node")  # type: ignore[attr-defined]
        if r.status == "ok"
    }
    want = "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90"
    assert gencodes == {"node1": want, "node2": want}
    markers = set()
    for node in gpu.cluster().nodes:
        # What is really inside the library: sm_80 and sm_90 (and NCCL's own sm_100), no PTX.
        assert lib_archs(node) == {"sm": ["80", "90", "100"], "ptx": []}, node.name
        markers.add(ssh(node, "cat /usr/local/nccl-2.29.7/.mpictl-fingerprint").stdout.strip())
    assert len(markers) == 1 and "" not in markers
    (fingerprint,) = markers
    assert (paths.cache_dir() / "artifacts" / "nccl" / f"{fingerprint}.tar.gz").is_file()
    checks = gpu.first.task_results(
        "Check that the library holds the architectures NCCL was built for"
    )  # type: ignore[attr-defined]
    assert sorted(r.host for r in checks if r.status == "ok") == ["node1", "node2"]


def test_the_pytorch_only_default_brings_nothing_of_tensorflow(gpu: GpuSandbox) -> None:
    """This sandbox keeps the default horovod_frameworks [pytorch]: Horovod is built without
    TensorFlow, and no TensorFlow wheel reaches the nodes or their venv."""
    envs = {
        r.host: r.result.get("ansible_facts", {}).get("_horovod_build_env")
        for r in gpu.first.task_results("Assemble the Horovod build environment of the node")  # type: ignore[attr-defined]
        if r.status == "ok"
    }
    assert sorted(envs) == ["node1", "node2"], envs
    for env in envs.values():
        assert env["HOROVOD_WITH_PYTORCH"] == "1" and env["HOROVOD_WITHOUT_TENSORFLOW"] == "1"
        assert "HOROVOD_WITH_TENSORFLOW" not in env
    for node in gpu.cluster().nodes:
        listed = ssh(
            node,
            "ls /var/cache/mpictl/wheels/horovod-*/ /opt/mpictl/venv/lib/python3*/site-packages",
        )
        assert listed.returncode == 0 and "torch-" in listed.stdout, (node.name, listed.stderr)
        assert "tensorflow" not in listed.stdout.lower(), (node.name, listed.stdout)


def test_mpi_slots_default_to_the_gpu_count(gpu: GpuSandbox) -> None:
    out = gpu.ok("hostfile", "-i", str(gpu.inventory)).stdout.split("\n")
    assert [line for line in out if line] == ["node1 slots=2", "node2 slots=8"]


def ranks(stdout: str) -> list[tuple[str, int, str]]:
    rows = []
    for line in stdout.splitlines():
        fields = line.split(": ", 1)[-1].split()
        if len(fields) == 3 and fields[0] in GPUS:
            rows.append((fields[0], int(fields[1]), fields[2]))
    return sorted(rows)


def test_torch_pins_every_local_rank_to_its_gpu(gpu: GpuSandbox) -> None:
    say = 'echo "$(hostname) $LOCAL_RANK ${CUDA_VISIBLE_DEVICES-unset}"'
    show = ["--", "sh", "-c", say]
    inv = ["-i", str(gpu.inventory)]
    full = gpu.ok("run", *inv, "-np", "10", "--torch", *show).stdout
    assert ranks(full) == [("node1", k, str(k)) for k in range(2)] + [
        ("node2", k, str(k)) for k in range(8)
    ]
    over = ["run", *inv, "--hosts", "node1", "--ppn", "5", "-np", "5", "--oversubscribe"]
    assert ranks(gpu.ok(*over, "--torch", *show).stdout) == [
        ("node1", k, str(k % 2)) for k in range(5)
    ]


def test_openmpi_is_cuda_aware_with_a_toolkit_on_the_node(gpu: GpuSandbox) -> None:
    flags = {
        r.host: r.result.get("ansible_facts", {}).get("_openmpi_configure_all")
        for r in gpu.first.task_results("Assemble the OpenMPI configure flags of the node")  # type: ignore[attr-defined]
    }
    cuda = [
        "--with-cuda=/usr/local/cuda",
        "--with-cuda-libdir=/var/tmp/mpictl-build/openmpi/cuda-libdir",
    ]
    assert {h: [f for f in v if "cuda" in f] for h, v in flags.items()} == {n: cuda for n in GPUS}
    for node in gpu.cluster().nodes:
        proc = ssh(node, "ompi_info --parsable --all | grep mpi_built_with_cuda_support:value")
        assert proc.stdout.strip().endswith(":true"), (node.name, proc.stdout, proc.stderr)
    checked = gpu.first.task_results("Check that OpenMPI is CUDA-aware")  # type: ignore[attr-defined]
    assert sorted(r.host for r in checked if r.status == "ok") == sorted(GPUS)


def test_jobs_of_the_cuda_aware_openmpi_say_nothing_about_cuda_without_a_gpu(
    gpu: GpuSandbox,
) -> None:
    # One rank per node: the ranks talk across nodes, every buffer checked by OpenMPI's CUDA
    # accelerator against the stub driver (no GPU: host memory, no message).
    job = ["run", "-i", str(gpu.inventory), "--ppn", "1", "-np", "2", "--"]
    plain = gpu.ok(*job, "hostname")
    allreduce = "from mpi4py import MPI; print('sum', MPI.COMM_WORLD.allreduce(1))"
    mpi4py = gpu.ok(*job, "python", "-c", allreduce)
    for proc in (plain, mpi4py):  # mpictl's own announcement lines aside
        said = [line for line in (proc.stdout + proc.stderr).splitlines()
                if not line.startswith("mpictl: ")]  # fmt: skip
        assert "cuda" not in "\n".join(said).lower(), proc.stdout + proc.stderr
    # GPU nodes whose UCC has no cuda transport (the mounted toolkit has no nvml.h): coll/ucc
    # stays off (UCC would take device buffers for host memory)
    assert "coll_ucc_enable" not in mpi4py.stderr and "collectives: ucc" not in mpi4py.stderr
    hostnames = {ssh(n, "hostname").stdout.strip() for n in gpu.cluster().nodes}
    assert {line.rsplit(":", 1)[-1].strip() for line in plain.stdout.splitlines()} == hostnames
    assert [line.rsplit(":", 1)[-1].strip() for line in mpi4py.stdout.splitlines()] == [
        "sum 2",
        "sum 2",
    ], mpi4py.stdout


def test_a_node_without_libcuda_builds_without_cuda_or_stops_the_run(gpu: GpuSandbox) -> None:
    node2 = gpu.node("node2")
    lib = stub_libcuda.node_path()
    # Out of the library directory: ldconfig would link libcuda.so.1 to a renamed copy there.
    hide = ssh(node2, f"mv {lib} /root/libcuda.so.1.hidden && ldconfig")
    assert hide.returncode == 0, hide.stderr
    try:
        # The preflight runs whatever the tags; the hostfile play changes nothing here.
        auto = gpu.provision(tags="hostfile")
        enabled = gpu.provision({"openmpi_cuda": "enabled"}, tags="hostfile")
    finally:
        back = ssh(node2, f"mv /root/libcuda.so.1.hidden {lib} && ldconfig")
        assert back.returncode == 0, back.stderr
    looked = (
        "no libcuda (looked at: /usr/local/cuda/lib64/stubs/libcuda.so; "
        "/usr/local/cuda/targets/*/lib/stubs/libcuda.so; /usr/local/cuda/lib/stubs/libcuda.so; "
        "/usr/local/cuda/compat/libcuda.so.1; ldconfig -p; "
        "/usr/lib/x86_64-linux-gnu/libcuda.so; /usr/lib/x86_64-linux-gnu/libcuda.so.1; "
        "/usr/lib64/libcuda.so; /usr/lib64/libcuda.so.1)"
    )
    fix = (
        "install the NVIDIA driver (libcuda.so.1) or the CUDA toolkit's stubs "
        "(lib64/stubs/libcuda.so), or set openmpi_cuda_libdir to the directory of a libcuda"
    )
    assert auto.ok, describe_failures(auto)
    said = auto.task_results("Say why OpenMPI is built without CUDA on the node")
    assert {r.host: r.result.get("msg") for r in said if r.status == "ok"} == {
        "node2": "OpenMPI without CUDA on node2: /usr/local/cuda/bin/nvcc is there but "
        f"{looked}; {fix}"
    }
    flags = {
        r.host: r.result.get("ansible_facts", {}).get("_openmpi_configure_all", [])
        for r in auto.task_results("Assemble the OpenMPI configure flags of the node")
    }
    assert "--without-cuda" in flags["node2"] and "--with-cuda=/usr/local/cuda" in flags["node1"]
    assert changed(auto) == []
    assert failure_messages(enabled) == {
        "node2": f"openmpi: openmpi_cuda is enabled but node2 has {looked}; {fix}; "
        "nothing was changed"
    }
    assert changed(enabled) == []


def test_a_failing_nvidia_smi_stops_the_run_naming_the_node(gpu: GpuSandbox) -> None:
    node2 = gpu.node("node2")
    set_gpus(node2, {**GPUS["node2"], "fail": True})
    try:
        result = gpu.provision()
    finally:
        set_gpus(node2, GPUS["node2"])
    assert not result.ok
    assert failure_messages(result) == {
        "node2": "nccl: nvidia-smi fails on node2 (exit 9): NVIDIA-SMI has failed because it "
        "couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver "
        "is installed and running.; fix the NVIDIA driver there (or remove nvidia-smi from a "
        "node without GPUs); nothing was changed"
    }
    assert changed(result) == []


def test_no_gpu_and_no_archs_is_skipped_or_refused_as_documented(gpu: GpuSandbox) -> None:
    nodes = gpu.cluster().nodes
    for node in nodes:
        set_gpus(node, {"gpus": 0})  # nvidia-smi answers "No devices were found" (exit 6)
    try:
        auto = gpu.provision({"nccl_cuda_archs": []}, tags="nccl")
        required = gpu.provision({"nccl_cuda_archs": [], "nccl_enabled": "true"}, tags="nccl")
    finally:
        for node in nodes:
            set_gpus(node, GPUS[node.name])
    why = (
        'no GPU found by nvidia-smi and nccl_cuda_archs is empty (set e.g. nccl_cuda_archs: ["90"])'
    )
    assert auto.ok, describe_failures(auto)
    said = auto.task_results("Say why NCCL is skipped on the node")
    assert sorted(str(r.result.get("msg")) for r in said if r.status == "ok") == [
        f"NCCL skipped on {n}: {why}" for n in sorted(GPUS)
    ]
    assert changed(auto) == []
    assert failure_messages(required) == {
        n: f"nccl: nccl_enabled is true but NCCL cannot be built on {n}: {why}" for n in GPUS
    }
    assert changed(required) == []


@pytest.mark.parametrize("archs", [["9.0"], ["sm90"]])
def test_archs_in_another_form_are_refused_in_preflight(gpu: GpuSandbox, archs: list[str]) -> None:
    result = gpu.provision({"nccl_cuda_archs": archs})
    assert not result.ok
    messages = set(failure_messages(result).values())
    assert messages == {
        'nccl: nccl_cuda_archs must list compute capabilities as nvcc numbers them, like ["80", '
        f'"90"] (9.0 -> "90"): "{archs[0]}" (write "90")'
    }
    assert changed(result) == []


def make_user_env(gpu: GpuSandbox) -> None:
    """A venv with the CPU PyTorch on every node, made as a user would (not by mpictl), from the
    wheels the controller fetched for the cluster venv (nodes have no index)."""
    wheelhouses = sorted(paths.cache_dir().glob("wheels/horovod-*/torch-*.whl"))
    assert wheelhouses, "no PyTorch wheel in the controller cache (the provision fetches it)"
    wheels = wheelhouses[0].parent
    for node in gpu.cluster().nodes:
        tar = subprocess.run(["tar", "-C", str(wheels), "-c", "."], capture_output=True, check=True)
        command = (
            f"rm -rf /tmp/userenv-wheels {USER_ENV} && mkdir /tmp/userenv-wheels"
            " && tar -C /tmp/userenv-wheels -x"
            f" && python3 -m venv {USER_ENV}"
            f" && {USER_ENV}/bin/pip install -q --no-index --find-links /tmp/userenv-wheels torch"
            " && rm -rf /tmp/userenv-wheels"
        )
        proc = subprocess.run(
            [*ssh_base(node), command], input=tar.stdout, capture_output=True, timeout=900
        )
        assert proc.returncode == 0, (node.name, proc.stderr.decode()[-2000:])


def torch_record(node: Node) -> str:
    return ssh(
        node, f"cd {USER_ENV}/lib/python3*/site-packages && sha256sum torch-*.dist-info/RECORD"
    ).stdout


def test_horovod_builds_into_an_existing_venv_with_its_own_torch(gpu: GpuSandbox) -> None:
    missing = gpu.provision({"horovod_python": "/opt/nowhere/bin/python"}, tags="horovod")
    assert failure_messages(missing) == {
        n: f"horovod: {n}: horovod_python /opt/nowhere/bin/python does not run; nothing was changed"
        for n in GPUS
    }
    assert changed(missing) == []

    make_user_env(gpu)
    before = {n.name: torch_record(n) for n in gpu.cluster().nodes}
    named = {"horovod_python": f"{USER_ENV}/bin/python"}
    result = gpu.provision(named, tags="horovod")
    assert result.ok, describe_failures(result)
    # Nothing fetched or installed for PyTorch; the env's own torch is untouched.
    pip = result.task_results("Install PyTorch and Horovod's dependencies into the venv (no index)")
    assert pip and all("torch" not in " ".join(r.result.get("cmd", [])) for r in pip)
    assert {n.name: torch_record(n) for n in gpu.cluster().nodes} == before
    # The same PyTorch and MPI as the cluster venv's build: the same fingerprint, no compile.
    assert not [
        r
        for r in result.task_results("Compile Horovod on the builder node")
        if r.status == "changed"
    ]
    for node in gpu.cluster().nodes:
        check = ssh(node, f"{USER_ENV}/bin/python -m horovod.runner.launch --check-build")
        assert "[X] PyTorch" in check.stdout and "[X] MPI" in check.stdout, check.stdout
        markers = ssh(
            node,
            "cat /var/lib/mpictl/horovod/*.fingerprint"
            " /opt/mpictl/venv/.mpictl-horovod-fingerprint",
        ).stdout.split()
        assert len(markers) == 2 and markers[0] == markers[1], (node.name, markers)

    again = gpu.provision(named, tags="horovod")
    assert again.ok and changed(again) == [], changed(again)

    # The job side follows the inventory's horovod_python: smoke's Horovod suite runs with it.
    group_vars = gpu.inventory / "group_vars" / "mpi_nodes.yml"
    text = group_vars.read_text()
    group_vars.write_text(text + f"\nhorovod_python: {USER_ENV}/bin/python\n")
    try:
        smoke = gpu.mpictl("smoke", "-i", str(gpu.inventory), "--suite", "horovod", "--json")
    finally:
        group_vars.write_text(text)
    report = json.loads(smoke.stdout)
    assert report["ok"], smoke.stdout + smoke.stderr
    assert {r["result"] for r in report["results"]} == {"pass"}
    (job,) = report["jobs"]
    record = json.loads((gpu.state / "jobs" / job / "job.json").read_text())
    assert f"{USER_ENV}/bin/python" in json.dumps(record["command"]), record["command"]


def test_one_eight_gpu_node_is_a_cluster(gpu: GpuSandbox, tmp_path: Path) -> None:
    """The most common first cluster: one 8-GPU server (node2 alone, from the same provision).
    `run -np 8 --torch` gives every rank its own GPU, and smoke passes with all ranks on that one
    node (a cluster of several nodes still requires crossing nodes: test_job_programs)."""
    one = tmp_path / "one-node"
    shutil.copytree(gpu.inventory, one)
    hosts_file = one / "hosts.yml"
    hosts = yaml.safe_load(hosts_file.read_text())
    del hosts["all"]["children"]["mpi_nodes"]["hosts"]["node1"]
    hosts["all"]["children"].pop("mpi_head", None)  # the one node is the head
    hosts_file.write_text(yaml.safe_dump(hosts, sort_keys=False))
    inv = ["-i", str(one)]
    assert gpu.ok("hostfile", *inv).stdout.split() == ["node2", "slots=8"]
    show = ["--", "sh", "-c", 'echo "$(hostname) $LOCAL_RANK ${CUDA_VISIBLE_DEVICES-unset}"']
    torch = gpu.ok("run", *inv, "-np", "8", "--torch", *show).stdout
    assert ranks(torch) == [("node2", k, str(k)) for k in range(8)]
    smoke = gpu.mpictl("smoke", *inv, "--suite", "all", "--json", timeout=900)
    report = json.loads(smoke.stdout)
    assert smoke.returncode == 0 and report["ok"], smoke.stdout + smoke.stderr
    results = report["results"]
    assert {r["suite"] for r in results} == {"mpi", "horovod"}, results
    assert {(r["result"], r["ranks"], tuple(r["hosts"])) for r in results} == {
        ("pass", 8, ("node2",))
    }, results
    for job in report["jobs"]:
        record = json.loads((gpu.state / "jobs" / job / "job.json").read_text())
        assert record["ranks"] == 8, record
        assert [h["host"] for h in record["hosts"]] == ["node2"], record


def test_fabric_adds_nccl_between_gpu_nodes_and_names_its_failure(gpu: GpuSandbox) -> None:
    """On GPU nodes fabric also measures NCCL: the node probe counts the (stub) GPUs and finds
    nccl-tests on the MPI user's PATH (the nccl_tests role's build), the head runs one mpirun of
    two ranks of `sendrecv_perf` for the pair, and its table or its error comes back. The stub
    driver sees no GPU, so nccl-tests fails with its own message: the pair is named failed for
    NCCL while its MPI figures are measured, and the run exits 1. Every part of the GPU path but
    the GPU itself."""
    proc = gpu.mpictl(
        "fabric", "-i", str(gpu.inventory), "--expect", "0.001", "--no-tcp", "--seconds", "0.3",
        "--json", timeout=600,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    (pair,) = report["pairs"]
    assert pair["verdict"] == "ok" and pair["ab_GBps"] > 0, pair  # MPI, against 0.001 Gbit/s
    (nccl,) = pair["nccl"]
    assert nccl["via"] == "NCCL" and nccl["verdict"] == "failed", nccl
    assert nccl["error"].startswith("sendrecv_perf exit "), nccl["error"]
    assert "not on the PATH" not in nccl["error"] and "not found" not in nccl["error"], nccl
    (finding,) = report["findings"]
    assert finding["kind"] == "failed" and finding["text"].startswith(
        "NCCL: no pair could be measured"
    )
    kept = json.loads((gpu.state / "jobs" / report["job"] / "fabric.json").read_text())
    assert kept["pairs"][0]["nccl"][0]["error"] == nccl["error"]
