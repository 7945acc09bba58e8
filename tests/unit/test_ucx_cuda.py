"""What the ucx role reads from a node and decides, without a GPU or an HCA: its probe
(``roles/ucx/files/ucx_probe.sh``) run as the preflight runs it on fake toolkit trees with a fake
``ldconfig`` on PATH and fake sysfs and include directories, and the CUDA decision it takes from
the probe's lines (``mpictl_ucx_cuda``)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import yaml

from tests.unit.test_openmpi_cuda import SYSTEM_DIRS, cuda, fake_ldconfig, touch

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "roles" / "ucx" / "files"
HEADERS = ("cuda.h", "cuda_runtime.h", "nvml.h")


def toolkit(root: Path, *, nvcc: bool = True, headers: tuple[str, ...] = HEADERS) -> Path:
    """A fake CUDA toolkit at ``root``: an nvcc that prints its version, the headers asked for."""
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    if nvcc:
        (root / "bin" / "nvcc").write_text(
            "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
            "echo 'Cuda compilation tools, release 13.0, V13.0.88'\n"
        )
        (root / "bin" / "nvcc").chmod(0o755)
    for header in headers:
        (root / "include" / header).write_text("/* header */\n")
    return root


def probe(home: Path, mode: str = "auto", *, tmp: Path, cache: str = "") -> list[str]:
    """The probe's lines, run as the preflight's raw task runs it (its command line rendered from
    the task, through sh), with ``tmp``/sys and ``tmp``/include for the node's own."""
    tasks = yaml.safe_load((ROOT / "roles/ucx/tasks/preflight.yml").read_text())
    (task,) = [t for t in tasks if t.get("register") == "__ucx_probe"]
    env = jinja2.Environment()
    env.filters["quote"] = shlex.quote
    env.globals["lookup"] = lambda kind, name: (FILES / name).read_text()
    line = env.from_string(task["ansible.builtin.raw"]).render(
        ucx_cuda_home=str(home), ucx_cuda=mode
    )
    line += f" {shlex.quote(str(tmp / 'sys'))} {shlex.quote(str(tmp / 'include'))}"
    bindir = fake_ldconfig(tmp, cache)
    proc = subprocess.run(
        ["sh", "-c", line],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": f"{bindir}:/usr/bin:/bin"},
    )
    assert proc.stderr == ""
    return proc.stdout.splitlines()


# --- the node probe --------------------------------------------------------------------------


def test_rdma_devices_and_verbs_h_are_read(tmp_path: Path) -> None:
    home = toolkit(tmp_path / "cuda")
    got = cuda.mpictl_key_values(probe(home, "disabled", tmp=tmp_path))
    assert got == {"ib_devices": "", "verbs_h": "no"}  # disabled: nothing of CUDA is read
    for dev in ("mlx5_0", "mlx5_1"):
        (tmp_path / "sys" / dev).mkdir(parents=True)
    touch(tmp_path / "include" / "infiniband" / "verbs.h")
    got = cuda.mpictl_key_values(probe(home, "disabled", tmp=tmp_path))
    assert got == {"ib_devices": "mlx5_0 mlx5_1", "verbs_h": "yes"}


def test_the_toolkits_stubs_come_first_for_both_driver_libraries(tmp_path: Path) -> None:
    home = toolkit(tmp_path / "cuda")
    cuda_stub = touch(home / "lib64" / "stubs" / "libcuda.so")
    nvml_stub = touch(home / "targets" / "x86_64-linux" / "lib" / "stubs" / "libnvidia-ml.so")
    driver = touch(tmp_path / "driver dir" / "libcuda.so.1")
    nvml = touch(tmp_path / "driver dir" / "libnvidia-ml.so.1")
    cache = (
        f"\tlibcuda.so.1 (libc6,x86-64) => {driver}\n\tlibnvidia-ml.so.1 (libc6,x86-64) => {nvml}\n"
    )
    got = cuda.mpictl_key_values(probe(home, tmp=tmp_path, cache=cache))
    assert got["libcuda"] == str(cuda_stub)
    assert got["libnvidia_ml"] == str(nvml_stub)
    assert (got["nvcc"], got["cuda_h"], got["cuda_runtime_h"], got["nvml_h"]) == ("yes",) * 4
    assert got["nvcc_release"] == "release 13.0, V13.0.88"
    assert got["searched_libnvidia_ml"] == (
        f"{home}/lib64/stubs/libnvidia-ml.so; {nvml_stub}; {home}/lib/stubs/libnvidia-ml.so; "
        "ldconfig -p; "
        + "; ".join(
            f"{d}/{n}" for d in SYSTEM_DIRS for n in ("libnvidia-ml.so", "libnvidia-ml.so.1")
        )
    )
    nvml_stub.unlink()
    cuda_stub.unlink()
    got = cuda.mpictl_key_values(probe(home, tmp=tmp_path, cache=cache))
    # the driver's 64-bit libraries as the dynamic linker lists them (a directory with a space)
    assert (got["libcuda"], got["libnvidia_ml"]) == (str(driver), str(nvml))


def test_only_the_64_bit_driver_libraries_count(tmp_path: Path) -> None:
    home = toolkit(tmp_path / "cuda")
    lib32 = touch(tmp_path / "i386" / "libnvidia-ml.so.1")
    cache = f"\tlibnvidia-ml.so.1 (libc6) => {lib32}\n"
    got = cuda.mpictl_key_values(probe(home, tmp=tmp_path, cache=cache))
    if not any((d / "libnvidia-ml.so.1").exists() for d in SYSTEM_DIRS):
        assert got["libnvidia_ml"] == ""


# --- the decision ------------------------------------------------------------------------------


def lines(nvcc: str = "yes", nvml_h: str = "yes", libcuda: str = "/drv/libcuda.so.1") -> list[str]:
    # as raw returns them: a carriage return at each line's end
    return [
        "ib_devices=\r",
        "verbs_h=no\r",
        "home=/usr/local/cuda\r",
        f"nvcc={nvcc}\r",
        "nvcc_release=release 13.0, V13.0.88\r",
        "cuda_h=yes\r",
        "cuda_runtime_h=yes\r",
        f"nvml_h={nvml_h}\r",
        f"libcuda={libcuda}\r",
        "searched_libcuda=/usr/local/cuda/lib64/stubs/libcuda.so; ldconfig -p\r",
        "libnvidia_ml=/drv/libnvidia-ml.so.1\r",
        "searched_libnvidia_ml=/usr/local/cuda/lib64/stubs/libnvidia-ml.so; ldconfig -p\r",
    ]


def test_auto_builds_with_cuda_where_nvcc_the_headers_and_both_libraries_are_found() -> None:
    assert cuda.mpictl_ucx_cuda(lines(), "auto") == {
        "with_cuda": True,
        "nvcc": True,
        "release": "release 13.0, V13.0.88",
        "libs": {"libcuda": "/drv/libcuda.so.1", "libnvidia-ml": "/drv/libnvidia-ml.so.1"},
        "why": "",
        "fix": "",
    }


def test_auto_without_nvml_h_or_libcuda_builds_without_cuda_and_says_why() -> None:
    got = cuda.mpictl_ucx_cuda(lines(nvml_h="no", libcuda=""), "auto")
    assert (got["with_cuda"], got["nvcc"], got["release"], got["libs"]) == (False, True, "", {})
    assert got["why"] == (
        "no /usr/local/cuda/include/nvml.h and no libcuda"
        " (looked at: /usr/local/cuda/lib64/stubs/libcuda.so; ldconfig -p)"
    )
    assert got["fix"] == (
        "point ucx_cuda_home at a CUDA toolkit with include/cuda.h, cuda_runtime.h and nvml.h"
        " (nvml.h: NVIDIA's cuda-nvml-dev package); install the NVIDIA driver (libcuda.so.1)"
        " or the CUDA toolkit's stubs (lib64/stubs/libcuda.so)"
    )


def test_auto_without_nvcc_is_no_cuda_whatever_else_is_there() -> None:
    got = cuda.mpictl_ucx_cuda(lines(nvcc="no"), "auto")
    assert (got["with_cuda"], got["nvcc"], got["why"], got["fix"]) == (
        False, False, "no /usr/local/cuda/bin/nvcc", "",
    )  # fmt: skip


def test_enabled_needs_the_headers_and_libraries_but_not_nvcc() -> None:
    assert cuda.mpictl_ucx_cuda(lines(nvcc="no"), "enabled")["with_cuda"] is True
    got = cuda.mpictl_ucx_cuda(lines(nvml_h="no"), "enabled")
    assert (got["with_cuda"], got["why"]) == (False, "no /usr/local/cuda/include/nvml.h")


def test_disabled_is_no_cuda_without_a_probe() -> None:
    assert cuda.mpictl_ucx_cuda([], "disabled") == {
        "with_cuda": False,
        "nvcc": False,
        "release": "",
        "libs": {},
        "why": "",
        "fix": "",
    }


def test_the_probe_passes_shellcheck() -> None:
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    proc = subprocess.run(
        [shellcheck, "-s", "sh", str(FILES / "ucx_probe.sh")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout
