"""A site that moves what the roles and the job side share (issue 11): the MPI user, the cluster
venv, the hostfile and the job tools' directories set in the inventory, on a 2-node sandbox of
its own. Provision puts everything there (and nothing at the defaults), and run, smoke and
doctor find it there, because they read the same variables from the head."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mpictl.inventory import Cluster, load_inventory
from tests.integration import stub_libcuda
from tests.integration.nodes import clone_sandbox_inventory, run_cli, ssh

SITE_NAME = "mpictl-it-site"
SITE_SUBNET = "10.89.47.0/24"
SITE_PORT_BASE = 2241
SITE_VARS = {
    "mpi_user": "trainer",
    "mpi_cluster_venv": "/opt/site/venv",
    "mpi_hostfile_path": "/etc/site/hostfile",
    "mpi_tools_dir": "/opt/site/jobs",
    "mpi_bin_dir": "/opt/site/bin",
}


class Site:
    def __init__(self, inventory: Path, env: dict[str, str]) -> None:
        self.inventory = inventory
        self.env = env

    def mpictl(self, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, env=self.env, timeout=timeout)

    def ok(self, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
        proc = self.mpictl(*args, timeout=timeout)
        assert proc.returncode == 0, f"mpictl {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
        return proc

    def cluster(self) -> Cluster:
        old = os.environ.get("MPICTL_STATE_DIR")
        os.environ["MPICTL_STATE_DIR"] = self.env["MPICTL_STATE_DIR"]
        try:
            return load_inventory(self.inventory)
        finally:
            if old is not None:
                os.environ["MPICTL_STATE_DIR"] = old


@pytest.fixture(scope="module")
def site(
    tmp_path_factory: pytest.TempPathFactory,
    warm_cache: None,  # the session sandbox's builds are in the cache: nothing compiles here
    source_vars: dict[str, Any],
) -> Iterator[Site]:
    state = tmp_path_factory.mktemp("site-state")
    inv = clone_sandbox_inventory(state / "inventory", SITE_NAME, SITE_SUBNET, SITE_PORT_BASE)
    hosts_file = inv / "hosts.yml"
    hosts = yaml.safe_load(hosts_file.read_text())
    del hosts["all"]["children"]["mpi_nodes"]["hosts"]["node3"]
    hosts_file.write_text(yaml.safe_dump(hosts, sort_keys=False))
    group_vars = inv / "group_vars" / "mpi_nodes.yml"
    # Slurm is not what this test is about: off in the inventory, where doctor reads it too
    text = group_vars.read_text().replace("slurm_enabled: true", "slurm_enabled: false")
    group_vars.write_text(text + yaml.safe_dump(SITE_VARS))
    extra = state / "vars.yml"
    # NCCL and Horovod stay out; the CUDA mount and the stub libcuda as in the session's sandbox
    # keep OpenMPI's fingerprint the cached one (nothing compiles here).
    extra.write_text(
        yaml.safe_dump(
            {
                **source_vars,
                "nccl_enabled": "false",
                "horovod_enabled": False,
                "slurm_enabled": False,
            }
        )
    )
    env = {**os.environ, "MPICTL_STATE_DIR": str(state)}
    s = Site(inv, env)
    s.mpictl("sandbox", "down", "-i", str(inv))
    cuda = ["--cuda"] if Path("/usr/local/cuda").is_dir() else []
    s.ok("sandbox", "up", "-i", str(inv), *cuda, timeout=600)
    if cuda:
        stub_libcuda.install(inv)
    try:
        s.ok("provision", "-i", str(inv), "-e", f"@{extra}")
        yield s
    finally:
        if not os.environ.get("MPICTL_KEEP_SANDBOX"):
            s.mpictl("sandbox", "down", "-i", str(inv))


def test_provision_puts_everything_at_the_sites_paths(site: Site) -> None:
    for node in site.cluster().nodes:
        proc = ssh(
            node,
            "id -un trainer && test -f /etc/site/hostfile && test -f /opt/site/jobs/smoke_mpi.py"
            " && test -x /opt/site/bin/mpictl-torch-env"
            " && /opt/site/venv/bin/python -c 'import mpi4py' && echo site-ok;"
            " ls -d /etc/mpictl/hostfile /opt/mpictl/venv /opt/mpictl/share/jobs 2>/dev/null;"
            " id mpi 2>/dev/null; true",
        )
        assert proc.stdout.split() == ["trainer", "site-ok"], (node.name, proc.stdout, proc.stderr)


def test_run_uses_the_sites_hostfile_user_and_torch_wrapper(site: Site) -> None:
    proc = site.ok("run", "-i", str(site.inventory), "--", "sh", "-c", "id -un; hostname")
    lines = [line.split(": ", 1)[-1] for line in proc.stdout.splitlines()]
    assert lines.count("trainer") == 2
    assert "--hostfile /etc/site/hostfile" in proc.stderr
    torch = site.ok("run", "-i", str(site.inventory), "--torch", "--", "sh", "-c", "echo R$RANK")
    assert sorted(line.split(": ", 1)[-1] for line in torch.stdout.splitlines()) == ["R0", "R1"]
    assert "/opt/site/bin/mpictl-torch-env" in torch.stderr


def test_smoke_and_doctor_pass_against_the_sites_paths(site: Site) -> None:
    report = json.loads(
        site.ok("smoke", "-i", str(site.inventory), "--suite", "mpi", "--json").stdout
    )
    assert report["ok"] and {r["result"] for r in report["results"]} == {"pass"}
    doctor = json.loads(site.mpictl("doctor", "-i", str(site.inventory), "--json").stdout)
    failed = [c for c in doctor["checks"] if c["result"] != "ok"]
    assert doctor["ok"], failed
    hostfile = [c for c in doctor["checks"] if c["check"] == "slots"]
    assert len(hostfile) == 2
