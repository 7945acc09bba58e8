"""TensorFlow on the cluster (issue 28), without TensorFlow: `mpictl run --tf` (the plan under
mpirun and Slurm, the refusals), the node-side wrapper mpictl-tf-env (run for real, with a
stand-in for mpi4py that answers the gather as MPI would), horovod_frameworks in the settings,
the smoke suite per framework, doctor's TensorFlow version and the horovod role's reading of a
Python environment's TensorFlow without importing it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpictl import mpirun_plan, network, planner, slurm_plan, smoke
from mpictl import settings as cluster_settings
from mpictl.doctor import nodes as doctor_nodes
from mpictl.errors import InventoryError, UsageError
from mpictl.planner import LaunchOptions
from tests.unit.jobside import three

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "mpictl" / "scripts"
CMD = ["python", "train.py"]


def mpirun_job(**kw):  # type: ignore[no-untyped-def]
    c = kw.pop("cluster", None) or three()
    return mpirun_plan.plan(c, LaunchOptions(command=CMD, **kw), "J1", network.derive_network(c))


def exported(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "-x"]


# --------------------------------------------------------------------------------------------
# mpictl run --tf: the plan


def test_tf_starts_every_rank_behind_the_wrapper_with_the_job_nodes_and_the_port() -> None:
    p = mpirun_job(tf=True, hosts=["node2", "node3"], tf_port=30000)
    assert p.command == ["/opt/mpictl/venv/bin/python", "/opt/mpictl/bin/mpictl-tf-env", *CMD]
    xs = exported(p.mpirun)
    assert "MPICTL_TF_HOSTS=node2,node3" in xs  # three(): the addresses are the names
    assert "MPICTL_TF_PORT=30000" in xs
    assert not [x for x in xs if x.startswith(("MASTER_", "GLOO_"))]  # torch's are not set


def test_a_users_own_tf_port_wins_and_the_default_port_is_documented() -> None:
    xs = exported(mpirun_job(tf=True, env=["MPICTL_TF_PORT=4000"]).mpirun)
    assert "MPICTL_TF_PORT=4000" in xs and f"MPICTL_TF_PORT={planner.DEFAULT_TF_PORT}" not in xs
    assert planner.DEFAULT_TF_PORT == 23456
    assert f"MPICTL_TF_PORT={planner.DEFAULT_TF_PORT}" in exported(mpirun_job(tf=True).mpirun)


def test_without_tf_nothing_of_it_is_set() -> None:
    p = mpirun_job()
    assert p.command == CMD
    assert not [x for x in exported(p.mpirun) if x.startswith("MPICTL_TF_")]


@pytest.mark.parametrize(
    ("kw", "text"),
    [
        ({"tf": True, "torch": True}, "--tf and --torch"),
        ({"tf": True, "tf_port": 0}, "--tf-port must be a TCP port"),
        ({"tf": True, "tf_port": 70000}, "--tf-port must be a TCP port"),
    ],
)
def test_bad_tf_options_are_refused_before_anything_runs(kw, text) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match=text):
        mpirun_job(**kw)


def test_tf_through_slurm_names_every_node_slurm_may_choose() -> None:
    c = three()
    p = slurm_plan.plan(
        c, LaunchOptions(command=CMD, tf=True, np=3), "J1", network.derive_network(c)
    )
    assert p.command[1].endswith("/mpictl-tf-env")
    assert "export MPICTL_TF_HOSTS=node1,node2,node3" in p.script
    assert "export MPICTL_TF_PORT=23456" in p.script
    assert "MASTER_ADDR" not in p.script
    narrowed = slurm_plan.plan(
        c, LaunchOptions(command=CMD, tf=True, hosts=["node3"]), "J1", network.derive_network(c)
    )
    assert "export MPICTL_TF_HOSTS=node3" in narrowed.script


def test_the_cli_refuses_tf_with_torch_in_one_line_without_touching_a_node(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n  children:\n    mpi_nodes:\n      hosts:\n"
        "        n1: {ansible_host: 127.0.0.1, ansible_port: 1, mpi_slots: 1}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "mpictl", "run", "-i", str(inv), "--tf", "--torch", "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MPICTL_STATE_DIR": str(tmp_path / "state")},
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "--tf and --torch" in proc.stderr
    assert not (tmp_path / "state" / "jobs").exists() or not any(
        (tmp_path / "state" / "jobs").iterdir()
    )


# --------------------------------------------------------------------------------------------
# mpictl-tf-env on a node, for real; mpi4py is a stand-in whose allgather answers as three ranks
# on three nodes would (this rank's own entry in its place), and which records its calls.

FAKE_MPI = """
import json, os
LOG = os.environ["FAKE_MPI_LOG"]
def _log(what):
    with open(LOG, "a") as f:
        f.write(json.dumps(what) + "\\n")
class _Comm:
    def allgather(self, value):
        _log(["allgather", value])
        rank = int(os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ["SLURM_PROCID"])
        out = ["10.9.0.1:23456", "10.9.0.2:23456", "10.9.0.3:23456"]
        out[rank] = value
        return out
COMM_WORLD = _Comm()
def Finalize():
    _log(["finalize"])
"""


@pytest.fixture
def fake_mpi(tmp_path: Path) -> Path:
    package = tmp_path / "site" / "mpi4py"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "MPI.py").write_text(FAKE_MPI)
    return tmp_path


def tf_env(tmp: Path, env: dict[str, str], *cmd: str) -> subprocess.CompletedProcess[str]:
    names = "('TF_CONFIG', 'CUDA_VISIBLE_DEVICES')"
    show = f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {names}}}))"
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "mpictl-tf-env"), *(cmd or (sys.executable, "-c", show))],
        env={
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(tmp / "site"),
            "FAKE_MPI_LOG": str(tmp / "mpi.log"),
            "MPICTL_GPU_COUNT": "0",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


RANK1 = {
    "OMPI_COMM_WORLD_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_RANK": "0",
    # 10.255.255.9 is no address of this machine; 127.0.0.1 is
    "MPICTL_TF_HOSTS": "10.255.255.9,127.0.0.1",
}


def test_the_wrapper_gives_each_rank_the_worker_list_in_rank_order_and_its_index(
    fake_mpi: Path,
) -> None:
    proc = tf_env(fake_mpi, {**RANK1, "MPICTL_TF_PORT": "30000"})
    assert proc.returncode == 0, proc.stderr
    config = json.loads(json.loads(proc.stdout)["TF_CONFIG"])
    assert config == {
        "cluster": {"worker": ["10.9.0.1:23456", "127.0.0.1:30000", "10.9.0.3:23456"]},
        "task": {"type": "worker", "index": 1},
    }
    calls = [json.loads(line) for line in (fake_mpi / "mpi.log").read_text().splitlines()]
    assert calls == [["allgather", "127.0.0.1:30000"], ["finalize"]]  # MPI left before the exec


def test_ranks_sharing_a_node_get_ports_apart_and_gpus_round_robin(fake_mpi: Path) -> None:
    env = {**RANK1, "OMPI_COMM_WORLD_LOCAL_RANK": "3", "MPICTL_GPU_COUNT": "2"}
    got = json.loads(tf_env(fake_mpi, env).stdout)
    assert json.loads(got["TF_CONFIG"])["cluster"]["worker"][1] == "127.0.0.1:23459"
    assert got["CUDA_VISIBLE_DEVICES"] == "1"
    user = json.loads(tf_env(fake_mpi, {**env, "CUDA_VISIBLE_DEVICES": "0"}).stdout)
    assert user["CUDA_VISIBLE_DEVICES"] == "0"


def test_under_srun_the_rank_comes_from_slurm(fake_mpi: Path) -> None:
    env = {"SLURM_PROCID": "2", "SLURM_LOCALID": "1", "MPICTL_TF_HOSTS": "127.0.0.1"}
    got = json.loads(json.loads(tf_env(fake_mpi, env).stdout)["TF_CONFIG"])
    assert got["task"]["index"] == 2 and got["cluster"]["worker"][2] == "127.0.0.1:23457"


def test_a_users_own_tf_config_is_kept_and_mpi_is_not_touched(fake_mpi: Path) -> None:
    mine = '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}'
    got = json.loads(tf_env(fake_mpi, {**RANK1, "TF_CONFIG": mine}).stdout)
    assert got["TF_CONFIG"] == mine
    assert not (fake_mpi / "mpi.log").exists()


@pytest.mark.parametrize(
    ("env", "text"),
    [
        ({"MPICTL_TF_HOSTS": "127.0.0.1"}, "neither OMPI_COMM_WORLD_RANK nor SLURM_PROCID"),
        ({**RANK1, "MPICTL_TF_HOSTS": "10.255.255.9"}, "none of the job's node addresses"),
        ({**RANK1, "MPICTL_TF_HOSTS": ""}, "MPICTL_TF_HOSTS is empty"),
        ({**RANK1, "MPICTL_TF_PORT": "http"}, "MPICTL_TF_PORT must be a port number"),
        ({**RANK1, "MPICTL_TF_PORT": "65535", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}, "past port"),
    ],
)
def test_the_wrapper_stops_with_one_line_where_it_cannot_tell(fake_mpi: Path, env, text) -> None:  # type: ignore[no-untyped-def]
    proc = tf_env(fake_mpi, env)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and text in proc.stderr, proc.stderr
    assert not (fake_mpi / "mpi.log").exists()  # stopped before asking the other ranks


def test_a_command_that_does_not_exist_is_one_line(fake_mpi: Path) -> None:
    proc = tf_env(fake_mpi, RANK1, "no-such-program-here")
    assert proc.returncode == 2 and "cannot run no-such-program-here" in proc.stderr


# --------------------------------------------------------------------------------------------
# horovod_frameworks: settings, smoke and doctor


def test_settings_read_horovod_frameworks_and_refuse_a_bad_one() -> None:
    c = three()
    assert cluster_settings.for_cluster(c).horovod_frameworks == ("pytorch",)
    c.head.vars["horovod_frameworks"] = ["tensorflow", "pytorch", "tensorflow"]
    assert cluster_settings.for_cluster(c).horovod_frameworks == ("tensorflow", "pytorch")
    for bad, why in ((["jax"], "must be one or more of: pytorch, tensorflow"),
                     ([], "must not be empty"), ("caffe", "must be one or more of")):  # fmt: skip
        c.head.vars["horovod_frameworks"] = bad
        with pytest.raises(InventoryError, match=f"horovod_frameworks .*: {why}"):
            cluster_settings.for_cluster(c)
    c.head.vars["horovod_frameworks"] = "tensorflow"  # a string is a list of one, as in Ansible
    assert cluster_settings.for_cluster(c).horovod_frameworks == ("tensorflow",)


def test_each_framework_has_its_module_and_its_own_test_names() -> None:
    torch_mod, torch_tests = smoke.HOROVOD_FRAMEWORKS["pytorch"]
    tf_mod, tf_tests = smoke.HOROVOD_FRAMEWORKS["tensorflow"]
    assert (torch_mod, tf_mod) == ("horovod.torch", "horovod.tensorflow")
    assert torch_tests == smoke.HOROVOD_TESTS  # the PyTorch suite's names are unchanged
    assert not set(torch_tests) & set(tf_tests)
    assert set(smoke.HOROVOD_FRAMEWORKS) == set(cluster_settings.HOROVOD_FRAMEWORKS)


def test_smoke_horovod_refuses_an_unknown_framework() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "smoke_horovod.py"), "jax"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2 and "usage: smoke_horovod.py [pytorch|tensorflow]" in proc.stderr


def test_doctor_compares_tensorflow_only_where_a_node_has_it() -> None:
    def checks(versions: dict[str, str | None]) -> list:  # type: ignore[type-arg]
        data = {n: {"versions": {"tensorflow": v}} for n, v in versions.items()}
        return [
            c
            for c in doctor_nodes.build_checks(data, "provision")
            if c.check == "tensorflow version"
        ]

    assert checks({"node1": None, "node2": None}) == []
    same = checks({"node1": "2.15.1 (tensorflow-cpu)", "node2": "2.15.1 (tensorflow-cpu)"})
    assert [(c.node, c.ok) for c in same] == [("all", True)]
    odd = checks(
        {"node1": "2.15.1 (tensorflow-cpu)", "node2": None, "node3": "2.15.1 (tensorflow-cpu)"}
    )
    assert [(c.node, c.ok) for c in odd] == [("node2", False)]
    assert "missing; other nodes: 2.15.1 (tensorflow-cpu)" in odd[0].detail


def test_the_venv_versions_name_tensorflows_distribution_without_importing_it(
    tmp_path: Path,
) -> None:
    dist = tmp_path / "tensorflow_cpu-2.15.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tensorflow-cpu\nVersion: 2.15.1\n")
    # a tensorflow package that would fail if imported
    (tmp_path / "tensorflow").mkdir()
    (tmp_path / "tensorflow" / "__init__.py").write_text("raise SystemExit('imported')\n")
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r}); sys.path.insert(0, {str(SCRIPTS)!r});"
        "import venv_versions; print(venv_versions.tensorflow_version())"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.stdout.strip() == "2.15.1 (tensorflow-cpu)", proc.stderr


# tensorflow/python/platform/build_info.py's build_info line: of the tensorflow-cpu 2.15.1 wheel
# (copied from it), and of a CUDA build in the same form (written here; no GPU wheel was at hand).
BUILD_INFO_CPU = (
    "build_info = collections.OrderedDict([('is_cuda_build', False), ('is_rocm_build', False), "
    "('is_tensorrt_build', False)])"
)
BUILD_INFO_CUDA = (
    "build_info = collections.OrderedDict([('cuda_version', '12.2'), ('cudnn_version', '8'), "
    "('is_cuda_build', True), ('is_rocm_build', False), ('is_tensorrt_build', True)])"
)


@pytest.mark.parametrize(
    ("name", "line", "cuda"),
    [("tensorflow-cpu", BUILD_INFO_CPU, None), ("tensorflow", BUILD_INFO_CUDA, "12.2")],
)
def test_the_horovod_role_reads_a_tensorflow_build_from_its_files(  # type: ignore[no-untyped-def]
    tmp_path: Path, name, line, cuda
) -> None:
    """files/python_env.py: TensorFlow's distribution, version and CUDA build from the metadata
    and tensorflow/python/platform/build_info.py, never by importing it."""
    dist = tmp_path / f"{name.replace('-', '_')}-2.15.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 2.15.1\n")
    platform = tmp_path / "tensorflow" / "python" / "platform"
    platform.mkdir(parents=True)
    (tmp_path / "tensorflow" / "__init__.py").write_text("raise SystemExit('imported')\n")
    (platform / "build_info.py").write_text(f"import collections\n\n{line}\n")
    source = (ROOT / "roles" / "horovod" / "files" / "python_env.py").read_text()
    proc = subprocess.run(
        [sys.executable, "-c", source],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    got = json.loads(proc.stdout.splitlines()[-1])
    want = {"dist": name.replace("-", "_"), "version": "2.15.1", "cuda": cuda}
    assert got["tensorflow"] == want


def test_tf_refuses_a_node_whose_address_is_an_ipv6_literal() -> None:
    from tests.unit.jobside import cluster, node

    c = cluster(node("node1", 1, address="fd00::1"), node("node2", 1, address="10.0.0.2"))
    with pytest.raises(UsageError, match="node1's address fd00::1 is an IPv6 literal"):
        mpirun_plan.plan(c, LaunchOptions(command=CMD, tf=True), "J1", None)
    with pytest.raises(UsageError, match="IPv6 literal"):
        slurm_plan.plan(c, LaunchOptions(command=CMD, tf=True), "J1", None)
    # without --tf the same cluster plans as before
    assert mpirun_plan.plan(c, LaunchOptions(command=CMD), "J1", None).command == CMD


def test_the_role_and_the_doctor_know_the_same_tensorflow_distributions() -> None:
    import ast

    def dists(path: Path) -> tuple[str, ...]:
        tree = ast.parse(path.read_text())
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and getattr(stmt.targets[0], "id", "") == "TF_DISTS":
                return tuple(ast.literal_eval(stmt.value))
        raise AssertionError(f"no TF_DISTS in {path}")

    role = dists(ROOT / "roles" / "horovod" / "files" / "python_env.py")
    assert role == dists(SCRIPTS / "venv_versions.py")
    assert role[:2] == ("tensorflow", "tensorflow-cpu")
