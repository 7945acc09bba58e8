"""What the ssh_mesh role manages on a node, read in one round trip (run by the node's python3
with one JSON argument; prints one JSON object). Reads only; changes nothing. Files are described
by mode, owner and sha256, never by content (the private key stays on the node)."""

import glob
import grp
import hashlib
import json
import os
import pwd
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
try:
    with open(os.path.join(ssh_dir, "authorized_keys"), encoding="utf-8") as handle:
        authorized = args["public_key"] in handle.read().splitlines()
except OSError:
    authorized = False

host_keys = []
for path in sorted(glob.glob("/etc/ssh/ssh_host_*_key.pub")):
    with open(path, encoding="utf-8") as handle:
        host_keys.append(handle.read().strip())

print(
    json.dumps(
        {
            "account": account,
            "group_gid": group_gid,
            "ssh_dir": describe(ssh_dir),
            "private_key": describe(os.path.join(ssh_dir, "id_ed25519"), digest=True),
            "public_key": describe(os.path.join(ssh_dir, "id_ed25519.pub"), digest=True),
            "authorized_keys": describe(os.path.join(ssh_dir, "authorized_keys")),
            "authorized": authorized,
            "known_hosts": describe(args["known_hosts"], digest=True),
            "config": describe(os.path.join(ssh_dir, "config"), digest=True),
            "host_keys": host_keys,
        }
    )
)
