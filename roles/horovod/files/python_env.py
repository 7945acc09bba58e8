"""The Python environment horovod_python names, as the horovod role needs it (run by that
interpreter; prints one JSON object). Reads only, and never imports PyTorch (seconds per node):
its version and CUDA build come from torch/version.py.

{"runs": true, "python": "311", "prefix": "/opt/env", "pip": true,
 "torch": {"version": "2.13.0+cpu", "cuda": null}}   ("torch": null when it is not installed)
"""

import ast
import importlib.util
import json
import os
import re
import sys


def torch_build():
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    values = {"version": None, "cuda": None}
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return None
    for key, name in (("version", "__version__"), ("cuda", "cuda")):
        m = re.search(r"^" + name + r"\s*(?::[^=\n]*)?=\s*(.+)$", text, re.M)
        if m:
            try:
                values[key] = ast.literal_eval(m.group(1).strip())
            except (ValueError, SyntaxError):
                values[key] = None
    return values if values["version"] else None


print(
    json.dumps(
        {
            "runs": True,
            "python": f"{sys.version_info[0]}{sys.version_info[1]}",
            "prefix": sys.prefix,
            "pip": importlib.util.find_spec("pip") is not None,
            "torch": torch_build(),
        }
    )
)
