"""The read-only node probes the roles run with `raw` (one SSH exec, JSON out), run here on a
temporary tree: what they report decides whether a role skips its work, so a wrong report would
either leave a drifted node unrepaired or make every re-run slow."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path
from typing import Any

SSH_MESH_PROBE = "roles/ssh_mesh/files/ssh_mesh_node_state.py"
HOROVOD_PROBE = "roles/horovod/files/horovod_node_state.py"

ROOT = Path(__file__).resolve().parents[2]


def probe(script: str, args: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", str(ROOT / script), json.dumps(args)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    return json.loads(proc.stdout)


def ssh_mesh_args(home: Path, known: Path, user: str = "no-such-user-mpictl") -> dict[str, Any]:
    return {
        "user": user,
        "group": "no-such-group-mpictl",
        "home": str(home),
        "known_hosts": str(known),
    }


def test_ssh_mesh_probe_describes_files_by_mode_owner_and_checksum(tmp_path: Path) -> None:
    me = pwd.getpwuid(os.getuid())
    ssh_dir = tmp_path / ".ssh"
    ssh_dir.mkdir(mode=0o700)
    (ssh_dir / "id_ed25519").write_text("PRIVATE\n")
    (ssh_dir / "id_ed25519").chmod(0o600)
    authorized = "ssh-ed25519 OTHER x\nssh-ed25519 AAAA mpictl-controller\n"
    (ssh_dir / "authorized_keys").write_text(authorized)
    known = tmp_path / "known_hosts"
    known.write_text("node1 ssh-ed25519 AAAA\n")
    out = probe(SSH_MESH_PROBE, ssh_mesh_args(tmp_path, known, me.pw_name))
    assert out["ssh_dir"] == {"mode": "0700", "uid": os.getuid(), "gid": os.getgid()}
    assert out["private_key"] == {
        "mode": "0600",
        "uid": os.getuid(),
        "gid": os.getgid(),
        "sha256": hashlib.sha256(b"PRIVATE\n").hexdigest(),
    }
    assert out["public_key"] is None  # missing: the role must write it
    # not a key ssh-keygen can read: no node key, so the role makes one
    assert out["node_key"] == "" and out["public_key_matches"] is False
    assert out["authorized_keys"]["sha256"] == hashlib.sha256(authorized.encode()).hexdigest()
    assert out["known_hosts"]["sha256"] == hashlib.sha256(b"node1 ssh-ed25519 AAAA\n").hexdigest()
    assert out["config"] is None
    assert out["group_gid"] is None
    if out["account"] is not None:  # /etc/shadow is readable (root): the account is described
        assert out["account"]["uid"] == os.getuid() and out["account"]["home"] == me.pw_dir


def test_ssh_mesh_probe_reads_the_public_half_of_the_nodes_own_key(tmp_path: Path) -> None:
    ssh_dir = tmp_path / ".ssh"
    ssh_dir.mkdir(mode=0o700)
    key = ssh_dir / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "mpi@node1", "-f", str(key)],
        check=True,
    )
    made = (ssh_dir / "id_ed25519.pub").read_text().split()
    out = probe(SSH_MESH_PROBE, ssh_mesh_args(tmp_path, tmp_path / "none"))
    assert out["account"] is None
    assert out["node_key"] == " ".join(made[:2])  # type and key, no comment
    assert out["public_key_matches"] is True
    assert out["authorized_keys"] is None and out["known_hosts"] is None

    # a .pub file that is not the private key's public half does not count
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    (ssh_dir / "id_ed25519.pub").write_text((tmp_path / "other.pub").read_text())
    out = probe(SSH_MESH_PROBE, ssh_mesh_args(tmp_path, tmp_path / "none"))
    assert out["node_key"] == " ".join(made[:2]) and out["public_key_matches"] is False


def test_horovod_probe_reads_venv_record_dists_and_markers(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "torch-2.13.0+cpu.dist-info").mkdir(parents=True)
    (site / "numpy-2.1.0.dist-info").mkdir()
    (venv / "bin").mkdir()
    (venv / "bin" / "python").write_text("")
    stamp = venv / ".mpictl-horovod-packages.json"
    stamp.write_text(json.dumps({"key": "abc", "torch": {"version": "2.13.0+cpu", "cuda": None}}))
    mpi = tmp_path / "mpi"
    mpi.mkdir()
    (mpi / ".mpictl-fingerprint").write_text("f00d\n")
    out = probe(
        HOROVOD_PROBE,
        {
            "venv": str(venv),
            "stamp": str(stamp),
            "packages": ["no-such-package-mpictl"],
            "nccl_home": "",
            "mpi_home": str(mpi),
        },
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out["venv"] is True
    assert out["packages_stamp"]["key"] == "abc"
    assert out["dists"] == ["numpy-2.1.0", "torch-2.13.0+cpu"]
    assert out["missing_packages"] == ["no-such-package-mpictl"]
    assert out["mpi_home"] == str(mpi) and out["mpi_marker"] == "f00d"


def test_horovod_probe_treats_a_broken_record_as_none(tmp_path: Path) -> None:
    stamp = tmp_path / "record.json"
    stamp.write_text("{not json")
    out = probe(
        HOROVOD_PROBE,
        {
            "venv": str(tmp_path / "venv"),
            "stamp": str(stamp),
            "packages": [],
            "nccl_home": "",
            "mpi_home": str(tmp_path / "mpi"),
        },
    )
    assert out["venv"] is False
    assert out["packages_stamp"] == {}
    assert out["dists"] == []
    assert out["mpi_marker"] == ""
