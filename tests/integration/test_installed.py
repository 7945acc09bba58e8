"""mpictl as an installed tool (issue 12): the wheel built from this checkout, installed into a new
venv outside the clone and made read-only, used from a directory outside the clone with no
checkout on sys.path. It brings up a sandbox from its own bundled inventory, provisions it from
the artifact cache (no compile), runs a job on three hosts, passes doctor and takes the sandbox
down; its state goes to the XDG state dir and nothing appears under the venv."""

from __future__ import annotations

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

from bench.wheel_install import build_wheel, clean_env, install
from tests.integration import stub_libcuda
from tests.integration.nodes import run_cli

NAME = "mpictl-it-wheel"
SUBNET = "10.89.48.0/24"
PORT_BASE = 2251


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_size)
        for p in root.rglob("*")
        if not p.is_symlink()
    }


class Installed:
    def __init__(self, base: Path, venv: Path, env: dict[str, str]) -> None:
        self.base, self.venv, self.env = base, venv, env
        self.work = base / "work"

    def mpictl(self, *args: str, timeout: float = 1500) -> subprocess.CompletedProcess[str]:
        mpictl = [str(self.venv / "bin" / "mpictl")]
        return run_cli(*args, mpictl=mpictl, env=self.env, cwd=self.work, timeout=timeout)

    def ok(self, *args: str, timeout: float = 1500) -> subprocess.CompletedProcess[str]:
        proc = self.mpictl(*args, timeout=timeout)
        assert proc.returncode == 0, f"mpictl {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
        return proc

    def python(self, code: str) -> str:
        proc = subprocess.run(
            [str(self.venv / "bin" / "python"), "-c", code],
            capture_output=True, text=True, check=True, cwd=self.work, env=self.env,
        )  # fmt: skip
        return proc.stdout.strip()


def copy_bundled_inventory(installed: Installed) -> Path:
    """The install's own sandbox inventory, made an independent sandbox (name, subnet, ports)."""
    bundled = Path(installed.python("from mpictl import paths; print(paths.sandbox_inventory())"))
    assert bundled.is_relative_to(installed.venv), bundled
    inv = installed.work / "sandbox-inventory"
    shutil.copytree(bundled, inv)
    group_vars = inv / "group_vars" / "all.yml"
    text = re.sub(r"(?m)^sandbox_name:.*$", f"sandbox_name: {NAME}", group_vars.read_text())
    group_vars.write_text(re.sub(r"(?m)^sandbox_subnet:.*$", f"sandbox_subnet: {SUBNET}", text))
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    prefix = SUBNET.rsplit(".", 1)[0]
    for i, host in enumerate(hosts["all"]["children"]["mpi_nodes"]["hosts"].values()):
        host.update(ansible_port=PORT_BASE + i, sandbox_ip=f"{prefix}.{11 + i}")
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    # Slurm is not what this test is about; off in the inventory, where doctor reads it too
    node_vars = inv / "group_vars" / "mpi_nodes.yml"
    text = node_vars.read_text()
    assert re.search(r"(?m)^slurm_enabled: true$", text)
    node_vars.write_text(re.sub(r"(?m)^slurm_enabled: true$", "slurm_enabled: false", text))
    return inv


@pytest.fixture(scope="module")
def installed(
    tmp_path_factory: pytest.TempPathFactory,
    warm_cache: None,  # the session sandbox's builds are in the cache
) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("installed")
    wheel = build_wheel(base / "dist")
    venv = base / "venv"
    install(venv, wheel)
    subprocess.run(["chmod", "-R", "a-w", str(venv)], check=True)
    env = clean_env(
        XDG_STATE_HOME=str(base / "xdg-state"),
        MPICTL_CACHE_DIR=os.environ["MPICTL_CACHE_DIR"],
        MPICTL_STATE_DIR="",
    )
    del env["MPICTL_STATE_DIR"]
    inst = Installed(base, venv, env)
    inst.work.mkdir()
    # a stray ansible.cfg in the working directory must not change what mpictl runs
    (inst.work / "ansible.cfg").write_text("[defaults]\nroles_path = /nonexistent\n")
    before = snapshot(venv)
    yield inst
    subprocess.run(["chmod", "-R", "u+w", str(venv)], check=True)
    assert snapshot(venv) == before, "something was written under the install"


def test_the_installed_tool_runs_the_whole_path(
    installed: Installed, source_vars: dict[str, Any]
) -> None:
    assert "sandbox" in installed.ok("--help").stdout
    assert installed.python("import mpictl, sys; print(mpictl.__file__)").startswith(
        str(installed.venv)
    )
    inv = copy_bundled_inventory(installed)
    extra = installed.work / "vars.yml"
    # NCCL and Horovod stay out (not what this test is about); the CUDA mount and the stub libcuda
    # stay as for the session's sandbox, so OpenMPI's fingerprint (CUDA-aware) is the cached one.
    extra.write_text(
        yaml.safe_dump(
            {
                **source_vars,
                "nccl_enabled": "false",
                "horovod_enabled": False,
            }
        )
    )
    installed.mpictl("sandbox", "down", "-i", str(inv))
    cuda = ["--cuda"] if Path("/usr/local/cuda").is_dir() else []
    installed.ok("sandbox", "up", "-i", str(inv), *cuda, timeout=600)
    if cuda:
        stub_libcuda.install(inv)
    try:
        installed.ok("provision", "-i", str(inv), "-e", f"@{extra}")
        state = installed.base / "xdg-state" / "mpictl"
        events = sorted(state.glob("runs/*-site-*/artifacts/run/job_events/*.json"))
        assert events, f"no run artifacts under {state}"
        compiled = []
        for path in events:
            event = json.loads(path.read_text())
            task = str(event.get("event_data", {}).get("task", ""))
            if event.get("event") == "runner_on_ok" and task.startswith("Compile "):
                compiled.append(task)
        assert compiled == [], f"compiled although the cache is warm: {compiled}"
        run = installed.ok("run", "-i", str(inv), "-np", "3", "--", "hostname")
        hosts = {line.split(": ", 1)[-1] for line in run.stdout.splitlines() if line.strip()}
        assert len(hosts) == 3, run.stdout
        # --workdir from the install (its ignore rules come from the installed dependencies)
        code = installed.work / "code"
        code.mkdir()
        (code / "hello.txt").write_text("from the controller\n")
        (code / "skip.log").write_text("left behind\n")
        (code / ".mpictlignore").write_text("*.log\n")
        synced = installed.ok(
            "run", "-i", str(inv), "-np", "3", "--workdir", str(code), "--", "sh", "-c",
            "cat hello.txt; ls skip.log 2>/dev/null || echo no-log",
        )  # fmt: skip
        said = [line.split(": ", 1)[-1] for line in synced.stdout.splitlines()]
        assert sorted(said) == ["from the controller"] * 3 + ["no-log"] * 3, synced.stdout
        doctor = json.loads(installed.mpictl("doctor", "-i", str(inv), "--json").stdout)
        assert doctor["ok"], [c for c in doctor["checks"] if c["result"] != "ok"]
        assert (state / "jobs").is_dir() and (state / "cluster_ssh" / "id_ed25519").is_file()
    finally:
        down = installed.mpictl("sandbox", "down", "-i", str(inv))
    assert down.returncode == 0, down.stderr
