"""The one exception hierarchy of mpictl.

Library code raises these; only ``mpictl.cli`` turns them into an exit code and a one-line
message. Exit code 2 means bad input (nothing was changed anywhere); 1 means an operation ran and
failed.
"""

from __future__ import annotations


class MpictlError(Exception):
    """Base of every error mpictl reports to a user."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(MpictlError):
    """Bad input: arguments, options or values the user gave. Nothing was changed."""

    exit_code = 2


class InventoryError(UsageError):
    """The inventory is missing, unreadable or breaks the inventory contract."""


class LockError(MpictlError):
    """Another mpictl operation holds the lock on this inventory."""


class ProvisionError(MpictlError):
    """A playbook run failed on at least one host."""


class SandboxError(MpictlError):
    """The local sandbox cluster could not be created, inspected or removed."""


class JobError(MpictlError):
    """A job could not be launched, or ended badly."""


class CheckFailed(MpictlError):
    """A verification (smoke, doctor) found a problem."""


class Interrupted(MpictlError):
    """A signal (Ctrl-C, SIGTERM, SIGHUP) ended a job that a longer operation had started; the
    operation stops there, with the job's exit code (130, 143, 129)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code
