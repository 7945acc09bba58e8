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
    assert got == {"ib_devices": "", "verbs_h": "no", "rdmacm_h": "no"}  # disabled: no CUDA read
    for dev in ("mlx5_0", "mlx5_1"):
        (tmp_path / "sys" / dev).mkdir(parents=True)
    touch(tmp_path / "include" / "infiniband" / "verbs.h")
    got = cuda.mpictl_key_values(probe(home, "disabled", tmp=tmp_path))
    # verbs.h without librdmacm's header, as on a real GPU image (UCX then builds without rdmacm)
    assert got == {"ib_devices": "mlx5_0 mlx5_1", "verbs_h": "yes", "rdmacm_h": "no"}
    touch(tmp_path / "include" / "rdma" / "rdma_cma.h")
    got = cuda.mpictl_key_values(probe(home, "disabled", tmp=tmp_path))
    assert got["rdmacm_h"] == "yes"


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


# --- found on a real GPU node (H200, Ubuntu 24.04, 2026-11-26) ---------------------------------


def rdmacm_decision(nodes: dict[str, dict[str, str]], rdma: bool = True) -> tuple[bool, str]:
    """``_ucx_rdmacm`` and its reason, rendered from the preflight task as Ansible renders it,
    for nodes whose probe read ``verbs_h``/``rdmacm_h`` as given."""
    tasks = yaml.safe_load((ROOT / "roles/ucx/tasks/preflight.yml").read_text())
    (task,) = [t for t in tasks if t.get("name") == "Decide whether UCX has the rdmacm transport"]
    env = jinja2.Environment()
    env.filters["bool"] = lambda v: v is True or str(v).strip().lower() in ("true", "yes", "1")
    names = {
        "ansible_play_hosts": list(nodes),
        "hostvars": {h: {"_ucx_node": n} for h, n in nodes.items()},
        "_ucx_rdma": rdma,
    }
    names["_without_cma"] = yaml.safe_load(
        env.from_string(task["vars"]["_without_cma"]).render(names)
    )
    facts = {
        k: env.from_string(v).render(names).strip()
        for k, v in task["ansible.builtin.set_fact"].items()
    }
    return facts["_ucx_rdmacm"] == "True", facts["_ucx_rdmacm_why"]


def test_verbs_h_without_rdma_cma_h_builds_verbs_without_rdmacm() -> None:
    # The H200 image had libibverbs-dev (verbs.h, mlx5dv.h) but no librdmacm-dev: UCX's configure
    # stopped at "RDMACM requested but required file (rdma/rdma_cma.h) could not be found".
    ok, why = rdmacm_decision(
        {
            "gpu1": {"verbs_h": "yes", "rdmacm_h": "yes"},
            "gpu2": {"verbs_h": "yes", "rdmacm_h": "no"},
        }
    )
    assert not ok
    assert why.startswith("no /usr/include/rdma/rdma_cma.h on gpu2 ")
    # both headers everywhere, or nodes that get rdma-core (and both headers) from the role
    assert rdmacm_decision(
        {
            "gpu1": {"verbs_h": "yes", "rdmacm_h": "yes"},
            "gpu2": {"verbs_h": "no", "rdmacm_h": "no", "ib_devices": "mlx5_0"},
        }
    ) == (True, "")
    # no RDMA build at all: no rdmacm either
    assert rdmacm_decision({"cpu": {"verbs_h": "no", "rdmacm_h": "no"}}, rdma=False)[0] is False


def test_the_gda_guard_lands_on_ucx_1_22s_device_api_and_only_once(tmp_path: Path) -> None:
    # UCX 1.22's release source includes gdaki.cuh wherever mlx5dv.h exists, and gdaki.cuh needs
    # DOCA GPUNetIO headers the source lacks: its CUDA perftest kernels failed on the H200 node.
    import re
    import tarfile

    tasks = yaml.safe_load((ROOT / "roles/ucx/tasks/build.yml").read_text())
    (task,) = [t for t in tasks if t.get("name", "").startswith("Guard UCX's device API")]
    spec = task["ansible.builtin.replace"]
    with tarfile.open(ROOT / "tests/data/sources/ucx-1.22.0.tar.xz") as tar:
        member = next(
            m for m in tar.getmembers() if m.name.endswith("uct/api/device/uct_device_impl.h")
        )
        header = tar.extractfile(member).read().decode()  # type: ignore[union-attr]
    # ansible.builtin.replace: Python's re, MULTILINE
    once = re.sub(spec["regexp"], spec["replace"], header, flags=re.MULTILINE)
    gated = once[once.index("#if __has_include(<uct/ib/mlx5/gdaki/gdaki.cuh>)") :].split(
        "#include"
    )[0]
    assert "__has_include(<infiniband/mlx5dv.h>) &&" in gated
    assert "gdaki/gpunetio/device/doca_gpunetio_dev_verbs_qp.cuh>)" in gated
    assert re.sub(spec["regexp"], spec["replace"], once, flags=re.MULTILINE) == once
