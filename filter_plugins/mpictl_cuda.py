"""Ansible filters of the GPU logic. nccl: GPU architectures from ``nvidia-smi``, the ``-gencode``
flags NCCL is compiled with, the form ``nccl_cuda_archs`` must have, and whether a built library
holds the architectures that were asked for. openmpi: whether a node's OpenMPI is built with CUDA,
from what ``roles/openmpi/files/cuda_probe.sh`` found there; ucx: the same for UCX, from
``roles/ucx/files/ucx_probe.sh``. Pure (plain values in, plain values out), so the unit tests call
them without Ansible."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# A compute capability as nvcc's arch numbers write it: "90", "80", "100", "90a" (arch-specific).
ARCH = re.compile(r"^[0-9]{2,3}[a-z]?$")
# What `nvidia-smi --query-gpu=compute_cap --format=csv,noheader` prints per GPU: "9.0", "12.0".
CAP = re.compile(r"^([0-9]+)\.([0-9])$")
# Architectures NCCL adds to every build whatever NVCC_GENCODE says: its FP8 multimem symmetric
# kernels are compiled for sm_100f (CUDA >= 12.9; sm_100a from 12.7) in src/device/Makefile.
NCCL_FIXED_ARCHS = ("100",)


def _key(arch: str) -> tuple[int, str]:
    digits = arch.rstrip("abcdefghijklmnopqrstuvwxyz")
    return int(digits), arch[len(digits) :]


def mpictl_cuda_sorted(archs: Iterable[Any]) -> list[str]:
    """Architectures once each, in numeric order ("80" before "100")."""
    return sorted({str(a) for a in archs}, key=_key)


def mpictl_cuda_caps(lines: Iterable[str]) -> list[str]:
    """The architectures of nvidia-smi's compute_cap lines ("9.0" -> "90"), once each, sorted;
    lines that are not a capability are ignored."""
    found = []
    for line in lines:
        m = CAP.match(str(line).strip())
        if m:
            found.append(m.group(1) + m.group(2))
    return mpictl_cuda_sorted(found)


def mpictl_cuda_arch_problems(archs: Iterable[Any]) -> list[str]:
    """One phrase per entry that is not an arch number, saying what to write instead:
    '"9.0" (write "90")', '"sm90" (write "90")'. Empty when every entry is fine."""
    problems = []
    for arch in archs:
        text = str(arch).strip()
        if ARCH.match(text):
            continue
        cap = CAP.match(text)
        prefixed = re.match(r"^(?:sm|compute)_?([0-9]{2,3}[a-z]?)$", text)
        if cap:
            problems.append(f'"{text}" (write "{cap.group(1)}{cap.group(2)}")')
        elif prefixed:
            problems.append(f'"{text}" (write "{prefixed.group(1)}")')
        else:
            problems.append(f'"{text}"')
    return problems


def mpictl_cuda_gencode(archs: Iterable[Any], ptx: bool = False) -> str:
    """nvcc's -gencode flags (NCCL's NVCC_GENCODE): a cubin per architecture, plus the PTX of the
    highest one when ``ptx``."""
    ordered = mpictl_cuda_sorted(archs)
    flags = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in ordered]
    if ptx and ordered:
        flags.append(f"-gencode=arch=compute_{ordered[-1]},code=compute_{ordered[-1]}")
    return " ".join(flags)


def mpictl_cuda_build_mismatch(
    found: Mapping[str, Iterable[Any]],
    asked: Iterable[Any],
    ptx: bool = False,
    fixed: Iterable[Any] = NCCL_FIXED_ARCHS,
) -> str:
    """'' when a library's architectures (``found``: {"sm": [...], "ptx": [...]}, as
    roles/nccl/files/cuda_archs.py reads them) are what was asked: a cubin for each asked
    architecture and no other (but ``fixed``, which NCCL adds itself), PTX of the highest asked
    one exactly when ``ptx``. Else what differs, in words."""
    want = mpictl_cuda_sorted(a.rstrip("abcdefghijklmnopqrstuvwxyz") for a in map(str, asked))
    sm = mpictl_cuda_sorted(found.get("sm") or [])
    have_ptx = mpictl_cuda_sorted(found.get("ptx") or [])
    allowed = set(want) | {str(a) for a in fixed}
    problems = []
    missing = [a for a in want if a not in sm]
    if missing:
        problems.append("no sm_" + ", sm_".join(missing))
    other = [a for a in sm if a not in allowed]
    if other:
        problems.append("unexpected sm_" + ", sm_".join(other))
    want_ptx = want[-1:] if ptx else []
    if have_ptx != want_ptx:
        problems.append(
            f"PTX for {', '.join('compute_' + a for a in have_ptx) or 'nothing'}"
            f" (want {', '.join('compute_' + a for a in want_ptx) or 'none'})"
        )
    return "; ".join(problems)


# What to do about each thing an OpenMPI build with CUDA lacks on a node.
LIBCUDA_FIX = (
    "install the NVIDIA driver (libcuda.so.1) or the CUDA toolkit's stubs"
    " (lib64/stubs/libcuda.so), or set openmpi_cuda_libdir to the directory of a libcuda"
)
CUDA_H_FIX = "point openmpi_cuda_home at a CUDA toolkit with include/cuda.h"


def mpictl_key_values(lines: Iterable[Any]) -> dict[str, str]:
    """``KEY=VALUE`` lines as a dict (the value keeps any further ``=``); other lines ignored.
    Surrounding white space goes (``raw`` output ends its lines with a carriage return)."""
    out = {}
    for line in lines:
        key, sep, value = str(line).strip().partition("=")
        if sep and key:
            out[key] = value
    return out


def mpictl_openmpi_cuda(lines: Iterable[Any], mode: str) -> dict[str, Any]:
    """Whether a node's OpenMPI is built with CUDA (``openmpi_cuda``: ``mode``), from the lines
    of ``cuda_probe.sh`` on it: {"with_cuda", "nvcc", "libcuda", "why", "fix"}. ``why`` says what
    is missing ('' when nothing is, and under ``disabled``) and ``fix`` what to do about it.

    ``disabled``: never. ``auto``: where nvcc, cuda.h and a libcuda are all found (OpenMPI's
    configure would otherwise drop CUDA silently, or stop without cuda.h). ``enabled``: where
    cuda.h and a libcuda are found (nvcc is not needed); the caller stops the run when ``why``."""
    probe = mpictl_key_values(lines)
    home = probe.get("home", "")
    nvcc = probe.get("nvcc") == "yes"
    libcuda = probe.get("libcuda", "")
    missing, fixes = [], []
    if mode == "auto" and not nvcc:
        missing.append(f"no {home}/bin/nvcc")
    elif mode != "disabled":
        if probe.get("cuda_h") != "yes":
            missing.append(f"no {home}/include/cuda.h")
            fixes.append(CUDA_H_FIX)
        if not libcuda:
            missing.append(f"no libcuda (looked at: {probe.get('searched', '')})")
            fixes.append(LIBCUDA_FIX)
    with_cuda = mode in ("auto", "enabled") and not missing
    return {
        "with_cuda": with_cuda,
        "nvcc": nvcc,
        "libcuda": libcuda if with_cuda else "",
        "why": " and ".join(missing),
        "fix": "; ".join(fixes),
    }


# What to do about each thing a UCX build with CUDA lacks on a node (UCX's configure stops on any).
UCX_HEADERS_FIX = (
    "point ucx_cuda_home at a CUDA toolkit with include/cuda.h, cuda_runtime.h and nvml.h"
    " (nvml.h: NVIDIA's cuda-nvml-dev package)"
)
UCX_LIB_FIX = (
    "install the NVIDIA driver ({lib}.so.1) or the CUDA toolkit's stubs (lib64/stubs/{lib}.so)"
)
UCX_HEADERS = ("cuda.h", "cuda_runtime.h", "nvml.h")
UCX_LIBS = ("libcuda", "libnvidia-ml")


def mpictl_ucx_cuda(lines: Iterable[Any], mode: str) -> dict[str, Any]:
    """Whether a node's UCX is built with CUDA (``ucx_cuda``: ``mode``), from the lines of
    ``ucx_probe.sh`` on it: {"with_cuda", "nvcc", "release", "libs", "why", "fix"}; ``libs`` maps
    libcuda and libnvidia-ml to the file found ({} without CUDA), ``release`` is nvcc's ('' when
    none), ``why`` what is missing ('' when nothing is, and under ``disabled``), ``fix`` what to do.

    The rule of ``mpictl_openmpi_cuda``, with what UCX's configure needs besides: ``disabled``:
    never. ``auto``: where nvcc, the headers (cuda.h, cuda_runtime.h, nvml.h), a libcuda and a
    libnvidia-ml are all found. ``enabled``: where the headers and both libraries are found (nvcc
    is not needed); the caller stops the run when ``why``."""
    probe = mpictl_key_values(lines)
    home = probe.get("home", "")
    nvcc = probe.get("nvcc") == "yes"
    missing, fixes = [], []
    if mode == "auto" and not nvcc:
        missing.append(f"no {home}/bin/nvcc")
    elif mode != "disabled":
        headers = [h for h in UCX_HEADERS if probe.get(h.replace(".", "_")) != "yes"]
        if headers:
            missing.append("no " + ", ".join(f"{home}/include/{h}" for h in headers))
            fixes.append(UCX_HEADERS_FIX)
        for lib in UCX_LIBS:
            key = lib.replace("-", "_")
            if not probe.get(key):
                missing.append(f"no {lib} (looked at: {probe.get('searched_' + key, '')})")
                fixes.append(UCX_LIB_FIX.format(lib=lib))
    with_cuda = mode in ("auto", "enabled") and not missing
    return {
        "with_cuda": with_cuda,
        "nvcc": nvcc,
        "release": probe.get("nvcc_release", "") if with_cuda else "",
        "libs": {lib: probe[lib.replace("-", "_")] for lib in UCX_LIBS} if with_cuda else {},
        "why": " and ".join(missing),
        "fix": "; ".join(fixes),
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "mpictl_cuda_sorted": mpictl_cuda_sorted,
            "mpictl_cuda_caps": mpictl_cuda_caps,
            "mpictl_cuda_arch_problems": mpictl_cuda_arch_problems,
            "mpictl_cuda_gencode": mpictl_cuda_gencode,
            "mpictl_cuda_build_mismatch": mpictl_cuda_build_mismatch,
            "mpictl_openmpi_cuda": mpictl_openmpi_cuda,
            "mpictl_ucx_cuda": mpictl_ucx_cuda,
            "mpictl_key_values": mpictl_key_values,
        }
