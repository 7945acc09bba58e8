"""The renderer of /etc/environment in roles/mpi_environment/library/mpictl_environment.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

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
