# The one reader of the RDMA ports the kernel shows in sysfs, for every node program that needs
# them: doctor's probe (doctor_probe.py), the provision's node state
# (playbooks/files/mpictl_node_state.py: the fact mpi_rdma_ports that picks the transport),
# fabric's node probe (fabric_node.sh) and the node health program (node_health.py).
#
# Node programs travel alone (python3's stdin over ssh, a raw command, a file a role installs),
# so this text takes the place of each program's line "# mpictl-include: hca_ports.py" when the
# program is sent or installed (mpictl.programs.source; the filter mpictl_program for the
# playbooks and roles); it is never imported on a node. Standard library only, and no
# `from __future__` (it lands in the middle of a program).
import os as _hca_os

IB_ROOT = "/sys/class/infiniband"


def rdma_ports(root: str = IB_ROOT) -> list[str]:
    """Each RDMA port under ``root`` with a readable ``state``, as a
    ``port DEV N STATE|RATE|LINK_LAYER|HCA_TYPE`` line (mpictl.rdma.parse_ports reads them),
    e.g. ``port mlx5_0 1 4: ACTIVE|400 Gb/sec (4X NDR)|InfiniBand|MT4129``."""

    def text(path: str):  # -> str | None (no annotation: Python < 3.10 evaluates it)
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read().strip()
        except OSError:
            return None

    out = []
    devices = sorted(_hca_os.listdir(root)) if _hca_os.path.isdir(root) else []
    for device in devices:
        ports = _hca_os.path.join(root, device, "ports")
        for port in sorted(_hca_os.listdir(ports)) if _hca_os.path.isdir(ports) else []:
            state = text(_hca_os.path.join(ports, port, "state"))
            if state is None:
                continue
            fields = [state] + [
                text(_hca_os.path.join(ports, port, name)) or "" for name in ("rate", "link_layer")
            ]
            fields.append(text(_hca_os.path.join(root, device, "hca_type")) or "")
            out.append(f"port {device} {port} " + "|".join(fields))
    return out
