"""build_once's component_home.sh: where a component the node already has lives (the openmpi
role reads UCX and UCC with it, the ucc role UCX), run as the roles run it, with the version
expressions the roles' tasks pass."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "roles" / "build_once" / "files" / "component_home.sh"
OPENMPI_TASK = (ROOT / "roles" / "openmpi" / "tasks" / "install.yml").read_text()
UCC_TASK = (ROOT / "roles" / "ucc" / "tasks" / "node.yml").read_text()


def version_expr(task: str, info: str) -> str:
    """The sed expression a role's task passes for ``info`` (single-quoted in its shell text)."""
    return re.search(rf"{info}\s+\S+\s+\S+\s+'([^']+)'", task).group(1)


def probe(*args: str, env_file: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "MPICTL_ENVIRONMENT_FILE": str(env_file or "/nonexistent")}
    proc = subprocess.run(
        ["sh", "-c", SCRIPT.read_text(), "component_home", *args],
        capture_output=True, text=True, env=env, timeout=30, check=True,
    )  # fmt: skip
    return dict(line.split("=", 1) for line in proc.stdout.splitlines())


def home(root: Path, info: str, header: str, lib: str, version_line: str) -> Path:
    for rel in (header, lib):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    (root / "bin").mkdir(exist_ok=True)
    (root / "bin" / info).write_text(f"#!/bin/sh\necho '{version_line}'\n")
    (root / "bin" / info).chmod(0o755)
    return root


UCX = ("ucx_info", "include/ucp/api/ucp.h", "lib/libucp.so")
UCC = ("ucc_info", "include/ucc/api/ucc.h", "lib/libucc.so")


def test_the_roles_ucx_found_on_the_path_of_etc_environment_with_its_marker(tmp_path: Path) -> None:
    ucx = home(tmp_path / "opt" / "ucx", *UCX, "# Library version: 1.22.0")
    (ucx / ".mpictl-fingerprint").write_text("ucx-1.22.0-abc\n")
    env = tmp_path / "environment"
    env.write_text(f'PATH="{ucx}/bin:/usr/bin:/bin"\n')
    expr = version_expr(OPENMPI_TASK, "ucx_info")
    got = probe("ucx", "", "yes", *UCX, expr, env_file=env)
    assert got == {"ucx": str(ucx), "ucx_files": "yes", "ucx_ours": "yes",
                   "ucx_marker": "ucx-1.22.0-abc"}  # fmt: skip


def test_a_sites_own_ucc_is_read_at_its_prefix_with_the_version_it_reports(tmp_path: Path) -> None:
    ucc = home(tmp_path / "site-ucc", *UCC, "# UCC version=1.8.0 revision abcdef")
    got = probe("ucc", str(ucc), "no", *UCC, version_expr(OPENMPI_TASK, "ucc_info"))
    assert got == {"ucc": str(ucc), "ucc_files": "yes", "ucc_ours": "no", "ucc_marker": "1.8.0"}


def test_no_lookup_and_no_prefix_is_no_home(tmp_path: Path) -> None:
    env = tmp_path / "environment"
    env.write_text(f'PATH="{tmp_path}/bin"\n')
    assert probe("ucx", "", "no", *UCX, "p", env_file=env) == {"ucx": ""}
    assert probe("ucx", "", "yes", *UCX, "p", env_file=env) == {"ucx": ""}  # no ucx_info there


def test_a_home_without_the_header_has_no_files_and_cuda_is_read_from_the_glob(
    tmp_path: Path,
) -> None:
    ucx = home(tmp_path / "ucx", *UCX, "# Library version: 1.22.0")
    (ucx / UCX[1]).unlink()
    expr = version_expr(UCC_TASK, "ucx_info")
    got = probe("ucx", str(ucx), "yes", *UCX, expr, "lib/ucx/libuct_cuda.so*")
    assert got["ucx_files"] == "no" and got["ucx_marker"] == "1.22.0" and got["ucx_cuda"] == "no"
    (ucx / "lib" / "ucx").mkdir()
    (ucx / "lib" / "ucx" / "libuct_cuda.so.0").write_text("")
    assert probe("ucx", str(ucx), "yes", *UCX, expr, "lib/ucx/libuct_cuda.so*")["ucx_cuda"] == "yes"


def test_both_roles_run_the_one_script() -> None:
    for task in (OPENMPI_TASK, UCC_TASK):
        assert "role_path ~ '/../build_once/files/component_home.sh'" in task
    assert not list(ROOT.glob("roles/*/files/ucc_probe.sh"))


def rendered_raw(task_file: Path, name: str, variables: dict[str, object]) -> str:
    """The raw command of task ``name`` rendered with plain Jinja2 and the filters it uses
    (its own ``vars`` first), as Ansible sends it to the node."""
    import shlex

    import jinja2
    import yaml

    task = next(t for t in yaml.safe_load(task_file.read_text()) if t.get("name") == name)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update(
        quote=lambda v: shlex.quote(str(v)),
        bool=lambda v: v is True or str(v).strip().lower() in ("true", "yes", "1"),
        ternary=lambda v, a, b: a if v else b,
    )
    scope = {**variables, "lookup": lambda _kind, path: Path(path).read_text().rstrip("\n")}
    for key, value in (task.get("vars") or {}).items():
        scope[key] = env.from_string(value).render(scope)
    return env.from_string(task["ansible.builtin.raw"]).render(scope)


def run_raw(command: str, env_file: Path) -> dict[str, str]:
    env = {**os.environ, "MPICTL_ENVIRONMENT_FILE": str(env_file)}
    # (head: a command that never ends writing, as `yes` once did, dies of SIGPIPE instead of
    # filling memory; its lines then fail the caller's comparison)
    proc = subprocess.run(
        ["sh", "-c", 'sh -c "$0" | head -c 65536', command],
        capture_output=True, text=True, env=env, timeout=30, check=True,
    )  # fmt: skip
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def test_the_roles_raw_commands_run_as_rendered(tmp_path: Path) -> None:
    # (a line break left in a folded command once ran `yes` on the node, forever)
    ucx = home(tmp_path / "ucx", *UCX, "# Library version: 1.22.0")
    ucc = home(tmp_path / "ucc", *UCC, "# UCC version=1.8.0 revision abcdef")
    env = tmp_path / "environment"
    env.write_text(f'PATH="{ucx}/bin:{ucc}/bin:/usr/bin:/bin"\n')
    ucc_raw = rendered_raw(
        ROOT / "roles" / "ucc" / "tasks" / "node.yml",
        "Read the UCX of the node",
        {"ucc_ucx_prefix": "", "ucx_enabled": "auto", "role_path": str(ROOT / "roles" / "ucc")},
    )
    assert run_raw(ucc_raw, env) == {"ucx": str(ucx), "ucx_files": "yes", "ucx_ours": "no",
                                     "ucx_marker": "1.22.0", "ucx_cuda": "no"}  # fmt: skip
    openmpi_raw = rendered_raw(
        ROOT / "roles" / "openmpi" / "tasks" / "install.yml",
        "Read the missing OpenMPI build packages and the node's UCX and UCC in one pass",
        {"openmpi_packages": ["perl"], "openmpi_ucx_prefix": "", "openmpi_ucc_prefix": "",
         "_openmpi_ucx_lookup": True, "_openmpi_ucc_lookup": True,
         "role_path": str(ROOT / "roles" / "openmpi")},
    )  # fmt: skip
    got = run_raw(openmpi_raw, env)
    assert got == {"ucx": str(ucx), "ucx_files": "yes", "ucx_ours": "no", "ucx_marker": "1.22.0",
                   "ucc": str(ucc), "ucc_files": "yes", "ucc_ours": "no",
                   "ucc_marker": "1.8.0"}  # fmt: skip
