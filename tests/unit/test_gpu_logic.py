"""The GPU logic that needs no GPU (issue 15): architectures from nvidia-smi, NCCL's -gencode flags,
the form nccl_cuda_archs must have, the architectures inside a built library (fat binaries read
without cuobjdump) and whether they are what was asked, the nccl role's node probe and the torch
wrapper's GPU pinning against the test stub of nvidia-smi."""

from __future__ import annotations

import json
import os
import shlex
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from tests.unit.loader import load

ROOT = Path(__file__).resolve().parents[2]
STUB = ROOT / "tests" / "integration" / "stub_nvidia_smi.py"


cuda = load("mpictl_cuda_filter", ROOT / "filter_plugins" / "mpictl_cuda.py")
archs = load("nccl_cuda_archs", ROOT / "roles" / "nccl" / "files" / "cuda_archs.py")
stub = load("stub_nvidia_smi", STUB)


# --- filters -----------------------------------------------------------------------------------


def test_capabilities_become_arch_numbers_once_each_in_numeric_order() -> None:
    assert cuda.mpictl_cuda_caps(["9.0", "9.0", " 8.0 ", "10.0", "junk", ""]) == ["80", "90", "100"]
    assert cuda.mpictl_cuda_caps([]) == []


def test_gencode_has_a_cubin_per_arch_and_ptx_only_when_asked() -> None:
    assert cuda.mpictl_cuda_gencode(["90", "80"]) == (
        "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90"
    )
    assert cuda.mpictl_cuda_gencode(["90"], True) == (
        "-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90"
    )
    assert cuda.mpictl_cuda_gencode([], True) == ""
    # the exact string of the session sandbox's cached NCCL fingerprint (nccl_cuda_archs ["90"])
    assert cuda.mpictl_cuda_gencode(["90"]) == "-gencode=arch=compute_90,code=sm_90"


@pytest.mark.parametrize(
    ("given", "problem"),
    [("9.0", '"9.0" (write "90")'), ("sm90", '"sm90" (write "90")'),
     ("sm_90a", '"sm_90a" (write "90a")'), ("compute_80", '"compute_80" (write "80")'),
     ("ninety", '"ninety"'), (9.0, '"9.0" (write "90")')],
)  # fmt: skip
def test_archs_in_another_form_are_refused_with_the_form_to_write(given: Any, problem: str) -> None:
    assert cuda.mpictl_cuda_arch_problems(["90", given]) == [problem]


def test_arch_numbers_pass() -> None:
    assert cuda.mpictl_cuda_arch_problems(["80", "90", "90a", "100", 86]) == []


def test_a_library_of_the_asked_archs_matches() -> None:
    match = cuda.mpictl_cuda_build_mismatch
    assert match({"sm": ["90", "100"], "ptx": []}, ["90"]) == ""  # 100: NCCL's own FP8 kernels
    assert match({"sm": ["80", "90", "100"], "ptx": ["90"]}, ["80", "90"], True) == ""
    assert match({"sm": ["90"], "ptx": []}, ["90a"]) == ""


def test_a_library_of_the_wrong_arch_does_not_match() -> None:
    match = cuda.mpictl_cuda_build_mismatch
    assert match({"sm": ["80", "100"], "ptx": []}, ["90"]) == "no sm_90; unexpected sm_80"
    assert match({"sm": ["80", "90"], "ptx": []}, ["90"]) == "unexpected sm_80"
    assert match({"sm": ["90"], "ptx": []}, ["90"], True) == "PTX for nothing (want compute_90)"
    assert match({"sm": ["90"], "ptx": ["90"]}, ["90"]) == "PTX for compute_90 (want none)"
    assert match({"sm": [], "ptx": []}, ["80"]) == "no sm_80"


# --- the architectures inside a library --------------------------------------------------------


def fatbin(*entries: tuple[int, int]) -> bytes:
    """A fat binary with (kind, arch) entries (kind 1 PTX, 2 cubin), each with a small payload."""
    body = b""
    for kind, arch in entries:
        payload = bytes([arch % 256]) * 24
        header = struct.pack(
            "<HHIQIIHHI", kind, 0x101, 64, len(payload), len(payload), 0, 8, 1, arch
        )
        body += header.ljust(64, b"\0") + payload
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def elf_with_fatbin(section: bytes, decoy: bytes = b"") -> bytes:
    """A minimal ELF64 file whose .nv_fatbin section holds ``section`` (``decoy``: a fat binary
    outside that section, which must not count)."""
    names = b"\0.shstrtab\0.nv_fatbin\0"
    data_off = 64
    names_off = data_off + len(section)
    decoy_off = names_off + len(names)
    shoff = (decoy_off + len(decoy) + 7) // 8 * 8
    header = b"\x7fELF\x02\x01\x01".ljust(16, b"\0")
    header += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 56, 0, 64, 3, 1)
    null = b"\0" * 64
    shstr = struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, names_off, len(names), 0, 0, 1, 0)
    fat = struct.pack("<IIQQQQIIQQ", 11, 1, 2, 0, data_off, len(section), 0, 0, 8, 0)
    body = header + section + names + decoy
    return body.ljust(shoff, b"\0") + null + shstr + fat


def test_archs_of_an_elf_library_come_from_its_nv_fatbin_section(tmp_path: Path) -> None:
    section = fatbin((2, 80), (2, 90)) + b"\0" * 4 + fatbin((2, 90), (1, 90), (2, 100))
    lib = tmp_path / "libnccl.so.2"
    lib.write_bytes(elf_with_fatbin(section, decoy=fatbin((2, 75))))
    assert archs.read(str(lib)) == {"sm": ["80", "90", "100"], "ptx": ["90"]}
    out = subprocess.run(
        [sys.executable, str(ROOT / "roles/nccl/files/cuda_archs.py"), str(lib)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(out.stdout) == {"sm": ["80", "90", "100"], "ptx": ["90"]}


def test_a_file_without_elf_sections_is_scanned_whole(tmp_path: Path) -> None:
    archive = tmp_path / "libnccl_static.a"
    archive.write_bytes(b"!<arch>\n" + b"x" * 13 + fatbin((2, 86)) + b"tail")
    assert archs.read(str(archive)) == {"sm": ["86"], "ptx": []}


def test_a_file_without_a_fat_binary_is_an_error(tmp_path: Path) -> None:
    plain = tmp_path / "libplain.so"
    plain.write_bytes(elf_with_fatbin(b""))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "roles/nccl/files/cuda_archs.py"), str(plain)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert (
        proc.returncode == 1 and proc.stderr.strip() == f"{plain}: no CUDA fat binary in the file"
    )


def test_the_wrong_arch_build_is_caught_end_to_end(tmp_path: Path) -> None:
    lib = tmp_path / "libnccl.so.2"
    lib.write_bytes(elf_with_fatbin(fatbin((2, 80), (2, 100))))
    assert cuda.mpictl_cuda_build_mismatch(archs.read(str(lib)), ["90"]) == (
        "no sm_90; unexpected sm_80"
    )


# --- the nvidia-smi stub -----------------------------------------------------------------------

H100 = {"gpus": 2, "compute_cap": "9.0", "name": "NVIDIA H100 80GB HBM3"}


def test_stub_lists_gpus_as_nvidia_smi_does() -> None:
    code, out = stub.main(["-L"], H100)
    assert code == 0
    assert out.splitlines() == [
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-1111-2222-3333-000000000000)",
        "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-00000001-1111-2222-3333-000000000001)",
    ]


def test_stub_answers_csv_queries_with_and_without_header() -> None:
    assert stub.main(["--query-gpu=compute_cap", "--format=csv,noheader"], H100) == (
        0,
        "9.0\n9.0\n",
    )
    code, out = stub.main(["--query-gpu=index,memory.total", "--format=csv"], {**H100, "gpus": 1})
    assert (code, out) == (0, "index, memory.total\n0, 143771 MiB\n")
    code, out = stub.main(["--query-gpu=memory.total", "--format=csv,noheader,nounits"], H100)
    assert out == "143771\n143771\n"


def test_stub_without_gpus_and_with_a_failed_driver() -> None:
    assert stub.main(["-L"], {"gpus": 0}) == (6, "No devices found.\n")
    assert stub.main(["--query-gpu=compute_cap", "--format=csv,noheader"], {"gpus": 0}) == (
        6, "No devices were found\n",
    )  # fmt: skip
    code, out = stub.main(["-L"], {"gpus": 8, "fail": True})
    assert code == 9 and out.startswith(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    )


def test_stub_refuses_what_the_real_tool_refuses() -> None:
    assert stub.main(["--query-gpu=bogus", "--format=csv"], H100)[0] == 2
    assert stub.main(["--query-gpu=index"], H100)[0] == 2
    assert stub.main(["-x"], H100)[0] == 2


@pytest.fixture
def smi_path(tmp_path: Path) -> tuple[Path, Path]:
    """A PATH directory whose nvidia-smi is the stub reading ``config`` (rewritten per test)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    config = tmp_path / "nvidia-smi.json"
    text = STUB.read_text().replace(
        'CONFIG = "/etc/mpictl-test/nvidia-smi.json"', f"CONFIG = {str(config)!r}"
    )
    smi = bindir / "nvidia-smi"
    smi.write_text(text.replace("#!/usr/bin/python3", f"#!{sys.executable}", 1))
    smi.chmod(0o755)
    return bindir, config


# --- the nccl role's probe of the node, with the stub ------------------------------------------


def nccl_probe(bindir: Path, cuda_home: Path) -> list[str]:
    tasks = yaml.safe_load((ROOT / "roles/nccl/tasks/detect.yml").read_text())
    (task,) = [t for t in tasks if t.get("register") == "__nccl_node"]
    env = jinja2.Environment()
    env.filters["quote"] = shlex.quote
    script = env.from_string(task["ansible.builtin.raw"]).render(nccl_cuda_home=str(cuda_home))
    proc = subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, check=True,
        env={**os.environ, "PATH": f"{bindir}:/usr/bin:/bin"},
    )  # fmt: skip
    return proc.stdout.splitlines()


def test_the_probe_reads_capabilities_and_the_toolkit(
    smi_path: tuple[Path, Path], tmp_path: Path
) -> None:
    bindir, config = smi_path
    config.write_text(json.dumps({"gpus": 8, "compute_cap": "8.0"}))
    lines = nccl_probe(bindir, tmp_path / "no-cuda")
    assert lines[0] == "nvcc no"
    assert [x for x in lines if x.startswith("cap ")] == ["cap 8.0"] * 8
    assert cuda.mpictl_cuda_caps(x[4:] for x in lines if x.startswith("cap ")) == ["80"]
    assert not [x for x in lines if x.startswith("smi-error")]


def test_the_probe_reports_a_failing_nvidia_smi(
    smi_path: tuple[Path, Path], tmp_path: Path
) -> None:
    bindir, config = smi_path
    config.write_text(json.dumps({"gpus": 2, "fail": True}))
    errors = [x for x in nccl_probe(bindir, tmp_path) if x.startswith("smi-error")]
    assert errors == [
        "smi-error 9 NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
        "driver. Make sure that the latest NVIDIA driver is installed and running."
    ]


def test_the_probe_takes_no_devices_as_no_gpus(smi_path: tuple[Path, Path], tmp_path: Path) -> None:
    bindir, config = smi_path
    config.write_text(json.dumps({"gpus": 0}))
    lines = nccl_probe(bindir, tmp_path)
    assert not [x for x in lines if x.startswith(("cap ", "smi-error"))], lines


# --- the torch wrapper pins each local rank to a GPU of the stub --------------------------------


def torch_env_devices(bindir: Path, local_ranks: range) -> list[str | None]:
    out = []
    for rank in local_ranks:
        env = {
            "PATH": f"{bindir}:/usr/bin:/bin",
            "OMPI_COMM_WORLD_RANK": str(rank),
            "OMPI_COMM_WORLD_SIZE": str(len(local_ranks)),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
            "OMPI_COMM_WORLD_LOCAL_SIZE": str(len(local_ranks)),
        }
        proc = subprocess.run(
            ["sh", str(ROOT / "mpictl/scripts/mpictl-torch-env"), "sh", "-c",
             'echo "${CUDA_VISIBLE_DEVICES-unset}"'],
            capture_output=True, text=True, check=True, env=env,
        )  # fmt: skip
        value = proc.stdout.strip()
        out.append(None if value == "unset" else value)
    return out


def test_torch_env_pins_local_ranks_round_robin_on_the_stubs_gpus(
    smi_path: tuple[Path, Path],
) -> None:
    bindir, config = smi_path
    config.write_text(json.dumps({"gpus": 2, "compute_cap": "9.0"}))
    assert torch_env_devices(bindir, range(5)) == ["0", "1", "0", "1", "0"]
    config.write_text(json.dumps({"gpus": 8, "compute_cap": "8.0"}))
    assert torch_env_devices(bindir, range(8)) == [str(i) for i in range(8)]
    config.write_text(json.dumps({"gpus": 8, "fail": True}))
    assert torch_env_devices(bindir, range(2)) == [None, None]


# --- the horovod role's reading of a named Python environment ----------------------------------


def python_env(path: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-I", "-c", (ROOT / "roles/horovod/files/python_env.py").read_text()],
        capture_output=True, text=True, check=True, cwd=path,
        env={**os.environ, "PYTHONPATH": str(path)},
    )  # fmt: skip
    return json.loads(proc.stdout)


def test_a_named_environment_is_read_without_importing_torch(tmp_path: Path) -> None:
    torch = tmp_path / "site" / "torch"
    torch.mkdir(parents=True)
    # Importing this torch would fail: the probe reads version.py only.
    (torch / "__init__.py").write_text("raise SystemExit('imported')\n")
    (torch / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.13.0+cu130'\ndebug = False\n"
        "cuda: Optional[str] = '13.0'\ngit_version = 'abc'\n"
    )
    got = subprocess.run(
        [sys.executable, "-c", (ROOT / "roles/horovod/files/python_env.py").read_text()],
        capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
    )  # fmt: skip
    env = json.loads(got.stdout)
    assert env["runs"] and env["pip"] is not None
    assert env["python"] == f"{sys.version_info[0]}{sys.version_info[1]}"
    assert env["torch"] == {"version": "2.13.0+cu130", "cuda": "13.0"}
    (torch / "version.py").write_text("__version__ = '2.13.0+cpu'\ncuda = None\n")
    got = subprocess.run(
        [sys.executable, "-c", (ROOT / "roles/horovod/files/python_env.py").read_text()],
        capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
    )  # fmt: skip
    assert json.loads(got.stdout)["torch"] == {"version": "2.13.0+cpu", "cuda": None}


def test_an_environment_without_torch_says_so(tmp_path: Path) -> None:
    assert python_env(tmp_path)["torch"] is None


def test_requirements_a_named_environment_already_meets_are_not_fetched(tmp_path: Path) -> None:
    """Defect 8 of issue 23: numpy & co. were downloaded for an environment that had them."""
    dist = tmp_path / "fakepkg_mpictl-1.2.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakepkg-mpictl\nVersion: 1.2\n")
    wanted = ["fakepkg-mpictl", "fakepkg-mpictl>=1.0", "fakepkg-mpictl>=1.10", "absent-mpictl"]
    wanted += ["fakepkg-mpictl<2"]  # another specifier: pip decides
    got = subprocess.run(
        [sys.executable, "-c", (ROOT / "roles/horovod/files/python_env.py").read_text(), *wanted],
        capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    assert json.loads(got.stdout)["satisfied"] == ["fakepkg-mpictl", "fakepkg-mpictl>=1.0"]


def test_the_environments_own_cmake_is_found_beside_its_interpreter(tmp_path: Path) -> None:
    """pip's cmake lives in the environment's bin/: the role then installs no OS cmake."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    code = (ROOT / "roles/horovod/files/python_env.py").read_text()

    def cmake() -> Any:
        proc = subprocess.run(
            [str(bin_dir / "python"), "-c", code], capture_output=True, text=True, check=True
        )
        return json.loads(proc.stdout)["cmake"]

    assert cmake() is None
    stub = bin_dir / "cmake"
    stub.write_text("#!/bin/sh\necho 'cmake version 3.31.6'\necho\necho 'CMake suite'\n")
    stub.chmod(0o755)
    assert cmake() == "3.31.6"


# --- the job side follows horovod_python ------------------------------------------------------


def test_settings_name_the_interpreter_horovod_was_built_into() -> None:
    from mpictl import settings
    from mpictl.errors import InventoryError
    from tests.unit.jobside import cluster, node

    plain = settings.for_cluster(cluster(node("a"), node("b")))
    assert plain.horovod_interpreter == plain.venv_python
    named = cluster(node("a", vars={"horovod_python": "/usr/bin/python3"}), node("b"))
    assert settings.for_cluster(named).horovod_interpreter == "/usr/bin/python3"
    bad = cluster(node("a", vars={"horovod_python": "python3"}), node("b"))
    with pytest.raises(
        InventoryError, match="a: horovod_python 'python3': must be an absolute path"
    ):
        settings.for_cluster(bad)


def test_smoke_checks_horovod_with_the_named_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    from mpictl import remote, smoke
    from tests.unit.jobside import cluster, node

    commands: list[str] = []

    def fake(head, hosts, command, program="", **kw):  # type: ignore[no-untyped-def]
        commands.append(command)
        mods = {"horovod.torch": "ok"} if "/usr/bin/python3" in command else {"mpi4py": "ok"}
        line = json.dumps({"missing": [], "modules": mods}) + "\n"
        return {h: remote.NodeOutput(h, 0, line, "") for h in hosts}

    monkeypatch.setattr(remote, "run_on_nodes", fake)
    c = cluster(node("node1", vars={"horovod_python": "/usr/bin/python3"}), node("node2"))
    errors, skip = smoke.preflight(c, None, ["mpi", "horovod"])  # type: ignore[arg-type]
    assert (errors, skip) == ([], {})
    assert commands[1] == "/usr/bin/python3 - horovod.torch"
    assert "horovod.torch" not in commands[0]


@pytest.mark.parametrize(
    ("name", "expected", "mismatch"),
    [
        ("sm90-only.fatbin", {"sm": ["90"], "ptx": []}, ""),
        (
            "sm90-sm100f-ptx100.fatbin",
            {"sm": ["90", "100"], "ptx": ["100"]},
            "PTX for compute_100 (want none)",
        ),
    ],
)
def test_archs_of_fat_binaries_nvcc_13_wrote(
    name: str, expected: dict[str, list[str]], mismatch: str
) -> None:
    # Recorded with nvcc 13.0, compressed as NCCL's own (tests/unit/data/fatbin/README.md): an
    # sm_90-only build reads as exactly sm_90; sm_90 + sm_100f (the cubins NCCL adds itself) +
    # PTX reads as all three, and the nccl role's verify for an sm_90 request without PTX takes
    # the sm_100 cubin as NCCL's own and names only the stray PTX.
    found = archs.read(str(ROOT / "tests" / "unit" / "data" / "fatbin" / name))
    assert found == expected
    assert cuda.mpictl_cuda_build_mismatch(found, ["90"], ptx=False) == mismatch
