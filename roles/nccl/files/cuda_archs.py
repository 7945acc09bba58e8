"""The GPU architectures compiled into a CUDA library: the entries of the fat binaries in its
``.nv_fatbin`` ELF section (the whole file is scanned when there is no such section, e.g. a
static archive). What ``cuobjdump --list-elf``/``--list-ptx`` would list, read without the CUDA
toolkit (CUDA 13's minimal toolkits have no cuobjdump).

Run by the nccl role on a node (``python3 -c <this file> LIB``) and imported by the tests.
Prints one JSON object: ``{"sm": ["80", "90"], "ptx": ["90"]}`` (cubin and PTX architectures,
sorted, each once). Exit 1 with one line on stderr when the file cannot be read or holds no fat
binary. Reads only.

Format (little-endian): a fat binary is a 16-byte header (magic 0xBA55ED50, u16 version, u16
header size, u64 size of the entries) followed by entries; each entry starts with u16 kind
(1 = PTX, 2 = ELF cubin), u16, u32 entry header size, u64 payload size, and holds the
architecture as u32 at byte 28 (90 for sm_90). Fat binaries in the section are 8-byte aligned.
"""

from __future__ import annotations

import json
import mmap
import struct
import sys

MAGIC = 0xBA55ED50
KINDS = {1: "ptx", 2: "sm"}


def fatbin_region(data: bytes | mmap.mmap) -> tuple[int, int]:
    """(start, end) of the ``.nv_fatbin`` section of an ELF64 file, else the whole file."""
    whole = (0, len(data))
    if data[:5] != b"\x7fELF\x02" or len(data) < 64:
        return whole
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if not shoff or shentsize < 64 or shstrndx >= shnum:
        return whole

    def section(i: int) -> tuple[int, int, int]:
        base = shoff + i * shentsize
        name = struct.unpack_from("<I", data, base)[0]
        offset, size = struct.unpack_from("<QQ", data, base + 24)
        return name, offset, size

    _, str_off, _ = section(shstrndx)
    for i in range(shnum):
        name, offset, size = section(i)
        end = data.find(b"\0", str_off + name)
        if bytes(data[str_off + name : end]) == b".nv_fatbin":
            return offset, offset + size
    return whole


def archs(data: bytes | mmap.mmap) -> dict[str, list[str]]:
    """The cubin ("sm") and PTX ("ptx") architectures of every fat binary in ``data``."""
    found: dict[str, set[int]] = {"sm": set(), "ptx": set()}
    start, end = fatbin_region(data)
    magic = struct.pack("<I", MAGIC)
    pos = data.find(magic, start, end)
    while pos >= 0 and pos + 16 <= end:
        _, version, header, size = struct.unpack_from("<IHHQ", data, pos)
        if version != 1 or header < 16 or pos + header + size > end:
            pos = data.find(magic, pos + 4, end)
            continue
        entry, stop = pos + header, pos + header + size
        while entry + 32 <= stop:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            if entry_header < 32 or kind not in KINDS:
                break
            found[KINDS[kind]].add(struct.unpack_from("<I", data, entry + 28)[0])
            entry += entry_header + payload
        pos = data.find(magic, stop, end)
    return {kind: [str(a) for a in sorted(values)] for kind, values in found.items()}


def read(path: str) -> dict[str, list[str]]:
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return archs(m)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: cuda_archs.py LIBRARY", file=sys.stderr)
        return 2
    try:
        result = read(argv[1])
    except (OSError, ValueError) as exc:
        print(f"{argv[1]}: {exc}", file=sys.stderr)
        return 1
    if not result["sm"] and not result["ptx"]:
        print(f"{argv[1]}: no CUDA fat binary in the file", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
