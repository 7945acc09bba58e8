"""The node image: ``localhost/mpictl-node:<hash of the recipe>``, built from the recipe in
``mpictl/data/sandbox/`` (debootstrap of Debian + ``podman import``) when its tag is missing.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from mpictl.errors import SandboxError
from mpictl.sandbox import podman
from mpictl.sandbox.host import debian_mirror
from mpictl.sandbox.podman import last_line
from mpictl.sandbox.spec import DEFAULT_OS

#: ``mpictl/data/sandbox/``: this file is ``mpictl/sandbox/image.py``.
RECIPE_DIR = Path(__file__).resolve().parent.parent / "data" / "sandbox"
IMAGE_REPO = "localhost/mpictl-node"
BUILD_TIMEOUT_S = 1800


def recipe_hash(recipe_dir: Path = RECIPE_DIR) -> str:
    """Hash of the node image recipe: file names, modes and contents."""
    digest = hashlib.sha256()
    for path in sorted(p for p in recipe_dir.rglob("*") if p.is_file()):
        if "__pycache__" in path.parts:
            continue
        digest.update(path.relative_to(recipe_dir).as_posix().encode() + b"\0")
        digest.update(b"x" if os.access(path, os.X_OK) else b"-")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def image_tag(recipe_dir: Path = RECIPE_DIR, release: str = DEFAULT_OS) -> str:
    """The node image tag for the recipe in ``recipe_dir`` and a Debian release (bookworm's tag
    is the recipe's hash alone, another release's is prefixed with its name)."""
    prefix = "" if release == DEFAULT_OS else f"{release}-"
    return f"{IMAGE_REPO}:{prefix}{recipe_hash(recipe_dir)}"


def image_exists(tag: str) -> bool:
    """Whether podman has the image ``tag``."""
    return podman.run(["image", "exists", tag], check=False).returncode == 0


def ensure_image(recipe_dir: Path = RECIPE_DIR, release: str = DEFAULT_OS) -> tuple[str, bool]:
    """Build the node image of a Debian release unless its tag exists; returns (tag, built)."""
    tag = image_tag(recipe_dir, release)
    if image_exists(tag):
        return tag, False
    lock_path = Path(tempfile.gettempdir()) / f"mpictl-node-image-{tag.rsplit(':', 1)[1]}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another `up` may be building the same image
        if image_exists(tag):
            return tag, False
        if os.geteuid() != 0:
            raise SandboxError("building the sandbox node image needs root (debootstrap)")
        if shutil.which("debootstrap") is None:
            raise SandboxError("debootstrap is not installed (it builds the sandbox node image)")
        mirror = debian_mirror()
        with tempfile.TemporaryDirectory(prefix="mpictl-recipe-") as tmp:
            # build from a snapshot of the recipe so the tag matches exactly what was built
            work = Path(tmp) / "recipe"
            shutil.copytree(recipe_dir, work)
            if image_tag(work, release) != tag:
                raise SandboxError("the sandbox image recipe changed while building; run up again")
            try:
                proc = subprocess.run(
                    ["sh", str(work / "build.sh"), tag, mirror, release],
                    capture_output=True,
                    text=True,
                    timeout=BUILD_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise SandboxError(
                    f"building the node image timed out after {BUILD_TIMEOUT_S} s"
                ) from None
        if proc.returncode != 0:
            raise SandboxError(
                f"building the node image {tag} failed: {last_line(proc.stderr or proc.stdout)}"
            )
    return tag, True
