#!/usr/bin/python3
"""mpictl's node health program: is this node fit to take the next job? (issue 27, part 1)

Runs on one node as root (Slurm's HealthCheckProgram runs it so; doctor runs it the same way),
reads only, apart from its own small state file (the kernel log position already looked at, so
that only new XID errors count), and answers fast: every command has a timeout.

Usage: node_health.py [--config FILE] [--dcgm] [--json | --ack-xid | --slurm | --prolog]
  FILE (default /etc/mpictl/health.json) is JSON, every key optional:
    "venv_python", "hostfile"             paths the cluster environment needs ("" skips)
    "environment_file", "programs"        programs that must be on that file's PATH (the
                                          PATH every rank gets: /etc/environment)
    "mpi_user", "ssh_files"               the MPI user and the SSH files it needs ("~/" is in
                                          its home)
    "disk_min_free_mib"                   {path: MiB}: free space each path needs
    "max_load_per_cpu"                    15-minute load average per CPU above which load is stuck
    "gpus"                                GPUs the node must show (0: no GPU checks)
    "driver"                              the driver version provisioned ("" skips)
    "nvidia_smi_timeout"                  seconds nvidia-smi has to answer
    "xid_ignore"                          XIDs that are the application's, not the node's
    "fabric_manager"                      "auto" (on NVSwitch systems), true or false
    "rdma_ports"                          {"mlx5_0/1": rate in Gb/s, ...}: ports that must be
                                          ACTIVE at that rate (or faster)
    "dcgm_diag", "dcgm_diag_level"        --dcgm: run `dcgmi diag -r LEVEL` where dcgmi exists
    "dcgm_timeout"                        ("auto") or must (true); false never; its timeout
    "state"                               the state file (default /var/lib/mpictl/health.json)
  and, for tests only, "nvidia_smi", "kmsg", "sysfs_ib", "nvswitch_glob", "systemctl", "dcgmi".
Prints one line per failed check, "CHECK: what is wrong", and one per check that could not read
its source, "warning: CHECK: why" (a check never passes silently). --json prints
{"failed": [[check, detail]...], "warnings": [...], "passed": [checks]} instead.
--slurm (Slurm's HealthCheckProgram, which ignores exit codes): drains the node ("slurm_node",
default the short host name) with "mpictl-health: CHECK: what" as its reason, and resumes it when
the checks pass again, but only a drain it set itself: an operator's drain is left alone.
--prolog (Slurm's Prolog, slurm_health_prolog): the same, and exit 1 when a check failed, so that
Slurm requeues the job instead of starting it on this node (a node that passes asks Slurm
nothing). Where Slurm drains the node with its own reason ("Prolog error") instead of keeping
this program's, the state file remembers that this program's prolog failed, so the next health
check puts the failed check back as the reason, and resumes the node once it passes.
--dcgm adds NVIDIA DCGM's diagnostic (a minute or so at level 1: for the prolog, not every check).
A new XID error keeps failing until `--ack-xid` (after the GPU is reset or replaced) or a reboot.
Exit 0: healthy (warnings allowed); 1: a check failed; 2: the config cannot be read.
Standard library only.

Size: one file of small checks (NHC's shape), past 400 lines because Slurm runs one program per
node, as root, with no package beside it: the checks, the Slurm drain/resume and the parsers of
nvidia-smi, the kernel log and dcgmi travel together.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
from typing import Any

# rdma_ports(root): the node's RDMA ports in sysfs, read as doctor, fabric and the node state do
# mpictl-include: hca_ports.py

DEFAULTS: dict[str, Any] = {
    "venv_python": "",
    "hostfile": "",
    "environment_file": "",
    "programs": [],
    "mpi_user": "",
    "ssh_files": [],
    "disk_min_free_mib": {"/": 1024, "/tmp": 512},
    "max_load_per_cpu": 8.0,
    "gpus": 0,
    "driver": "",
    "nvidia_smi_timeout": 20,
    # 13 graphics engine exception, 31 MMU fault, 43 channel stopped, 45 preemptive cleanup: a
    # job's own errors; 63 a row remapping recorded (informational). Everything else counts.
    "xid_ignore": [13, 31, 43, 45, 63],
    "fabric_manager": "auto",
    "rdma_ports": {},
    "state": "/var/lib/mpictl/health.json",
    "nvidia_smi": "nvidia-smi",
    "kmsg": "",
    "sysfs_ib": "/sys/class/infiniband",
    "nvswitch_glob": "/dev/nvidia-nvswitch*",
    "systemctl": "systemctl",
    "slurm_node": "",
    "scontrol": "scontrol",
    "dcgm_diag": "auto",
    "dcgm_diag_level": 1,
    "dcgm_timeout": 300,
    "dcgmi": "dcgmi",
}
#: the start of every Reason this program gives Slurm: a drain it did not set (an operator's) is
#: never resumed, and never overwritten
MARK = "mpictl-health:"
#: the reason slurmctld gives a node whose prolog failed (over the one the prolog set)
PROLOG_REASON = "Prolog error"
#: dcgmi diag's rows that explain the test row above them, not tests of their own
DCGM_NOTES = ("Warning", "Error", "Info")
#: the characters of a result cell's line: dcgmi cuts a longer result there, mid-word
DCGM_WIDTH = 45
GPU_FIELDS = (
    "index,pci.bus_id,driver_version,ecc.errors.uncorrected.volatile.total,"
    "retired_pages.pending,remapped_rows.pending,remapped_rows.failure"
)
# the kernel's XID line: "NVRM: Xid (PCI:0000:9b:00): 79, pid=..., GPU has fallen off the bus."
# (MIG adds the instance: "NVRM: Xid (PCI:0000:3b:00 GPU-I:05): 94, ...")
XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)[^)]*\): (\d+),?(.*)$")
# newer drivers also say it over three lines without an XID ("NVRM: The NVIDIA GPU 0000:b3:00.0",
# "NVRM: (PCI ID: ...) installed in this system has", "NVRM: fallen off the bus and is not
# responding to commands."): counted as XID 79
# (and "NVRM: GPU 0000:1a:00.0: GPU has fallen off the bus." after an XID 79: the same event)
OFF_BUS_GPU = re.compile(r"NVRM: (?:The NVIDIA )?GPU ([0-9a-fA-F]{4,8}:[0-9a-fA-F:.]+)")


class Report:
    def __init__(self) -> None:
        self.failed: list[tuple[str, str]] = []
        self.warnings: list[tuple[str, str]] = []
        self.passed: list[str] = []

    def check(self, name: str, problems: list[str]) -> None:
        if problems:
            self.failed += [(name, p) for p in problems]
        else:
            self.passed.append(name)

    def warn(self, name: str, why: str) -> None:
        self.warnings.append((name, why))


def run(cmd: list[str], timeout: float) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout + (p.stderr if p.returncode else "")
    except subprocess.TimeoutExpired:
        return 124, f"no answer within {timeout:g} s"
    except OSError as exc:
        return 127, str(exc)


def environment(cfg: dict[str, Any], report: Report) -> None:
    problems = []
    if cfg["venv_python"] and not os.access(cfg["venv_python"], os.X_OK):
        problems.append(f"the cluster venv's python {cfg['venv_python']} is missing")
    if cfg["hostfile"] and not os.path.isfile(cfg["hostfile"]):
        problems.append(f"the hostfile {cfg['hostfile']} is missing")
    if cfg["programs"]:
        path, why = env_path(cfg["environment_file"])
        if why:
            problems.append(why)
        for prog in cfg["programs"]:
            if path and not any(os.access(os.path.join(d, prog), os.X_OK) for d in path):
                problems.append(f"{prog} is not on the PATH of {cfg['environment_file']}")
    report.check("environment", problems)


def env_path(path: str) -> tuple[list[str], str]:
    """The PATH directories of an environment file (/etc/environment: what every SSH session and
    so every rank gets), or [] and why not."""
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.strip().partition("=")
                if key.strip() == "PATH":
                    return [d for d in value.strip().strip("'\"").split(":") if d], ""
    except OSError as exc:
        return [], f"{path} cannot be read: {exc.strerror}"
    return [], f"{path} sets no PATH"


def mpi_user(cfg: dict[str, Any], report: Report) -> None:
    if not cfg["mpi_user"]:
        return
    try:
        home = pwd.getpwnam(cfg["mpi_user"]).pw_dir
    except KeyError:
        report.check("mpi user", [f"no user {cfg['mpi_user']}"])
        return
    # "~/..." is in the MPI user's home
    files = [home + p[1:] if p.startswith("~/") else p for p in cfg["ssh_files"]]
    missing = [p for p in files if not os.path.isfile(p)]
    report.check("mpi user", [f"{cfg['mpi_user']}'s {p} is missing" for p in missing])


def disk(cfg: dict[str, Any], report: Report) -> None:
    problems = []
    for path, need in sorted(cfg["disk_min_free_mib"].items()):
        try:
            free = shutil.disk_usage(path).free // (1 << 20)
        except OSError as exc:
            report.warn("disk", f"cannot read the free space of {path}: {exc.strerror}")
            continue
        if free < int(need):
            problems.append(f"{path} has {free} MiB free, below {int(need)} MiB")
    report.check("disk", problems)


def load(cfg: dict[str, Any], report: Report) -> None:
    try:
        load15 = os.getloadavg()[2]
    except OSError:
        report.warn("load", "cannot read the load average")
        return
    cpus = os.cpu_count() or 1
    limit = float(cfg["max_load_per_cpu"]) * cpus
    stuck = [f"15-minute load {load15:.1f} above {limit:g} ({cpus} CPUs)"] if load15 > limit else []
    report.check("load", stuck)


def parse_gpus(text: str) -> list[dict[str, str]]:
    """nvidia-smi --query-gpu=GPU_FIELDS --format=csv,noheader: one dict per GPU."""
    names = GPU_FIELDS.split(",")
    out = []
    for line in text.splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(names) and values[0].isdigit():
            out.append(dict(zip(names, values, strict=True)))
    return out


def gpus(cfg: dict[str, Any], report: Report) -> list[dict[str, str]]:
    want = int(cfg["gpus"] or 0)
    if want <= 0:
        return []
    rc, out = run(
        [cfg["nvidia_smi"], f"--query-gpu={GPU_FIELDS}", "--format=csv,noheader"],
        float(cfg["nvidia_smi_timeout"]),
    )
    if rc != 0:
        first = (out.strip().splitlines() or ["failed"])[0]
        report.check("gpu", [f"nvidia-smi failed (exit {rc}): {first}"])
        return []
    found = parse_gpus(out)
    problems = []
    if len(found) != want:
        problems.append(f"{len(found)} GPUs visible, {want} expected")
    for g in found:
        where = f"GPU {g['index']} ({g['pci.bus_id']})"
        ecc = g["ecc.errors.uncorrected.volatile.total"]
        if ecc.isdigit() and int(ecc) > 0:
            problems.append(f"{where}: {ecc} uncorrectable ECC errors")
        if g["retired_pages.pending"] == "Yes":
            problems.append(f"{where}: retired pages pending (reset the GPU)")
        if g["remapped_rows.pending"] == "Yes":
            problems.append(f"{where}: row remapping pending (reset the GPU)")
        if g["remapped_rows.failure"] == "Yes":
            problems.append(f"{where}: row remapping failed (replace the GPU)")
    drivers = sorted({g["driver_version"] for g in found})
    if cfg["driver"] and drivers and drivers != [cfg["driver"]]:
        problems.append(
            f"driver {', '.join(drivers)}, provisioned with {cfg['driver']} "
            "(reboot after a driver upgrade, or provision again)"
        )
    report.check("gpu", problems)
    return found


def read_state(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            state = json.load(fh)
        return state if isinstance(state, dict) else {}
    except (OSError, ValueError):
        return {}


def write_state(path: str, state: dict[str, Any]) -> str:
    """'' or why the state could not be written."""
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"  # prologs and the periodic check may write at once
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(state, fh)
        os.replace(tmp, path)
        return ""
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror}"


def kernel_log(cfg: dict[str, Any]) -> tuple[list[str], str]:
    """The kernel log's lines and '' (or [] and why it cannot be read): a file given in the
    config (tests), else `dmesg` (which a container may not be allowed to read)."""
    if cfg["kmsg"]:
        try:
            with open(cfg["kmsg"], encoding="utf-8", errors="replace") as fh:
                return fh.read().splitlines(), ""
        except OSError as exc:
            return [], f"cannot read {cfg['kmsg']}: {exc.strerror}"
    rc, out = run(["dmesg"], 10)
    if rc != 0:
        return [], f"dmesg failed: {(out.strip().splitlines() or ['exit ' + str(rc)])[0]}"
    return out.splitlines(), ""


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""


STAMP = re.compile(r"^\[\s*(\d+\.\d+)\]")


def stamped(lines: list[str]) -> list[tuple[float, str]]:
    """(kernel timestamp, line) per line; a line without one (a message's continuation, as the
    three-line "fallen off the bus") takes its predecessor's."""
    out, last = [], 0.0
    for line in lines:
        m = STAMP.match(line)
        last = float(m.group(1)) if m else last
        out.append((last, line))
    return out


def xid_findings(lines: list[str], ignore: set[int]) -> list[tuple[str, str]]:
    """(PCI address, failure line) per XID that is the node's (not in ``ignore``) in ``lines``;
    a "fallen off the bus" message is XID 79 unless an XID 79 of the same GPU was already seen."""
    out: list[tuple[str, str]] = []
    for i, line in enumerate(lines):
        m = XID.search(line)
        if m:
            if int(m.group(2)) not in ignore:
                what = m.group(3).strip(" ,.") or "see the kernel log"
                out.append((m.group(1), f"XID {m.group(2)} on PCI {m.group(1)}: {what}"))
        elif "fallen off the bus" in line and 79 not in ignore:
            found = [g.group(1) for g in map(OFF_BUS_GPU.search, lines[max(0, i - 3) : i + 1]) if g]
            pci = found[-1] if found else "?"
            said = [
                a
                for a, f in out
                if f.startswith("XID 79 ") and (a.startswith(pci[:10]) or pci == "?")
            ]
            if not said:
                out.append((pci, f"XID 79 on PCI {pci}: GPU has fallen off the bus"))
    return out


def xids(cfg: dict[str, Any], report: Report) -> None:
    """New XID errors since the last look. The state file keeps, per boot, the kernel timestamp
    read up to (the log is a ring that drops old lines: a line count would not do) and the XIDs
    found, which stay failures until --ack-xid (after the repair) or a reboot."""
    lines, why = kernel_log(cfg)
    if why:
        report.warn("xid", why)
        return
    state = read_state(cfg["state"])
    boot = boot_id()
    if state.get("boot_id") != boot:  # a reboot clears the XIDs, not a failed prolog's drain
        state = {"boot_id": boot, "prolog_drain": bool(state.get("prolog_drain"))}
    upto = float(state.get("xid_upto", -1.0))
    rows = stamped(lines)
    if rows and rows[-1][0] < upto:  # the timestamps went back (a log from elsewhere): all of it
        upto = -1.0
    new = [line for t, line in rows if t > upto]
    found = [f for _, f in xid_findings(new, {int(x) for x in cfg["xid_ignore"]})]
    kept = list(dict.fromkeys([*state.get("xids", []), *found]))
    why = write_state(cfg["state"], {**state, "xid_upto": rows[-1][0] if rows else upto,
                                     "xids": kept})  # fmt: skip
    if why:
        report.warn("xid", why)
    report.check("xid", kept)


def ack_xid(cfg: dict[str, Any]) -> int:
    """--ack-xid: the XIDs found so far are dealt with (the GPU was reset or replaced); only
    later ones count."""
    lines, why = kernel_log(cfg)
    rows = stamped(lines)
    state = read_state(cfg["state"])
    if not why:
        upto = rows[-1][0] if rows else float(state.get("xid_upto", -1.0))
        why = write_state(cfg["state"], {**state, "boot_id": boot_id(), "xid_upto": upto,
                                         "xids": []})  # fmt: skip
    if why:
        print(f"node_health: {why}", file=sys.stderr)
        return 1
    print(f"node_health: {len(state.get('xids', []))} XID failure(s) acknowledged")
    return 0


def fabric_manager(cfg: dict[str, Any], report: Report) -> None:
    setting = cfg["fabric_manager"]
    wanted = bool(glob.glob(cfg["nvswitch_glob"])) if setting == "auto" else setting is True
    if not wanted:
        return
    rc, out = run([cfg["systemctl"], "is-active", "nvidia-fabricmanager"], 10)
    if rc == 127:
        report.warn("fabric manager", f"cannot ask systemd: {out.strip()}")
        return
    state = out.strip().splitlines()[0] if out.strip() else f"exit {rc}"
    report.check(
        "fabric manager",
        [] if rc == 0 else [f"nvidia-fabricmanager is {state} on an NVSwitch system"],
    )


def rate_gbps(text: str) -> float:
    m = re.match(r"\s*([\d.]+)", text)
    return float(m.group(1)) if m else 0.0


def rdma(cfg: dict[str, Any], report: Report) -> None:
    ports = cfg["rdma_ports"]
    if not ports:
        return
    problems = []
    seen = {}  # "dev/port" -> (state, rate)
    for line in rdma_ports(cfg["sysfs_ib"]):  # noqa: F821 (hca_ports.py)
        _, dev, port, fields = line.split(" ", 3)
        state, rate = (fields.split("|") + ["", ""])[:2]
        seen[f"{dev}/{port}"] = (state, rate)
    for name, want in sorted(ports.items()):
        dev, _, port = name.partition("/")
        if f"{dev}/{port or '1'}" not in seen:
            problems.append(f"{name} is missing")
            continue
        state, rate = seen[f"{dev}/{port or '1'}"]
        if not state.endswith("ACTIVE"):
            problems.append(f"{name} is {state.split(':')[-1].strip()}")
        elif rate_gbps(rate) < float(want):
            problems.append(f"{name} runs at {rate}, {float(want):g} Gb/sec expected")
    report.check("rdma", problems)


def dcgm_rows(text: str) -> list[list[str]]:
    """``[name, result]`` of each row of ``dcgmi diag``'s table, a result wrapped over several
    lines joined (the table's width cuts words: a cell's first character is its separator)."""
    rows: list[list[str]] = []
    width = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith("|") or line.startswith("|--") or line.count("|") < 3:
            continue
        name, cell = line[1:].split("|", 1)
        cell = cell.rsplit("|", 1)[0]
        if name.strip() == "Diagnostic":
            continue
        if name.strip():
            rows.append([name.strip(), cell.strip()])
            width = len(cell[1:].rstrip())
        elif rows:  # a line cut at the cell's width goes on mid-word; a shorter one after a space
            rows[-1][1] += cell[1:].rstrip() if width >= DCGM_WIDTH else " " + cell.strip()
            width = len(cell[1:].rstrip())
    return rows


def dcgm_failures(text: str) -> tuple[list[str], list[str]]:
    """(failures, warnings) of ``dcgmi diag``'s table: a test whose result says Fail, with the
    Error or Warning row under it; an Error row of its own; Warning rows under a passed test."""
    failures: list[str] = []
    warnings: list[str] = []
    failed_test = False
    for name, result in dcgm_rows(text):
        if name not in DCGM_NOTES:
            failed_test = "Fail" in result
            if failed_test:
                failures.append(f"{name}: {result}")
        elif name == "Error" and not failed_test:
            failures.append(f"Error: {result}")
        elif failed_test and name != "Info" and "(" not in failures[-1]:
            failures[-1] += f" ({name}: {result})"
        elif name == "Warning":
            warnings.append(result)
    return [f[:240] for f in failures], [w[:240] for w in warnings]


def dcgm(cfg: dict[str, Any], report: Report) -> None:
    """--dcgm: NVIDIA DCGM's diagnostic at ``dcgm_diag_level`` where dcgmi exists."""
    setting = cfg["dcgm_diag"]
    if setting in (False, "false"):
        return
    dcgmi = shutil.which(cfg["dcgmi"])
    if not dcgmi:
        if setting in (True, "true"):
            report.check("dcgm", [f"{cfg['dcgmi']} is not installed (dcgm_diag is true)"])
        return
    level = int(cfg["dcgm_diag_level"])
    rc, out = run([dcgmi, "diag", "-r", str(level)], float(cfg["dcgm_timeout"]))
    problems, warnings = dcgm_failures(out)
    if rc != 0 and not problems:
        lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
        problems = [f"dcgmi diag -r {level} exited {rc}: {lines[-1] if lines else 'no output'}"]
    for why in warnings:
        report.warn("dcgm", why)
    report.check("dcgm", problems)


def slurm_node_state(cfg: dict[str, Any], node: str) -> tuple[str, str, str]:
    """(State, Reason, '') of ``node`` as ``scontrol show node -o`` says, or ('', '', why)."""
    rc, out = run([cfg["scontrol"], "show", "node", node, "-o"], 30)
    if rc != 0:
        return "", "", f"scontrol show node {node} failed: {(out.strip().splitlines() or [''])[0]}"
    state = re.search(r"(?:^|\s)State=(\S+)", out)
    # Reason= runs to the end of the line, or to the next " Key=" of the one-line form
    reason = re.search(r"(?:^|\s)Reason=(.*?)(?=\s[A-Z][A-Za-z]+=|$)", out.strip())
    return (state.group(1) if state else ""), (reason.group(1) if reason else ""), ""


def set_prolog_drain(cfg: dict[str, Any], value: bool) -> None:
    """Remember (or forget) that this program's prolog failed on the node: Slurm's "Prolog
    error" drain that follows is this program's to take back."""
    saved = read_state(cfg["state"])
    if bool(saved.get("prolog_drain")) != value:
        write_state(cfg["state"], {**saved, "prolog_drain": value})


def slurm(cfg: dict[str, Any], report: Report, prolog: bool = False) -> int:
    """--slurm (Slurm's HealthCheckProgram): drain this node with the first failure as its
    reason; resume it when the checks pass again, but only from a drain of its own (MARK, or
    the prolog's: see --prolog). --prolog: exit 1 when a check failed (the job is requeued);
    a node that passes is in service (a job was allocated to it): nothing is asked of Slurm."""
    if prolog and not report.failed:
        set_prolog_drain(cfg, False)
        return 0
    node = cfg["slurm_node"] or os.uname().nodename.split(".")[0]
    state, reason, why = slurm_node_state(cfg, node)
    if why:
        print(f"node_health: {why}", file=sys.stderr)
        if prolog:  # failed checks: the job must not start here, whatever Slurm answers
            set_prolog_drain(cfg, True)
        return 1
    by_prolog = reason.split(" [")[0] == PROLOG_REASON and bool(
        read_state(cfg["state"]).get("prolog_drain")
    )
    ours = reason.startswith(MARK) or by_prolog
    drained = "DRAIN" in state
    failed = 1 if prolog else 0  # only failed checks get here in --prolog
    if report.failed:
        name, detail = report.failed[0]
        more = f" (+{len(report.failed) - 1} more)" if len(report.failed) > 1 else ""
        text = f"{MARK} {name}: {detail}{more}".replace('"', "'")[:250]
        if drained and not ours:
            print(f"node_health: {node} is drained by someone else ({reason}); left as it is")
            return failed
        if prolog:  # Slurm drains it again as "Prolog error" after this exits 1
            set_prolog_drain(cfg, True)
        if drained and reason.split(" [")[0] == text:
            return failed
        cmd = [cfg["scontrol"], "update", f"NodeName={node}", "State=DRAIN", f"Reason={text}"]
        action = f"drained {node}: {text}"
    elif drained and ours:
        cmd = [cfg["scontrol"], "update", f"NodeName={node}", "State=RESUME"]
        action = f"resumed {node} (was: {reason})"
        set_prolog_drain(cfg, False)
    else:
        return 0
    rc, out = run(cmd, 30)
    if rc != 0:
        print(f"node_health: {' '.join(cmd[1:])} failed: {out.strip()}", file=sys.stderr)
        return 1
    print(f"node_health: {action}")
    return failed


def load_config(path: str) -> dict[str, Any]:
    cfg = dict(DEFAULTS)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            given = json.load(fh)
        if not isinstance(given, dict):
            raise ValueError("not a JSON object")
        cfg.update(given)
    return cfg


def evaluate(cfg: dict[str, Any], with_dcgm: bool = False) -> Report:
    report = Report()
    environment(cfg, report)
    mpi_user(cfg, report)
    disk(cfg, report)
    load(cfg, report)
    if gpus(cfg, report) or int(cfg["gpus"] or 0) > 0:
        xids(cfg, report)
        fabric_manager(cfg, report)
    rdma(cfg, report)
    if with_dcgm:
        dcgm(cfg, report)
    return report


def main(argv: list[str]) -> int:
    path, as_json, ack, in_slurm = "/etc/mpictl/health.json", False, False, False
    prolog = with_dcgm = False
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--json":
            as_json = True
        elif arg == "--ack-xid":
            ack = True
        elif arg == "--slurm":
            in_slurm = True
        elif arg == "--prolog":
            prolog = True
        elif arg == "--dcgm":
            with_dcgm = True
        elif arg == "--config" and args:
            path = args.pop(0)
        else:
            print(f"node_health: unknown argument {arg!r}", file=sys.stderr)
            return 2
    try:
        cfg = load_config(path)
    except (OSError, ValueError) as exc:
        print(f"node_health: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    if ack:
        return ack_xid(cfg)
    report = evaluate(cfg, with_dcgm)
    if in_slurm or prolog:
        return slurm(cfg, report, prolog)
    if as_json:
        print(json.dumps({"failed": report.failed, "warnings": report.warnings,
                          "passed": report.passed}))  # fmt: skip
    else:
        for name, detail in report.failed:
            print(f"{name}: {detail}")
        for name, why in report.warnings:
            print(f"warning: {name}: {why}")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
