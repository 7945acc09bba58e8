"""`mpictl run --container`: the option's checks and the rank's start under each launcher."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from mpictl import container, mpirun_plan, slurm_plan
from mpictl.errors import UsageError
from mpictl.inventory import load_inventory
from mpictl.planner import LaunchOptions

IMAGE = "/shared/images/smoke.sqsh"


def cluster(tmp_path: Path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n  children:\n    mpi_nodes:\n      hosts:\n"
        "        node1: {ansible_host: 10.0.0.1, mpi_slots: 2}\n"
        "        node2: {ansible_host: 10.0.0.2, mpi_slots: 2}\n"
    )
    return load_inventory(inv)


def test_no_container_is_none_and_a_mount_alone_is_refused() -> None:
    assert container.parse(None) is None
    with pytest.raises(UsageError, match="--container-mounts applies to --container"):
        container.parse(None, ["/data:/data"])


@pytest.mark.parametrize(
    "image", ["relative.sqsh", "/a/../b.sqsh", "/x,y.sqsh", "/dir/", "/a b.sqsh", "/a\nb"]
)
def test_an_image_that_is_not_an_absolute_plain_path_is_one_line(image: str) -> None:
    with pytest.raises(UsageError) as err:
        container.parse(image)
    assert "\n" not in str(err.value) and "--container" in str(err.value)


@pytest.mark.parametrize(
    "mount", ["/data", "data:/data", "/data:/x:rx", "/a:/b,", "/a:/b:ro:x", "/a/..:/b", ""]
)
def test_a_bad_mount_is_one_line(mount: str) -> None:
    with pytest.raises(UsageError, match="--container-mounts"):
        container.parse(IMAGE, [mount])


def test_mpirun_ranks_start_behind_the_wrapper_with_the_mounts(tmp_path: Path) -> None:
    c = container.parse(IMAGE, ["/data:/data:ro,/scratch:/mnt"])
    assert c == container.parse(IMAGE, ["/data:/data:ro", "/scratch:/mnt"])
    plan = mpirun_plan.plan(
        cluster(tmp_path), LaunchOptions(command=["python3", "x.py"], container=c), "job"
    )
    assert plan.container == IMAGE
    assert plan.command == [
        "/opt/mpictl/bin/mpictl-container",
        IMAGE,
        "-m",
        "/data:/data:none:x-create=dir,rbind,nosuid,ro",
        "-m",
        "/scratch:/mnt:none:x-create=dir,rbind,nosuid",
        "--",
        "python3",
        "x.py",
    ]
    # the torch wrapper runs inside the container, in front of the user's command
    torch = mpirun_plan.plan(
        cluster(tmp_path),
        LaunchOptions(command=["python3", "x.py"], container=c, torch=True),
        "job",
    )
    assert torch.command[torch.command.index("--") + 1 :] == [
        "/opt/mpictl/bin/mpictl-torch-env",
        "python3",
        "x.py",
    ]


def test_a_bare_job_has_no_container(tmp_path: Path) -> None:
    plan = mpirun_plan.plan(cluster(tmp_path), LaunchOptions(command=["hostname"]), "job")
    assert plan.container == "" and plan.command == ["hostname"]


def test_slurm_jobs_use_pyxis_with_the_hosts_directories(tmp_path: Path) -> None:
    c = container.parse(IMAGE, ["/data:/data:ro"])
    plan = slurm_plan.plan(
        cluster(tmp_path), LaunchOptions(command=["python3", "x.py"], container=c), "job"
    )
    lines = plan.script.splitlines()
    assert "MPICTL_CONTAINER_MOUNTS=$(/opt/mpictl/bin/mpictl-container --mounts)" in lines
    srun_at = lines.index(next(x for x in lines if x.startswith("srun ")))
    for var, option in (("LD_LIBRARY_PATH", "--ld-library-path"), ("PATH", "--path")):
        line = f'export {var}="$(/opt/mpictl/bin/mpictl-container {option})"'
        assert lines.index(line) < srun_at
    srun = next(line for line in lines if line.startswith("srun "))
    srun = srun.replace("${MPICTL_CONTAINER_MOUNTS}", "/opt/openmpi:/opt/openmpi:ro")
    argv = shlex.split(srun.replace("${PWD}", "/work"))
    assert argv[:5] == [
        "srun",
        f"--container-image={IMAGE}",
        "--container-mounts=/opt/openmpi:/opt/openmpi:ro,/data:/data:ro",
        "--container-env=PATH,LD_LIBRARY_PATH",
        "--container-workdir=/work",
    ]
    assert argv[-2:] == ["python3", "x.py"] and "--mpi=pmix" in argv
    assert plan.container == IMAGE
    # no wrapper under Slurm: pyxis starts the ranks in the image
    assert "mpictl-container" not in " ".join(plan.command)
