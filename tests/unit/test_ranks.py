"""Each rank's lines from mpirun's tagged output (mpictl.ranks): ``jobs logs --rank N`` and
``run --output-dir`` read them, so a line given to the wrong rank, an untagged mpirun line in a
rank's file or a progress bar cut at its carriage returns would be wrong output for the user."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpictl import ranks
from mpictl.errors import UsageError

OUTPUT = (
    "Warning: Permanently added 'node2' to the list of known hosts.\n"
    "[1,0]<stdout>: epoch 1\n"
    "[1,1]<stderr>: warn from 1\n"
    "[1,1]<stdout>: epoch 1 on 1\n"
    "--------------------------------------------------------------------------\n"
    "mpirun noticed that process rank 1 with PID 0 on node node2 exited on signal 9.\n"
    "[1,0]<stdout>:  two spaces\n"
    "[1,0]<stdout>:no space\n"
    "[1,10]<stdout>: ten\n"
    "[1,0]<stddiag>: diag\n"
    "not a tag [1,0]<stdout>: inside\n"
    "[1,2]<stdout>: 10%\r 50%\r100%\n"
    "[1,0]<stdout>: last, no newline"
)


def test_split_gives_each_rank_its_lines_in_order() -> None:
    assert ranks.split(OUTPUT) == {
        0: {
            "stdout": ["epoch 1\n", " two spaces\n", "no space\n", "last, no newline"],
            "stderr": ["diag\n"],
        },
        1: {"stdout": ["epoch 1 on 1\n"], "stderr": ["warn from 1\n"]},
        2: {"stdout": ["10%\r 50%\r100%\n"], "stderr": []},
        10: {"stdout": ["ten\n"], "stderr": []},
    }


def test_untagged_output_belongs_to_no_rank() -> None:
    assert ranks.split("mpirun: hello\n\n[1,x]<stdout>: y\n[1,0]<other>: z\n") == {}
    assert ranks.split("") == {}


def test_of_rank_is_stdout_then_stderr() -> None:
    assert ranks.of_rank(OUTPUT, 1, 11) == "epoch 1 on 1\nwarn from 1\n"
    assert ranks.of_rank(OUTPUT, 1, 11, streams=("stderr",)) == "warn from 1\n"
    assert ranks.of_rank(OUTPUT, 2, 11) == "10%\r 50%\r100%\n"
    assert ranks.of_rank(OUTPUT, 5, 11) == ""  # a rank that printed nothing


@pytest.mark.parametrize(("rank", "count"), [(3, 3), (-1, 3), (7, 3), (0, 0)])
def test_of_rank_refuses_a_rank_the_job_did_not_have(rank: int, count: int) -> None:
    with pytest.raises(UsageError) as err:
        ranks.of_rank(OUTPUT, rank, count)
    assert str(err.value).startswith(f"--rank {rank}: the job had {count} rank(s)")


def test_write_dir_pads_rank_dirs_and_writes_every_rank(tmp_path: Path) -> None:
    written = ranks.write_dir(OUTPUT, tmp_path / "out", 11)
    dirs = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert dirs == [f"rank.{i:02d}" for i in range(11)]
    assert len(written) == 22 and all(p.is_file() for p in written)
    assert (tmp_path / "out/rank.00/stdout").read_text() == (
        "epoch 1\n two spaces\nno space\nlast, no newline"
    )
    assert (tmp_path / "out/rank.00/stderr").read_text() == "diag\n"
    assert (tmp_path / "out/rank.01/stderr").read_text() == "warn from 1\n"
    assert (tmp_path / "out/rank.02/stdout").read_bytes() == b"10%\r 50%\r100%\n"
    assert (tmp_path / "out/rank.10/stdout").read_text() == "ten\n"
    assert (tmp_path / "out/rank.05/stdout").read_text() == ""


def test_write_dir_leaves_out_ranks_beyond_the_job_and_overwrites(tmp_path: Path) -> None:
    (tmp_path / "rank.0").mkdir()
    (tmp_path / "rank.0" / "stdout").write_text("old run\n")
    ranks.write_dir(OUTPUT, tmp_path, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank.0", "rank.1", "rank.2"]
    assert (tmp_path / "rank.0" / "stdout").read_text().startswith("epoch 1\n")
    ranks.write_dir("[1,0]<stdout>: only\n", tmp_path / "one", 1)
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["rank.0"]
