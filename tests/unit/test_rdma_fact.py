"""The ``mpi_rdma_ports`` fact: every provision's node probe (playbooks/files/mpictl_node_state.py)
reads the HCA ports from sysfs, validate.yml caches them where they changed, and the job side's
transport reads them (mpictl.transport). The sysfs tree here is built by the test in the kernel's
layout and format (``/sys/class/infiniband/<dev>/ports/<n>/{state,rate,link_layer}``); the
readers on recorded trees of real nodes: test_rdma_recordings.py."""

from __future__ import annotations

import json
from pathlib import Path

from mpictl import rdma
from tests.unit.loader import load

ROOT = Path(__file__).resolve().parents[2]
node_state = load("mpictl_node_state", ROOT / "playbooks" / "files" / "mpictl_node_state.py")
state_filters = load("mpictl_state", ROOT / "filter_plugins" / "mpictl_state.py")


def sysfs(tmp_path: Path, ports: dict[str, tuple[str, str, str]]) -> Path:
    root = tmp_path / "infiniband"
    for name, (state, rate, layer) in ports.items():
        device, port = name.split(":")
        d = root / device / "ports" / port
        d.mkdir(parents=True)
        (d / "state").write_text(state + "\n")
        (d / "rate").write_text(rate + "\n")
        (d / "link_layer").write_text(layer + "\n")
    return root


def test_the_probe_reads_every_port_in_the_parsers_format(tmp_path: Path) -> None:
    root = sysfs(
        tmp_path,
        {
            "mlx5_1:1": ("4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand"),
            "mlx5_0:1": ("1: DOWN", "10 Gb/sec (4X SDR)", "InfiniBand"),
            "mlx5_bond_0:1": ("4: ACTIVE", "200 Gb/sec (2X NDR)", "Ethernet"),
        },
    )
    lines = node_state.rdma_ports(str(root))
    assert lines == [
        "port mlx5_0 1 1: DOWN|10 Gb/sec (4X SDR)|InfiniBand|",  # no hca_type file here
        "port mlx5_1 1 4: ACTIVE|400 Gb/sec (4X NDR)|InfiniBand|",
        "port mlx5_bond_0 1 4: ACTIVE|200 Gb/sec (2X NDR)|Ethernet|",
    ]
    parsed = rdma.parse_ports(lines)
    assert [(p.name, p.active, p.rate_gbit) for p in parsed] == [
        ("mlx5_0:1", False, 10.0),
        ("mlx5_1:1", True, 400.0),
        ("mlx5_bond_0:1", True, 200.0),
    ]
    assert node_state.rdma_ports(str(tmp_path / "none")) == []


def test_only_nodes_whose_gpus_or_ports_changed_are_cached_again() -> None:
    def host(gpus: int, rdma_lines: list[str], cached: dict[str, object]) -> dict[str, object]:
        stdout = json.dumps({"gpus": gpus, "rdma": rdma_lines})
        return {"__mpictl_node_state": {"stdout": stdout}, **cached}

    line = "port mlx5_0 1 4: ACTIVE|400 Gb/sec (4X NDR)|InfiniBand"
    hostvars = {
        "same": host(8, [line], {"mpi_gpu_count": "8", "mpi_rdma_ports": [line]}),
        "new-port": host(8, [line], {"mpi_gpu_count": 8, "mpi_rdma_ports": []}),
        "never": host(0, [], {}),
        "bare": host(0, [], {"mpi_gpu_count": 0, "mpi_rdma_ports": []}),
    }
    changed = state_filters.mpictl_probed_facts_changed(list(hostvars), hostvars)
    assert changed == ["new-port", "never"]


def test_the_node_state_command_the_playbooks_send_runs_with_its_reader_in_place() -> None:
    """playbooks/group_vars/all.yml's ``_mpictl_node_state_command``, rendered as Ansible
    renders it (the filter mpictl_program puts hca_ports.py in place), runs a probe."""
    import shlex
    import subprocess

    import jinja2
    import yaml

    from tests.unit.loader import load as load_plugin

    command = yaml.safe_load((ROOT / "playbooks" / "group_vars" / "all.yml").read_text())[
        "_mpictl_node_state_command"
    ]
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    plugin = load_plugin("mpictl_program", ROOT / "filter_plugins" / "mpictl_program.py")
    env.filters.update(quote=shlex.quote, **plugin.FilterModule().filters())
    text = env.from_string(command).render(
        playbook_dir=str(ROOT / "playbooks"),
        lookup=lambda _kind, path: Path(path).read_text().rstrip("\n"),
    )
    from mpictl import programs

    assert not programs.INCLUDE.search(text) and "def rdma_ports(" in text
    request = json.dumps({"mode": "probe", "inputs": {}, "cuda_homes": []})
    proc = subprocess.run(
        ["sh", "-c", f"{text} {shlex.quote(request)}"], capture_output=True, text=True, timeout=60
    )
    answer = json.loads(proc.stdout)
    assert isinstance(answer["rdma"], list) and "converged" in answer, answer
