#!/usr/bin/python
"""Ansible module of the mpi_environment role: drop-ins → /etc/environment and ld.so.conf.d."""

from __future__ import annotations

import json
import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: mpictl_environment
short_description: Render PATH and LD_LIBRARY_PATH of a node from the mpictl drop-ins
description:
  - Optionally writes the drop-in C(<dropin_dir>/<component>.json) of one component, then
    re-renders the C(PATH) and C(LD_LIBRARY_PATH) lines of the environment file and the
    ld.so.conf.d file from all drop-ins. Other lines of the environment file stay as they are.
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
  ld_conf_header: {type: str, default: "", description: Comment lines at the top of ld_conf_file.}
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


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dropin_dir=dict(type="path", required=True),
            environment_file=dict(type="path", required=True),
            ld_conf_file=dict(type="path", required=True),
            base_path=dict(type="list", elements="str", required=True),
            component=dict(type="str"),
            order=dict(type="int", default=50),
            paths=dict(type="list", elements="str", default=[]),
            library_paths=dict(type="list", elements="str", default=[]),
            ld_conf_header=dict(type="str", default=""),
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
    path_dirs = _dedupe([d for _, _, paths, _ in dropins for d in paths] + p["base_path"])
    lib_dirs = _dedupe([d for _, _, _, libs in dropins for d in libs])
    path_value = ":".join(path_dirs)
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

    header = p["ld_conf_header"]
    if header and not header.endswith("\n"):
        header += "\n"
    ld_after = header + "".join(d + "\n" for d in lib_dirs)
    ld_before = _read(p["ld_conf_file"])
    ld_changed = ld_after != ld_before
    if ld_changed:
        changed_files.append(p["ld_conf_file"])
        diff.append(
            {
                "before_header": p["ld_conf_file"],
                "after_header": p["ld_conf_file"],
                "before": ld_before or "",
                "after": ld_after,
            }
        )
        if not module.check_mode:
            os.makedirs(os.path.dirname(p["ld_conf_file"]), mode=0o755, exist_ok=True)
            _write_atomic(module, p["ld_conf_file"], ld_after)
            if p["ldconfig"]:
                ldconfig = module.get_bin_path(
                    "ldconfig", required=True, opt_dirs=["/sbin", "/usr/sbin"]
                )
                rc, _, err = module.run_command([ldconfig])
                if rc != 0:
                    module.fail_json(msg=f"ldconfig failed: {err.strip()}")

    module.exit_json(
        changed=bool(changed_files),
        changed_files=changed_files,
        path=path_value,
        ld_library_path=lib_value,
        components=[name for _, name, _, _ in dropins],
        diff=diff,
    )


if __name__ == "__main__":
    main()
