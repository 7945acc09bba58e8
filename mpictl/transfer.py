"""Send a workdir selection (:mod:`mpictl.workdir`) to the nodes of a job.

The controller sends it once, to the head, with rsync over the head's own SSH connection (the
cluster key, the pinned known_hosts of the inventory): the selection's own list of paths
(``--files-from``, NUL-separated) is what leaves the controller, and the left-out paths only
decide what is deleted there (:func:`send_to_head`); the head then spreads it to the other
nodes in rounds (``scripts/mesh_spread.py``), each node mirroring the head's copy. Every
transfer's rsync ``--stats`` are kept, so a record shows what moved (a second run of an unchanged
tree moves no file content).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from mpictl import programs, remote, workdir
from mpictl.errors import JobError
from mpictl.inputs import shown

FANOUT = "mesh_spread.py"
_STAT_LINES = {
    "files": r"Number of regular files transferred:\s*([\d,.]+)",
    "content_bytes": r"Total transferred file size:\s*([\d,.]+)",
    "sent_bytes": r"Total bytes sent:\s*([\d,.]+)",
}
_RSYNC_SUMMARY = ("rsync error:", "rsync: connection unexpectedly closed")


@dataclass(frozen=True)
class RsyncStats:
    files: int  # regular files whose content moved
    content_bytes: int  # their size ("Total transferred file size")
    sent_bytes: int  # what the sender put on the wire


def parse_stats(text: str) -> RsyncStats:
    """The figures of ``rsync --stats`` output (0 for a figure that is missing)."""
    values = {}
    for key, pattern in _STAT_LINES.items():
        m = re.search(pattern, text)
        values[key] = int(re.sub(r"[,.]", "", m.group(1))) if m else 0
    return RsyncStats(**values)


@dataclass
class SyncReport:
    path: str  # absolute, the same on every node
    local: str
    digest: str
    files: int
    bytes: int
    left_out: list[str]
    controller: RsyncStats  # controller -> head
    fanout: list[dict[str, Any]] = field(default_factory=list)  # from, to, stats
    seconds: float = 0.0

    @property
    def moved_content(self) -> int:
        """File content (bytes) that moved anywhere in this sync."""
        return self.controller.content_bytes + sum(f["stats"]["content_bytes"] for f in self.fanout)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "moved_content": self.moved_content}


def _rsync_reason(text: str) -> str:
    """Why rsync failed: its first line that is not its own closing summary ("rsync error: ...
    (code 12)" says only that the connection closed; ssh's reason comes before it)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    causes = [line for line in lines if not line.startswith(_RSYNC_SUMMARY)]
    return causes[0] if causes else (lines[-1] if lines else "")


def send_to_head(head: remote.HeadSSH, sel: workdir.Selection, rel: str) -> RsyncStats:
    """rsync the selection to ``~/rel`` on the head: exactly the selection arrives, and nothing
    else stays there.

    Two rsyncs over the head's SSH. First the selection is sent: its paths, NUL-terminated, are
    rsync's ``--files-from`` (not recursive: a directory in the list brings only itself), so what
    leaves the controller is the list mpictl computed and hashed, whatever the names hold, and
    no pattern stands between the two; ``--force`` lets a file replace a directory of the same
    name. Then the stale entries go: a recursive rsync that transfers nothing (``--existing
    --ignore-existing``) deletes on the head whatever is not on the controller or is left out
    (the left-out paths as NUL-terminated anchored rules, ``--delete-excluded``). The first
    rsync's ``--stats`` are the transfer's."""
    if shutil.which("rsync") is None:
        raise JobError("--workdir needs rsync on the controller (apt-get install rsync)")
    common = [
        "-e",
        shlex.join(head.transport()),
        f"--rsync-path=mkdir -p {shlex.quote(rel)} && rsync",
        f"{sel.root}/",
        f"{head.user}@{head.host}:{rel}/",
    ]
    prune = [
        "rsync",
        "--recursive",
        "--links",
        "--delete",
        "--delete-excluded",
        "--existing",
        "--ignore-existing",
        "--from0",
        "--exclude-from=-",
        *common,
    ]
    send = ["rsync", "-a", "--force", "--stats", "--from0", "--files-from=-", *common]
    sent = _rsync(head, sel, send, workdir.rsync_files(sel))
    _rsync(head, sel, prune, workdir.rsync_filter(sel))
    return parse_stats(sent.stdout.decode(errors="replace"))


def _rsync(
    head: remote.HeadSSH, sel: workdir.Selection, argv: list[str], stdin: bytes
) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run(argv, input=stdin, capture_output=True)
    if proc.returncode != 0:
        raise JobError(
            f"{head.node.name}: sending {shown(sel.root)} failed (rsync exit {proc.returncode}: "
            f"{shown(_rsync_reason(proc.stderr.decode(errors='replace')))}); is rsync installed "
            "on the node? `mpictl provision`"
        )
    return proc


def fanout_spec(rel: str, hosts: Sequence[str], timeout: int = 3600) -> dict[str, Any]:
    """What scripts/mesh_spread.py gets on the head: the tree ``~/rel``, sent to ``hosts``."""
    return {"kind": "tree", "dir": rel, "hosts": list(hosts), "seed": "head",
            "connect_timeout": 5, "timeout": timeout}  # fmt: skip


def spread(
    head: remote.HeadSSH, rel: str, hosts: Sequence[str]
) -> tuple[str, list[dict[str, Any]]]:
    """From the head to ``hosts`` (addresses); the head's home and one record per transfer."""
    spec = fanout_spec(rel, hosts)
    proc = head.run_python(programs.source(FANOUT), [json.dumps(spec)], timeout=3700)
    data = next(iter(remote.json_lines(proc.stdout)), None)
    if proc.returncode != 0 or data is None:
        raise JobError(
            f"{head.node.name}: spreading the workdir from the head failed: "
            f"{remote.last_line(proc.stderr) or proc.returncode}"
        )
    records = []
    outcome: dict[str, dict[str, Any]] = {}  # the last record for a node is its outcome
    for rec in data["transfers"]:
        outcome[rec["to"]] = rec
        records.append(
            {
                "from": rec["from"],
                "to": rec["to"],
                "rc": rec["rc"],
                "stats": asdict(parse_stats(rec["stdout"])),
            }
        )
    failed = [
        f"{rec['to']} (from {rec['from']}: {_rsync_reason(rec['stderr'])})"
        for rec in outcome.values()
        if rec["rc"] != 0
    ]
    if failed:
        raise JobError("the workdir did not reach " + "; ".join(failed))
    return str(data["home"]), records


def sync(head: remote.HeadSSH, sel: workdir.Selection, hosts: Sequence[str]) -> SyncReport:
    """The selection at one path on the head and on ``hosts``."""
    started = time.monotonic()
    rel = workdir.remote_dir(sel.root)
    controller = send_to_head(head, sel, rel)
    home, fanout = spread(head, rel, [h for h in hosts if h not in (head.node.address,)])
    return SyncReport(
        path=f"{home.rstrip('/')}/{rel}",
        local=str(sel.root),
        digest=sel.digest,
        files=len(sel.files),
        bytes=sel.total_bytes,
        left_out=sel.left_out,
        controller=controller,
        fanout=fanout,
        seconds=time.monotonic() - started,
    )
