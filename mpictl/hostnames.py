"""What may stand where a host goes: hostfiles, known_hosts, ssh command lines.

A host is a host name of RFC 1123 labels (letters, digits, ``-``; dots between labels; at most
253 characters), an IPv4 address or an IPv6 address, nothing else: no spaces, no shell
characters, no leading ``-`` that ssh would read as an option. Two flavours:

- **names** (inventory host names, ``ansible_host``) may also contain ``_``: it is common in
  Ansible inventories, harmless in a shell, and the controller's own ssh resolves these names
  (``/etc/hosts``, ``~/.ssh/config`` aliases);
- **addresses** other nodes resolve (``mpi_address``, which defaults to the inventory name) may
  not, since a DNS name has no ``_``: a node named ``gpu_01`` needs an ``mpi_address``.

:func:`endpoint` is the one spelling of where ssh reaches a node (``host:port``, host lower-case,
an IP address in its canonical form, IPv6 in brackets): two inventories that describe the same
machine spell it the same way (duplicate nodes, locks).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

# One RFC 1123 label: letters, digits and '-', 1..63 characters, no '-' at either end; the
# inventory-name flavour also allows '_'.
_DNS_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_NAME_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
NOT_A_HOST = "not a valid host name, IPv4 or IPv6 address"
NOT_AN_ADDRESS = "not a valid DNS name, IPv4 or IPv6 address"


def is_ip_address(value: str) -> bool:
    """An IPv4 or IPv6 address (no zone index: ``fe80::1%eth0`` means nothing to another node)."""
    if "%" in value:
        return False
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def is_host_name(value: str, *, underscore: bool = False) -> bool:
    """A host name of RFC 1123 labels separated by dots, at most 253 characters; ``_`` only with
    ``underscore``. An all-numeric last label is refused: ``10.0.0.256`` is a mistyped address,
    not a name."""
    if not value or len(value) > 253:
        return False
    labels = value.split(".")
    label = _NAME_LABEL if underscore else _DNS_LABEL
    return all(label.fullmatch(part) for part in labels) and not labels[-1].isdigit()


def host_problem(value: Any, *, underscore: bool = False) -> str | None:
    """Why ``value`` cannot be a host (a host name, an IPv4 or an IPv6 address), or None.

    ``underscore=True`` is the rule of inventory names and ``ansible_host``; ``False`` the rule of
    addresses other nodes resolve (``mpi_address``).
    """
    text = value if isinstance(value, str) else None
    if text is not None and (is_ip_address(text) or is_host_name(text, underscore=underscore)):
        return None
    return NOT_A_HOST if underscore else NOT_AN_ADDRESS


def endpoint(host: str, port: int) -> str:
    """``host:port`` in one spelling: a name lower-case, an IP address canonical
    (``0:0::1`` is ``::1``), an IPv6 address in brackets (``[::1]:22``)."""
    text = host.lower()
    if is_ip_address(text):
        address = ipaddress.ip_address(text)
        text = f"[{address.compressed}]" if address.version == 6 else address.compressed
    return f"{text}:{port}"
