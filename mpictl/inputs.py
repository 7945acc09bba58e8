"""The rules for values a user gives mpictl, in one place: pure checks that return the value in
its proper type or raise :class:`UsageError` with one line that names the input and shows the
value escaped.

Every command checks its input at the boundary, before anything reaches a node or a process
(the CLI's options, the inventory with the ``-e`` variables merged, a ``--workdir`` tree, a job
id); the modules that own those boundaries (``inventory``, ``planner``, ``init``, ``workdir``,
``jobs``, ``provision``) build on these rules, so that a value means the same wherever it is
read. ``shown`` is how user text appears in any message: a newline cannot split the one error
line, an escape sequence cannot reach the terminal.
"""

from __future__ import annotations

import math
import re
from typing import Any

from mpictl.errors import UsageError

# A variable an environment, a shell's `export` or mpirun's -x can carry.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A POSIX portable user name as useradd accepts it (Debian's default NAME_REGEX, no '$').
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
# A login name (ansible_user, init --user): letters, digits, '_', '.', '@', '-', not starting
# with '-' or '.'; wider than USER_NAME (upper case, directory logins as first.last@corp), which
# the MPI user mpictl creates must follow.
LOGIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,127}")
LOGIN_RULE = "letters, digits, '_', '.', '@', '-', not starting with '-' or '.'"
# A Linux network interface name: 1..15 bytes, no '/', ':', whitespace or control character.
INTERFACE = re.compile(r"[A-Za-z0-9_.@-]{1,15}")
# A directory on the nodes given on the command line (--chdir): absolute, in the characters
# every shell, mpirun's --wdir and an #SBATCH line take as they are.
NODE_PATH = re.compile(r"/[A-Za-z0-9_.@%+=:,~/-]{0,1023}")
MAX_SHOWN = 200
#: Ranks per node (``mpi_slots``, ``init --slots``): a cap far above any machine's cores or GPUs
#: that still stops a typo (``99999999999``) before it becomes a hostfile or a rank count.
MAX_SLOTS = 4096


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """``value`` as it may appear in a message: control and other unprintable characters
    escaped (``\\n``, ``\\x1b``), cut at ``limit`` characters (with ``...``)."""
    text = value if isinstance(value, str) else str(value)
    out = []
    for char in text[: limit + 1]:
        if char.isprintable():
            out.append(char)
        else:
            out.append(repr(char)[1:-1] if char not in "'\"" else char)
    escaped = "".join(out)
    if len(text) > limit:
        escaped = escaped[:limit] + "..."
    return escaped


def quoted(value: Any) -> str:
    """``shown`` in single quotes: for a value inside a sentence."""
    return f"'{shown(value)}'"


def fullmatch(pattern: re.Pattern[str], value: Any) -> bool:
    """``value`` is a string ``pattern`` matches whole (``$`` would accept a final newline)."""
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def number(value: Any) -> int | None:
    """An int, or a string of ASCII digits only (no sign, no space: ``'²'``, ``'1 '``, ``1.5`` and
    ``True`` are not numbers): the strict reading of a value in a file (an inventory, the
    sandbox's literals); None otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,19}", value, re.ASCII):
        return int(value)
    return None


def integer(what: str, value: Any, *, minimum: int = 1, maximum: int | None = None) -> int:
    """An integer in ``[minimum, maximum]`` from an int or ASCII decimal digits (``'²'`` is a
    digit to ``str.isdigit`` but not a number; booleans are not numbers)."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]{1,19}\s*", value, re.ASCII):
        number = int(value.strip())
    if number is None or number < minimum or (maximum is not None and number > maximum):
        bounds = f"at least {minimum}" if maximum is None else f"{minimum}..{maximum}"
        raise UsageError(f"{what} must be an integer, {bounds}; got {quoted(value)}")
    return number


def seconds(what: str, value: float | None, *, allow_zero: bool = False) -> float | None:
    """A duration in seconds: finite and positive (``nan`` would mean no limit at all)."""
    if value is None:
        return None
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise UsageError(f"{what} must be a finite number of seconds above 0; got {shown(value)}")
    return value


def env_name(what: str, name: Any) -> str:
    """A variable name (``[A-Za-z_][A-Za-z0-9_]*``, nothing before or after)."""
    if not fullmatch(ENV_NAME, name):
        raise UsageError(f"{what}: {quoted(name)} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
    return str(name)


def user_name(what: str, name: Any) -> str:
    if not fullmatch(USER_NAME, name):
        raise UsageError(
            f"{what}: {quoted(name)} is not a user name (lower case letters, digits, '_' and "
            "'-', starting with a letter or '_', at most 32)"
        )
    return str(name)


def is_node_path(path: Any) -> bool:
    """An absolute path on the nodes, in plain characters (:data:`NODE_PATH`), without ``..``."""
    return fullmatch(NODE_PATH, path) and ".." not in str(path).split("/")


def node_path(what: str, path: Any) -> str:
    """An absolute directory path on the nodes, in plain characters, without ``..``."""
    if not is_node_path(path):
        raise UsageError(
            f"{what}: {quoted(path)} is not an absolute path on the nodes (letters, digits and "
            "_ . @ % + = : , ~ - /, without '..')"
        )
    return str(path)


def interface_name(what: str, name: Any) -> str:
    if not fullmatch(INTERFACE, name) or name in (".", ".."):
        raise UsageError(
            f"{what}: {quoted(name)} is not a network interface name (1 to 15 letters, digits, "
            "'_', '.', '-', '@')"
        )
    return str(name)
