"""The rank wrapper of ``mpictl run --container`` under mpirun (mpictl/scripts/mpictl-container)
with a stand-in enroot that keeps its containers as files: an image is unpacked once per
version of the file, and a new file at the same path replaces the earlier unpack once no
process runs in it."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

from mpictl import paths

WRAPPER = paths.package_dir() / "scripts" / "mpictl-container"

# enroot as the wrapper uses it: version, list [-f], create -n NAME IMAGE, remove -f NAME, start.
# Containers are files of $DATA; the names in $DATA/.running have a process (list -f shows it);
# start's mounts (-m) are written to $DATA/.mounts.
FAKE_ENROOT = r"""#!/bin/bash
echo "$*" >> "$DATA/.calls"
case $1 in
  version) echo 4.1.2 ;;
  list)
    if [ "${2:-}" = -f ]; then
      echo "NAME  PID  COMM  STATE  STARTED  TIME  MNTNS  USERNS  COMMAND"
      for f in $(ls "$DATA"); do
        if grep -qx "$f" "$DATA/.running" 2>/dev/null; then
          echo "$f  4242  bash  S  10:00  01:00  1  2  bash"
        else
          echo "$f                                 "  # column -t pads every line
        fi
      done
    else
      ls "$DATA"
    fi ;;
  create) touch "$DATA/$3" ;;
  remove) rm "$DATA/$3" ;;
  start)
    shift
    while [ "${1:-}" != "${1#-}" ]; do
      if [ "$1" = -m ]; then echo "$2" >> "$DATA/.mounts"; fi
      shift 2
    done
    echo "started $1" ;;
esac
"""


def setup(tmp_path: Path) -> tuple[dict[str, str], Path]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "enroot").write_text(FAKE_ENROOT)
    (bindir / "enroot").chmod(0o755)
    data = tmp_path / "data"
    data.mkdir()
    image = tmp_path / "images" / "smoke.sqsh"
    image.parent.mkdir()
    image.write_bytes(b"hsqs" + b"\0" * 60)
    env = {"PATH": f"{bindir}:/usr/bin:/bin:/usr/sbin:/sbin", "DATA": str(data), "HOME": "/"}
    return env, image


def start(env: dict[str, str], image: Path, *opts: str, cwd: str = "/") -> str:
    proc = subprocess.run(
        ["bash", str(WRAPPER), str(image), *opts, "--", "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    assert line.startswith("started mpictl-"), line
    return line.split()[1]


def containers(env: dict[str, str]) -> set[str]:
    return {name for name in os.listdir(env["DATA"]) if not name.startswith(".")}


def calls(env: dict[str, str], verb: str) -> list[str]:
    return [c for c in Path(env["DATA"], ".calls").read_text().splitlines() if c.startswith(verb)]


def test_an_image_is_unpacked_once_and_started_each_time(tmp_path: Path) -> None:
    env, image = setup(tmp_path)
    first = start(env, image)
    assert start(env, image) == first
    assert calls(env, "create") == [f"create -n {first} {image}"]
    family, _, version = first.rpartition("-")
    assert len(family) == len("mpictl-") + 8 and len(version) == 16
    assert containers(env) == {first}


def test_a_new_file_at_the_path_replaces_the_unpack_no_process_runs_in(tmp_path: Path) -> None:
    env, image = setup(tmp_path)
    first = start(env, image)
    other_image = image.with_name("other.sqsh")
    other_image.write_bytes(image.read_bytes())
    other = start(env, other_image)  # another image: its own family
    legacy = "mpictl-0123456789abcdef"  # an earlier wrapper's name: never started again
    for name in (legacy, "someones-own"):
        Path(env["DATA"], name).touch()
    os.utime(image, (1_000_000, 1_000_000))  # a new file at the same path
    second = start(env, image)
    assert second != first and second.rpartition("-")[0] == first.rpartition("-")[0]
    assert containers(env) == {second, other, "someones-own"}
    assert sorted(calls(env, "remove")) == sorted([f"remove -f {first}", f"remove -f {legacy}"])


def test_an_unpack_a_process_runs_in_stays_until_the_next_new_file(tmp_path: Path) -> None:
    env, image = setup(tmp_path)
    first = start(env, image)
    Path(env["DATA"], ".running").write_text(f"{first}\n")
    os.utime(image, (1_000_000, 1_000_000))
    second = start(env, image)
    assert containers(env) == {first, second}
    assert calls(env, "remove") == []


def test_an_unpack_a_start_holds_stays(tmp_path: Path) -> None:
    # a rank of another job took the earlier version and is still in `enroot start`, before
    # its process is in the container (which `enroot list -f` would show): its lock keeps it
    env, image = setup(tmp_path)
    first = start(env, image)
    fd = os.open(f"/tmp/.mpictl-container-{os.getuid()}-{first}.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.utime(image, (1_000_000, 1_000_000))
        second = start(env, image)
        assert containers(env) == {first, second}
    finally:
        os.close(fd)
    third_version = (2_000_000, 2_000_000)
    os.utime(image, third_version)  # the next start removes both, now that nothing uses them
    third = start(env, image)
    assert containers(env) == {third}


def test_a_failing_list_removes_nothing(tmp_path: Path) -> None:
    env, image = setup(tmp_path)
    first = start(env, image)
    fake = Path(env["PATH"].split(":")[0], "enroot")
    fake.write_text(
        fake.read_text().replace('if [ "${2:-}" = -f ]; then', 'if [ "${2:-}" = -f ]; then exit 1;')
    )
    os.utime(image, (1_000_000, 1_000_000))
    second = start(env, image)
    assert containers(env) == {first, second}


def test_the_mounts_under_mpirun_are_the_ones_pyxis_is_given(tmp_path: Path) -> None:
    """One list of what a container gets from the host (the cluster's /opt directories, the
    shared and working directories, the driver's files): enroot's -m under mpirun, pyxis's
    --container-mounts under Slurm; mpirun adds PMIx's directories and the job's own mounts."""
    env, image = setup(tmp_path)
    tops = sorted(p for p in Path("/opt").iterdir() if p.is_dir())[:2]  # what this machine has
    for dir in ("shared", "work", "pmix"):
        (tmp_path / dir).mkdir()
    env.update(
        PATH=":".join(f"{top}/bin" for top in tops) + ":" + env["PATH"],
        MPICTL_SHARED_DIR=str(tmp_path / "shared"),
        PMIX_SERVER_TMPDIR=str(tmp_path / "pmix"),
    )
    work = str(tmp_path / "work")
    start(env, image, "-m", "/data:/data:none:x-create=dir,rbind,nosuid,ro", cwd=work)
    mounts = Path(env["DATA"], ".mounts").read_text().splitlines()
    rw = "none:x-create=dir,rbind,rw,nosuid"
    assert [f"{top}:{top}:none:x-create=dir,bind,ro,nosuid" for top in tops] == mounts[: len(tops)]
    assert f"{tmp_path}/shared:{tmp_path}/shared:{rw}" in mounts
    assert f"{work}:{work}:{rw}" in mounts
    assert mounts[-2:] == [
        f"{tmp_path}/pmix:{tmp_path}/pmix:{rw}",
        "/data:/data:none:x-create=dir,rbind,nosuid,ro",
    ]
    pyxis = subprocess.run(
        ["bash", str(WRAPPER), "--mounts"],
        env=env,
        capture_output=True,
        text=True,
        cwd=work,
        timeout=60,
    )
    assert pyxis.returncode == 0, pyxis.stderr

    def pairs(specs: list[str]) -> set[tuple[str, str, bool]]:
        return {(s.split(":")[0], s.split(":")[1], ",ro," in s or s.endswith(":ro")) for s in specs}

    assert pairs(pyxis.stdout.strip().split(",")) == pairs(mounts[:-2])
