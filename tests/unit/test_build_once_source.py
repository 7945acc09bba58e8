"""roles/build_once/tasks/source.yml, the one place every build role's sources are fetched and
checked on the controller, run by ansible-playbook on localhost: a site's own file with the wrong
sha256 or no file at all stops the run in one line naming each; the right file passes; with
build_once_source_skip_cached, a complete artifact in the cache built from these sources (its
.json and .sha256) means no source is needed, and an incomplete one (no .sha256) does not."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def run(tmp_path: Path, sources: list[dict[str, str]], skip_cached: bool) -> tuple[int, str]:
    play = [
        {
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "vars": {"mpictl_cache_dir": str(tmp_path / "cache")},
            "tasks": [
                {
                    "ansible.builtin.include_role": {"name": "build_once", "tasks_from": "source"},
                    "vars": {
                        "build_once_name": "demo",
                        "build_once_sources": sources,
                        "build_once_source_skip_cached": skip_cached,
                    },
                }
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    # an inventory file of its own: localhost only, never the checkout's sandbox
    hosts = {"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(hosts))
    env: dict[str, Any] = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    playbook = str(Path(sys.executable).parent / "ansible-playbook")
    proc = subprocess.run(
        [playbook, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    return proc.returncode, proc.stdout + proc.stderr


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_wrong_or_missing_source_stops_in_one_line_and_a_right_one_passes(
    tmp_path: Path,
) -> None:
    good, bad = tmp_path / "good.tar.gz", tmp_path / "bad.tar.gz"
    good.write_bytes(b"good")
    bad.write_bytes(b"bad")
    want = sha(good)
    sources = [
        {"file": str(good), "url": "", "sha256": want},
        {"file": str(bad), "url": "", "sha256": want},
        {"file": str(tmp_path / "none.tar.gz"), "url": "", "sha256": want},
    ]
    code, out = run(tmp_path, sources, skip_cached=False)
    assert code != 0
    assert (
        f'"msg": "demo: {bad} has sha256 {sha(bad)}, expected {want}; '
        f'{tmp_path}/none.tar.gz does not exist; nothing was built or installed"'
    ) in out, out
    assert str(good) + " " not in out.split('"msg"')[1]

    code, out = run(tmp_path, sources[:1], skip_cached=False)
    assert code == 0, out


def test_an_artifact_built_from_these_sources_needs_none(tmp_path: Path) -> None:
    want = "a" * 64
    sources = [{"file": str(tmp_path / "absent.tar.gz"), "url": "", "sha256": want}]
    cached = tmp_path / "cache" / "artifacts" / "demo" / "f00.tar.gz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"artifact")
    Path(f"{cached}.json").write_text(json.dumps({"inputs": {"source_sha256": want}}))
    code, out = run(tmp_path, sources, skip_cached=True)
    assert code != 0 and "absent.tar.gz does not exist" in out, out  # no .sha256: incomplete
    Path(f"{cached}.sha256").write_text(f"{sha(cached)}  f00.tar.gz\n")
    code, out = run(tmp_path, sources, skip_cached=True)
    assert code == 0, out
    code, out = run(tmp_path, sources, skip_cached=False)  # a build needs it
    assert code != 0 and "absent.tar.gz does not exist" in out, out
    Path(f"{cached}.json").write_text(json.dumps({"inputs": {"source_sha256": "b" * 64}}))
    code, out = run(tmp_path, sources, skip_cached=True)  # built from another source
    assert code != 0 and "absent.tar.gz does not exist" in out, out
