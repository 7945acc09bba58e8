"""Bad input to ``mpictl jobs list|show|logs|cancel``, and the job records and state dir they
read, as a careless or hostile user gives them (the harness: :mod:`tests.unit.hostile`).

- A job id is ``YYYYMMDD-HHMMSS-xxxxxx`` or a unique prefix of one, never a path: anything else
  is an unknown job (exit 2, one line, the id escaped) before a file is read or a process
  signalled.
- A record that does not read is one line naming its path (exit 1: the id was good, the record
  on disk is not) for show/logs/cancel, and an ``unreadable`` row in ``jobs list``.
- A state dir that cannot be used is one line naming it, what is wrong and the fix (exit 2).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mpictl import jobs, paths, ui
from mpictl.errors import UsageError
from tests.unit.hostile import Hostile, Outcome, as_unprivileged

GOOD = "20260101-120000-abc123"
OTHER = "20260101-120000-abd456"  # shares the prefix 20260101-120000-ab with GOOD
SECRET = "planted-outside-the-state-dir"


def _record(job_id: str, **fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": job_id,
        "command": ["hostname"],
        "mpirun": "mpirun hostname",
        "inventory": "/nowhere/hosts.yml",
        "head": "node1",
        "hosts": [{"host": "node1", "slots": 1}],
        "ranks": 1,
        "start": 1767261600.0,
        "end": 1767261601.0,
        "exit_code": 0,
        "status": "succeeded",
        "extra": {},
        "controller": {},
    }
    data.update(fields)
    return data


def _plant(directory: Path, data: Any) -> Path:
    """``directory/job.json`` holding ``data`` (JSON), or ``data`` as it is (str/bytes)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / jobs.RECORD
    if isinstance(data, bytes):
        path.write_bytes(data)
    elif isinstance(data, str):
        path.write_text(data)
    else:
        path.write_text(json.dumps(data))
    (directory / jobs.OUTPUT).write_text(f"{SECRET} output\n")
    return path


def _good(hostile: Hostile, job_id: str = GOOD, **fields: Any) -> Path:
    return _plant(hostile.state / "jobs" / job_id, _record(job_id, **fields))


def _one_line(got: Outcome, code: int) -> str:
    why = got.describe()
    assert not got.traceback and "Traceback" not in got.err, why
    assert got.code == code, why
    assert len(got.err_lines) == 1 and got.err_lines[0].startswith("mpictl: error: "), why
    assert got.spawned == [] and got.shim_calls == [] and got.outside == [], why
    return got.err_lines[0]


# ------------------------------------------------- security defect 1: a job id is not a path


def test_a_record_outside_the_state_dir_is_not_reached_with_dot_dot(hostile: Hostile) -> None:
    _good(hostile)  # the jobs dir exists, so ../ resolves from it
    _plant(hostile.root / "outside", _record("outside", command=[SECRET]))
    for job_id in ("../../outside", "../../outside/", f"{GOOD}/../../../outside"):
        got = hostile.refused("jobs", "show", job_id, says=("unknown job",))
        assert SECRET not in got.out
        hostile.refused("jobs", "logs", job_id, says=("unknown job",))


def test_an_absolute_id_does_not_replace_the_jobs_dir(hostile: Hostile) -> None:
    outside = hostile.root / "outside"
    _plant(outside, _record("outside", command=[SECRET]))
    for command in ("show", "logs", "cancel"):
        got = hostile.refused("jobs", command, str(outside), says=("unknown job",))
        assert SECRET not in got.out


@pytest.mark.parametrize("pattern", ["*", "2026*", "20260101-12000?-abc123", "[2]*", "*123"])
def test_glob_characters_are_not_globs(hostile: Hostile, pattern: str) -> None:
    _good(hostile, command=[SECRET])
    got = hostile.refused("jobs", "show", pattern, says=("unknown job",))
    assert SECRET not in got.out


def test_cancel_of_a_planted_record_never_signals_its_pid(hostile: Hostile) -> None:
    decoy = subprocess.Popen(["sleep", "60"])
    try:
        start = jobs._process_start(decoy.pid)
        assert start is not None
        planted = hostile.root / "decoy"
        controller = {"host": socket.gethostname(), "pid": decoy.pid, "pid_start": start}
        _plant(
            planted,
            _record("decoy", status="running", end=None, exit_code=None, controller=controller),
        )
        assert jobs.controller_alive(controller) is True  # the record would be signalled
        for job_id in (str(planted), str(planted) + "/", "../../decoy"):
            hostile.refused("jobs", "cancel", job_id, says=("unknown job",))
            time.sleep(0.05)
            assert decoy.poll() is None, "the decoy process was signalled"
    finally:
        decoy.kill()
        decoy.wait()


# ------------------------------------------------------------------ ids that are not job ids

NOT_IDS = [
    "",
    ".",
    "..",
    "/",
    "~",
    "$HOME",
    "job.json",
    "nope",
    "2026\n",
    "2026\nmpictl: error: forged second line",
    "\x1b]0;title\x07",
    f"{GOOD}\x1b[2J",
    " 2026",
    "2026 ",
    "2026\t",
    "ABC123",
    "20260101-120000-ABC123",  # uppercase hex
    "20260101-120000-abc12g",
    "20260101_120000",
    "20260101-1200001",
    "2026010a",
    f"{GOOD}0",  # longer than an id
    f"{GOOD}/",
    f"{GOOD}/job.json",
    "２０２６",  # fullwidth digits
    "٢٠٢٦",  # Arabic-Indic digits
    "2026-",
    "x" * 5000,
    "2" * 5000,
]


@pytest.mark.parametrize("job_id", NOT_IDS, ids=lambda i: repr(i)[:40])
@pytest.mark.parametrize("command", ["show", "logs", "cancel"])
def test_an_id_that_is_no_job_id_is_unknown(hostile: Hostile, command: str, job_id: str) -> None:
    _good(hostile)
    got = hostile.refused("jobs", command, job_id, says=("unknown job '",))
    assert len(got.err_lines) == 1, got.describe()
    assert "\x1b" not in got.err and "\x07" not in got.err and "\t" not in got.err
    assert len(got.err_lines[0]) < 400  # a 5000-character id is cut
    assert got.out == ""


def test_a_prefix_up_to_a_dash_is_a_prefix(hostile: Hostile) -> None:
    _good(hostile)
    got = hostile.call("jobs", "show", "20260101-")
    assert got.code == 0 and json.loads(got.out)["id"] == GOOD, got.describe()


def test_an_id_is_unknown_before_the_jobs_dir_is_read(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    def listed(*_: object) -> list[str]:
        raise AssertionError("the jobs dir was listed")

    monkeypatch.setattr(paths, "entries", listed)
    hostile.refused("jobs", "show", "../x", says=("unknown job",))


def test_a_job_id_that_does_not_exist_is_unknown(hostile: Hostile) -> None:
    hostile.refused("jobs", "show", GOOD, says=(f"unknown job '{GOOD}'",))  # no jobs dir at all
    _good(hostile, OTHER)
    for command in ("show", "logs", "cancel"):
        hostile.refused("jobs", command, GOOD, says=(f"unknown job '{GOOD}'",))
        hostile.refused("jobs", command, "20270101", says=("unknown job '20270101'",))


def test_an_ambiguous_prefix_is_refused_and_names_the_matches(hostile: Hostile) -> None:
    _good(hostile)
    _good(hostile, OTHER)
    got = hostile.refused("jobs", "show", "20260101-120000-ab", says=("ambiguous",))
    assert GOOD in got.err and OTHER in got.err
    hostile.refused("jobs", "cancel", "2026", says=("ambiguous", "2 jobs"))


def test_a_good_id_and_a_unique_prefix_work(hostile: Hostile) -> None:
    _good(hostile)
    _good(hostile, OTHER)
    for job_id in (GOOD, "20260101-120000-abc", "20260101-120000-abc123"):
        got = hostile.call("jobs", "show", job_id)
        assert got.code == 0 and json.loads(got.out)["id"] == GOOD, got.describe()
    got = hostile.call("jobs", "logs", "20260101-120000-abd")
    assert got.code == 0 and got.out == f"{SECRET} output\n", got.describe()


def test_entries_of_the_jobs_dir_that_are_not_ids_are_ignored(hostile: Hostile) -> None:
    _good(hostile)
    for name in ("notes", f"{OTHER}.bak", "20260101-120000-ABC123", ".hidden"):
        _plant(hostile.state / "jobs" / name, _record(name))
    (hostile.state / "jobs" / "stray.txt").write_text("x\n")
    got = hostile.call("jobs", "list", "--json")
    assert got.code == 0, got.describe()
    assert [r["id"] for r in json.loads(got.out)] == [GOOD]
    hostile.refused("jobs", "show", "notes", says=("unknown job",))
    # a prefix is compared with ids only: OTHER.bak does not make OTHER's prefix match
    hostile.refused("jobs", "show", OTHER, says=(f"unknown job '{OTHER}'",))


def test_a_directory_without_a_record_is_no_job(hostile: Hostile) -> None:
    _good(hostile)
    (hostile.state / "jobs" / OTHER).mkdir()  # being created, or left empty
    got = hostile.call("jobs", "show", "20260101-120000-ab")  # not ambiguous
    assert got.code == 0 and json.loads(got.out)["id"] == GOOD, got.describe()
    hostile.refused("jobs", "show", OTHER, says=("unknown job",))


@pytest.mark.parametrize(
    ("rank", "says"),
    [
        ("-1", "--rank must be an integer, at least 0; got '-1'"),
        ("²", "--rank must be an integer"),
        ("x", "--rank must be an integer"),
        ("1\n2", "got '1\\n2'"),
        ("99999999999999999999999", "--rank must be an integer"),
    ],
)
def test_a_rank_that_is_no_rank_is_refused_before_the_id_is_looked_up(
    hostile: Hostile, rank: str, says: str
) -> None:
    hostile.refused("jobs", "logs", "../../x", "--rank", rank, says=(says,))
    _good(hostile)
    hostile.refused("jobs", "logs", GOOD, "--rank", rank, says=(says,))


def test_a_rank_the_job_did_not_have_is_refused(hostile: Hostile) -> None:
    _good(hostile)
    hostile.refused("jobs", "logs", GOOD, "--rank", "1", says=("the job had 1 rank(s)",))


# ------------------------------------------------------------ records that do not read

UNREADABLE = {
    "empty": "",
    "blank": "  \n",
    "truncated": json.dumps(_record(GOOD))[:40],
    "a list": "[]",
    "null": "null",
    "a number": "42",
    "a string": '"job"',
    "not utf-8": b"\xff\xfe{}",
    "deep": "[" * 100_000 + "]" * 100_000,
    "huge int": '{"id": ' + "1" * 5000 + "}",
    "no start": {k: v for k, v in _record(GOOD).items() if k != "start"},
    "start a string": _record(GOOD, start="yesterday"),
    "start NaN": json.dumps(_record(GOOD)).replace("1767261600.0", "NaN"),
    "start a bool": _record(GOOD, start=True),
    "command a string": _record(GOOD, command="rm -rf /"),
    "command of ints": _record(GOOD, command=[1, 2]),
    "hosts of strings": _record(GOOD, hosts=["node1"]),
    "ranks a float": _record(GOOD, ranks=1.5),
    "exit code a string": _record(GOOD, exit_code="0"),
    "status a number": _record(GOOD, status=0),
    "extra a list": _record(GOOD, extra=[]),
    "detached a string": _record(GOOD, extra={"detached": "x"}),
    "slurm without dir": _record(GOOD, extra={"slurm": {"id": "12"}}),
    "output_dir a number": _record(GOOD, extra={"output_dir": 1}),
    "controller a list": _record(GOOD, controller=[]),
    "another id": _record(OTHER),
    "a path as id": _record("../../x"),
}


@pytest.mark.parametrize("content", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_a_record_that_does_not_read_is_one_line(hostile: Hostile, content: Any) -> None:
    path = _plant(hostile.state / "jobs" / GOOD, content)
    for argv in (["show", GOOD], ["logs", GOOD], ["logs", "-f", GOOD], ["cancel", "2026"]):
        line = _one_line(hostile.call("jobs", *argv), 1)
        assert str(path) in line and "unreadable" in line, line
    got = hostile.call("jobs", "logs", GOOD, "--rank", "0")
    assert _one_line(got, 1).count("unreadable") == 1


@pytest.mark.parametrize("content", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_jobs_list_lists_a_record_that_does_not_read(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch, content: Any
) -> None:
    monkeypatch.setattr(ui, "console", Console(width=400, highlight=False))  # rows on one line
    _good(hostile, OTHER)
    _plant(hostile.state / "jobs" / GOOD, content)
    got = hostile.call("jobs", "list", "--json")
    assert got.code == 0 and got.err == "", got.describe()
    rows = {r["id"]: r for r in json.loads(got.out)}
    assert set(rows) == {GOOD, OTHER}
    assert rows[GOOD]["status"] == "unreadable" and rows[OTHER]["status"] == "succeeded"
    assert str(hostile.state / "jobs" / GOOD / "job.json") in rows[GOOD]["extra"]["unreadable"]
    got = hostile.call("jobs", "list")
    assert got.code == 0 and got.err == "", got.describe()
    line = next(line for line in got.out.splitlines() if GOOD in line)
    assert "unreadable" in line


def test_a_record_that_is_a_directory_or_not_readable(hostile: Hostile) -> None:
    (hostile.state / "jobs" / GOOD / "job.json").mkdir(parents=True)
    line = _one_line(hostile.call("jobs", "show", GOOD), 1)
    assert "unreadable" in line and "job.json" in line
    got = hostile.call("jobs", "list", "--json")
    assert got.code == 0 and json.loads(got.out)[0]["status"] == "unreadable", got.describe()


def test_an_output_that_does_not_read_is_one_line(hostile: Hostile) -> None:
    _good(hostile)
    output = hostile.state / "jobs" / GOOD / jobs.OUTPUT
    output.unlink()
    output.mkdir()
    line = _one_line(hostile.call("jobs", "logs", GOOD), 1)
    assert str(output) in line and "does not read" in line


def test_an_unreadable_record_is_never_written_over(hostile: Hostile) -> None:
    record = jobs.unreadable(GOOD, hostile.state / "jobs" / GOOD / "job.json", "empty")
    with pytest.raises(ValueError):
        jobs.save(record)
    assert not (hostile.state / "jobs" / GOOD).exists()


# ------------------------------------------------------------ a state dir that cannot be used


def _file(hostile: Hostile) -> Path:
    path = hostile.root / "a-file"
    path.write_text("not a directory\n")
    return path


@pytest.mark.parametrize("where", ["under", "is", "jobs"])
def test_a_state_dir_that_is_or_is_under_a_file(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    file = _file(hostile)
    state = {"under": file / "state", "is": file, "jobs": hostile.root / "st"}[where]
    if where == "jobs":
        state.mkdir()
        (state / "jobs").write_text("x\n")
        file = state / "jobs"
    monkeypatch.setenv("MPICTL_STATE_DIR", str(state))
    says = ("state dir", str(state), "MPICTL_STATE_DIR", f"{file} is a file, not a directory")
    for argv in (
        ["jobs", "list"],
        ["jobs", "list", "--json"],
        ["jobs", "show", GOOD],
        ["jobs", "show", "2026"],
        ["jobs", "logs", GOOD],
        ["jobs", "logs", "-f", GOOD, "--rank", "0"],
        ["jobs", "cancel", GOOD],
    ):
        got = hostile.refused(*argv, says=says)
        assert "set MPICTL_STATE_DIR to a directory you can write" in got.err_lines[0]
    with pytest.raises(UsageError, match="is a file, not a directory; set MPICTL_STATE_DIR"):
        jobs.create(
            GOOD, command=["x"], launch_line="x", inventory="/i", head="h", hosts=[], ranks=1
        )


def test_a_state_dir_with_a_newline_is_shown_escaped(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = _file(hostile) / "st\x1b]0;x\x07\nate"
    monkeypatch.setenv("MPICTL_STATE_DIR", str(state))
    got = hostile.refused("jobs", "list", says=("state dir", "\\x1b]0;x\\x07\\nate"))
    assert "\x1b" not in got.err and len(got.err_lines) == 1


def test_a_state_dir_without_permissions(hostile: Hostile, request: pytest.FixtureRequest) -> None:
    if os.geteuid() == 0:  # root reads and writes any directory: the case runs as nobody
        as_unprivileged(request.node.nodeid)
        return
    jobs_dir = hostile.state / "jobs"
    _good(hostile)
    try:
        jobs_dir.chmod(0o500)  # read-only: reading works, writing says so
        got = hostile.call("jobs", "show", GOOD)
        assert got.code == 0, got.describe()
        with pytest.raises(UsageError, match="permission denied.*fix its permissions"):
            jobs.create(
                OTHER, command=["x"], launch_line="x", inventory="/i", head="h", hosts=[], ranks=1
            )
        jobs_dir.chmod(0o000)  # unreadable
        for argv in (["jobs", "list"], ["jobs", "show", GOOD], ["jobs", "cancel", GOOD]):
            hostile.refused(*argv, says=("state dir", "permission denied", "fix its permissions"))
    finally:
        jobs_dir.chmod(0o700)


def test_the_state_dir_message_for_each_reason(hostile: Hostile) -> None:
    import errno

    where = hostile.state / "jobs"
    for code, says in (
        (errno.EACCES, f"permission denied on {where}; fix its permissions"),
        (errno.EPERM, "permission denied"),
        (errno.EROFS, f"{where} is on a read-only file system; set MPICTL_STATE_DIR"),
        (errno.ENOSPC, f"{where}: No space left on device; set MPICTL_STATE_DIR"),
    ):
        error = paths.unusable(where, "job records", OSError(code, os.strerror(code), str(where)))
        text = str(error)
        assert isinstance(error, UsageError) and says in text, text
        assert text.startswith(f"job records: the state dir '{hostile.state}' (MPICTL_STATE_DIR)")


def test_cancel_of_a_running_job_in_a_state_dir_it_cannot_write(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    controller = {"host": socket.gethostname(), "pid": os.getpid()}
    controller["pid_start"] = jobs._process_start(os.getpid())
    _good(hostile, status="running", end=None, exit_code=None, controller=controller)
    sent: list[object] = []
    monkeypatch.setattr(os, "kill", lambda *a: sent.append(a))
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if "jobs" in str(p) else real(p, m))
    hostile.refused("jobs", "cancel", GOOD, says=("state dir", "permission denied"))
    assert sent == []  # nothing was signalled
