"""What the ssh_mesh role manages on a node, read in one round trip (run by the node's python3
with one JSON argument; prints one JSON object). Reads only; changes nothing. Files are described
by mode, owner and sha256, never by content: the private key never leaves the node; of the
node's own key pair only the public half is reported."""

import glob
import grp
import hashlib
import json
import os
import pwd
import socket
import subprocess
import sys

args = json.loads(sys.argv[1])


def describe(path, digest=False):
    try:
        st = os.stat(path)
    except OSError:
        return None
    out = {"mode": "%04o" % (st.st_mode & 0o7777), "uid": st.st_uid, "gid": st.st_gid}
    if digest:
        with open(path, "rb") as handle:
            out["sha256"] = hashlib.sha256(handle.read()).hexdigest()
    return out


try:
    user = pwd.getpwnam(args["user"])
    account = {"uid": user.pw_uid, "gid": user.pw_gid, "home": user.pw_dir, "shell": user.pw_shell}
    # /etc/shadow read directly (the spwd module is gone from Python 3.13).
    with open("/etc/shadow", encoding="utf-8") as handle:
        fields = [line.split(":") for line in handle]
    account["locked"] = any(f[0] == args["user"] and f[1] == "*" for f in fields if len(f) > 1)
except (KeyError, OSError):
    account = None

try:
    group_gid = grp.getgrnam(args["group"]).gr_gid
except KeyError:
    group_gid = None

ssh_dir = os.path.join(args["home"], ".ssh")


def key_words(text):
    """An OpenSSH public key line without its comment: type and key."""
    return " ".join(text.split()[:2])


def node_key():
    """The public half of the node's own key pair, derived from the private key itself (the .pub
    file could disagree with it), without a comment; '' when there is no usable private key."""
    private = os.path.join(ssh_dir, "id_ed25519")
    if not os.path.isfile(private):
        return ""
    try:
        proc = subprocess.run(
            ["ssh-keygen", "-y", "-P", "", "-f", private],
            capture_output=True,
            text=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return key_words(proc.stdout) if proc.returncode == 0 else ""


def public_file_words():
    try:
        with open(os.path.join(ssh_dir, "id_ed25519.pub"), encoding="utf-8") as handle:
            return key_words(handle.read())
    except (OSError, UnicodeDecodeError):
        return ""


derived = node_key()

host_keys = []
for path in sorted(glob.glob("/etc/ssh/ssh_host_*_key.pub")):
    with open(path, encoding="utf-8") as handle:
        host_keys.append(handle.read().strip())


def ip(*args):
    try:
        return subprocess.run(
            ["ip", "-o", "-4", *args], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def ipv4_addresses():
    """(interface, address) of every IPv4 address of the node (``ip -o -4 addr show``)."""
    found = []
    for line in ip("addr", "show").splitlines():
        fields = line.split()
        if "inet" in fields and len(fields) > 1:
            found.append((fields[1], fields[fields.index("inet") + 1].split("/")[0]))
    return found


def default_interface():
    for line in ip("route", "show", "default").splitlines():
        fields = line.split()
        if "dev" in fields:
            return fields[fields.index("dev") + 1]
    return ""


# The names and addresses other nodes may reach this one by (known_hosts lists them all), read
# fresh each run: a renamed or re-addressed node is pinned under its new names.
addresses = ipv4_addresses()
route_dev = default_interface()  # once: the generator below would run `ip route` per address
names = {
    "hostname": socket.gethostname().split(".")[0],
    "fqdn": socket.getfqdn(),
    "ipv4": [address for _, address in addresses],
    "default_ipv4": next((a for dev, a in addresses if dev == route_dev), ""),
}

print(
    json.dumps(
        {
            "account": account,
            "group_gid": group_gid,
            "ssh_dir": describe(ssh_dir),
            "private_key": describe(os.path.join(ssh_dir, "id_ed25519"), digest=True),
            "public_key": describe(os.path.join(ssh_dir, "id_ed25519.pub"), digest=True),
            "authorized_keys": describe(os.path.join(ssh_dir, "authorized_keys"), digest=True),
            "node_key": derived,
            "public_key_matches": bool(derived) and public_file_words() == derived,
            "known_hosts": describe(args["known_hosts"], digest=True),
            "config": describe(os.path.join(ssh_dir, "config"), digest=True),
            "host_keys": host_keys,
            "names": names,
        }
    )
)
