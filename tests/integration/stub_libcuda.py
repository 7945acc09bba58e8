"""A stand-in for the NVIDIA driver's ``libcuda.so.1`` on sandbox nodes (tests only; no role
installs it), as ``stub_nvidia_smi.py`` stands in for ``nvidia-smi``.

OpenMPI's configure links against libcuda (``cuMemFree``) and, without one, builds without CUDA
silently; the CUDA toolkit mounted into the sandbox (``sandbox up --cuda``) has no ``stubs/`` and
the nodes have no driver. With this library on every node the openmpi role finds a libcuda
(through ``ldconfig -p``, as it finds a real driver's) and builds OpenMPI CUDA-aware.

It is built on the controller (Debian like the nodes, with gcc) from the toolkit's own
``cuda.h``: every ``CUresult CUDAAPI cuXxx(...)`` the header declares, by the name a program
compiled against it calls (after the preprocessor: ``cuMemFree`` is ``cuMemFree_v2``) and by the
names the driver itself exports for programs built against older headers (the header read as
the driver is built, ``__CUDA_API_VERSION_INTERNAL``: ``cuMemFree``; OpenMPI's configure links
its test against that bare name, without the header). It is a driver that sees no GPU:
``cuInit`` returns ``CUDA_ERROR_NO_DEVICE`` and every other function
``CUDA_ERROR_NOT_INITIALIZED``. OpenMPI's CUDA accelerator then treats every buffer as host memory
without a message (``accelerator_cuda.c``: ``check_addr`` takes NOT_INITIALIZED as a host buffer;
``accelerator_cuda_component.c``: ``delayed_init`` stops quietly when ``cuCtxGetCurrent`` fails).

Every test sandbox that mounts CUDA gets it (``install``), so they all compute the one OpenMPI
fingerprint (``--with-cuda``) and share its cached build. ``python -m tests.integration.stub_libcuda
INVENTORY`` installs it from a checkout (Molecule's create)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from mpictl.sandbox import podman
from mpictl.sandbox.spec import read_sandbox

CUDA_HOME = Path("/usr/local/cuda")
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_NO_DEVICE = 100
SONAME = "libcuda.so.1"
# A driver API declaration once the preprocessor ran (CUDAAPI is empty off Windows).
DECLARATION = re.compile(r"\bCUresult\s+(cu[A-Za-z0-9_]+)\s*\(")


def function_names(preprocessed: str) -> list[str]:
    """The driver functions a preprocessed ``cuda.h`` declares, once each, sorted."""
    return sorted(set(DECLARATION.findall(preprocessed)))


def c_source(names: Iterable[str]) -> str:
    """C of a libcuda whose ``cuInit`` finds no device and whose other functions say the driver
    is not initialized (no header: arguments are ignored, the result is an int like CUresult)."""
    lines = [
        "/* Test stub of the NVIDIA driver library (tests/integration/stub_libcuda.py). */",
    ]
    for name in names:
        code = CUDA_ERROR_NO_DEVICE if name == "cuInit" else CUDA_ERROR_NOT_INITIALIZED
        lines.append(f"int {name}(void) {{ return {code}; }}")
    return "\n".join(lines) + "\n"


def build(out_dir: Path, cuda_home: Path = CUDA_HOME) -> Path:
    """Compile the stub from ``cuda_home``'s cuda.h into ``out_dir``; the library's path."""
    header = cuda_home / "include" / "cuda.h"
    names: set[str] = set()
    for view in ([], ["-D__CUDA_API_VERSION_INTERNAL"]):  # a program's, the driver's own
        preprocessed = subprocess.run(
            ["gcc", "-E", "-P", *view, str(header)], capture_output=True, text=True, check=True
        ).stdout
        names.update(function_names(preprocessed))
    if not {"cuInit", "cuMemFree", "cuMemFree_v2"} <= names:
        raise RuntimeError(f"{header}: no cuInit/cuMemFree/cuMemFree_v2 declaration found")
    source = out_dir / "stub_libcuda.c"
    source.write_text(c_source(sorted(names)))
    lib = out_dir / SONAME
    subprocess.run(
        ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{SONAME}", "-o", str(lib), str(source)],
        check=True,
    )
    return lib


def node_path() -> str:
    """Where the nodes get the library: the multiarch directory a driver package uses (the
    controller's, the same Debian on the same architecture as the nodes)."""
    arch = subprocess.run(
        ["gcc", "-print-multiarch"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return f"/usr/lib/{arch}/{SONAME}"


def install(inventory: Path) -> None:
    """Build the stub and put it on every node of the sandbox of ``inventory`` (podman exec as
    root, then ldconfig), replacing one that is there."""
    spec = read_sandbox(inventory)
    found = podman.containers(spec.name)
    exe = shutil.which("podman") or "podman"
    dest = node_path()
    with tempfile.TemporaryDirectory() as tmp:
        data = build(Path(tmp)).read_bytes()
    for node in spec.nodes:
        container = spec.container(node)
        runtime = podman.entry_runtime(found[container])
        script = f"cat > {dest}.part && chmod 0644 {dest}.part && mv {dest}.part {dest} && ldconfig"
        proc = subprocess.run(
            [exe, *runtime.global_args, "exec", "-i", container, "sh", "-c", script],
            input=data, capture_output=True, timeout=120,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"{container}: installing {dest}: {proc.stderr.decode()[-500:]}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.integration.stub_libcuda INVENTORY")
    install(Path(sys.argv[1]))
