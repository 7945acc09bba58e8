#!/usr/bin/python
"""Ansible module of the mpi_environment role: drop-ins → /etc/environment, ld.so.conf.d and the
login shells' /etc/profile.d script."""

from __future__ import annotations

import json
import os
import re
import shlex
import tempfile

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: mpictl_environment
short_description: Render PATH and LD_LIBRARY_PATH of a node from the mpictl drop-ins
description:
  - Optionally writes the drop-in C(<dropin_dir>/<component>.json) of one component, then
    re-renders the C(PATH) and C(LD_LIBRARY_PATH) lines of the environment file, the
    ld.so.conf.d file and (when C(profile_file) is given) the login shells' profile script from
    all drop-ins. Other lines of the environment file stay as they are.
  - The profile script (POSIX sh) puts the contributed directories in front of C(PATH) and
    C(LD_LIBRARY_PATH), each once, in the order of the environment file; a directory already
    there is moved to its place, other entries keep their order.
  - Every write is atomic (temporary file in the same directory, then rename).
  - Runs C(ldconfig) when the ld.so.conf.d file changed.
options:
  dropin_dir: {type: path, required: true, description: Directory of the drop-ins.}
  environment_file: {type: path, required: true, description: Usually /etc/environment.}
  ld_conf_file: {type: path, required: true, description: The ld.so.conf.d file owned here.}
  base_path: {type: list, elements: str, required: true, description: PATH after contributions.}
  component: {type: str, description: Name of the drop-in to write (none to only re-render).}
  order: {type: int, default: 50, description: Drop-ins are ordered by (order, component).}
  paths: {type: list, elements: str, default: [], description: Absolute dirs for PATH.}
  library_paths: {type: list, elements: str, default: [], description: Absolute dirs for libs.}
  profile_file:
    type: path
    description: The /etc/profile.d script of login shells (not rendered when unset).
  header:
    type: str
    default: ""
    aliases: [ld_conf_header]
    description: Comment lines at the top of ld_conf_file and profile_file.
  ldconfig: {type: bool, default: true, description: Run ldconfig when ld_conf_file changed.}
"""


COMPONENT_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
MARKER = "# PATH and LD_LIBRARY_PATH below are managed by mpictl (drop-ins in {dir})"


def _dedupe(items):
    seen = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def _check_dirs(kind, dirs):
    for d in dirs:
        if not isinstance(d, str) or not d.startswith("/") or ":" in d or "\n" in d or '"' in d:
            return f"{kind}: '{d}' is not an absolute directory path (no ':' or quotes)"
    return None


def _read(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def _write_atomic(module, path, text, mode=0o644):
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".mpictl-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        module.atomic_move(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _dropin_text(component, order, paths, library_paths):
    data = {
        "component": component,
        "order": order,
        "paths": paths,
        "library_paths": library_paths,
    }
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _load_dropins(module, dropin_dir, pending):
    """All drop-ins of ``dropin_dir``; ``pending`` maps file name → text not yet written."""
    texts = dict(pending)
    if os.path.isdir(dropin_dir):
        for name in os.listdir(dropin_dir):
            if name.endswith(".json") and name not in texts:
                texts[name] = _read(os.path.join(dropin_dir, name)) or ""
    dropins = []
    for name, text in texts.items():
        where = os.path.join(dropin_dir, name)
        try:
            data = json.loads(text)
            order = int(data.get("order", 50))
            paths = list(data.get("paths", []))
            libs = list(data.get("library_paths", []))
        except (ValueError, TypeError, AttributeError) as exc:
            module.fail_json(msg=f"{where}: not a valid mpictl drop-in ({exc})")
        for kind, dirs in (("paths", paths), ("library_paths", libs)):
            err = _check_dirs(kind, dirs)
            if err:
                module.fail_json(msg=f"{where}: {err}")
        dropins.append((order, name[: -len(".json")], paths, libs))
    return sorted(dropins)


def render_environment(current, path_value, lib_value, marker):
    """``current`` with its PATH / LD_LIBRARY_PATH lines replaced; other lines kept as they are."""
    lines = current.splitlines() if current else []
    wanted = {"PATH": f'PATH="{path_value}"'}
    if lib_value:
        wanted["LD_LIBRARY_PATH"] = f'LD_LIBRARY_PATH="{lib_value}"'
    key_re = re.compile(r"^\s*(?:export\s+)?(PATH|LD_LIBRARY_PATH)\s*=")
    out = []
    placed = set()
    for line in lines:
        if line == marker:
            continue
        match = key_re.match(line)
        if not match:
            out.append(line)
            continue
        key = match.group(1)
        if key in wanted and key not in placed:
            if not placed:
                out.append(marker)
            out.append(wanted[key])
            placed.add(key)
    missing = [k for k in ("PATH", "LD_LIBRARY_PATH") if k in wanted and k not in placed]
    if missing:
        if not placed:
            out.append(marker)
        out.extend(wanted[k] for k in missing)
    return "\n".join(out) + "\n"


# The body of the login shells' script; dash-compatible POSIX sh, shellcheck-clean
# (tests/unit/test_mpi_environment_render.py runs it under sh and bash and lints it).
PROFILE_FUNCTION = r"""_mpictl_front() {
    # _mpictl_r := the colon list $1 with the directories $2... in front, in that order, each
    # once; the list's other entries (empty ones too) keep their order.
    _mpictl_r=":$1:"
    shift
    _mpictl_f=
    for _mpictl_d in "$@"; do
        while :; do
            case $_mpictl_r in
                *":$_mpictl_d:"*)
                    _mpictl_r="${_mpictl_r%%":$_mpictl_d:"*}:${_mpictl_r#*":$_mpictl_d:"}" ;;
                *) break ;;
            esac
        done
        _mpictl_f="$_mpictl_f${_mpictl_f:+:}$_mpictl_d"
    done
    _mpictl_r="${_mpictl_r#:}"
    _mpictl_r="${_mpictl_r%:}"
    _mpictl_r="$_mpictl_f${_mpictl_r:+:}$_mpictl_r"
}
"""


def render_profile(header, path_dirs, lib_dirs, dropin_dir):
    """The /etc/profile.d script of login shells: ``path_dirs`` / ``lib_dirs`` (the contributed
    directories, in the order of the environment file) in front of PATH / LD_LIBRARY_PATH."""
    if header and not header.endswith("\n"):
        header += "\n"
    out = [
        header,
        f"# PATH and LD_LIBRARY_PATH of login shells, from the mpictl drop-ins in {dropin_dir}\n",
        "# (the same directories, in the same order, as /etc/environment gives every SSH\n",
        "# session). Each directory is put in front once; one already there moves to its place.\n",
    ]
    if not path_dirs and not lib_dirs:
        out.append("# Nothing is contributed.\n")
        return "".join(out)
    out.append(PROFILE_FUNCTION)
    for var, dirs in (("PATH", path_dirs), ("LD_LIBRARY_PATH", lib_dirs)):
        if dirs:
            if any(c in d for d in dirs for c in "$`"):  # a directory named so, quoted literally
                out.append("# shellcheck disable=SC2016\n")
            quoted = " ".join(shlex.quote(d) for d in dirs)
            out.append(f'_mpictl_front "${{{var}:-}}" {quoted}\n')
            out.append(f'{var}="$_mpictl_r"\nexport {var}\n')
    out.append("unset -f _mpictl_front\nunset _mpictl_r _mpictl_f _mpictl_d\n")
    return "".join(out)


def _render_file(module, path, text, changed_files, diff):
    """Write ``text`` to ``path`` (mode 0644) unless it holds it already; True when it changed."""
    before = _read(path)
    if text == before:
        return False
    changed_files.append(path)
    diff.append(
        {"before_header": path, "after_header": path, "before": before or "", "after": text}
    )
    if not module.check_mode:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        _write_atomic(module, path, text)
    return True


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dropin_dir=dict(type="path", required=True),
            environment_file=dict(type="path", required=True),
            ld_conf_file=dict(type="path", required=True),
            profile_file=dict(type="path"),
            base_path=dict(type="list", elements="str", required=True),
            component=dict(type="str"),
            order=dict(type="int", default=50),
            paths=dict(type="list", elements="str", default=[]),
            library_paths=dict(type="list", elements="str", default=[]),
            header=dict(type="str", default="", aliases=["ld_conf_header"]),
            ldconfig=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    changed_files = []
    pending = {}
    if p["component"] is not None:
        if not COMPONENT_RE.match(p["component"]):
            module.fail_json(
                msg=f"mpi_env_component '{p['component']}' must match {COMPONENT_RE.pattern}"
            )
        contributed = (("mpi_env_paths", p["paths"]), ("mpi_env_library_paths", p["library_paths"]))
        for kind, dirs in contributed:
            err = _check_dirs(kind, dirs)
            if err:
                module.fail_json(msg=f"component {p['component']}: {err}")
        name = p["component"] + ".json"
        text = _dropin_text(p["component"], p["order"], p["paths"], p["library_paths"])
        dropin = os.path.join(p["dropin_dir"], name)
        if _read(dropin) != text:
            changed_files.append(dropin)
            if not module.check_mode:
                os.makedirs(p["dropin_dir"], mode=0o755, exist_ok=True)
                _write_atomic(module, dropin, text)
        pending[name] = text

    dropins = _load_dropins(module, p["dropin_dir"], pending)
    # The contributed dirs, in order; /etc/environment's PATH is them, then the base PATH.
    contributed_paths = _dedupe([d for _, _, paths, _ in dropins for d in paths])
    path_value = ":".join(_dedupe(contributed_paths + p["base_path"]))
    lib_dirs = _dedupe([d for _, _, _, libs in dropins for d in libs])
    lib_value = ":".join(lib_dirs)

    diff = []
    env_file = p["environment_file"]
    env_before = _read(env_file)
    marker = MARKER.format(dir=p["dropin_dir"])
    env_after = render_environment(env_before or "", path_value, lib_value, marker)
    if env_after != env_before:
        changed_files.append(env_file)
        diff.append(
            {
                "before_header": env_file,
                "after_header": env_file,
                "before": env_before or "",
                "after": env_after,
            }
        )
        if not module.check_mode:
            mode = os.stat(env_file).st_mode & 0o7777 if env_before is not None else 0o644
            _write_atomic(module, env_file, env_after, mode)

    header = p["header"]
    if header and not header.endswith("\n"):
        header += "\n"
    ld_after = header + "".join(d + "\n" for d in lib_dirs)
    ld_changed = _render_file(module, p["ld_conf_file"], ld_after, changed_files, diff)
    if ld_changed and p["ldconfig"] and not module.check_mode:
        ldconfig = module.get_bin_path("ldconfig", required=True, opt_dirs=["/sbin", "/usr/sbin"])
        rc, _, err = module.run_command([ldconfig])
        if rc != 0:
            module.fail_json(msg=f"ldconfig failed: {err.strip()}")

    if p["profile_file"]:
        profile = render_profile(header, contributed_paths, lib_dirs, p["dropin_dir"])
        _render_file(module, p["profile_file"], profile, changed_files, diff)

    module.exit_json(
        changed=bool(changed_files),
        changed_files=changed_files,
        path=path_value,
        ld_library_path=lib_value,
        contributed_paths=contributed_paths,
        components=[name for _, name, _, _ in dropins],
        diff=diff,
    )


if __name__ == "__main__":
    main()
