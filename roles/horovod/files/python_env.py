"""The Python environment horovod_python names, as the horovod role needs it (run by that
interpreter with the requirements Horovod's build needs as arguments, e.g. `numpy`
`cffi>=1.4.0`; prints one JSON object). Reads only, and never imports PyTorch (seconds per
node): its version and CUDA build come from torch/version.py; TensorFlow's (never imported
either) from its distribution's metadata and build_info.py.

{"runs": true, "python": "311", "prefix": "/opt/env", "pip": true,
 "torch": {"version": "2.13.0+cpu", "cuda": null},   ("torch": null when it is not installed)
 "tensorflow": {"dist": "tensorflow_cpu", "version": "2.15.1", "cuda": null},
                                                     (null when it is not installed; "cuda" from
                                                      tensorflow/python/platform/build_info.py)
 "satisfied": ["numpy", "cffi>=1.4.0"],              (arguments already met: not downloaded)
 "cmake": "3.31.6"}                                  (the environment's own bin/cmake, or null)
"""

import ast
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
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


# The distributions that install the `tensorflow` package, the usual ones first.
TF_DISTS = (
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-gpu",
    "tensorflow-intel",
    "tensorflow-aarch64",
    "tensorflow-rocm",
    "intel-tensorflow",
    "tf-nightly",
    "tf-nightly-cpu",
)


def tensorflow_build():
    """TensorFlow's distribution (as its .dist-info directory spells it), version and CUDA."""
    for name in TF_DISTS:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        cuda = None
        spec = importlib.util.find_spec("tensorflow")
        if spec is not None and spec.submodule_search_locations:
            base = list(spec.submodule_search_locations)[0]
            try:
                with open(os.path.join(base, "python", "platform", "build_info.py"),
                          encoding="utf-8") as handle:  # fmt: skip
                    text = handle.read()
            except OSError:
                text = ""
            if re.search(r"['\"]is_cuda_build['\"]\s*[:,]\s*True", text):
                m = re.search(r"['\"]cuda_version['\"]\s*[:,]\s*['\"]([^'\"]*)['\"]", text)
                cuda = m.group(1) if m else "unknown"
        return {"dist": re.sub(r"[-.]+", "_", name), "version": version, "cuda": cuda}
    return None


def release(version):
    """The numeric release of a version string: "2.1.3rc1" -> (2, 1, 3)."""
    parts = []
    for piece in version.split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
        if m.group() != piece:
            break
    return tuple(parts)


def satisfied(requirement):
    """Whether NAME or NAME>=VERSION is installed in this environment."""
    m = re.match(r"^([A-Za-z0-9_.-]+)\s*(?:>=\s*([0-9][0-9.]*))?$", requirement.strip())
    if not m:
        return False  # another specifier: leave it to pip
    try:
        have = importlib.metadata.version(m.group(1))
    except importlib.metadata.PackageNotFoundError:
        return False
    return m.group(2) is None or release(have) >= release(m.group(2))


def cmake_version():
    """The version of the environment's own cmake (pip's cmake package puts one in bin/)."""
    path = os.path.join(os.path.dirname(sys.executable), "cmake")
    if not os.access(path, os.X_OK):
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"cmake version (\d+\.\d+(?:\.\d+)?)", out)
    return m.group(1) if m else None


print(
    json.dumps(
        {
            "runs": True,
            "python": f"{sys.version_info[0]}{sys.version_info[1]}",
            "prefix": sys.prefix,
            "pip": importlib.util.find_spec("pip") is not None,
            "torch": torch_build(),
            "tensorflow": tensorflow_build(),
            "satisfied": [r for r in sys.argv[1:] if satisfied(r)],
            "cmake": cmake_version(),
        }
    )
)
