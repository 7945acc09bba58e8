"""What ``mpictl doctor`` reports: one :class:`Check` per finding, naming the node and the fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

PROVISION = "run `mpictl provision -i {inv}`"


@dataclass(frozen=True)
class Check:
    check: str
    node: str  # a node name, or "all"
    ok: bool
    detail: str
    fix: str = ""

    @property
    def result(self) -> str:
        return "ok" if self.ok else "FAIL"


@dataclass
class DoctorReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [{**asdict(c), "result": c.result} for c in self.checks]}
