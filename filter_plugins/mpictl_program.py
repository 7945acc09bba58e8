"""The node programs the playbooks and roles send or install, with their shared code in place
(``mpictl.programs.expand``: each ``# mpictl-include: NAME`` line becomes mpictl/scripts/NAME),
as the CLI sends its own: ``lookup('ansible.builtin.file', PROGRAM) | mpictl_program``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

try:
    import mpictl  # noqa: F401
except ImportError:
    # Plain `ansible-playbook` from a checkout, with an Ansible that does not have the mpictl
    # package installed: the package lives beside this directory.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def mpictl_program(text: Any) -> str:
    from mpictl import programs

    return programs.expand(str(text))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"mpictl_program": mpictl_program}
