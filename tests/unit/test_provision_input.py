"""What `mpictl provision` accepts before anything runs (a playbook of mpictl's, tags some play
carries), and what it says when Ansible itself stops (its own first error line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpictl import paths, runner
from mpictl.errors import UsageError
from mpictl.provision import check_tags, play_tags, resolve_playbook
from mpictl.runner import HostStats, RunResult, first_error
from mpictl.ui import failure_summary

COMPONENTS = [
    "ssh",
    "environment",
    "hostfile",
    "ucx",
    "ucc",
    "openmpi",
    "mpi4py",
    "nccl",
    "nccl_tests",
    "horovod",
    "jobs",
    "health",
    "monitoring",
    "slurm",
    "containers",
]


# --- playbooks ---------------------------------------------------------------------------------


def test_a_playbook_is_one_of_mpictls_files() -> None:
    assert resolve_playbook("site.yml") == paths.playbooks_dir() / "site.yml"
    assert resolve_playbook("openmpi.yml").is_file()


@pytest.mark.parametrize(
    "name", ["nope.yml", "../../etc/passwd", "/etc/passwd", "playbooks/site.yml", "site", ""]
)
def test_anything_else_is_refused_with_the_valid_names(name: str) -> None:
    with pytest.raises(UsageError) as err:
        resolve_playbook(name)
    assert f"unknown playbook '{name}'" in str(err.value)
    assert "site.yml, slurm.yml, ssh.yml" in str(err.value)


# --- tags --------------------------------------------------------------------------------------


def test_the_tags_of_site_yml_are_the_components_in_run_order() -> None:
    assert list(play_tags(paths.playbook("site.yml"))) == COMPONENTS
    assert list(play_tags(paths.playbook("nccl.yml"))) == ["nccl"]
    assert play_tags(paths.playbook("validate.yml")) == {}


def test_play_tags_follow_imports_and_leave_always_out(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "inner.yml").write_text(
        "- {name: Inner, hosts: all, tags: [b]}\n- {name: Plain, hosts: all}\n"
    )
    (tmp_path / "main.yml").write_text(
        "- {name: Check, hosts: localhost, tags: [always]}\n"
        "- {name: First, hosts: all, tags: 'a, c'}\n"
        "- {ansible.builtin.import_playbook: sub/inner.yml, tags: [x]}\n"
        "- {import_playbook: sub/inner.yml}\n"
    )
    assert play_tags(tmp_path / "main.yml") == {
        "a": ["First"],
        "c": ["First"],
        "x": ["Inner", "Plain"],  # an import's tags apply to every play it imports
        "b": ["Inner"],
    }


def test_tags_are_split_at_commas_and_each_checked() -> None:
    valid = ["openmpi", "mpi4py", "nccl"]
    assert check_tags("--tags", None, valid) is None
    assert check_tags("--tags", " openmpi, mpi4py ,openmpi", valid) == "openmpi,mpi4py"
    with pytest.raises(UsageError) as err:
        check_tags("--skip-tags", "openmpi,nosuch", valid)
    assert str(err.value) == "unknown tag 'nosuch' in --skip-tags (valid: mpi4py, nccl, openmpi)"
    with pytest.raises(UsageError, match="--tags needs a tag"):
        check_tags("--tags", " , ", valid)
    with pytest.raises(UsageError, match="unknown tag 'always'"):
        check_tags("--skip-tags", "always", valid)  # the validation plays cannot be skipped


# --- Ansible's own errors ----------------------------------------------------------------------


def verbose(*lines: str) -> list[dict[str, object]]:
    return [{"event": "verbose", "stdout": f"\x1b[0;31m{line}\x1b[0m"} for line in lines]


def test_first_error_reads_ansibles_error_and_origin() -> None:
    events = verbose(
        "[ERROR]: conflicting action statements: ansible.builtin.debug, bogus",
        "Origin: /x/bad.yml:5:7",
        "",
        "5     - name: t",
        "[ERROR]: a second error",
    )
    assert first_error(events) == (
        "conflicting action statements: ansible.builtin.debug, bogus (/x/bad.yml:5:7)"
    )
    assert first_error(events[:1]) == "conflicting action statements: ansible.builtin.debug, bogus"


def test_first_error_of_older_ansible_and_of_error_events() -> None:
    old = verbose(
        "ERROR! the role 'nope' was not found in /x/roles",
        "",
        "The error appears to be in '/x/site.yml': line 4, column 7, but may",
    )
    assert first_error(old) == "the role 'nope' was not found in /x/roles (/x/site.yml:4:7)"
    one_event = [{"event": "error", "stdout": "[ERROR]: 'x' is undefined\r\nOrigin: /p.yml:2:10"}]
    assert first_error(one_event) == "'x' is undefined (/p.yml:2:10)"


def test_failed_tasks_are_not_read_as_ansible_errors() -> None:
    failed = {"event": "runner_on_failed", "stdout": "[ERROR]: Task failed: boom"}
    assert first_error([failed, {"event": "verbose", "stdout": "ok"}]) is None


def _result(events: list[dict[str, object]], stats: dict[str, HostStats]) -> RunResult:
    return RunResult(4, "failed", "id", Path("/state/runs/id"), stats, events)


def test_failure_summary_shows_ansibles_error_and_the_artifacts() -> None:
    events = verbose("[ERROR]: YAML parsing failed", "Origin: /x/site.yml:4:1")
    line = failure_summary(_result(events, {}))
    assert line == (
        "provision failed (rc=4): YAML parsing failed (/x/site.yml:4:1) (artifacts: /state/runs/id)"
    )
    assert failure_summary(_result([], {})) == "provision failed (rc=4) on: see the artifacts"


SYNTAX_ERROR = """\
- name: A play with a task that is no task
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Two actions
      ansible.builtin.debug: {msg: hi}
      bogus_keyword: 1
"""
UNDEFINED_HOSTS = """\
- name: A play whose hosts are undefined
  hosts: "{{ no_such_variable }}"
  connection: local
  gather_facts: false
  tasks:
    - name: Never runs
      ansible.builtin.debug: {msg: hi}
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (SYNTAX_ERROR, "conflicting action statements: ansible.builtin.debug, bogus_keyword"),
        (UNDEFINED_HOSTS, "'no_such_variable' is undefined"),
    ],
    ids=["syntax", "undefined"],
)
def test_a_playbook_that_ansible_refuses_reports_ansibles_error(
    tmp_path: Path, text: str, expected: str
) -> None:
    """A real run (localhost, connection local: no node) of a playbook Ansible refuses."""
    playbook = tmp_path / "broken.yml"
    playbook.write_text(text)
    inventory = tmp_path / "inv.ini"
    inventory.write_text("localhost ansible_connection=local\n")
    result = runner.run_playbook(playbook, inventory)
    assert not result.ok and result.task_results() == []
    line = failure_summary(result)
    assert line.startswith(f"provision failed (rc={result.rc}): ")
    assert expected in line and f"{playbook}:" in line
    assert line.endswith(f"(artifacts: {result.private_data_dir})")
    assert "\n" not in line and "\x1b" not in line
