"""CLI of the job side: bad input is one line on stderr, exit 2, and no job is started."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpictl import cli, paths


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(
        "all:\n  children:\n    mpi_nodes:\n      hosts:\n"
        "        a: {mpi_slots: 2}\n        b: {mpi_slots: 2}\n"
    )
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-np", "0"], "-np must be a positive number of ranks, got 0"),
        (["-np", "5"], "-np 5 is more ranks than the 4 slots of a, b"),
        (["--hosts", "a,zz"], "--hosts: unknown host 'zz'"),
        (["--ppn", "3"], "--ppn 3 exceeds the slots of a, b"),
        (["--mca", "novalue"], "--mca 'novalue': expected KEY=VALUE"),
    ],
)
def test_run_bad_input(
    inv: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code = cli.main(["run", "-i", str(inv), *args, "--", "hostname"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("mpictl: error: ")
    assert message in err
    assert not paths.jobs_dir().exists()


def test_run_without_cluster_key_says_what_to_do(
    inv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["run", "-i", str(inv), "--", "hostname"])
    err = capsys.readouterr().err
    assert code == 1 and "cluster key" in err and "mpictl provision" in err
    assert len(err.splitlines()) == 1


def test_unknown_smoke_suite(inv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["smoke", "-i", str(inv), "--suite", "nope"]) == 2
    assert "unknown suite 'nope'" in capsys.readouterr().err


def test_jobs_show_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["jobs", "show", "nope"]) == 2
    assert "unknown job 'nope'" in capsys.readouterr().err


def test_jobs_list_empty(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["jobs", "list", "--json"]) == 0
    assert capsys.readouterr().out.strip() == "[]"
