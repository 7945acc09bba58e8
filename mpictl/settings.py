"""Values the roles and the job side share: the MPI user and where the roles put things on nodes.

Their one home is ``roles/cluster_defaults/defaults/main.yml`` (literal values), which every role
that uses one depends on. The job side (run, smoke, bench, doctor) reads them from the head's
inventory variables, falling back to that same file, so a site that sets ``mpi_hostfile_path`` or
``mpi_cluster_venv`` in its inventory moves the roles and the CLI together.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpictl import paths, role_vars
from mpictl.errors import InventoryError
from mpictl.inputs import quoted, shown
from mpictl.inventory import Cluster

#: The frameworks Horovod can be built for (horovod_frameworks), in the order smoke runs them.
HOROVOD_FRAMEWORKS = ("pytorch", "tensorflow")

KEYS = {
    "user": "mpi_user",
    "venv": "mpi_cluster_venv",
    "hostfile": "mpi_hostfile_path",
    "tools_dir": "mpi_tools_dir",
    "bin_dir": "mpi_bin_dir",
    "health_program": "mpi_health_program",
    "monitoring_config": "mpi_monitoring_config",
}


@dataclass(frozen=True)
class ClusterSettings:
    user: str  # the MPI user (jobs run as this user on every node)
    venv: str  # the cluster venv
    hostfile: str  # the hostfile the hostfile role renders
    tools_dir: str  # the smoke and bench programs (mpi_jobs role)
    bin_dir: str  # the torch environment wrapper (mpi_jobs role)
    health_program: str  # the node health program (health role; Slurm runs <it>-slurm)
    # where Prometheus answers, written by the monitoring role (`mpictl status` reads it)
    monitoring_config: str = ""
    # The interpreter Horovod was built into when it is not the cluster venv's (the horovod
    # role's horovod_python; "" = the cluster venv).
    horovod_python: str = ""
    # The frameworks Horovod was built for (the horovod role's horovod_frameworks): smoke runs
    # the Horovod suite under each
    horovod_frameworks: tuple[str, ...] = ("pytorch",)
    # mpi_transport: auto, ucx or tcp (mpictl.transport)
    transport: str = "auto"
    # ucx_enabled, ucc_enabled: auto, true or false, the ucx and ucc roles' own tri-states as
    # role_vars checks them (mpictl.transport decides on them: false builds nothing, so no job
    # runs over it)
    ucx_enabled: str = "auto"
    ucc_enabled: str = "auto"
    # mpi_shared_dir: a filesystem the site mounts on every node ("" none): jobs get it as
    # MPICTL_SHARED_DIR, doctor proves it is one filesystem
    shared_dir: str = ""

    @property
    def venv_python(self) -> str:
        return f"{self.venv}/bin/python"

    @property
    def horovod_interpreter(self) -> str:
        """The Python that has Horovod: horovod_python where set, else the cluster venv's."""
        return self.horovod_python or self.venv_python

    @property
    def torch_env(self) -> str:
        return f"{self.bin_dir}/mpictl-torch-env"

    @property
    def tf_env(self) -> str:
        return f"{self.bin_dir}/mpictl-tf-env"

    def tool(self, name: str) -> str:
        """Path of one of the job side's programs (``smoke_mpi.py``, ...) on the nodes."""
        return f"{self.tools_dir}/{name}"


def defaults_file() -> Path:
    return paths.roles_dir() / "cluster_defaults" / "defaults" / "main.yml"


@functools.cache
def defaults() -> dict[str, str]:
    """The shared defaults (variable name -> value), read from the roles' own file."""
    import yaml

    path = defaults_file()
    data = yaml.safe_load(path.read_text())
    missing = [var for var in KEYS.values() if not isinstance((data or {}).get(var), str)]
    if missing:
        raise InventoryError(f"{path}: {', '.join(missing)} must be set (strings)")
    return {var: data[var] for var in KEYS.values()}


def _template(value: Any, variables: Mapping[str, Any]) -> Any:
    if not isinstance(value, str) or "{{" not in value:
        return value
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    try:  # ansible-core 2.19 templates only trusted strings; inventory values are the site's own
        from ansible.template import trust_as_template

        value = trust_as_template(value)
    except ImportError:
        pass
    try:
        return Templar(loader=DataLoader(), variables=dict(variables)).template(value)
    except Exception as exc:  # noqa: BLE001 - Ansible raises many kinds; one line for the user
        first = shown(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        raise InventoryError(f"cannot template {quoted(value)}: {first}") from None


def for_cluster(cluster: Cluster) -> ClusterSettings:
    """The head's values of the shared variables (inventory first, then the shared defaults),
    templated, each checked by its declared rule (:mod:`mpictl.role_vars`, the one home of the
    rules: ``mpi_user`` a login name, it follows ``ssh -l`` and owns every job; the paths
    absolute node paths of plain characters, they go into remote command lines)."""
    base = defaults()
    head_vars = {**(cluster.head.facts or {}), **base, **(cluster.head.vars or {})}
    head = shown(cluster.head.name)
    specs = role_vars.load_specs(paths.roles_dir())

    def value_of(var: str, default: Any) -> Any:
        value = _template(head_vars.get(var, default), head_vars)
        why, done = role_vars.converted(specs[var], value)
        if why:
            raise InventoryError(f"{head}: {var} {quoted(value)}: {why} ({specs[var].where})")
        return done

    values = {field: value_of(var, base[var]) for field, var in KEYS.items()}
    values = {f: v if f == "user" else v.rstrip("/") for f, v in values.items()}
    frameworks = value_of("horovod_frameworks", ["pytorch"])
    shared = value_of("mpi_shared_dir", "")
    return ClusterSettings(
        **values,
        horovod_python=value_of("horovod_python", ""),
        horovod_frameworks=tuple(dict.fromkeys(frameworks)),
        transport=value_of("mpi_transport", "auto").lower(),
        ucx_enabled=value_of("ucx_enabled", "auto"),
        ucc_enabled=value_of("ucc_enabled", "auto"),
        shared_dir=shared.rstrip("/"),
    )
