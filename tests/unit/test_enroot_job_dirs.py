"""The containers role's Slurm prolog and epilog (roles/containers/files/enroot_job_dirs.sh), run
here as Slurm runs it: as root, with the job's ids in its environment and enroot's settings
in a file. The job's user is ``nobody`` (65534): root makes its directories and the epilog
removes them as that user."""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from mpictl import paths

SCRIPT = paths.roles_dir() / "containers" / "files" / "enroot_job_dirs.sh"
UID = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="Slurm runs its prolog as root")


def settings(tmp_path: Path, runtime: str = "") -> Path:
    conf = tmp_path / "mpictl.conf"
    conf.write_text(
        "# Written by mpictl (roles/containers); enroot evaluates $(...) per user.\n"
        f"ENROOT_RUNTIME_PATH        {runtime or tmp_path / 'run/enroot/user-$(id -u)'}\n"
        f"ENROOT_CACHE_PATH          {tmp_path}/cache/enroot/user-$(id -u)\n"
        f"ENROOT_DATA_PATH           {tmp_path}/lib/enroot/data/user-$(id -u)\n"
        "ENROOT_SQUASH_OPTIONS      -noI -noD -noF -noX -no-duplicates\n"
    )
    return conf


def environment(
    tmp_path: Path, context: str, squeue: str = "", job: str = "42", **env: str
) -> dict[str, str]:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "squeue").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/squeue.args\n{squeue}')
    (bindir / "squeue").chmod(0o755)
    return {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "MPICTL_ENROOT_CONF": str(tmp_path / "mpictl.conf"),
        "MPICTL_ENROOT_KEPT": str(tmp_path / "tmpfiles.conf"),
        "SLURM_SCRIPT_CONTEXT": context,
        "SLURM_JOB_UID": str(UID),
        "SLURM_JOB_GID": str(UID),
        "SLURM_JOB_ID": job,
        "SLURMD_NODENAME": "node2",
        **env,
    }


def run(
    tmp_path: Path, context: str, squeue: str = "", job: str = "42", **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(SCRIPT)],
        env=environment(tmp_path, context, squeue, job, **env),
        capture_output=True,
        text=True,
        timeout=30,
    )


def owner_mode(path: Path) -> tuple[int, int, str]:
    st = path.lstat()
    return st.st_uid, st.st_gid, oct(stat.S_IMODE(st.st_mode))


def test_the_prolog_makes_the_job_users_three_directories_its_own(tmp_path: Path) -> None:
    settings(tmp_path)
    done = run(tmp_path, "prolog_slurmd")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    for dir in ("run/enroot", "cache/enroot", "lib/enroot/data"):
        assert owner_mode(tmp_path / dir / f"user-{UID}") == (UID, UID, "0o700"), dir
        assert owner_mode(tmp_path / dir) == (0, 0, "0o755"), dir  # the parents stay root's
    # a second job: nothing changes, a directory the user changed stays as the user left it
    (tmp_path / f"cache/enroot/user-{UID}").chmod(0o750)
    assert run(tmp_path, "prolog_slurmd", job="43").returncode == 0
    assert owner_mode(tmp_path / f"cache/enroot/user-{UID}") == (UID, UID, "0o750")


def test_a_path_that_is_not_absolute_once_the_uid_is_in_is_not_made(tmp_path: Path) -> None:
    # root evaluates nothing of the path: $(id -g), `...` or a relative path are refused
    for runtime in ("x/user-$(id -g)", "run/enroot/user-$(id -u)", "`id`/x", "a/../b"):
        where = runtime if runtime.startswith("run") else f"{tmp_path}/{runtime}"
        settings(tmp_path, runtime=where)
        done = run(tmp_path, "prolog_slurmd")
        assert done.returncode == 0, done.stderr
        assert "ENROOT_RUNTIME_PATH" in done.stderr and "not an absolute path" in done.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "x").exists()
    assert not (tmp_path / "b").exists() and not (tmp_path / "a").exists()
    assert (tmp_path / f"cache/enroot/user-{UID}").is_dir()  # the others are made


def test_no_job_ids_is_one_line_and_nothing_made(tmp_path: Path) -> None:
    settings(tmp_path)
    for env in ({"SLURM_JOB_UID": ""}, {"SLURM_JOB_GID": "x"}, {"SLURM_JOB_ID": ""}):
        done = run(tmp_path, "prolog_slurmd", **env)
        assert done.returncode == 0 and "nothing done" in done.stderr, env
    assert not (tmp_path / "run").exists()


def runtime_with_state(tmp_path: Path) -> Path:
    settings(tmp_path)
    assert run(tmp_path, "prolog_slurmd").returncode == 0
    runtime = tmp_path / f"run/enroot/user-{UID}"
    (runtime / "state").mkdir()
    (runtime / "state" / "pid").write_text("1\n")
    os.chown(runtime / "state", UID, UID)
    os.chown(runtime / "state" / "pid", UID, UID)
    return runtime


def test_the_epilog_of_the_users_last_job_on_the_node_removes_the_runtime_dir(
    tmp_path: Path,
) -> None:
    runtime = runtime_with_state(tmp_path)
    done = run(tmp_path, "epilog_slurmd", squeue="echo 42\n")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert not runtime.exists()
    assert (tmp_path / f"cache/enroot/user-{UID}").is_dir()  # imported images stay
    assert (tmp_path / f"lib/enroot/data/user-{UID}").is_dir()
    assert (tmp_path / "squeue.args").read_text() == f"-h -u {UID} -w node2 -o %A\n"


@pytest.mark.parametrize(
    ("squeue", "why"),
    [
        ("echo 42\necho 57\n", ""),  # another job of the user runs here
        ("echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1\n", "kept"),
    ],
)
def test_the_runtime_dir_stays_while_another_job_may_use_it(
    tmp_path: Path, squeue: str, why: str
) -> None:
    runtime = runtime_with_state(tmp_path)
    done = run(tmp_path, "epilog_slurmd", squeue=squeue)
    assert done.returncode == 0
    assert (runtime / "state" / "pid").is_file()
    assert (why in done.stderr) if why else done.stderr == ""
    if why:
        assert "Unable to contact slurm controller" in done.stderr


def test_the_mpi_users_directories_the_role_keeps_stay(tmp_path: Path) -> None:
    runtime = runtime_with_state(tmp_path)
    (tmp_path / "tmpfiles.conf").write_text(
        f"d {tmp_path}/run/enroot 0755 root root -\nd {runtime} 0700 {UID} {UID} -\n"
    )
    assert run(tmp_path, "epilog_slurmd", squeue="echo 42\n").returncode == 0
    assert (runtime / "state" / "pid").is_file()
    assert not (tmp_path / "squeue.args").exists()


def test_the_epilog_removes_as_the_user_never_through_a_users_link(tmp_path: Path) -> None:
    # the user put a link to a root file in the runtime dir: removed is the link, not the file
    runtime = runtime_with_state(tmp_path)
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "file").write_text("root's\n")
    (runtime / "link").symlink_to(precious)
    os.lchown(runtime / "link", UID, UID)
    assert run(tmp_path, "epilog_slurmd", squeue="echo 42\n").returncode == 0
    assert not runtime.exists() and (precious / "file").read_text() == "root's\n"


def test_the_epilog_removes_only_what_the_user_may(tmp_path: Path) -> None:
    # root's directory in the user's runtime dir: the user cannot remove it, nor can the epilog
    runtime = runtime_with_state(tmp_path)
    (runtime / "roots").mkdir()
    (runtime / "roots" / "file").write_text("root's\n")
    done = run(tmp_path, "epilog_slurmd", squeue="echo 42\n")
    assert done.returncode == 0 and f"{runtime} not empty: kept" in done.stderr
    assert (runtime / "roots" / "file").read_text() == "root's\n"
    assert not (runtime / "state").exists()  # the user's own went


def test_what_another_user_put_on_the_path_is_left_alone(tmp_path: Path) -> None:
    settings(tmp_path)
    for dir in ("run/enroot", "cache/enroot"):
        (tmp_path / dir).mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / f"run/enroot/user-{UID}").symlink_to(elsewhere)  # a link where the dir goes
    (tmp_path / f"cache/enroot/user-{UID}").mkdir()  # root's, not the user's
    done = run(tmp_path, "prolog_slurmd")
    assert done.returncode == 0
    for dir in ("run", "cache"):
        assert f"{tmp_path}/{dir}/enroot/user-{UID} is there and is not the user's" in done.stderr
    assert (
        owner_mode(elsewhere)[0] == 0 and owner_mode(tmp_path / f"cache/enroot/user-{UID}")[0] == 0
    )
    assert owner_mode(tmp_path / f"lib/enroot/data/user-{UID}") == (UID, UID, "0o700")


def test_a_parent_others_may_write_is_refused_and_a_sticky_one_is_not(tmp_path: Path) -> None:
    settings(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run").chmod(0o777)  # anyone could make run/enroot first
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache").chmod(0o1777)  # sticky, as /tmp
    done = run(tmp_path, "prolog_slurmd")
    assert done.returncode == 0
    assert "ENROOT_RUNTIME_PATH: a directory above" in done.stderr and "not made" in done.stderr
    assert not (tmp_path / "run/enroot").exists()
    assert owner_mode(tmp_path / f"cache/enroot/user-{UID}") == (UID, UID, "0o700")
    assert owner_mode(tmp_path / "cache/enroot") == (0, 0, "0o755")


def test_the_epilog_waits_for_a_prolog_of_the_same_node(tmp_path: Path) -> None:
    # the runtime directories' parent is the lock of a prolog's and an epilog's check and change
    runtime = runtime_with_state(tmp_path)
    fd = os.open(runtime.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        epilog = subprocess.Popen(
            ["sh", str(SCRIPT)], env=environment(tmp_path, "epilog_slurmd", "echo 42\n")
        )
        time.sleep(1.5)
        assert epilog.poll() is None and (runtime / "state" / "pid").is_file()
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    assert epilog.wait(timeout=30) == 0
    assert not runtime.exists()


def test_a_node_without_enroots_settings_is_left_alone(tmp_path: Path) -> None:
    done = run(tmp_path, "prolog_slurmd")  # no mpictl.conf
    assert done.returncode == 0 and done.stderr == "" and not (tmp_path / "run").exists()


def test_the_files_go_where_the_slurm_roles_slurm_conf_runs_them() -> None:
    import yaml

    def role_vars(role: str) -> dict:
        return yaml.safe_load((paths.roles_dir() / role / "vars" / "main.yml").read_text())

    slurm = role_vars("slurm")["_slurm_job_dirs"]
    files = role_vars("containers")["_containers_job_files"]
    assert [str(Path(f).parent) for f in files] == [slurm["prolog"], slurm["epilog"]]
    assert {Path(f).name for f in files} == {"50-mpictl-enroot"}
    conf = (paths.roles_dir() / "slurm" / "templates" / "slurm.conf.j2").read_text()
    assert "Prolog={{ _slurm_job_dirs.prolog }}/*" in conf
    assert "Epilog={{ _slurm_job_dirs.epilog }}/*" in conf
