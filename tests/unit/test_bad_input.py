"""Bad input, as a careless or hostile user gives it, with no cluster at all (the harness:
:mod:`tests.unit.hostile`): every case is refused with exit 2 and one line, before any process,
node or ansible-runner run, and nothing is written outside the test's own folders.

Every input mpictl adds joins these modules (``test_bad_input*.py``)."""

from __future__ import annotations

from tests.unit.hostile import Hostile


def test_the_spies_see_a_command_that_gets_through(hostile: Hostile) -> None:
    # The control case: a good `run` goes on to ssh to the head (the shim fails it).
    got = hostile.call("run", "-i", str(hostile.inventory), "--", "hostname")
    assert any(event == "subprocess.Popen" for event, _ in got.spawned), got.describe()
    assert any(line.startswith("ssh ") and "127.0.0.1" in line for line in got.shim_calls)


def test_a_job_id_that_is_a_path_is_unknown(hostile: Hostile) -> None:
    hostile.refused("jobs", "show", "../../x", says=("unknown job",))
