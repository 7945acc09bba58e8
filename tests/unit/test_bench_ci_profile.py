"""bench/ci_profile.py reads a `.ci/run` log: both pytest processes, their sums per module and
Molecule scenario, lint and the unit tests, and the measured total."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import ci_profile

LOG = """\
bootstrap: ready
============================= slowest 40 durations =============================
1797.25s setup    tests/integration/test_containers.py::test_the_marker_is_only_in_the_image
98.46s call     tests/integration/test_slurm.py::test_with_the_prolog[x-y z]
20.00s teardown tests/integration/test_slurm.py::test_other
=============== 2 passed, 1 failed, 44 deselected in 3896.38s (1:04:56) ================
=== the tests with sandboxes of their own (run beside the session sandbox's) ===
============================= slowest 40 durations =============================
470.63s call     tests/integration/test_molecule.py::test_molecule_scenario[ucx]
54.46s call     tests/integration/test_molecule.py::test_molecule_scenario[ucc]
113.41s setup    tests/integration/test_site_settings.py::test_provision_puts
=============== 44 passed, 122 deselected in 4948.64s (1:22:28) ================
=== lint and the unit tests (run beside the integration tests) ===
All checks passed!
1997 passed in 189.63s (0:03:09)
rc=1 total=4994
"""


def test_both_processes_their_modules_and_the_total() -> None:
    got = ci_profile.parse(LOG)
    assert (got["rc"], got["total_s"]) == (1, 4994)
    session, beside, fast = (got["processes"][k] for k in ("session", "beside", "fast"))
    assert session["wall_s"] == 3896.38 and "1 failed" in session["summary"]
    assert session["modules"] == {"test_containers": 1797.25, "test_slurm": 118.46}
    assert beside["modules"] == {
        "molecule[ucx]": 470.63,
        "test_site_settings": 113.41,
        "molecule[ucc]": 54.46,
    }
    assert fast["wall_s"] == 189.63 and fast["items"] == []
    slurm = "tests/integration/test_slurm.py::test_with_the_prolog[x-y z]"
    assert session["items"][1]["id"] == slurm


def test_a_log_without_durations_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "ci.log"
    log.write_text("bootstrap: ready\nthe test sources could not be fetched\n")
    assert ci_profile.main([str(log)]) == 2
    assert ci_profile.main([str(tmp_path / "missing.log")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "no pytest durations" in err and "cannot read" in err
