"""Recorded RDMA output of real GPU nodes (tests/data/recordings/rdma/, provenance in its
README): each recording as the sysfs tree the node probes read. A recorded sysfs tree is used as
it is; ``ibstatus`` prints the sysfs files' contents unchanged; ``ibstat`` abbreviates them, and
its values are written in the kernel's form (``Active`` -> ``4: ACTIVE``, ``400`` -> ``400
Gb/sec``, ``CA type`` -> ``hca_type``)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

RECORDINGS = Path(__file__).resolve().parents[1] / "data" / "recordings" / "rdma"
H100_IB_SYSFS = RECORDINGS / "h100-ndr-sysfs"
H100_IB_IBSTAT = RECORDINGS / "h100-ndr-ibstat.txt"
H100_ROCE_IBSTAT = RECORDINGS / "h100-roce-ibstat.txt"
A100_IB_IBSTATUS = RECORDINGS / "a100-hdr-ibstatus.txt"
ONE_RAIL_IBSTAT = RECORDINGS / "one-rail-hdr-ibstat.txt"

#: ibstat's port state words as the kernel writes them in sysfs (IB port states 1-5).
STATES = {"Down": "1: DOWN", "Initializing": "2: INIT", "Armed": "3: ARMED", "Active": "4: ACTIVE",
          "ActiveDefer": "5: ACTIVE_DEFER"}  # fmt: skip


def _port(root: Path, device: str, port: str, **files: str) -> None:
    d = root / device / "ports" / port
    d.mkdir(parents=True, exist_ok=True)
    for name, value in files.items():
        (d / name).write_text(value + "\n")


def from_ibstat(text: str, root: Path) -> Path:
    device = hca = ""
    port = ""
    fields: dict[str, str] = {}

    def flush() -> None:
        if device and port:
            _port(root, device, port, state=STATES[fields["State"]],
                  rate=f"{fields['Rate']} Gb/sec", link_layer=fields["Link layer"])  # fmt: skip
            (root / device / "hca_type").write_text(hca + "\n")

    for line in text.splitlines():
        if m := re.match(r"^CA '(.+)'$", line):
            flush()
            device, port, fields = m.group(1), "", {}
        elif m := re.match(r"^\s+CA type: (.*)$", line):
            hca = m.group(1).strip()
        elif m := re.match(r"^\s+Port (\d+):$", line):
            flush()
            port, fields = m.group(1), {}
        elif port and (m := re.match(r"^\s+([^:]+): (.*)$", line)):
            fields[m.group(1)] = m.group(2).strip()
    flush()
    return root


def from_ibstatus(text: str, root: Path) -> Path:
    for block in text.split("Infiniband device ")[1:]:
        m = re.match(r"'(.+)' port (\d+) status:", block)
        assert m, block
        values = dict(re.findall(r"^\s+(state|rate|link_layer):\s+(.*)$", block, re.M))
        _port(root, m.group(1), m.group(2), **{k: v.strip() for k, v in values.items()})
    return root


def tree(recording: Path, root: Path) -> Path:
    """The recording as a sysfs tree under ``root`` (a recorded tree is copied as it is)."""
    if recording.is_dir():
        shutil.copytree(recording, root)
        return root
    text = recording.read_text()
    return from_ibstat(text, root) if text.startswith("CA '") else from_ibstatus(text, root)
