"""Issue 3 on the session's 3-node sandbox: SSH mesh, /etc/environment, hostfile.

- every node reaches every node as the MPI user (BatchMode, StrictHostKeyChecking=yes), by
  inventory name and by IP;
- a non-interactive ``ssh nodeB env`` shows the directories other roles contribute;
- login shells (``bash -l``, ``sh -l``, nested, ``su -``, ``sudo -i``, an interactive SSH login)
  find the same mpirun and venv python, with the contributed directories once each, in order;
- a second provision changes nothing in these roles;
- a node whose host key changed is refused, and re-provisioning recovers;
- each node has its own key pair; a node left out of the inventory can no longer log in to the
  others (issue 26), and comes back with the inventory;
- the private key never appears in any output or runner artifact; file modes; the host key
  policy is never ``no`` unless asked;
- bad variables fail with a one-line message before any node is touched.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mpictl import paths, provision, runner, settings
from mpictl.inventory import Cluster, Node
from tests.integration.conftest import describe_failures
from tests.integration.nodes import cluster_key, load, ssh, ssh_base, ssh_mpi

ROLES = ("ssh_mesh", "mpi_environment", "hostfile")
DUMMY_PLAY = Path(__file__).parent / "playbooks" / "contribute_dummy.yml"
DUMMY_BIN = "/opt/mpictl-it-dummy/bin"
DUMMY_LIB = "/opt/mpictl-it-dummy/lib"
# Files whose content must not move when a bad variable is rejected.
WATCHED = (
    "/etc/environment",
    "/etc/ssh/ssh_known_hosts",
    "/home/mpi/.ssh/config",
    "/etc/mpictl/hostfile",
    "/etc/ld.so.conf.d/mpictl.conf",
)


@pytest.fixture(scope="module")
def cluster(first_provision: runner.RunResult, inventory: Path) -> Cluster:
    return load(inventory)


@pytest.fixture(scope="module")
def ips(inventory: Path) -> dict[str, str]:
    """Each node's address on the cluster network (sandbox_ip)."""
    from mpictl import sandbox

    return {n.name: n.ip for n in sandbox.read_sandbox(inventory).nodes}


def root(node: Node, command: str) -> str:
    proc = ssh(node, command)
    assert proc.returncode == 0, f"{node.name}: {command}: {proc.stderr.strip()}"
    return proc.stdout


def mesh_report(src: Node, targets: list[str]) -> dict[str, str]:
    """From ``src``, as the MPI user: ssh to each target with pinned keys; target → OK/FAIL+err."""
    script = "; ".join(
        f"if out=$(ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=10 "
        f"{shlex.quote(t)} true 2>&1); then echo 'OK {t}'; "
        f"else printf 'FAIL {t} %s\\n' \"$(printf '%s' \"$out\" | tr '\\r\\n' '  ')\"; fi"
        for t in targets
    )
    proc = ssh_mpi(src, script)
    assert proc.returncode == 0, proc.stderr
    report = {}
    for line in proc.stdout.splitlines():
        status, target, *rest = line.split(" ", 2)
        if status in ("OK", "FAIL"):
            report[target] = status + (" " + rest[0] if rest else "")
    return report


def targets_of(cluster: Cluster, ips: dict[str, str]) -> list[str]:
    return [n.name for n in cluster.nodes] + [ips[n.name] for n in cluster.nodes]


def role_of(task: runner.TaskResult, result: runner.RunResult) -> str:
    for event in result.events:
        data = event.get("event_data", {})
        if data.get("task") == task.task and data.get("host") == task.host and data.get("role"):
            return str(data["role"])
    return ""


def watched_checksums(cluster: Cluster) -> dict[str, str]:
    files = " ".join(WATCHED)
    return {
        n.name: hashlib.sha256(root(n, f"cat {files} 2>/dev/null; id mpi").encode()).hexdigest()
        for n in cluster.nodes
    }


def test_every_node_reaches_every_node_as_the_mpi_user(
    cluster: Cluster, ips: dict[str, str]
) -> None:
    targets = targets_of(cluster, ips)
    for src in cluster.nodes:
        report = mesh_report(src, targets)
        assert report == {t: "OK" for t in targets}, f"from {src.name}: {report}"


def test_mpi_user_files_and_modes(cluster: Cluster) -> None:
    uids = set()
    for node in cluster.nodes:
        out = root(
            node,
            "stat -c '%n %a %U' /home/mpi/.ssh /home/mpi/.ssh/id_ed25519 "
            "/home/mpi/.ssh/authorized_keys /home/mpi/.ssh/config /etc/ssh/ssh_known_hosts "
            "/etc/mpictl/hostfile; id -u mpi",
        ).split("\n")
        modes = dict((line.split(" ", 1)[0], line.split(" ", 1)[1]) for line in out[:6])
        assert modes == {
            "/home/mpi/.ssh": "700 mpi",
            "/home/mpi/.ssh/id_ed25519": "600 mpi",
            "/home/mpi/.ssh/authorized_keys": "600 mpi",
            "/home/mpi/.ssh/config": "600 mpi",
            "/etc/ssh/ssh_known_hosts": "644 root",
            "/etc/mpictl/hostfile": "644 root",
        }
        uids.add(out[6])
        config = root(node, "cat /home/mpi/.ssh/config")
        assert "StrictHostKeyChecking yes" in config
        assert "StrictHostKeyChecking no" not in config
        assert "/dev/null" not in config
    assert len(uids) == 1
    assert (cluster_key().stat().st_mode & 0o777) == 0o600


def test_known_hosts_pins_every_name_and_address(cluster: Cluster, ips: dict[str, str]) -> None:
    known = root(cluster.nodes[0], "cat /etc/ssh/ssh_known_hosts")
    for node in cluster.nodes:
        keys = root(node, "cat /etc/ssh/ssh_host_*_key.pub").split("\n")
        for key in filter(None, keys):
            key_type, blob = key.split()[:2]
            line = next(ln for ln in known.splitlines() if f" {key_type} {blob}" in ln)
            names = line.split(" ", 1)[0].split(",")
            assert node.name in names and ips[node.name] in names
            assert line.endswith(f" {key_type} {blob}"), line  # the key's comment left out


def test_hostfile_is_the_cli_hostfile(cluster: Cluster, inventory: Path) -> None:
    from mpictl.hostfile import entries_for_cluster, render

    expected = render(entries_for_cluster(load(inventory)), "openmpi")
    for node in cluster.nodes:
        text = root(node, "cat /etc/mpictl/hostfile")
        assert text.startswith("#") and "Ansible managed" in text
        body = "".join(ln + "\n" for ln in text.splitlines() if not ln.startswith("#"))
        assert body == expected


def test_non_interactive_ssh_sees_contributed_directories(
    cluster: Cluster, inventory: Path
) -> None:
    a, b = cluster.nodes[0], cluster.nodes[1]
    # A line of the site's own in /etc/environment: the role must leave it as it is.
    root(b, "echo MPICTL_IT_KEEP=kept >> /etc/environment")
    result = runner.run_playbook(DUMMY_PLAY, inventory)
    assert result.ok, describe_failures(result)
    assert "MPICTL_IT_KEEP=kept" in root(b, "cat /etc/environment").splitlines()
    proc = ssh_mpi(a, f"ssh -o BatchMode=yes {b.name} env")
    assert proc.returncode == 0, proc.stderr
    env = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    path = env["PATH"].split(":")
    assert DUMMY_BIN in path and "/usr/bin" in path
    assert path.index(DUMMY_BIN) < path.index("/usr/bin")
    assert DUMMY_LIB in env["LD_LIBRARY_PATH"].split(":")
    assert env["MPICTL_IT_KEEP"] == "kept"
    # The linker sees it too, and the other lines of /etc/environment are untouched.
    assert DUMMY_LIB in root(b, "cat /etc/ld.so.conf.d/mpictl.conf").splitlines()
    # Re-running the contribution changes nothing.
    again = runner.run_playbook(DUMMY_PLAY, inventory)
    assert again.ok and not again.changed_tasks(), [t.task for t in again.changed_tasks()]
    root(b, "sed -i '/^MPICTL_IT_KEEP=/d' /etc/environment")


# --- login shells (issue 12, item 7) -------------------------------------------------------------

# Debian's /etc/profile resets PATH for every login shell; /etc/profile.d/mpictl.sh puts the
# contributed directories back. dash's `command -v` takes one name, hence two commands for sh.
WHICH_SH = "command -v mpirun; command -v python3"
BASE_DIRS = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}


def mpi_out(node: Node, command: str) -> list[str]:
    """Words of ``command``'s output, run on ``node`` as the MPI user (non-interactive SSH)."""
    proc = ssh_mpi(node, command)
    assert proc.returncode == 0, f"{node.name}: {command}: {proc.stderr.strip()}"
    return proc.stdout.split()


def env_of(text: str) -> dict[str, str]:
    return {
        k: v
        for k, v in (line.split("=", 1) for line in text.splitlines() if "=" in line)
        if k in ("PATH", "LD_LIBRARY_PATH")
    }


def test_login_shells_find_the_same_mpirun_and_venv_python(cluster: Cluster) -> None:
    venv_python = settings.for_cluster(cluster).venv + "/bin/python3"
    for node in cluster.nodes:
        plain = mpi_out(node, "command -v mpirun python3")
        assert len(plain) == 2 and plain[0].startswith("/opt/openmpi/"), (node.name, plain)
        assert plain[1] == venv_python, (node.name, plain)
        assert mpi_out(node, "bash -lc 'command -v mpirun python3'") == plain, node.name
        assert mpi_out(node, f"sh -lc '{WHICH_SH}'") == plain, node.name
        assert mpi_out(node, f"bash -lc \"bash -lc '{WHICH_SH}'\"") == plain, node.name
        # as root: su - and sudo -i start the MPI user's login shell
        assert root(node, f"su - mpi -c '{WHICH_SH}'").split() == plain, node.name
        assert root(node, "su - mpi -s /bin/sh -c 'command -v mpirun'").split() == plain[:1]
        assert root(node, "sudo -i -u mpi command -v mpirun").split() == plain[:1], node.name


def test_login_shells_from_another_node_and_an_interactive_login(cluster: Cluster) -> None:
    """What issue 12 measured: `ssh node2 "bash -lc 'command -v mpirun'"` from the head, and an
    interactive login (a terminal, no command) as the MPI user."""
    head = cluster.nodes[0]
    for node in cluster.nodes[1:]:
        plain = mpi_out(head, f"ssh -o BatchMode=yes {node.name} 'command -v mpirun python3'")
        login = mpi_out(
            head, f"ssh -o BatchMode=yes {node.name} \"bash -lc 'command -v mpirun python3'\""
        )
        assert login == plain and len(plain) == 2, (node.name, plain, login)
        argv = ssh_base(node, "mpi", str(cluster_key()))
        proc = subprocess.run(
            [*argv[:-1], "-tt", argv[-1]],
            input='echo "@@$(command -v mpirun)@@$(command -v python3)@@"; exit\n',
            capture_output=True,
            text=True,
            timeout=120,
        )
        found = re.search(r"@@(/[^@\s]*)@@(/[^@\s]*)@@", proc.stdout)
        assert found, (node.name, proc.stdout[-2000:], proc.stderr[-500:])
        assert list(found.groups()) == plain, node.name


@pytest.mark.parametrize("shell", ["bash -lc env", "sh -lc env", "bash -lc 'bash -lc env'"])
def test_login_shells_get_the_contributed_dirs_once_each_in_order(
    cluster: Cluster, shell: str
) -> None:
    for node in cluster.nodes:
        plain = ssh_mpi(node, "env")
        login = ssh_mpi(node, shell)
        assert plain.returncode == 0 and login.returncode == 0, (node.name, login.stderr)
        want, got = env_of(plain.stdout), env_of(login.stdout)
        contributed = [d for d in want["PATH"].split(":") if d not in BASE_DIRS]
        path = got["PATH"].split(":")
        assert len(path) == len(set(path)), (node.name, shell, got["PATH"])
        assert [d for d in path if d in contributed] == contributed, (node.name, got["PATH"])
        assert path.index(contributed[-1]) < path.index("/usr/bin"), (node.name, got["PATH"])
        assert got["LD_LIBRARY_PATH"] == want["LD_LIBRARY_PATH"], (node.name, shell)


def test_the_login_script_is_managed(cluster: Cluster) -> None:
    for node in cluster.nodes:
        out = root(
            node, "stat -c '%a %U' /etc/profile.d/mpictl.sh; head -n 2 /etc/profile.d/mpictl.sh"
        )
        assert out.splitlines() == ["644 root", "#", "# Ansible managed"], (node.name, out)


def test_second_provision_changes_nothing_in_these_roles(
    second_provision: runner.RunResult,
) -> None:
    changed = [
        (t.host, t.task)
        for t in second_provision.changed_tasks()
        if role_of(t, second_provision) in ROLES
    ]
    assert changed == []
    ran = {role_of(t, second_provision) for t in second_provision.task_results()}
    assert set(ROLES) <= ran


def test_private_key_never_in_output_or_artifacts(
    first_provision: runner.RunResult, cluster: Cluster
) -> None:
    # the controller's key, and each node's own, which never leaves its node
    keys = [cluster_key().read_text()] + [
        root(n, "cat /home/mpi/.ssh/id_ed25519") for n in cluster.nodes
    ]
    body = [
        line for key in keys for line in key.splitlines() if line and not line.startswith("-----")
    ]
    assert len(body) > len(keys)
    runs = paths.state_dir() / "runs"
    hits = []
    for f in runs.rglob("*"):
        if f.is_file():
            text = f.read_bytes().decode("utf-8", "replace")
            if any(chunk in text for chunk in body):
                hits.append(str(f))
    assert hits == []


def test_changed_host_key_is_refused_then_recovered(
    cluster: Cluster, inventory: Path, ips: dict[str, str]
) -> None:
    from mpictl import sandbox

    a, c = cluster.nodes[0], cluster.nodes[-1]
    # Reinstall-like event on node c: new host keys, sshd reloaded (SIGHUP re-reads them).
    root(
        c,
        'rm -f /etc/ssh/ssh_host_*; ssh-keygen -A >/dev/null; kill -HUP "$(cat /run/sshd.pid)"',
    )
    sandbox.up(inventory)  # the controller re-pins its own view (keys read through podman)
    report = mesh_report(a, [c.name, ips[c.name]])
    for target, status in report.items():
        assert status.startswith("FAIL"), f"{target}: {status}"
        assert "Host key verification failed" in status or "HOST IDENTIFICATION" in status

    _, result = provision.provision(inventory, playbook="ssh.yml")
    assert result.ok, describe_failures(result)
    targets = targets_of(cluster, ips)
    assert mesh_report(a, targets) == {t: "OK" for t in targets}


def test_a_node_left_out_of_the_inventory_can_no_longer_log_in_to_the_others(
    cluster: Cluster, inventory: Path, ips: dict[str, str], tmp_path: Path
) -> None:
    # issue 26: every node held the one cluster key, so a removed node kept a working login; now
    # each node has its own key pair and authorized_keys lists the inventory's nodes only
    from tests.integration.conftest import without_the_last_node

    keys = {
        n.name: root(n, "ssh-keygen -y -f /home/mpi/.ssh/id_ed25519").split()[1]
        for n in cluster.nodes
    }
    assert len(set(keys.values())) == len(keys), keys
    assert cluster_key().with_suffix(".pub").read_text().split()[1] not in keys.values()
    a, b, gone = cluster.nodes
    smaller = without_the_last_node(tmp_path / "inv2")
    try:
        _, result = provision.provision(smaller, playbook="ssh.yml")
        assert result.ok, describe_failures(result)
        assert keys[gone.name] not in root(a, "cat /home/mpi/.ssh/authorized_keys")
        # what node3 kept (its key, its known_hosts) no longer logs in; the others still do
        report = mesh_report(gone, [a.name, b.name, ips[a.name]])
        for target, status in report.items():
            assert status.startswith("FAIL") and "Permission denied" in status, (target, status)
        assert mesh_report(a, [b.name, ips[b.name]]) == {b.name: "OK", ips[b.name]: "OK"}
    finally:
        _, back = provision.provision(inventory, playbook="ssh.yml")
    assert back.ok, describe_failures(back)
    targets = targets_of(cluster, ips)
    assert mesh_report(gone, targets) == {t: "OK" for t in targets}


def test_doctor_names_a_node_whose_key_another_node_does_not_admit(
    cluster: Cluster, inventory: Path
) -> None:
    """As after `--limit node3` on a node whose MPI user got a new key pair (its home wiped): the
    other nodes' authorized_keys, which only a run over every node rewrites, lack its key."""
    a, _, stale = cluster.nodes
    path = "/home/mpi/.ssh/authorized_keys"
    key = root(stale, "ssh-keygen -y -f /home/mpi/.ssh/id_ed25519").split()[1]
    root(a, f"cp -p {path} {path}.keep && grep -vF {shlex.quote(key)} {path}.keep > {path}")
    try:
        doctor = subprocess.run(
            [sys.executable, "-m", "mpictl", "doctor", "-i", str(inventory), "--json"],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
    finally:
        root(a, f"cp -p {path}.keep {path} && rm {path}.keep")
    checks = [c for c in json.loads(doctor.stdout)["checks"] if c["check"] == "node keys"]
    assert doctor.returncode == 1 and [(c["node"], c["ok"]) for c in checks] == [
        (stale.name, False)
    ], doctor.stdout
    assert f"authorized_keys on {a.name}:" in checks[0]["detail"], checks
    assert "over every node" in checks[0]["fix"]
    again = subprocess.run(
        [sys.executable, "-m", "mpictl", "doctor", "-i", str(inventory), "--json"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    checks = [c for c in json.loads(again.stdout)["checks"] if c["check"] == "node keys"]
    assert [(c["node"], c["ok"]) for c in checks] == [("all", True)], again.stdout


@pytest.mark.parametrize(
    ("extravars", "message"),
    [
        (
            {"mpi_ssh_strict_host_key_checking": "maybe"},
            "mpi_ssh_strict_host_key_checking",
        ),
        ({"mpi_user": "Bad User!"}, "mpi_user"),
        ({"mpi_env_extra_paths": ["opt/relative/bin"]}, "opt/relative/bin"),
        # roles that run after OpenMPI is installed: their settings are checked up front too
        ({"nccl_make_args": ["not a make variable"]}, "nccl_make_args"),
        (
            {"nccl_enabled": True, "nccl_cuda_home": "/nonexistent"},
            "no CUDA toolkit at /nonexistent",
        ),
        ({"horovod_gpu_operations": "MPI"}, "horovod_gpu_operations"),
    ],
)
def test_bad_variables_fail_before_any_node_changes(
    cluster: Cluster,
    inventory: Path,
    source_vars: dict[str, Any],
    extravars: dict[str, object],
    message: str,
) -> None:
    before = watched_checksums(cluster)
    # The playbooks on their own, as ansible-playbook runs them (mpictl provision refuses some of
    # these before Ansible starts: tests/unit/test_bad_input_inventory.py).
    result = runner.run_playbook(
        paths.playbook("site.yml"), inventory, extravars={**source_vars, **extravars}
    )
    assert not result.ok
    assert all(s.changed == 0 for s in result.stats.values()), result.stats
    failures = [t for t in result.task_results() if t.status == "failed"]
    assert failures
    msg = str(failures[0].result.get("msg", ""))
    assert message in msg and "\n" not in msg.strip(), msg
    assert watched_checksums(cluster) == before


def test_host_key_policy_modes_through_the_cli(cluster: Cluster, inventory: Path) -> None:
    """`no` (classic guides) and `accept-new` are honoured, `no` warns in mpictl's own output,
    and `yes` (the default) restores pinned-only checking. The key never reaches the output."""
    key_body = [ln for ln in cluster_key().read_text().splitlines() if not ln.startswith("-----")]
    targets = [n.name for n in cluster.nodes]
    for mode in ("no", "accept-new", "yes"):
        proc = subprocess.run(
            [sys.executable, "-m", "mpictl", "provision", "-i", str(inventory)]
            + ["--playbook", "ssh.yml", "-e", f"mpi_ssh_strict_host_key_checking={mode}"],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
        assert not any(chunk in proc.stdout + proc.stderr for chunk in key_body)
        warned = "WARNING: mpi_ssh_strict_host_key_checking=no" in proc.stdout
        assert warned == (mode == "no"), proc.stdout[-3000:]
        for node in cluster.nodes:
            config = root(node, "cat /home/mpi/.ssh/config")
            assert f"StrictHostKeyChecking {mode}\n" in config
            assert ("UserKnownHostsFile /dev/null" in config) == (mode == "no")
        assert mesh_report(cluster.nodes[0], targets) == {t: "OK" for t in targets}


def test_hostfile_playbook_alone_with_plain_ansible_playbook(
    cluster: Cluster, inventory: Path, tmp_path: Path
) -> None:
    """Ops teams run the playbooks without mpictl: `ansible-playbook` from the checkout, with no
    PYTHONPATH or ANSIBLE_CONFIG. hostfile.yml alone, on an inventory without mpi_slots, writes
    the slots `mpictl hostfile` derives from the same facts (its own validation play gathers
    them); then the original inventory's hostfile is restored the same way."""
    import shutil

    copy = tmp_path / "inventory"
    shutil.copytree(inventory, copy)
    group_vars = copy / "group_vars" / "all.yml"
    group_vars.write_text(group_vars.read_text().replace("\nmpi_slots: 1\n", "\n"))
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(Path.home()),
        "LANG": "C.UTF-8",
        "MPICTL_STATE_DIR": str(paths.state_dir()),
    }

    def ansible_playbook(inv: Path) -> None:
        proc = subprocess.run(
            ["ansible-playbook", "-i", str(inv), "playbooks/hostfile.yml"],
            cwd=paths.project_root(),
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]

    def on_nodes() -> set[str]:
        texts = {root(n, "cat /etc/mpictl/hostfile") for n in cluster.nodes}
        return {"".join(f"{ln}\n" for ln in t.splitlines() if ln[:1] != "#") for t in texts}

    ansible_playbook(copy)
    derived = subprocess.run(
        [sys.executable, "-m", "mpictl", "hostfile", "-i", str(copy)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    vcpus = load(copy).nodes[0].facts.get("ansible_processor_vcpus")
    assert derived.splitlines()[0] == f"node1 slots={vcpus}", derived
    assert on_nodes() == {derived}
    ansible_playbook(inventory)
    assert on_nodes() == {"node1 slots=1\nnode2 slots=1\nnode3 slots=1\n"}
