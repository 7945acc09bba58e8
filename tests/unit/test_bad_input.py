"""Bad input, as a careless or hostile user gives it, with no cluster at all (the harness:
:mod:`tests.unit.hostile`): every case is refused with exit 2 and one line, before any process,
node or ansible-runner run, and nothing is written outside the test's own folders.

Every input mpictl adds joins these modules (``test_bad_input*.py``)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.unit.hostile import Hostile


def test_the_spies_see_a_command_that_gets_through(hostile: Hostile) -> None:
    # The control case: a good `run` goes on to ssh to the head (the shim fails it).
    got = hostile.call("run", "-i", str(hostile.inventory), "--", "hostname")
    assert any(event == "subprocess.Popen" for event, _ in got.spawned), got.describe()
    assert any(line.startswith("ssh ") and "127.0.0.1" in line for line in got.shim_calls)


def test_a_job_id_that_is_a_path_is_unknown(hostile: Hostile) -> None:
    hostile.refused("jobs", "show", "../../x", says=("unknown job",))


# --------------------------------------------------------------------------- run: before contact
RUN_BAD = {
    "an unknown option before the command": (["--host", "a", "--", "hostname"], "--host"),
    "an option mpirun has, not mpictl": (["--map-by", "node", "--", "hostname"], "--map-by"),
    "-x name ending in a newline": (["-x", "FOO\n", "--", "env"], "-x"),
    "-x name with a newline inside": (["-x", "A\nB=1", "--", "env"], "-x"),
    "-x value of two lines": (["-x", "A=1\nexport B=2", "--", "env"], "-x"),
    "-x empty": (["-x", "", "--", "env"], "-x"),
    "-x name starting with a digit": (["-x", "1A=2", "--", "env"], "-x"),
    "--mca name ending in a newline": (["--mca", "btl\n=tcp", "--", "true"], "--mca"),
    "--mca value of two lines": (["--mca", "btl=tcp\nself", "--", "true"], "--mca"),
    "--mca without a value": (["--mca", "btl", "--", "true"], "--mca"),
    "--timeout nan": (["--timeout", "nan", "--", "true"], "--timeout"),
    "--timeout inf": (["--timeout", "inf", "--", "true"], "--timeout"),
    "--timeout -1": (["--timeout", "-1", "--", "true"], "--timeout"),
    "--timeout 0": (["--timeout", "0", "--", "true"], "--timeout"),
    "--timeout abc": (["--timeout", "abc", "--", "true"], "--timeout"),
    "an empty command": (["--", ""], "no command"),
    "a command of spaces": (["--", "  "], "no command"),
    "no command": (["--"], "command"),
    "-np 0": (["-np", "0", "--", "true"], "-np"),
    "-np -3": (["-np", "-3", "--", "true"], "-np"),
    "-np 2.5": (["-np", "2.5", "--", "true"], "-np"),
    "--ppn 0": (["--ppn", "0", "--", "true"], "--ppn"),
    "more ranks than slots": (["-np", "9", "--", "true"], "slots"),
    "--master-port 0": (["--torch", "--master-port", "0", "--", "true"], "--master-port"),
    "--master-port 70000": (["--torch", "--master-port", "70000", "--", "true"], "--master-port"),
    "--hosts empty": (["--hosts", "", "--", "true"], "--hosts"),
    "--hosts unknown": (["--hosts", "node9", "--", "true"], "node9"),
    "--hosts twice": (["--hosts", "node1,node1", "--", "true"], "twice"),
    "--hosts with a newline": (["--hosts", "node1\nnode2", "--", "true"], "--hosts"),
    "--launcher unknown": (["--launcher", "pbs", "--", "true"], "--launcher"),
    "--detach with --timeout": (["--detach", "--timeout", "5", "--", "true"], "--timeout"),
    "--exclude without --workdir": (["--exclude", "x", "--", "true"], "--exclude"),
    "--tf-port without --tf": (["--tf-port", "30000", "--", "true"], "--tf-port applies to --tf"),
}


@pytest.mark.parametrize("case", sorted(RUN_BAD))
def test_run_refuses_before_contact(hostile: Hostile, case: str) -> None:
    args, says = RUN_BAD[case]
    got = hostile.refused("run", "-i", str(hostile.inventory), *args, says=(says,))
    assert "\n" not in got.err.rstrip("\n")  # one line: a newline in the input is escaped


def test_an_unknown_option_is_never_passed_to_mpirun(hostile: Hostile) -> None:
    # Today's `run --host a -- hostname` gave mpirun its own `--host a` and recorded another job.
    got = hostile.refused("run", "-i", str(hostile.inventory), "--host", "a", "--", "hostname")
    assert "No such option: --host" in got.err


@pytest.mark.parametrize("kind", ["a file", "under a file"])
def test_run_refuses_a_bad_output_dir_before_contact(hostile: Hostile, kind: str) -> None:
    plain = hostile.root / "plain"
    plain.write_text("x")
    target = {"a file": plain, "under a file": plain / "sub"}[kind]
    hostile.refused(
        "run",
        "-i",
        str(hostile.inventory),
        "--output-dir",
        str(target),
        "--",
        "true",
        says=("--output-dir",),
    )


def test_an_output_dir_under_a_file_is_refused_as_root_too(hostile: Hostile) -> None:
    plain = hostile.root / "plain"
    plain.write_text("x")
    got = hostile.refused(
        "run", "-i", str(hostile.inventory), "--output-dir", str(plain / "a" / "b"), "--", "true"
    )
    assert "is not a directory" in got.err


# --------------------------------------------------------------------------- smoke, bench
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["smoke", "--timeout", "-1"], "--timeout"),
        (["smoke", "--timeout", "nan"], "--timeout"),
        (["smoke", "--timeout", "0"], "--timeout"),
        (["smoke", "--suite", "gpu"], "unknown suite"),
        (["smoke", "--suite", "\x1b]0;pwned\x07"], "unknown suite"),
        (["smoke", "--launcher", "pbs"], "--launcher"),
        (["bench", "--ppn", "0"], "--ppn"),
        (["bench", "--ppn", "-1"], "--ppn"),
        (["bench", "--ppn", "5"], "slots"),
        (["bench", "--max-size", "0"], "size range"),
        (["bench", "--max-size", str(1 << 40)], "size range"),
        (["bench", "--plot", "/nonexistent-mpictl/dir/x.png"], "--plot"),
        (["bench", "--plot", "report.txt"], ".png"),
        (["bench", "--engine", "gpu"], "--engine"),
        (["bench", "--engine", "\x1b[31mnccl"], "--engine"),
        (["hostfile", "--format", "slurm"], "format"),
        (["fabric", "--expect", "4e11"], "--expect must be a link rate in Gbit/s"),
        (["fabric", "--expect", "0"], "--expect"),
    ],
)
def test_smoke_bench_and_hostfile_refuse_before_contact(
    hostile: Hostile, args: list[str], says: str
) -> None:
    got = hostile.refused(args[0], "-i", str(hostile.inventory), *args[1:], says=(says,))
    assert "\x1b" not in got.err and "\x07" not in got.err


def test_a_plot_path_that_is_a_link_is_refused_before_the_sweep(hostile: Hostile) -> None:
    (hostile.cwd / "real.png").write_text("")
    (hostile.cwd / "plot.png").symlink_to(hostile.cwd / "real.png")
    hostile.refused("bench", "-i", str(hostile.inventory), "--plot", "plot.png", says=("--plot",))


# --------------------------------------------------------------------------- init -o
def test_init_force_never_replaces_a_symlink(hostile: Hostile) -> None:
    # Security defect 4: `init --force -o LINK` replaced the link with a regular file (as root,
    # `-o /dev/stdout --force` would have replaced /dev/stdout).
    target = hostile.root / "target.yml"
    target.write_text("mine\n")
    link = hostile.cwd / "hosts.yml"
    link.symlink_to(target)
    got = hostile.refused(
        "init", "--no-check", "--force", "-o", str(link), "127.0.0.1", says=("symbolic link",)
    )
    assert link.is_symlink() and target.read_text() == "mine\n", got.describe()


@pytest.mark.parametrize(
    ("output", "says"),
    [
        ("/dev/stdout", "symbolic link"),
        ("/dev/null", "not a regular file"),
        (".", "is a directory"),
        ("missing/hosts.yml", "no directory"),
    ],
)
def test_init_output_is_a_new_path_or_a_regular_file(
    hostile: Hostile, output: str, says: str
) -> None:
    hostile.refused("init", "--no-check", "--force", "-o", output, "127.0.0.1", says=(says,))


def test_init_force_replaces_a_regular_file(hostile: Hostile) -> None:
    out = hostile.cwd / "hosts.yml"
    out.write_text("old\n")
    got = hostile.call("init", "--no-check", "--force", "-o", str(out), "127.0.0.1")
    assert got.code == 0, got.describe()
    assert "127.0.0.1" in out.read_text()
    assert sorted(p.name for p in hostile.cwd.iterdir()) == ["hosts.yml"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["a b"], "a b"),
        (["--", "-oProxyCommand=x"], "-oProxyCommand=x"),
        (["n1=127.0.0.1:0"], "port"),
        (["n1=127.0.0.1:70000"], "port"),
        (["n1=127.0.0.1:²"], "127.0.0.1:²"),
        (["--user", "-oProxyCommand=x", "127.0.0.1"], "--user"),
        (["--user", "root\n", "127.0.0.1"], "--user"),
        (["--slots", "0", "127.0.0.1"], "--slots"),
        (["--slots", "99999999999", "127.0.0.1"], "--slots must be a positive integer up to 4096"),
        (["--ssh-option", "ProxyCommand", "127.0.0.1"], "--ssh-option"),
        (["--head", "other", "127.0.0.1"], "--head"),
        (["127.0.0.1", "127.0.0.1"], "127.0.0.1"),
    ],
)
def test_init_refuses_bad_hosts_and_options(hostile: Hostile, args: list[str], says: str) -> None:
    got = hostile.refused("init", "--no-check", "-o", "-", *args, says=(says,))
    assert got.out == ""


# --------------------------------------------------------------------------- messages
def test_user_text_in_an_error_is_escaped(hostile: Hostile) -> None:
    got = hostile.refused("smoke", "-i", str(hostile.inventory), "--suite", "a\nmpictl: ok\x1b[2J")
    assert got.err.count("\n") == 1 and "\x1b" not in got.err
    assert "a\\nmpictl: ok\\x1b[2J" in got.err


def test_a_bug_is_one_line_and_its_traceback_only_when_asked(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mpictl import hostfile

    def broken(*args: object, **kwargs: object) -> str:
        raise ValueError("a bug")

    monkeypatch.setattr(hostfile, "render", broken)
    got = hostile.call("hostfile", "-i", str(hostile.inventory))
    assert not got.traceback and got.code == 1, got.describe()
    assert len(got.err_lines) == 1 and "internal error: ValueError: a bug" in got.err
    assert "MPICTL_DEBUG=1" in got.err
    monkeypatch.setenv("MPICTL_DEBUG", "1")
    got = hostile.call("hostfile", "-i", str(hostile.inventory))
    assert got.code == 1 and "Traceback" in got.err and "raise ValueError" in got.err


def test_an_os_error_names_the_path(hostile: Hostile, monkeypatch: pytest.MonkeyPatch) -> None:
    from mpictl import hostfile

    def broken(*args: object, **kwargs: object) -> str:
        raise PermissionError(13, "Permission denied", "/some/where")

    monkeypatch.setattr(hostfile, "render", broken)
    got = hostile.call("hostfile", "-i", str(hostile.inventory))
    assert got.code == 1 and not got.traceback, got.describe()
    assert got.err_lines == [
        "mpictl: error: /some/where: Permission denied (MPICTL_DEBUG=1 shows where)"
    ]


def test_ctrl_c_says_so(hostile: Hostile, monkeypatch: pytest.MonkeyPatch) -> None:
    from mpictl import hostfile

    def interrupted(*args: object, **kwargs: object) -> str:
        os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C does
        time.sleep(5)
        return ""

    monkeypatch.setattr(hostfile, "render", interrupted)
    # Python's own handler, as in a fresh `mpictl` process (ansible-runner, run in this process
    # by other tests, replaces it and never puts it back)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        got = hostile.call("hostfile", "-i", str(hostile.inventory))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert got.code == 130 and not got.traceback, got.describe()
    assert got.err_lines == ["mpictl: interrupted"]


def test_tables_keep_every_cell_whole_when_not_a_terminal() -> None:
    import io

    from mpictl import ui

    fix = "run `mpictl provision -i /a/rather/long/path/to/the/inventory` " + "then look " * 20
    out = io.StringIO()
    console = ui._Console(file=out, highlight=False)
    console.print(ui._table(("node", "check", "fix"), [("node1", "environment", fix)]))
    assert fix.strip() in out.getvalue()


def test_run_refuses_a_broken_state_dir_before_contact(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = hostile.root / "plain"
    plain.write_text("x")
    key = hostile.state / "cluster_ssh" / "id_ed25519"
    monkeypatch.setenv("MPICTL_STATE_DIR", str(plain / "state"))
    got = hostile.call("run", "-i", str(hostile.inventory), "--", "true")
    # the cluster key is looked up first (it is in the state dir too): no contact either way
    assert got.code == 2 and got.spawned == [] and got.shim_calls == [], got.describe()
    assert len(got.err_lines) == 1 and "MPICTL_STATE_DIR" in got.err, got.describe()
    assert key.exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--workdir", "", "--", "true"], "--workdir ''"),
        (["--max-workdir-size", "abc", "--", "true"], "--max-workdir-size applies to --workdir"),
        (["--max-workdir-size", "1G", "--", "true"], "--max-workdir-size applies to --workdir"),
        (["--output-dir", "", "--", "true"], "--output-dir ''"),
        (["--output-dir", " ", "--", "true"], "--output-dir ''"),
    ],
)
def test_workdir_options_without_a_workdir(hostile: Hostile, args: list[str], says: str) -> None:
    hostile.refused("run", "-i", str(hostile.inventory), *args, says=(says,))


def test_a_workdir_that_would_send_the_state_dir_is_refused(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = hostile.root / "proj"
    state = project / ".mpictl-state"
    (state / "cluster_ssh").mkdir(parents=True)
    (state / "cluster_ssh" / "id_ed25519").write_text("secret\n")
    (project / "train.py").write_text("print(1)\n")
    monkeypatch.setenv("MPICTL_STATE_DIR", str(state))
    run = ["run", "-i", str(hostile.inventory), "--workdir", str(project)]
    hostile.refused(*run, "--", "true", says=("holds mpictl's state dir", "--exclude"))
    # left out, the same tree gets past the check (to the head: the ssh shim)
    got = hostile.call(*run, "--exclude", ".mpictl-state/", "--", "true")
    assert got.code == 1 and any(c.startswith("ssh ") for c in got.shim_calls), got.describe()
