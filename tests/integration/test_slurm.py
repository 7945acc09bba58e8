"""Slurm (issue 14) on the provisioned 3-node sandbox, whose nodes boot systemd: the scheduler
the slurm role set up, and mpictl's jobs through it (``--launcher slurm``), through the real CLI.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import time
from pathlib import Path
from typing import Any

from mpictl import jobs
from mpictl.inventory import Cluster
from tests.integration.conftest import provision_run
from tests.integration.nodes import ssh, ssh_mpi
from tests.integration.test_jobs import (
    TF_CONFIG_SCRIPT,
    VENV_PY,
    assert_tf_configs,
    job_id_of,
    leftovers,
    mpictl,
)

ALLREDUCE = "from mpi4py import MPI; c = MPI.COMM_WORLD; print('sum', c.allreduce(c.rank + 1))"


def sinfo_nodes(cluster: Cluster) -> dict[str, dict[str, str]]:
    """node -> {state, cpus, memory} as sinfo reports them."""
    proc = ssh_mpi(cluster.head, "sinfo -N -h -o '%N %T %c %m'")
    assert proc.returncode == 0, proc.stderr
    out = {}
    for line in proc.stdout.splitlines():
        name, state, cpus, memory = line.split()
        out[name] = {"state": state, "cpus": cpus, "memory": memory}
    return out


def test_sinfo_lists_every_node_idle_with_the_cpus_and_memory_of_its_facts(
    cluster: Cluster,
) -> None:
    nodes = sinfo_nodes(cluster)
    assert sorted(nodes) == sorted(cluster.names)
    for node in cluster.nodes:
        facts: dict[str, Any] = node.facts or {}
        assert nodes[node.name]["state"] == "idle", nodes
        assert nodes[node.name]["cpus"] == str(facts["ansible_processor_vcpus"]), nodes
        assert nodes[node.name]["memory"] == str(facts["ansible_memtotal_mb"]), nodes


def test_srun_pmix_runs_openmpi_ranks_directly(cluster: Cluster) -> None:
    proc = ssh_mpi(
        cluster.head, f'srun --mpi=pmix -N3 --ntasks-per-node=1 {VENV_PY} -c "{ALLREDUCE}"'
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n").count("sum 6") == 3, proc.stdout


def test_every_node_runs_the_slurm_release_the_role_built(
    cluster: Cluster, source_vars: dict[str, Any]
) -> None:
    """One supported release everywhere, from the role's build (not a distribution's package):
    the release the tests build (the vendored 26.05.3, scripts/fetch-test-sources.sh), which is
    not the role's default (26.05.5, whose source cannot be fetched where the tests run)."""
    want = source_vars["slurm_version"]
    for node in cluster.nodes:
        proc = ssh(
            node,
            "command -v sinfo; sinfo --version;"
            " dpkg-query -W -f '${db:Status-Status} ${Package}\\n' slurmd slurmctld slurm-client"
            " 2>/dev/null | grep '^installed ' || true",
        )
        assert proc.returncode == 0, proc.stderr
        # exactly these two lines: no Debian Slurm package beside the build
        assert proc.stdout.splitlines() == ["/usr/local/bin/sinfo", f"slurm {want}"], (
            node.name,
            proc.stdout,
        )


def journal_lines(cluster: Cluster, tag: str, word: str, want: int) -> dict[str, list[str]]:
    """node -> the lines of the node's journal with ``tag`` that hold ``word``, once every
    node has ``want`` of them (the epilog runs after srun returned), or after 30 s."""
    lines: dict[str, list[str]] = {}
    deadline = time.monotonic() + 30
    while True:
        for node in cluster.nodes:
            proc = ssh(
                node, f"journalctl -q -t {tag} -o cat --no-pager | grep -F -- {shlex.quote(word)}"
            )
            lines[node.name] = proc.stdout.splitlines()
        if all(len(v) >= want for v in lines.values()) or time.monotonic() > deadline:
            return lines
        time.sleep(1)


def test_every_job_leaves_a_start_and_an_end_line_in_each_nodes_journal(cluster: Cluster) -> None:
    # the slurm role's prolog and epilog (/etc/slurm/prolog.d, epilog.d: 00-mpictl-log)
    proc = ssh_mpi(cluster.head, "srun -N3 --ntasks-per-node=1 printenv SLURM_JOB_ID")
    assert proc.returncode == 0, proc.stderr
    (job,) = set(proc.stdout.split())
    lines = journal_lines(cluster, "slurm-job", f"job={job} ", 2)
    want = [f"job={job} user=mpi start", f"job={job} user=mpi end exit=0:0"]
    assert lines == dict.fromkeys(cluster.names, want), lines


def test_srun_and_its_ranks_share_openmpis_one_libpmix(cluster: Cluster) -> None:
    """Slurm's PMIx server (in slurmstepd, the ranks' parent) and the ranks' PMIx client map the
    same library file: the one of the cluster's OpenMPI. Read as root (slurmstepd's maps)."""
    script = (
        "import os\n"
        "from mpi4py import MPI\n"
        "def libs(pid):\n"
        "    return sorted({l.split()[-1] for l in open(f'/proc/{pid}/maps') if 'libpmix' in l})\n"
        "print('pmix', MPI.COMM_WORLD.rank, libs('self'), libs(os.getppid()))\n"
    )
    proc = ssh(
        cluster.head,
        f"cd /tmp && srun --mpi=pmix -N3 --ntasks-per-node=1 {VENV_PY} -c {shlex.quote(script)}",
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"^pmix (\d+) (\[.*\]) (\[.*\])$", line)
        if m:
            found[int(m.group(1))] = (ast.literal_eval(m.group(2)), ast.literal_eval(m.group(3)))
    assert sorted(found) == [0, 1, 2], proc.stdout
    for rank, (mine, parents) in found.items():
        assert mine == parents and len(mine) == 1, (rank, mine, parents)
        assert mine[0].startswith("/opt/openmpi/") and "/lib/libpmix.so" in mine[0], (rank, mine)


def test_a_limited_run_that_would_mix_slurm_releases_is_refused_before_any_node_changes(
    cluster: Cluster, source_vars: dict[str, Any]
) -> None:
    """Under --limit only the play's nodes would move to slurm_version: with the controller on
    another release the run stops in preflight, naming both, and changes nothing."""
    node3 = cluster.nodes[2]
    other = {**source_vars, "slurm_version": "26.05.2"}
    result = provision_run(cluster.source, other, limit=node3.name)
    assert not result.ok
    assert all(s.changed == 0 for s in result.stats.values()), result.stats
    msgs = [
        str(r.result.get("msg", ""))
        for r in result.task_results()
        if r.status == "failed" and not r.ignore_errors
    ]
    assert any(
        f"covers {node3.name} only (--limit)" in m
        and "install Slurm 26.05.2" in m
        and f"the controller {cluster.head.name} runs Slurm " in m
        for m in msgs
    ), msgs
    assert ssh(node3, "test -e /opt/slurm/26.05.2").returncode == 1


# OpenMPI 5.0.7's mpirun, with stdin at /dev/null as in every batch job, may push the EOF to
# rank 0 before it knows which daemon hosts that rank: PRRTE then logs this line (iof_hnp.c,
# push_stdin) and the job runs on unharmed. Seen once in CI; `mpirun --stdin none` avoids it.
_PRRTE_STDIN_RACE = re.compile(
    r"^\[[^\]]+\] PRTE ERROR: A message is attempting to be sent to a process whose contact"
    r" information is unknown in file iof_hnp\.c at line \d+$"
)


def test_mpirun_inside_an_allocation_uses_it_without_a_hostfile(cluster: Cluster) -> None:
    # sbatch --wait returns when the job ended; its output is on the batch host (the
    # allocation's first node), read over the cluster's SSH mesh. The ranks' stdout and
    # mpirun's stderr go to separate files: the hostnames are the ranks' answer.
    proc = ssh_mpi(
        cluster.head,
        "printf '%s\\n' '#!/bin/bash' 'mpirun --mca pml ob1 hostname' > $HOME/alloc.sbatch && "
        "sbatch --wait -N3 --ntasks-per-node=1 --output=$HOME/alloc.out --error=$HOME/alloc.err"
        " $HOME/alloc.sbatch >/dev/null && ssh -o BatchMode=yes "
        "$(scontrol show hostnames $(sinfo -h -o %N) | head -n1) "
        "'cat alloc.out; echo ---stderr---; cat alloc.err'",
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    out, _, err = proc.stdout.partition("---stderr---\n")
    assert sorted(set(out.split())) == sorted(cluster.names), proc.stdout
    unexpected = [line for line in err.splitlines() if line and not _PRRTE_STDIN_RACE.match(line)]
    assert not unexpected, err


def test_smoke_through_slurm_passes_with_ranks_on_three_nodes(cluster: Cluster) -> None:
    proc = mpictl(
        "smoke", "-i", str(cluster.source), "--suite", "mpi", "--launcher", "slurm", "--json"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    results = [r for r in report["results"] if not r.get("skipped")]
    assert results and all(r["ok"] for r in results), results
    assert all(set(r["hosts"]) >= set(cluster.names) for r in results if r["hosts"]), results


def test_run_through_slurm_streams_and_returns_the_jobs_exit_code(cluster: Cluster) -> None:
    ok = mpictl(
        "run",
        "-i",
        str(cluster.source),
        "--launcher",
        "slurm",
        "--ppn",
        "1",
        "--torch",
        "--",
        "sh",
        "-c",
        'echo "rank=$RANK of $WORLD_SIZE local=$LOCAL_RANK master=$MASTER_ADDR"',
    )
    assert ok.returncode == 0, ok.stderr
    lines = sorted(re.sub(r"^\s*\d+: ", "", ln) for ln in ok.stdout.splitlines())
    head = cluster.nodes[0].address
    assert lines == [f"rank={r} of 3 local=0 master={head}" for r in range(3)], ok.stdout
    record = jobs.load(job_id_of(ok.stderr))
    assert record.status == jobs.SUCCEEDED and record.extra["slurm"]["nodes"] == cluster.names
    bad = mpictl(
        "run",
        "-i",
        str(cluster.source),
        "--launcher",
        "slurm",
        "-np",
        "1",
        "--",
        "sh",
        "-c",
        "exit 7",
    )
    assert bad.returncode == 7, bad.stderr


def test_run_tf_through_slurm_builds_the_worker_list_from_the_ranks_srun_started(
    cluster: Cluster,
) -> None:
    proc = mpictl(
        "run", "-i", str(cluster.source), "--launcher", "slurm", "--ppn", "1", "--tf", "--",
        VENV_PY, "-c", TF_CONFIG_SCRIPT.replace("OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = [
        json.loads(line[line.index("{") :]) for line in proc.stdout.splitlines() if "{" in line
    ]
    assert_tf_configs(records, len(cluster.nodes), 1)


def test_jobs_cancel_ends_a_running_slurm_job_everywhere(cluster: Cluster) -> None:
    proc = mpictl(
        "run",
        "-i",
        str(cluster.source),
        "--launcher",
        "slurm",
        "--ppn",
        "1",
        "--detach",
        "--",
        "sleep",
        "300",
    )
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip()
    slurm_id = jobs.load(job_id).extra["slurm"]["id"]
    deadline = time.monotonic() + 60
    while "running" not in mpictl("jobs", "list", "--json").stdout:
        assert time.monotonic() < deadline
        time.sleep(1)
    cancel = mpictl("jobs", "cancel", job_id)
    assert cancel.returncode == 0, cancel.stderr
    assert jobs.load(job_id).status == jobs.CANCELLED
    squeue = ssh_mpi(cluster.head, f"squeue -h -j {slurm_id} 2>/dev/null; true")
    assert squeue.stdout.strip() == ""
    assert leftovers(cluster, job_id) == {}
    for node in cluster.nodes:
        assert ssh(node, "pgrep -u mpi -x sleep").stdout.strip() == "", node.name


def test_slurmd_stopped_on_node2_fails_doctor_and_provision_restarts_it(
    cluster: Cluster, source_vars: dict[str, Any]
) -> None:
    node2 = cluster.nodes[1]
    assert ssh(node2, "systemctl stop slurmd").returncode == 0
    doctor = mpictl("doctor", "-i", str(cluster.source), "--json")
    assert doctor.returncode != 0
    failed = [c for c in json.loads(doctor.stdout)["checks"] if c["result"] != "ok"]
    assert failed and {c["node"] for c in failed} == {node2.name}, failed
    fixed = provision_run(cluster.source, source_vars, tags="slurm")
    assert fixed.ok, fixed.stats
    assert ssh(node2, "systemctl is-active slurmd").stdout.strip() == "active"
    again = provision_run(cluster.source, source_vars, tags="slurm")
    assert again.ok and all(s.changed == 0 for s in again.stats.values()), again.stats


def test_launcher_slurm_on_a_cluster_without_slurm_and_an_unknown_launcher(
    cluster: Cluster,
) -> None:
    nosuch = mpictl("run", "-i", str(cluster.source), "--launcher", "nosuch", "--", "true")
    assert nosuch.returncode == 2
    assert nosuch.stderr.strip().splitlines()[-1].endswith("choose one of mpirun, slurm")
    head = cluster.head
    moved = "for b in sbatch scontrol; do mv /usr/local/bin/$b /usr/local/bin/$b.off; done"
    back = "for b in sbatch scontrol; do mv /usr/local/bin/$b.off /usr/local/bin/$b; done"
    assert ssh(head, moved).returncode == 0
    try:
        proc = mpictl("run", "-i", str(cluster.source), "--launcher", "slurm", "--", "true")
        assert proc.returncode != 0
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "slurm_enabled: true" in proc.stderr
    finally:
        assert ssh(head, back).returncode == 0


def wait_for(what: str, probe: Any, timeout: float = 90, every: float = 3) -> Any:
    """Call ``probe`` until it returns something true; the last value (or fail naming ``what``)."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got or time.monotonic() > deadline:
            assert got, f"{what}: not within {timeout:g} s"
            return got
        time.sleep(every)


def node_line(cluster: Cluster, name: str) -> str:
    """sinfo's state and reason of one node: 'STATE REASON'."""
    proc = ssh_mpi(cluster.head, f"sinfo -N -h -n {name} -o '%T %E'")
    return proc.stdout.strip()


def test_a_node_failing_its_health_check_is_drained_with_the_check_and_resumed(
    cluster: Cluster, source_vars: dict[str, Any]
) -> None:
    # issue 27: Slurm runs the health program every 5 s here (300 s by default)
    node2, node3 = cluster.nodes[1], cluster.nodes[2]
    fast = {**source_vars, "slurm_health_check_interval": 5}
    on = provision_run(cluster.source, fast, tags="health,slurm")
    assert on.ok, on.stats
    hostfile = "/etc/mpictl/hostfile"
    try:
        assert ssh(node2, f"mv {hostfile} {hostfile}.away").returncode == 0
        line = wait_for(
            "node2 drained",
            lambda: (lambda s: s if s.startswith("drain") else "")(node_line(cluster, node2.name)),
        )
        assert line.split(" ", 1)[1] == (
            f"mpictl-health: environment: the hostfile {hostfile} is missing"
        ), line
        # a job pinned to the drained node waits, and says why
        sub = ssh_mpi(cluster.head, f"sbatch --parsable -w {node2.name} --wrap true")
        assert sub.returncode == 0, sub.stderr
        slurm_id = sub.stdout.strip().split(";")[0]
        time.sleep(3)
        queued = ssh_mpi(cluster.head, f"squeue -h -j {slurm_id} -o '%T %r'").stdout.split()
        assert queued[0] == "PENDING" and "ReqNodeNotAvail" in queued[1], queued
        ssh_mpi(cluster.head, f"scancel {slurm_id}")
        # repaired: resumed by the next check
        assert ssh(node2, f"mv {hostfile}.away {hostfile}").returncode == 0
        wait_for("node2 resumed", lambda: node_line(cluster, node2.name).startswith("idle"))
        # a drain an operator set is never resumed by the checks (which pass on node3)
        reason = "operator: new DIMM on Friday"
        drain = f"scontrol update NodeName={node3.name} State=DRAIN Reason='{reason}'"
        assert ssh(node3, drain).returncode == 0
        time.sleep(13)  # two intervals and more
        assert node_line(cluster, node3.name) == f"drained {reason}"
    finally:
        ssh(node2, f"test -e {hostfile} || mv {hostfile}.away {hostfile}")
        ssh(node3, f"scontrol update NodeName={node3.name} State=RESUME")
        off = provision_run(cluster.source, source_vars, tags="health,slurm")
        assert off.ok, off.stats
    assert node_line(cluster, node3.name).startswith("idle")


def test_with_the_prolog_a_job_never_starts_on_a_failing_node(
    cluster: Cluster, source_vars: dict[str, Any]
) -> None:
    # issue 27: slurm_health_prolog; the periodic check hourly here, so only the prolog sees
    # the node break, and the test runs the periodic check itself after the repair
    node2 = cluster.nodes[1]
    # (cred_expire: how long Slurm holds a requeued job back, CredExpire + 1 s: 121 s by
    # default, 11 s here; the run that turns the prolog on and off again sets and drops it too)
    prolog = {**source_vars, "slurm_health_prolog": True, "slurm_health_check_interval": 3600,
              "slurm_config_extra": {"AuthInfo": "cred_expire=10"}}  # fmt: skip
    on = provision_run(cluster.source, prolog, tags="health,slurm")
    assert on.ok, on.stats
    hostfile = "/etc/mpictl/hostfile"
    marker = "/tmp/mpictl-prolog-test-ran"
    try:
        ssh(node2, f"rm -f {marker}")
        assert ssh(node2, f"mv {hostfile} {hostfile}.away").returncode == 0
        sub = ssh_mpi(cluster.head, f"sbatch --parsable -w {node2.name} --wrap 'touch {marker}'")
        assert sub.returncode == 0, sub.stderr
        slurm_id = sub.stdout.strip().split(";")[0]
        line = wait_for(
            "node2 drained by the prolog",
            lambda: (lambda s: s if s.startswith("drain") else "")(node_line(cluster, node2.name)),
        )
        assert "Prolog error" in line or "mpictl-health: environment: the hostfile" in line, line
        queued = ssh_mpi(cluster.head, f"squeue -h -j {slurm_id} -o '%T %r'").stdout.split()
        assert queued[0] == "PENDING" and "Held" not in queued[1], queued  # requeued, not held
        assert ssh(node2, f"test -e {marker}").returncode != 0
        # repaired: the next health check (run here by hand) resumes the node, and the job runs
        assert ssh(node2, f"mv {hostfile}.away {hostfile}").returncode == 0
        assert ssh(node2, "/opt/mpictl/sbin/mpictl-health-slurm").returncode == 0
        # Slurm holds a requeued job back for CredExpire + 1 s (11 s here)
        wait_for(
            "the job done",
            lambda: ssh(node2, f"test -e {marker}").returncode == 0,
            timeout=120,
            every=2,
        )
        assert node_line(cluster, node2.name).startswith(("idle", "mixed", "allocated")), node_line(
            cluster, node2.name
        )
    finally:
        ssh(node2, f"test -e {hostfile} || mv {hostfile}.away {hostfile}; rm -f {marker}")
        ssh(node2, f"scontrol update NodeName={node2.name} State=RESUME")
        off = provision_run(cluster.source, source_vars, tags="health,slurm")
        assert off.ok, off.stats


def test_a_node_left_out_of_the_inventory_loses_slurm_with_the_key_it_kept(
    cluster: Cluster, source_vars: dict[str, Any], tmp_path: Path
) -> None:
    # issue 26: a removed node kept the cluster's munge key and could still ask Slurm anything;
    # the run that takes it out replaces the key on the nodes that stay
    from mpictl import runner
    from tests.integration.conftest import without_the_last_node

    gone = cluster.nodes[-1]
    ask = "timeout 30 sinfo -h -N -o %N"
    before = ssh_mpi(gone, ask, timeout=60)
    assert before.returncode == 0 and gone.name in before.stdout.split(), before.stderr
    key_sha = "sha256sum /etc/munge/munge.key | cut -d' ' -f1"
    old = ssh(gone, key_sha).stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{64}", old), old
    smaller = without_the_last_node(tmp_path / "inv2")
    try:
        result = provision_run(smaller, source_vars, tags="ssh,slurm")
        assert result.ok, result.stats
        said = [
            str(e["event_data"]["res"].get("msg", ""))
            for e in result.events
            if e.get("event") in runner.RESULT_EVENTS
            and e["event_data"].get("task")
            == "Say that the munge key is replaced on every node, and what that does to jobs"
        ]
        assert said and said[0].startswith(f"WARNING: {gone.name} left the cluster"), said
        stay = cluster.nodes[:-1]
        new = {ssh(n, key_sha).stdout.strip() for n in stay}
        assert len(new) == 1 and old not in new, (old, new)
        assert sorted(sinfo_nodes(cluster)) == [n.name for n in stay]
        # what node3 kept no longer authenticates to slurmctld
        kept = ssh_mpi(gone, ask, timeout=60)
        # slurmctld drops a request whose munge credential it cannot decode
        assert kept.returncode == 1, (kept.returncode, kept.stdout, kept.stderr)
        assert re.search(r"Zero Bytes were transmitted|authentication", kept.stderr), kept.stderr
    finally:
        back = provision_run(cluster.source, source_vars, tags="ssh,slurm")
    assert back.ok, back.stats
    assert len({ssh(n, key_sha).stdout.strip() for n in cluster.nodes}) == 1
    wait_for(
        "every node idle in Slurm again",
        lambda: (
            all(v["state"] == "idle" for v in sinfo_nodes(cluster).values())
            and sorted(sinfo_nodes(cluster)) == sorted(cluster.names)
        ),
        timeout=120,
    )
