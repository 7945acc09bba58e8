"""Load a Python file that is not in a package (a filter plugin, a program a role runs on the
nodes) as a module, for unit tests: as it reaches a node, its ``# mpictl-include:`` lines
replaced by the shared code they name (mpictl.programs.expand)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from mpictl import programs


def load(name: str, path: Path) -> ModuleType:
    text = path.read_text()
    if not programs.INCLUDE.search(text):
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    module = ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module  # (dataclasses look their module up)
    exec(compile(programs.expand(text), str(path), "exec"), module.__dict__)  # noqa: S102
    return module
