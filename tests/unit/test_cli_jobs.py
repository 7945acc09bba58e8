"""Bad input to ``mpictl run`` (``--workdir``, ``--exclude``, ``--max-workdir-size``,
``--detach``) and ``mpictl jobs logs|cancel``: one line on stderr, exit 2, no job record and no
process started (nothing reaches the head)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpictl import cli, jobs, mpirun_plan, paths, planner, submit
from mpictl.inventory import load_inventory
from tests.unit.jobside import forbid_processes, three


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(
        "all:\n  children:\n    mpi_nodes:\n      hosts:\n"
        "        a: {mpi_slots: 2}\n        b: {mpi_slots: 2}\n"
    )
    load_inventory(path)  # importing Ansible runs `ldconfig -p` once; not the command's doing
    return path


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch, inv: Path) -> list[object]:
    return forbid_processes(monkeypatch)


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("mpictl: error: "), err
    return err.removeprefix("mpictl: error: ").rstrip("\n")


@pytest.mark.parametrize("detach", [[], ["--detach"]])
def test_run_workdir_bad_input(
    inv: Path,
    tmp_path: Path,
    spawned: list[object],
    capsys: pytest.CaptureFixture[str],
    detach: list[str],
) -> None:
    run = ["run", "-i", str(inv), *detach]
    missing = tmp_path / "nope"
    assert refused(capsys, [*run, "--workdir", str(missing), "--", "hostname"]) == (
        f"--workdir {missing}: no such directory"
    )
    file = tmp_path / "train.py"
    file.write_text("x")
    assert refused(capsys, [*run, "--workdir", str(file), "--", "hostname"]) == (
        f"--workdir {file}: not a directory"
    )
    project = tmp_path / "proj"
    project.mkdir()
    (project / "data.bin").write_bytes(b"x" * 2048)
    message = refused(
        capsys, [*run, "--workdir", str(project), "--max-workdir-size", "1K", "--", "hostname"]
    )
    assert message.startswith(f"--workdir {project}: at least 2.0 KiB to send, over the 1.0 KiB")
    # the same tree within the cap gets past the selection (to the missing cluster key: exit 1)
    assert cli.main([*run, "--workdir", str(project), "--max-workdir-size", "4K", "--", "x"]) == 1
    assert "cluster key" in capsys.readouterr().err
    assert spawned == []
    assert not paths.jobs_dir().exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--exclude", "*.log"], "--exclude applies to --workdir"),
        (["--detach", "--timeout", "5"], "--timeout applies to attached runs"),
        (["--workdir", "{proj}", "--detach", "--timeout", "5"], "--timeout applies to attached"),
        (["--workdir", "{proj}", "--max-workdir-size", "lots"], "--max-workdir-size 'lots': "),
        (["--workdir", "{proj}", "--max-workdir-size", "0"], "--max-workdir-size '0': expected"),
    ],
)
def test_run_option_bad_input(
    inv: Path,
    tmp_path: Path,
    spawned: list[object],
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    args = [a.format(proj=project) for a in args]
    got = refused(capsys, ["run", "-i", str(inv), *args, "--", "hostname"])
    assert got.startswith(message), got
    assert spawned == []
    assert not paths.jobs_dir().exists()


def test_jobs_logs_and_cancel_of_an_unknown_job(
    spawned: list[object], capsys: pytest.CaptureFixture[str]
) -> None:
    assert refused(capsys, ["jobs", "cancel", "nope"]).startswith("unknown job 'nope'")
    assert refused(capsys, ["jobs", "logs", "nope", "--rank", "0"]).startswith("unknown job 'nope'")
    assert refused(capsys, ["jobs", "logs", "-f", "nope"]).startswith("unknown job 'nope'")
    assert spawned == []


def test_jobs_logs_rank_and_cancel_of_a_finished_job(
    spawned: list[object], capsys: pytest.CaptureFixture[str]
) -> None:
    c = three()
    plan = mpirun_plan.plan(c, planner.LaunchOptions(command=["x"], np=3), jobs.new_id(), None)
    record = submit.create_record(c, plan)
    record.output_path.write_text("[1,1]<stdout>: one\n[1,0]<stdout>: zero\n")
    jobs.finish(record, exit_code=3, status=jobs.FAILED)
    assert refused(capsys, ["jobs", "logs", record.id, "--rank", "3"]) == (
        "--rank 3: the job had 3 rank(s) (0..2)"
    )
    assert refused(capsys, ["jobs", "cancel", record.id[:-2]]) == (
        f"job {record.id} is not running (status failed, exit code 3)"
    )
    assert cli.main(["jobs", "logs", record.id, "--rank", "1"]) == 0
    assert capsys.readouterr().out == "one\n"
    assert cli.main(["jobs", "logs", "-f", record.id]) == 3  # follow: the job's exit code
    assert capsys.readouterr().out == "[1,1]<stdout>: one\n[1,0]<stdout>: zero\n"
    assert spawned == []
