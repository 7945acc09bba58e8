#!/usr/bin/python3
"""A stand-in for ``nvidia-smi`` on sandbox nodes (tests only; no role installs it).

It answers the queries mpictl's roles and job side make, in the real tool's output format:
``nvidia-smi -L`` (validate.yml's GPU count, the torch wrapper, doctor, init's probe, the horovod
role) and ``nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]`` (the nccl role asks
``compute_cap``). The node's GPUs come from CONFIG (JSON, readable by every user):

    {"gpus": 2, "compute_cap": "9.0", "name": "NVIDIA H100 80GB HBM3", "fail": false}

``gpus: 0`` answers as a driver without devices (exit 6); ``fail: true`` as a node whose driver is
not loaded (the real message, exit 9). Anything else is refused as the real tool refuses it, so a
role that starts asking something new fails here instead of passing by accident.
"""

from __future__ import annotations

import json
import sys

CONFIG = "/etc/mpictl-test/nvidia-smi.json"
DRIVER_ERROR = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
INVALID = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
MEMORY_MIB = {"8.0": 81920, "9.0": 143771}


def load(path: str = CONFIG) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {"gpus": 0}


def uuid(index: int) -> str:
    return f"GPU-{index:08x}-1111-2222-3333-{index:012x}"


def field(name: str, index: int, config: dict, units: bool) -> str | None:
    cap = str(config.get("compute_cap", "9.0"))
    mib = MEMORY_MIB.get(cap, 81920)
    values = {
        "index": str(index),
        "name": config.get("name", "NVIDIA H100 80GB HBM3"),
        "uuid": uuid(index),
        "gpu_uuid": uuid(index),
        "compute_cap": cap,
        "pci.bus_id": f"00000000:{0x18 + index:02X}:00.0",
        "driver_version": "580.65.06",
        "memory.total": f"{mib} MiB" if units else str(mib),
        "count": str(config.get("gpus", 0)),
        # the node health program's (mpictl/scripts/node_health.py): a healthy GPU
        "ecc.errors.uncorrected.volatile.total": "0",
        "retired_pages.pending": "No",
        "remapped_rows.pending": "No",
        "remapped_rows.failure": "No",
    }
    return values.get(name)


def main(argv: list[str], config: dict) -> tuple[int, str]:
    """(exit code, stdout) of ``nvidia-smi ARGV`` on a node with ``config``."""
    if config.get("fail"):
        return 9, DRIVER_ERROR
    gpus = int(config.get("gpus", 0))
    if argv in (["-L"], ["--list-gpus"]):
        if not gpus:
            return 6, "No devices found.\n"
        name = config.get("name", "NVIDIA H100 80GB HBM3")
        return 0, "".join(f"GPU {i}: {name} (UUID: {uuid(i)})\n" for i in range(gpus))
    query = [a for a in argv if a.startswith("--query-gpu=")]
    fmt = [a for a in argv if a.startswith("--format=")]
    if len(query) != 1 or len(fmt) != 1 or len(argv) != 2:
        return 2, INVALID
    fields = query[0].split("=", 1)[1].split(",")
    options = fmt[0].split("=", 1)[1].split(",")
    if options[0] != "csv" or any(o not in ("noheader", "nounits") for o in options[1:]):
        return 2, INVALID
    units = "nounits" not in options
    for name in fields:
        if field(name, 0, config, units) is None:
            return 2, f'Field "{name}" is not a valid field to query.\n\n'
    if not gpus:
        return 6, "No devices were found\n"
    lines = [] if "noheader" in options else [", ".join(fields)]
    lines += [", ".join(field(f, i, config, units) or "" for f in fields) for i in range(gpus)]
    return 0, "\n".join(lines) + "\n"


if __name__ == "__main__":
    code, out = main(sys.argv[1:], load())
    sys.stdout.write(out)
    sys.exit(code)
