"""The cluster's short path: the node's record (playbooks/files/mpictl_node_state.py) and the
controller's digest of a run's inputs (filter_plugins/mpictl_state.py). A record that missed a
change would leave a drifted node unrepaired; one that saw changes where there are none would
make every re-run take the long path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.unit.loader import load

ROOT = Path(__file__).resolve().parents[2]


node = load("mpictl_node_state", ROOT / "playbooks" / "files" / "mpictl_node_state.py")
state = load("mpictl_state", ROOT / "filter_plugins" / "mpictl_state.py")
ENV = "env-digest"
# The controller's digest of each component's inputs (filter_plugins/mpictl_state.py).
NAMES = ("hostfile", "openmpi", "venv", "conf", "nccl", "jobs", "environment", "x", "y")
INPUTS = {name: f"inputs-of-{name}" for name in NAMES}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "prefix"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "mpirun").write_text("#!/bin/sh\n")
    (root / "lib" / "__pycache__").mkdir(parents=True)
    (root / "lib" / "libmpi.so").write_bytes(b"\x7fELF" * 100)
    (root / "etc.conf").write_text("a=1\n")
    return root


def record(tmp_path: Path, claims: dict[str, list[str]], keep: list[str] = ()) -> dict:
    path = tmp_path / "node-state.json"
    components = node.load(str(path))
    new = node.recorded(components, claims, list(keep), INPUTS, ENV, node.Signer())
    node.write(str(path), new)
    return node.load(str(path))


def converged(tmp_path: Path, inputs: dict[str, str] = INPUTS, env: str = ENV) -> list[str]:
    components = node.load(str(tmp_path / "node-state.json"))
    return node.converged(components, inputs, env, node.Signer())


def test_a_recorded_component_is_converged_until_its_tree_changes(
    tmp_path: Path, tree: Path
) -> None:
    record(tmp_path, {"openmpi": [f"tree:{tree}"], "hostfile": [f"path:{tree}/etc.conf"]})
    assert converged(tmp_path) == ["hostfile", "openmpi"]

    (tree / "bin" / "mpirun").unlink()
    assert converged(tmp_path) == ["hostfile"]


def test_tree_ignores_bytecode_and_directory_mtimes_but_not_files(
    tmp_path: Path, tree: Path
) -> None:
    record(tmp_path, {"venv": [f"tree:{tree}"]})
    (tree / "lib" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"pyc")
    (tree / "lib" / "stray.pyc").write_bytes(b"pyc")
    (tree / "lib" / "tmp").write_text("x")
    (tree / "lib" / "tmp").unlink()  # the directory's mtime moved; its listing did not
    assert converged(tmp_path) == ["venv"]

    (tree / "lib" / "new.py").write_text("")
    assert converged(tmp_path) == []


def test_path_signs_mode_and_content_of_small_files(tmp_path: Path, tree: Path) -> None:
    conf = tree / "etc.conf"
    record(tmp_path, {"env": [f"path:{conf}"]})
    conf.chmod(0o600)
    assert converged(tmp_path) == []
    conf.chmod(0o644)
    record(tmp_path, {"env": [f"path:{conf}"]})
    stat = conf.stat()
    conf.write_text("a=2\n")  # same size; even with the old mtime put back, the content differs
    os.utime(conf, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert converged(tmp_path) == []


def test_a_deleted_path_and_a_new_one_are_changes(tmp_path: Path, tree: Path) -> None:
    missing = tree / "later"
    record(tmp_path, {"nccl": [f"path:{missing}"], "conf": [f"path:{tree}/etc.conf"]})
    assert converged(tmp_path) == ["conf", "nccl"]
    missing.write_text("")
    (tree / "etc.conf").unlink()
    assert converged(tmp_path) == []


def test_other_inputs_or_environment_converge_nothing(tmp_path: Path, tree: Path) -> None:
    record(tmp_path, {"openmpi": [f"tree:{tree}"]})
    assert converged(tmp_path, inputs={name: "other" for name in NAMES}) == []
    assert converged(tmp_path, inputs={}) == []
    assert converged(tmp_path, env="other") == []


def test_inputs_are_compared_per_component(tmp_path: Path, tree: Path) -> None:
    record(tmp_path, {"openmpi": [f"tree:{tree}"], "hostfile": [f"path:{tree / 'etc.conf'}"]})
    # a variable only the hostfile reads changed: the other component stays converged
    assert converged(tmp_path, inputs={**INPUTS, "hostfile": "changed"}) == ["openmpi"]


def test_recording_keeps_a_drifted_component_that_did_not_run(tmp_path: Path, tree: Path) -> None:
    conf = tree / "etc.conf"
    record(tmp_path, {"jobs": [f"path:{conf}"], "openmpi": [f"tree:{tree / 'bin'}"]})
    conf.write_text("drifted, and this run only ran openmpi (--tags openmpi)\n")
    # jobs was not converged at the probe, so it is neither claimed nor kept: still drifted
    after = record(tmp_path, {"openmpi": [f"tree:{tree / 'bin'}"]}, keep=["openmpi"])
    assert set(after) == {"jobs", "openmpi"}
    assert converged(tmp_path) == ["openmpi"]


def test_a_kept_component_is_signed_again(tmp_path: Path, tree: Path) -> None:
    conf = tree / "etc.conf"
    record(tmp_path, {"environment": [f"path:{conf}"], "openmpi": [f"tree:{tree / 'bin'}"]})
    # environment was converged at the probe; openmpi's run rewrote the file they share
    conf.write_text("a=1\nb=2\n")
    record(tmp_path, {"openmpi": [f"tree:{tree / 'bin'}"]}, keep=["environment", "openmpi"])
    assert converged(tmp_path) == ["environment", "openmpi"]


def test_write_reports_whether_the_record_changed(tmp_path: Path, tree: Path) -> None:
    path = str(tmp_path / "sub" / "node-state.json")
    entry = {"x": {"inputs": INPUTS, "env": ENV, "signatures": {}}}
    assert node.write(path, entry) is True
    assert node.write(path, entry) is False
    assert json.loads(Path(path).read_text())["components"] == entry
    assert oct(Path(path).stat().st_mode & 0o777) == "0o600"


def test_an_unreadable_or_foreign_record_converges_nothing(tmp_path: Path) -> None:
    path = tmp_path / "node-state.json"
    for text in ("not json", "[]", '{"components": []}'):
        path.write_text(text)
        assert node.load(str(path)) == {}
    path.write_text(json.dumps({"components": {"x": "garbage", "y": {"inputs": INPUTS}}}))
    assert converged(tmp_path) == []


def test_unknown_kinds_are_refused() -> None:
    signer = node.Signer()
    for item in ("nokind", "file:/etc/passwd", "path:"):
        with pytest.raises(ValueError):
            signer.sign(item)


def test_users_and_packages_are_signed() -> None:
    signer = node.Signer()
    assert node.user_signature("root").startswith("0:0(root) /root ")
    assert node.user_signature("no-such-user-mpictl") == "absent"
    status = (
        "Package: iperf3\nStatus: install ok installed\nArchitecture: amd64\nVersion: 3.12-1\n\n"
        "Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2.36\n"
        "Description: x\n long text: with a colon\n\n"
        "Package: libc6\nStatus: install ok installed\nArchitecture: i386\nVersion: 2.36\n"
    )
    packages = node.dpkg_packages(status)
    assert packages["iperf3"] == "install ok installed 3.12-1"
    assert packages["libc6"].count("2.36") == 2
    assert signer.sign("package:no-such-package-mpictl") in ("absent", "")


def test_addresses_leave_out_lifetimes() -> None:
    out = (
        "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
        "2: eth0    inet 10.0.0.5/24 brd 10.0.0.255 scope global dynamic eth0\\"
        "       valid_lft 3599sec preferred_lft 3599sec\n"
    )
    later = out.replace("3599sec", "12sec")
    later += "2: eth0    inet6 2001:db8::5/64 scope global temporary dynamic \\  valid_lft 1sec\n"
    later += "7: veth1a2b@if6    inet6 fe80::1/64 scope link \\  valid_lft forever\n"
    assert node.addresses(out) == node.addresses(later) == ["eth0 10.0.0.5/24", "lo 127.0.0.1/8"]


# --- the controller's side -------------------------------------------------------------------


def test_inputs_digest_follows_variables_facts_content_and_key_files(tmp_path: Path) -> None:
    content = tmp_path / "content"
    for top in ("playbooks", "roles", "filter_plugins", "mpictl/scripts"):
        (content / top).mkdir(parents=True)
    (content / "roles" / "main.yml").write_text("a: 1\n")
    (content / "roles" / "molecule").mkdir()
    (content / "mpictl" / "__init__.py").write_text("")
    (content / "mpictl" / "scripts" / "smoke_mpi.py").write_text("print(1)\n")
    (content / "ansible.cfg").write_text("[defaults]\n")
    state_dir = tmp_path / "state"
    (state_dir / "cluster_ssh").mkdir(parents=True)
    key = state_dir / "cluster_ssh" / "id_ed25519"
    key.write_text("PRIVATE A\n")
    facts = {"processor_vcpus": 4, "memtotal_mb": 1000, "uptime_seconds": 5}
    common = {"mpictl_state_dir": str(state_dir), "ansible_facts": facts}
    hostvars = {
        "node1": {**common, "mpi_slots": 2, "ansible_host": "10.0.0.1"},
        "node2": {**common, "mpi_slots": 2, "ansible_host": "10.0.0.2"},
    }

    def digest(**changes: object) -> str:
        return state.mpictl_state_inputs(
            {**hostvars, **changes}, ["node2", "node1"], str(content / "playbooks")
        )["inputs"]

    base = digest()
    assert digest() == base
    # volatile facts, run-time internals, where the run reads from, the switch: not inputs
    quiet = {
        "node1": {
            **hostvars["node1"],
            "ansible_facts": {**facts, "uptime_seconds": 99, "mpi_gpu_count": 4},
            "mpi_gpu_count": 4,
            "ansible_distribution": "Debian",
            "_mpictl_checked": True,
            "__registered": {"rc": 0},
            "playbook_dir": "/elsewhere",
            "mpictl_short_path": False,
        }
    }
    assert digest(**quiet) == base
    assert digest(node1={**hostvars["node1"], "mpi_slots": 3}) != base
    assert digest(node1={**hostvars["node1"], "ansible_host": "10.0.0.9"}) != base
    resized = {**hostvars["node1"], "ansible_facts": {**facts, "memtotal_mb": 2000}}
    assert digest(node1=resized) != base  # slurm.conf and slots render from these facts
    (content / "roles" / "molecule" / "x.yml").write_text("ignored")
    assert digest() == base
    for path, text in (
        (content / "roles" / "main.yml", "a: 2\n"),
        (content / "mpictl" / "scripts" / "smoke_mpi.py", "print(2)\n"),
        (content / "ansible.cfg", "[defaults]\nforks = 5\n"),
        (key, "PRIVATE B\n"),
    ):
        before = digest()
        path.write_text(text)
        assert digest() != before, path


def test_the_end_of_a_run_digests_the_files_again_not_the_variables(tmp_path: Path) -> None:
    content = tmp_path / "content"
    (content / "playbooks").mkdir(parents=True)
    key = tmp_path / "munge.key"
    start = {"node1": {"slurm_munge_key_path": str(key), "mpi_slots": 1}}
    first = state.mpictl_state_inputs(start, ["node1"], str(content / "playbooks"))
    key.write_text("made by this run")
    # a role set a fact of its own during the run: the variables part is the run's first one
    end = {"node1": {**start["node1"], "build_once_result": {"needed": True}}}
    last = state.mpictl_state_inputs(end, ["node1"], str(content / "playbooks"), first["variables"])
    assert last["variables"] == first["variables"]
    assert last["inputs"] != first["inputs"]
    again = state.mpictl_state_inputs(start, ["node1"], str(content / "playbooks"))
    assert again == last  # the next run starts where this one ended


def test_the_package_beside_the_content_or_around_it(tmp_path: Path) -> None:
    assert state.package_dir(ROOT) == ROOT / "mpictl"  # a clone
    wheel = tmp_path / "site-packages" / "mpictl"
    (wheel / "_ansible").mkdir(parents=True)
    (wheel / "__init__.py").write_text("")
    assert state.package_dir(wheel / "_ansible") == wheel
    assert state.package_dir(tmp_path / "copied") is None  # never a walk of whatever is around


def test_claims_name_the_drop_in_directory_of_mpi_environment() -> None:
    defaults = yaml.safe_load((ROOT / "roles/mpi_environment/defaults/main.yml").read_text())
    for role in ("ucx", "ucc", "openmpi", "nccl", "nccl_tests", "mpi4py", "horovod"):
        text = (ROOT / "roles" / role / "vars" / "main.yml").read_text()
        # the role may run without mpi_environment's defaults loaded (its configure skipped)
        assert f"mpi_env_dropin_dir | default('{defaults['mpi_env_dropin_dir']}')" in text, role


def test_selected_components_follow_tags() -> None:
    comps = ["ssh", "openmpi", "nccl", "slurm"]
    select = state.mpictl_selected_components
    assert select(comps, ["all"], []) == comps
    assert select(comps, [], ["nccl"]) == ["ssh", "openmpi", "slurm"]
    assert select(comps, ["openmpi", "always"], []) == ["openmpi"]
    assert select(comps, ["all"], ["openmpi", "slurm"]) == ["ssh", "nccl"]
    assert select(comps, ["tagged"], []) == comps  # every component play is tagged
    assert select(comps, [], ["tagged"]) == []


def test_the_preflight_covers_what_the_running_components_build_against() -> None:
    deps = state.mpictl_with_dependencies
    assert deps(["ucc"]) == ["ucx", "ucc"]
    assert deps(["nccl_tests"]) == ["ucx", "ucc", "openmpi", "nccl", "nccl_tests"]
    assert deps(["containers"]) == ["ucx", "ucc", "openmpi", "slurm", "containers"]
    assert deps(["health", "jobs"]) == ["jobs", "health"]
    assert deps([]) == []


def test_converged_everywhere_is_what_every_node_holds() -> None:
    both = state.mpictl_converged_everywhere
    assert both([["ssh", "hostfile"], ["hostfile", "ssh", "jobs"]]) == ["hostfile", "ssh"]
    assert both([["ssh"], None]) == []
    assert both([]) == []
    # what builds against a component that runs runs too
    assert both([["mpi4py", "horovod", "nccl", "ssh"]]) == ["nccl", "ssh"]
    assert both([["ucx", "ucc", "openmpi", "mpi4py", "horovod"]]) == [
        "mpi4py", "openmpi", "ucc", "ucx",
    ]  # fmt: skip
    # OpenMPI's coll/ucc is built against UCC: UCC running runs OpenMPI too
    assert both([["ucx", "openmpi", "mpi4py"]]) == ["ucx"]
    # nccl-tests links against both NCCL and OpenMPI: either one running runs it too
    assert both([["ucx", "ucc", "openmpi", "nccl", "nccl_tests"]]) == [
        "nccl", "nccl_tests", "openmpi", "ucc", "ucx",
    ]  # fmt: skip
    assert both([["ucx", "ucc", "openmpi", "nccl_tests"]]) == ["openmpi", "ucc", "ucx"]
    assert both([["nccl", "nccl_tests"]]) == ["nccl"]
    # OpenMPI is built against UCX: UCX running runs OpenMPI and all that builds against it
    assert both([["openmpi", "mpi4py", "nccl", "nccl_tests", "horovod", "jobs"]]) == [
        "jobs", "nccl",
    ]  # fmt: skip
    assert both([["ucx", "nccl"], ["ucx", "nccl", "openmpi"]]) == ["nccl", "ucx"]


def test_dependencies_name_what_their_dependencies_build_against() -> None:
    """One level of DEPENDS is read: each list holds its dependencies' own (OpenMPI on UCX)."""
    for component, deps in state.DEPENDS.items():
        for dep in deps:
            missing = set(state.DEPENDS.get(dep, ())) - set(deps)
            assert not missing, f"{component} depends on {dep} but not on {sorted(missing)}"


def test_site_components_are_the_component_tags_of_site_yml() -> None:
    validate = yaml.safe_load((ROOT / "playbooks" / "validate.yml").read_text())
    task = validate[0]["tasks"][-1]["ansible.builtin.set_fact"]
    tags = []
    for entry in yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text()):
        for play in yaml.safe_load(
            (ROOT / "playbooks" / entry["ansible.builtin.import_playbook"]).read_text()
        ):
            tags += [t for t in play.get("tags", []) if t != "always"]
    assert task["_mpictl_components"] == tags


def test_every_component_play_has_no_node_on_the_short_path_and_claims_its_items() -> None:
    for entry in yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text()):
        for play in yaml.safe_load(
            (ROOT / "playbooks" / entry["ansible.builtin.import_playbook"]).read_text()
        ):
            tags = [t for t in play.get("tags", []) if t != "always"]
            if not tags or "import_playbook" in str(play):
                continue
            (component,) = tags
            assert play["hosts"] == (
                f"{{{{ [] if '{component}' in hostvars['localhost']._mpictl_converged"
                " | default([]) else 'mpi_nodes' }}"
            ), play["name"]
            first = play["tasks"][0]
            first = first["block"][0] if "block" in first else first  # nccl, horovod: rescued
            role = first["ansible.builtin.import_role"]["name"]
            claim = play["post_tasks"][-1]["ansible.builtin.set_fact"]["_mpictl_claims"]
            assert f"'{component}':" in claim, play["name"]
            claims_var = claim.split(f"'{component}': ")[1].split("}")[0]
            role_vars = yaml.safe_load((ROOT / "roles" / role / "vars" / "main.yml").read_text())
            assert claims_var in role_vars, (role, claims_var)


def test_the_probe_says_which_machine_it_ran_on(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "machine-id").write_text("0123abcd\n")
    (etc / "os-release").write_text('NAME="Debian GNU/Linux"\nID=debian\nVERSION_ID="12"\n')
    assert node.identity(str(etc)) == {"machine_id": "0123abcd", "os": "debian", "os_version": "12"}


def stale(cached: dict, probed: dict) -> list[str]:
    who = {"machine_id": "m1", "os": "debian", "os_version": "12"}
    answer = {"identity": {**who, **probed.get("identity", {})},
              "host_keys": probed.get("host_keys", ["ssh-ed25519 KEY1"])}  # fmt: skip
    facts = {"machine_id": "m1", "distribution": "Debian", "distribution_version": "12",
             "ssh_host_key_ed25519_public": "KEY1", **cached}  # fmt: skip
    hostvars = {"node1": {"ansible_facts": facts,
                          "__mpictl_node_state": {"stdout": json.dumps(answer)}}}  # fmt: skip
    return state.mpictl_stale_facts(["node1"], hostvars)


def test_cached_facts_of_another_machine_are_found() -> None:
    assert stale({}, {}) == []
    assert stale({"machine_id": "m0"}, {}) == ["node1"]  # re-imaged: a new machine id
    assert stale({"distribution_version": "11"}, {}) == ["node1"]  # upgraded in place
    assert stale({"distribution_version": "12.12"}, {}) == []  # Debian's point release: the same
    assert stale({"distribution_version": "11.9"}, {}) == ["node1"]
    assert stale({}, {"host_keys": ["ssh-ed25519 KEY2"]}) == ["node1"]  # another host key
    assert stale({"machine_id": ""}, {}) == []  # nothing cached: gathered fresh anyway


def test_each_component_digests_the_variables_it_reads() -> None:
    """A variable a role declares is in its component's digest, in the digests of the components
    whose roles name it and of those that build against it (DEPENDS); a cluster-wide one, and a
    role's that the shared playbooks or filters name, is in every digest."""
    base = {"mpi_slots": 2, "slurm_health_check_interval": 0, "ucx_enabled": "auto",
            "mpi_env_dropin_dir": "/etc/env.d", "horovod_extra_requirements": []}  # fmt: skip

    def changed(**values: object) -> list[str]:
        def inputs(node: dict[str, object]) -> dict[str, str]:
            got = state.mpictl_state_inputs({"node1": node}, ["node1"], str(ROOT / "playbooks"))
            return got["inputs"]

        before, after = inputs(base), inputs({**base, **values})
        assert sorted(before) == sorted(state.COMPONENT_ROLES)
        return sorted(c for c in before if before[c] != after[c])

    every = sorted(state.COMPONENT_ROLES)
    # the slurm role's, and the containers' (pyxis is built against that Slurm)
    assert changed(slurm_health_check_interval=10) == ["containers", "slurm"]
    assert changed(horovod_extra_requirements=["torchmetrics"]) == ["horovod"]
    # UCX's: all that builds against UCX (Slurm against OpenMPI's PMIx, pyxis against Slurm)
    assert changed(ucx_enabled="false") == [
        "containers", "horovod", "mpi4py", "nccl_tests", "openmpi", "slurm", "ucc", "ucx",
    ]  # fmt: skip
    assert changed(openmpi_version="5.0.8") == [
        "containers", "horovod", "mpi4py", "nccl_tests", "openmpi", "slurm",
    ]  # fmt: skip
    # mpi_environment's drop-in directory: named by every role that contributes to it
    assert {"environment", "ucx", "openmpi", "nccl"} <= set(changed(mpi_env_dropin_dir="/x"))
    assert not {"monitoring", "health", "ssh"} & set(changed(mpi_env_dropin_dir="/x"))
    assert changed(mpi_slots=3) == every  # cluster-wide
    assert changed(slurm_enabled=True) == every  # named by the shared playbooks


def test_the_components_are_site_ymls_plays_and_their_roles() -> None:
    validate = yaml.safe_load((ROOT / "playbooks" / "validate.yml").read_text())
    names = validate[0]["tasks"][-1]["ansible.builtin.set_fact"]["_mpictl_components"]
    assert names == list(state.COMPONENT_ROLES)
    # the preflight play's list for a run without the validation play
    (preflight,) = yaml.safe_load((ROOT / "playbooks" / "preflight.yml").read_text())
    assert preflight["vars"]["_preflight_all"] == list(state.COMPONENT_ROLES)
    for component, role in state.COMPONENT_ROLES.items():
        play = (ROOT / "playbooks" / f"{component}.yml").read_text()
        assert f"name: {role}\n" in play and f"tags: [{component}]" in play, component
