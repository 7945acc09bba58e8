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


def test_bench_prints_the_table_summary_and_where_results_are(
    inv: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mpictl import bench

    points = [bench.Point(bytes=b, iters=5, time_s=b / 1e9, ok=True, ranks=3) for b in (8, 2**26)]
    report = bench.BenchReport(
        points=points,
        hosts=["a", "b", "c"],
        link_gbps=2.0,
        link_pair=("a", "b"),
        job_id="J9",
        results_path=tmp_path / "J9" / "bench.json",
    )
    monkeypatch.setattr(bench, "run_bench", lambda cluster, **kw: report)
    assert cli.main(["bench", "-i", str(inv)]) == 0
    out = capfd.readouterr().out
    assert "allreduce, 3 ranks on a, b, c" in out
    assert "busbw (GB/s)" in out
    lines = out.splitlines()
    assert any(" 8 B " in ln and "1.333" in ln for ln in lines), out
    assert any("64 MiB" in ln and "67,108.9" in ln and "1.333" in ln for ln in lines), out
    assert "busbw at 64 MiB: 1.333 GB/s; TCP link a->b (iperf3): 2.000 GB/s" in out
    assert f"results: {tmp_path / 'J9' / 'bench.json'}" in out
