"""Integration fixtures: one real 3-node sandbox, provisioned once per test session.

The sandbox is an independent copy of inventories/sandbox (name ``mpictl-it``, ports 2211-2213)
so it never clashes with a developer's own sandbox. State (keys, facts, runs) lives in a fresh
temporary directory; the artifact cache is persistent (``MPICTL_CACHE_DIR``, default the machine's
``~/.cache/mpictl``)
so a re-run installs OpenMPI & co. from the cache instead of compiling. A new machine starts with
an empty cache and therefore proves the cold path.
Set MPICTL_KEEP_SANDBOX=1 to keep the nodes after the session for debugging.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mpictl import paths, provision, runner
from mpictl.inventory import Cluster, load_inventory
from tests.integration import stub_libcuda
from tests.integration.nodes import ROOT, clone_sandbox_inventory

# (MPICTL_IT_NAME, _SUBNET, _PORT_BASE move it: a second suite beside a running one)
IT_NAME = os.environ.get("MPICTL_IT_NAME", "mpictl-it")
IT_SUBNET = os.environ.get("MPICTL_IT_SUBNET", "10.89.41.0/24")
IT_PORT_BASE = int(os.environ.get("MPICTL_IT_PORT_BASE", "2211"))

# What the session sandbox's Horovod is built for: both frameworks, so one sandbox proves the
# TensorFlow path (Horovod's bindings, --tf) and PyTorch's.
IT_FRAMEWORKS = ["pytorch", "tensorflow"]

# Variables every integration provision passes on top of the fetched sources: a small NCCL
# kernel subset so the NCCL build fits a 2-core CI machine (full build is the product default),
# for the two architectures the GPU-stub sandbox's nodes report (8.0 and 9.0, test_gpu_stub.py):
# its NCCL and nccl-tests are then this build, installed from the cache instead of compiled
# again (a fingerprint is made of the gencode, not of the variable that chose it).
TEST_VARS: dict[str, Any] = {
    "nccl_cuda_archs": ["80", "90"],
    "nccl_make_args": ["ONLY_FUNCS=AllReduce Sum f32 * *|SendRecv"],
    # Slurm's node health checks off: tests that break a node on purpose (partial failures,
    # slurmd stopped) must not see it drained by a check in between; test_slurm.py turns them on
    # for its own health test.
    "slurm_health_check_interval": 0,
}


#: Test modules with sandboxes of their own; the rest share the session sandbox. They carry the
#: marker ``beside``: scripts/test.sh runs them (and Molecule's scenarios, each with a sandbox of
#: its own) in a second pytest process beside the session sandbox's, once the session's first
#: provision has filled the artifact cache (``warm_cache``); their nodes, subnets and ports never
#: meet the session sandbox's.
OWN_SANDBOX = ("test_gpu_stub", "test_installed", "test_sandbox", "test_scale",
               "test_site_settings", "test_molecule")  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
            if Path(str(item.fspath)).stem in OWN_SANDBOX:
                item.add_marker(pytest.mark.beside)
    # First what needs nothing of the session's first provision (it need not wait for it), then
    # what does, Molecule's scenarios that install its builds last (they reuse its artifacts).
    items.sort(key=_beside_order)


def _beside_order(item: pytest.Item) -> int:
    if Path(str(item.fspath)).stem not in OWN_SANDBOX:
        return 1  # the session sandbox's tests keep their order
    if "test_molecule" in str(item.fspath):
        from tests.integration.test_molecule import installs_builds

        return 2 if installs_builds(item.callspec.params["role"]) else 0  # type: ignore[attr-defined]
    uses = set(getattr(item, "fixturenames", ()))
    return 1 if uses & {"warm_cache", "first_provision", "cluster", "inventory"} else 0


@pytest.fixture(scope="session")
def it_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    state = tmp_path_factory.mktemp("mpictl-state")
    old = {k: os.environ.get(k) for k in ("MPICTL_STATE_DIR", "MPICTL_CACHE_DIR")}
    os.environ["MPICTL_STATE_DIR"] = str(state)
    os.environ["MPICTL_CACHE_DIR"] = old["MPICTL_CACHE_DIR"] or str(paths.cache_dir())
    yield state
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def inventory(it_state: Path) -> Iterator[Path]:
    """The inventory of the session's sandbox, brought up (with CUDA mounted when available, and
    then the test stub of the driver's libcuda, so OpenMPI is built CUDA-aware: every test sandbox
    that mounts CUDA does the same and shares that one OpenMPI build)."""
    from mpictl import sandbox

    inv = with_the_session_frameworks(
        clone_sandbox_inventory(it_state / "inventory", IT_NAME, IT_SUBNET, IT_PORT_BASE)
    )
    sandbox.down(inv)  # leftovers of an interrupted earlier session
    cuda = Path("/usr/local/cuda").is_dir()
    sandbox.up(inv, cuda=cuda)
    if cuda:
        stub_libcuda.install(inv)
    yield inv
    if not os.environ.get("MPICTL_KEEP_SANDBOX"):
        sandbox.down(inv)


@pytest.fixture(scope="session")
def source_vars(it_state: Path) -> dict[str, Any]:
    """Sources in the controller cache (downloaded once) and the vars that point roles at them."""
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "fetch-test-sources.sh")],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    vars_file = Path(out.stdout.strip().splitlines()[-1])
    return {**yaml.safe_load(vars_file.read_text()), **TEST_VARS}


# Containers on the session sandbox (issue 40; the demo's sandbox leaves them off): enroot on every
# node, pyxis in its Slurm (tests/integration/test_containers.py). The podman nodes need nothing
# added for enroot (user namespaces work in them, no --privileged); on a cgroup-v1 host they cannot
# mount their own cgroup subtree, which enroot's 10-cgroups.sh hook does (it shows the job's cgroup
# inside the container; MPI does not need it), so that hook is left out.
SESSION_CONTAINERS = "containers_enabled: true\ncontainers_hooks_off: [10-cgroups.sh]\n"


def with_the_session_frameworks(inv: Path) -> Path:
    """``inv`` (a copy of the sandbox inventory) choosing the session sandbox's frameworks
    (TensorFlow beside PyTorch, issue 28), where smoke and doctor read them too, and its
    containers (SESSION_CONTAINERS). The demo's
    inventory keeps the default [pytorch]; the other test sandboxes do as well. Any other
    inventory that provisions the session's nodes must choose the same (IT_FRAMEWORKS), or its
    run rebuilds their Horovod without TensorFlow."""
    with (inv / "group_vars" / "all.yml").open("a") as fh:
        fh.write(f"horovod_frameworks: {json.dumps(IT_FRAMEWORKS)}\n")
        fh.write(SESSION_CONTAINERS)
    return inv


def without_the_last_node(dst: Path) -> Path:
    """The session sandbox's inventory with its last node (node3) left out: a cluster that node
    was taken out of, while its container still runs."""
    from mpictl import sandbox

    return with_the_session_frameworks(
        sandbox.clone_inventory(dst, IT_NAME, IT_SUBNET, IT_PORT_BASE, 2)
    )


def provision_run(inventory: Path, extravars: dict[str, Any], **kwargs: Any) -> runner.RunResult:
    _, result = provision.provision(inventory, extravars=extravars, **kwargs)
    return result


def describe_failures(result: runner.RunResult) -> str:
    lines = [f"rc={result.rc} artifacts={result.private_data_dir}"]
    for r in result.task_results():
        if r.status in ("failed", "unreachable") and not r.ignore_errors:
            msg = str(r.result.get("msg", ""))[:300]
            stderr = str(r.result.get("stderr", ""))[-600:]
            lines.append(f"{r.host}: {r.task}: {msg} {stderr}")
    return "\n".join(lines)


def _warm_marker() -> Path | None:
    """With ``MPICTL_IT_RUN`` (scripts/test.sh: one id per run of the suite): the file the
    session sandbox's process writes once its first provision ended (``ok`` or ``failed``)."""
    run = os.environ.get("MPICTL_IT_RUN")
    return paths.cache_dir() / f".it-warm-{run}" if run else None


@pytest.fixture(scope="session")
def first_provision(inventory: Path, source_vars: dict[str, Any]) -> runner.RunResult:
    """The session's first full provision of the fresh sandbox (its events are kept)."""
    marker = _warm_marker()
    try:
        result = provision_run(inventory, source_vars)
    except BaseException:
        if marker is not None:
            marker.write_text("failed\n")
        raise
    if marker is not None:
        marker.write_text("ok\n" if result.ok else "failed\n")
    assert result.ok, describe_failures(result)
    return result


@pytest.fixture(scope="session")
def warm_cache(request: pytest.FixtureRequest, it_state: Path) -> None:
    """The artifact cache holds the session sandbox's builds, so a sandbox of another module
    installs them instead of compiling the same fingerprints again: the session's first
    provision, or, in the process that runs the ``beside`` tests next to the session sandbox's
    (``MPICTL_IT_BESIDE=1``), the end of that provision in the other process."""
    marker = _warm_marker()
    if marker is None or not os.environ.get("MPICTL_IT_BESIDE"):
        request.getfixturevalue("first_provision")
        return
    deadline = time.monotonic() + 5400
    while not marker.exists():
        assert time.monotonic() < deadline, "the session sandbox's first provision never ended"
        time.sleep(5)
    assert marker.read_text().strip() == "ok", "the session sandbox's first provision failed"


@pytest.fixture(scope="module")
def cluster(inventory: Path, first_provision: runner.RunResult) -> Cluster:
    """The provisioned sandbox as a Cluster (facts of the first provision loaded)."""
    return load_inventory(inventory)


#: The node whose cached facts the second provision finds to be of another machine (its machine
#: id replaced: a node re-imaged or replaced behind the same name), and the id it finds there.
STALE_NODE = "node2"
STALE_MACHINE_ID = "0" * 32


def cached_machine_id(state: Path, host: str, new: str | None = None) -> str:
    """The machine id in ``host``'s cached facts (ansible-core 2.19's jsonfile cache:
    ``facts/s<N>_<host>`` = ``{"__payload__": "<facts as JSON>"}``); ``new`` replaces it."""
    (cached,) = [p for p in (state / "facts").iterdir() if p.name.split("_", 1)[-1] == host]
    outer = json.loads(cached.read_text())
    facts = json.loads(outer["__payload__"]) if "__payload__" in outer else outer
    old = str(facts["ansible_machine_id"])
    if new is not None:
        facts["ansible_machine_id"] = new
        if "__payload__" in outer:
            outer["__payload__"] = json.dumps(facts)
        cached.write_text(json.dumps(outer if "__payload__" in outer else facts))
    return old


@pytest.fixture(scope="session")
def second_provision(
    first_provision: runner.RunResult, inventory: Path, source_vars: dict[str, Any], it_state: Path
) -> runner.RunResult:
    """A second provision with nothing changed (for idempotence assertions). It runs every role
    (``mpictl_short_path: false``): each role's own pass over what it manages must find nothing
    to change; the cluster's short path is ``short_path_provision``.

    The same pass proves that cached facts of another machine are gathered again (a node
    re-imaged behind the same name, test_no_change): STALE_NODE's cached machine id is replaced
    first, so this run must say so, gather that node's facts again and still change nothing. One
    long pass over every role serves both checks (it took ~80 s on the session's three nodes)."""
    cached_machine_id(it_state, STALE_NODE, STALE_MACHINE_ID)
    result = provision_run(inventory, {**source_vars, "mpictl_short_path": False})
    assert result.ok, describe_failures(result)
    return result


@pytest.fixture(scope="session")
def short_path_provision(
    second_provision: runner.RunResult, inventory: Path, source_vars: dict[str, Any]
) -> runner.RunResult:
    """A third provision with nothing changed, on the cluster's short path (the default)."""
    result = provision_run(inventory, source_vars)
    assert result.ok, describe_failures(result)
    return result


def assert_built_once(
    result: runner.RunResult, component: str, compile_task: str, install_task: str
) -> list[str]:
    """The build-once contract of ``component`` (a build_once_name) in a fresh sandbox's first
    provision: every node looked its artifact up in the controller cache; on a cold cache exactly
    one node compiled (and only it ran the build tasks), on a warm one none did; every node then
    installed from the artifact. Returns the hosts that compiled.

    The cache is shared with other runs, so what the run itself saw decides cold or warm."""

    def ran(task: str) -> list[str]:
        return sorted(r.host for r in result.task_results(task) if r.status in ("ok", "changed"))

    lookup = f"Look up the artifact in the controller cache for {component}"
    lookups = [r for r in result.task_results(lookup) if r.status == "ok"]
    nodes = sorted(r.host for r in lookups)
    assert nodes == ["node1", "node2", "node3"], f"{component}: lookups on {nodes}"
    cold = any(not r.result.get("stat", {}).get("exists") for r in lookups)
    compiled_on = ran(compile_task)
    if cold:
        assert len(compiled_on) == 1, f"{component}: cold cache, compiles on {compiled_on}"
        include = f"Run the build tasks on the builder node for {component}"
        builders = sorted(r.host for r in result.task_results(include) if r.status != "skipped")
        assert builders == compiled_on, f"{component}: build tasks ran on {builders}"
    else:
        assert compiled_on == [], f"{component}: compiled although cached: {compiled_on}"
    assert ran(install_task) == nodes, f"{component}: installed on {ran(install_task)}"
    return compiled_on


# A skipped integration test is a check lost: the only skips are for a machine without a CUDA
# toolkit (the GPU-stub sandbox, NCCL). On a machine that has one, any skip fails the run.
_SKIPPED: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and "tests/integration" in report.nodeid:
        _SKIPPED.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _SKIPPED and Path("/usr/local/cuda/bin/nvcc").is_file() and exitstatus == 0:
        print(f"\nmpictl: {len(_SKIPPED)} integration test(s) skipped on a machine that can run "
              f"them (it has /usr/local/cuda/bin/nvcc): {', '.join(_SKIPPED[:5])}")  # fmt: skip
        session.exitstatus = 1
