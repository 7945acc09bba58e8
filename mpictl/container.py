"""``mpictl run --container IMAGE``: the option's checks and how a rank starts in the image (pure).

IMAGE is an absolute path to a squashfs image that every node of the job reads at that path (the
site's shared directory, or copied there); ``submit`` asks each node before anything starts
(``scripts/mpictl-container --check``: the file is there, readable by the MPI user and squashfs;
enroot is installed). Both launchers run the ranks with the cluster's own MPI underneath (its
OpenMPI, UCX, UCC and the cluster venv mounted at their paths, the rank's environment passed in):

- mpirun: every rank starts through the containers role's wrapper, ``mpictl-container IMAGE
  [-m SRC:DST[:FLAGS]]... -- COMMAND``, which unpacks the image once per node (``enroot create``)
  and runs COMMAND in it (``enroot start``);
- Slurm: pyxis, ``srun --container-image=IMAGE --container-mounts=...``; the host directories
  come from the same wrapper (``--mounts``) on the batch host.

``--container-mounts SRC:DST[:ro|rw][,SRC:DST...]`` (pyxis's spelling; repeatable) adds host
directories.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mpictl import inputs
from mpictl.errors import UsageError

WRAPPER = "mpictl-container"  # in mpi_bin_dir (roles/containers)
_FLAGS = ("ro", "rw")


@dataclass(frozen=True)
class Container:
    image: str
    mounts: tuple[str, ...] = ()  # SRC:DST[:ro|rw], checked

    def wrapper(self, bin_dir: str) -> str:
        return f"{bin_dir}/{WRAPPER}"

    def mpirun_prefix(self, bin_dir: str) -> list[str]:
        """What every rank runs before its command under mpirun."""
        argv = [self.wrapper(bin_dir), self.image]
        for mount in self.mounts:
            argv += ["-m", _enroot_mount(mount)]
        return [*argv, "--"]

    def srun_args(self, host_mounts: str) -> list[str]:
        """pyxis's options of the srun line; ``host_mounts`` is the wrapper's ``--mounts`` as
        the batch script expands it (the cluster's directories on the batch host)."""
        mounts = ",".join([host_mounts, *self.mounts])
        return [
            f"--container-image={self.image}",
            f"--container-mounts={mounts}",
            # the cluster's PATH and library path win over the image's own
            "--container-env=PATH,LD_LIBRARY_PATH",
            # the ranks start where the batch script is (--workdir, --chdir), as bare ranks do
            "--container-workdir=${PWD}",
        ]


def _enroot_mount(mount: str) -> str:
    src, dst, *flags = mount.split(":")
    options = "x-create=dir,rbind,nosuid" + ("" if not flags else f",{flags[0]}")
    return f"{src}:{dst}:none:{options}"


def parse(image: str | None, mounts: Sequence[str] = ()) -> Container | None:
    """``--container`` and ``--container-mounts`` checked (UsageError, one line), or None."""
    if image is None:
        if mounts:
            raise UsageError("--container-mounts applies to --container")
        return None
    if not inputs.is_node_path(image) or "," in image or image.endswith("/"):
        raise UsageError(
            f"--container {inputs.quoted(image)}: expected the absolute path of a squashfs image "
            "on the nodes (letters, digits and _ . @ % + = : ~ - /, no ',' or '..'), e.g. "
            "/shared/images/pytorch.sqsh"
        )
    items = [m for group in mounts for m in group.split(",")]
    return Container(image, tuple(_mount(m) for m in items))


def _mount(item: str) -> str:
    parts = item.split(":")
    ok = (
        len(parts) in (2, 3)
        and all(inputs.is_node_path(p) and "," not in p for p in parts[:2])
        and (len(parts) == 2 or parts[2] in _FLAGS)
    )
    if not ok:
        raise UsageError(
            f"--container-mounts {inputs.quoted(item)}: expected SRC:DST or SRC:DST:ro|rw, both "
            "absolute paths (no ',' or '..')"
        )
    return item
