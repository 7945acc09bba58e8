"""mpictl run: mpirun command construction (planner), validation, network derivation (network),
the session script (executor)."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from mpictl import executor, mpirun_plan, network, planner, programs
from mpictl.errors import UsageError
from tests.unit.jobside import cluster, facts, node, three

CMD = ["python", "train.py"]


def build(c=None, **kw):  # type: ignore[no-untyped-def]
    c = c or three()
    return mpirun_plan.plan(
        c,
        planner.LaunchOptions(command=kw.pop("command", CMD), **kw),
        "J1",
        network.derive_network(c),
    )


def opt_value(argv: list[str], flag: str, key: str | None = None) -> list[str]:
    """Values following ``flag`` (for --mca: the value of ``key``)."""
    out = []
    for i, a in enumerate(argv):
        if a == flag:
            if key is None:
                out.append(argv[i + 1])
            elif argv[i + 1] == key:
                out.append(argv[i + 2])
    return out


def test_default_command_uses_hostfile_all_slots_and_classic_flags() -> None:
    p = build()
    assert p.mpirun[:3] == ["mpirun", "--hostfile", "/etc/mpictl/hostfile"]
    assert opt_value(p.mpirun, "-np") == ["6"]
    assert opt_value(p.mpirun, "--bind-to") == ["none"]
    assert opt_value(p.mpirun, "--map-by") == ["slot"]
    assert {"PATH", "LD_LIBRARY_PATH"} <= set(opt_value(p.mpirun, "-x"))
    assert opt_value(p.mpirun, "--mca", "pml") == ["ob1"]
    assert opt_value(p.mpirun, "--mca", "btl") == ["^openib"]
    assert opt_value(p.mpirun, "--mca", "btl_tcp_if_include") == ["eth0"]
    assert "--tag-output" in p.mpirun
    assert "MPICTL_JOB_ID=J1" in opt_value(p.mpirun, "-x")
    assert p.command == CMD
    assert p.argv[-2:] == CMD
    assert p.ranks == 6
    assert p.hosts == [("node1", 2), ("node2", 2), ("node3", 2)]


def test_nccl_socket_ifname_names_the_mpi_interface_unless_the_user_does() -> None:
    assert "NCCL_SOCKET_IFNAME=eth0" in opt_value(build().mpirun, "-x")
    own = opt_value(build(env=["NCCL_SOCKET_IFNAME=ib0"]).mpirun, "-x")
    assert [x for x in own if x.startswith("NCCL_SOCKET_IFNAME")] == ["NCCL_SOCKET_IFNAME=ib0"]
    no_facts = mpirun_plan.plan(three(), planner.LaunchOptions(command=CMD), "J1", None)
    assert not [x for x in opt_value(no_facts.mpirun, "-x") if x.startswith("NCCL_")]


def test_np_ppn_hosts_env_mca_oversubscribe() -> None:
    p = build(
        np=4,
        ppn=1,
        hosts=["node3", "node1"],
        env=["FOO=bar", "HOME"],
        mca=["btl_tcp_eager_limit=65536"],
        oversubscribe=True,
    )
    assert opt_value(p.mpirun, "--host") == ["node3:2,node1:2"]
    assert "--hostfile" not in p.mpirun
    assert opt_value(p.mpirun, "-np") == ["4"]
    assert opt_value(p.mpirun, "--map-by") == ["ppr:1:node:OVERSUBSCRIBE"]
    assert {"FOO=bar", "HOME"} <= set(opt_value(p.mpirun, "-x"))
    assert opt_value(p.mpirun, "--mca", "btl_tcp_eager_limit") == ["65536"]
    assert p.hosts == [("node3", 1), ("node1", 1)]


def test_user_interface_choice_wins_over_derived() -> None:
    p = build(mca=["btl_tcp_if_include=ib0"])
    assert opt_value(p.mpirun, "--mca", "btl_tcp_if_include") == ["ib0"]


def test_user_mca_replaces_the_default_of_the_same_key() -> None:
    # mpirun refuses a key given twice with different values ("listed more than once").
    p = build(mca=["btl=tcp,self", "pml=ucx"])
    assert opt_value(p.mpirun, "--mca", "btl") == ["tcp,self"]
    assert opt_value(p.mpirun, "--mca", "pml") == ["ucx"]


def test_ppn_defaults_np_to_ppn_times_hosts() -> None:
    assert build(ppn=1).ranks == 3


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"np": 0}, "-np must be a positive"),
        ({"np": -2}, "-np must be a positive"),
        ({"np": 7}, "-np 7 is more ranks than the 6 slots"),
        ({"ppn": 3}, "--ppn 3 exceeds the slots of node1, node2, node3"),
        ({"ppn": 1, "np": 4}, "-np 4 is more ranks than --ppn 1 x 3"),
        ({"hosts": ["node1", "nodeX"]}, "unknown host 'nodeX'"),
        ({"hosts": ["node1", "node1"]}, "given twice"),
        ({"env": ["1X=2"]}, "expected NAME or NAME=VALUE"),
        ({"mca": ["btl"]}, "expected KEY=VALUE"),
        ({"timeout": 0}, "--timeout must be positive"),
        ({"command": []}, "no command to run"),
    ],
)
def test_bad_input_is_one_line_usage_error(kw: dict, message: str) -> None:
    with pytest.raises(UsageError) as err:
        build(**kw)
    text = str(err.value)
    assert message.split()[0] in text
    assert "\n" not in text


def test_more_ranks_than_slots_allowed_with_oversubscribe() -> None:
    p = build(np=9, oversubscribe=True)
    assert p.ranks == 9
    assert opt_value(p.mpirun, "--map-by") == ["slot:OVERSUBSCRIBE"]


def test_torch_adds_wrapper_and_master_of_rank0_host() -> None:
    p = build(torch=True, hosts=["node2", "node3"], master_port=1234)
    assert p.command == ["/opt/mpictl/bin/mpictl-torch-env", *CMD]
    xs = opt_value(p.mpirun, "-x")
    assert "MASTER_ADDR=node2" in xs
    assert "MASTER_PORT=1234" in xs
    # the head hosts rank 0 whenever it is part of the job (mpirun puts its own node first)
    h = build(torch=True, hosts=["node3", "node1"])
    assert "MASTER_ADDR=node1" in opt_value(h.mpirun, "-x")
    q = build(torch=True, env=["MASTER_PORT=999"])
    assert "MASTER_PORT=999" in opt_value(q.mpirun, "-x")
    assert "MASTER_PORT=29500" not in opt_value(q.mpirun, "-x")
    assert "MASTER_ADDR=node1" in opt_value(q.mpirun, "-x")


def test_network_same_interface_name() -> None:
    net = network.derive_network(three())
    assert net is not None
    assert net.subnet == "10.0.0.0/24"
    assert net.btl_tcp_if_include == "eth0"
    assert net.nccl_socket_ifname == "eth0"


def test_network_different_names_use_the_subnet() -> None:
    c = cluster(
        node("a", facts=facts("10.0.0.1", "eth0")),
        node("b", facts=facts("10.0.0.2", "ens5")),
    )
    net = network.derive_network(c)
    assert net is not None
    assert net.btl_tcp_if_include == "10.0.0.0/24"
    assert net.nccl_socket_ifname == "ens5,eth0"


def test_network_prefers_the_heads_default_subnet_and_honours_overrides() -> None:
    def two_nets(addr: str, other: str) -> dict:
        f = facts(addr, "eth0")
        f["ansible_interfaces"].append("ib0")
        f["ansible_ib0"] = {"ipv4": {"address": other, "netmask": "255.255.0.0"}}
        return f

    c = cluster(
        node("a", facts=two_nets("10.0.0.1", "192.168.0.1")),
        node("b", facts=two_nets("10.0.0.2", "192.168.0.2")),
    )
    assert network.derive_network(c).interfaces == {"a": "eth0", "b": "eth0"}  # type: ignore[union-attr]
    c2 = cluster(
        node("a", facts=two_nets("10.0.0.1", "192.168.0.1"), interface="ib0"),
        node("b", facts=two_nets("10.0.0.2", "192.168.0.2"), interface="ib0"),
    )
    net = network.derive_network(c2)
    assert net is not None and net.subnet == "192.168.0.0/16" and net.names == ["ib0"]


def test_network_none_without_facts_or_common_subnet() -> None:
    assert network.derive_network(cluster(node("a"), node("b"))) is None
    c = cluster(node("a", facts=facts("10.0.0.1")), node("b", facts=facts("10.1.0.1")))
    assert network.derive_network(c) is None
    p = mpirun_plan.plan(c, planner.LaunchOptions(command=["x"]), "J", None)
    assert "btl_tcp_if_include" not in p.mpirun


def test_override_without_facts_is_used_as_given() -> None:
    c = cluster(node("a", interface="eth1"), node("b", interface="eth1"))
    net = network.derive_network(c)
    assert net is not None and net.btl_tcp_if_include == "eth1" and net.subnet is None


def session(cmd: str, env: dict[str, str]) -> tuple[int, str, str]:
    """Run a session command with its stdin held open, as the SSH channel does."""
    proc = subprocess.Popen(
        ["sh", "-c", cmd],  # the login shell may be any POSIX sh
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    rc = proc.wait(timeout=30)
    out, err = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
    proc.stdin.close()  # type: ignore[union-attr]
    return rc, out, err


def test_session_command_round_trips_through_a_shell(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The remote session gets exactly the planned argv (a fake mpirun prints its argv)."""
    p = build(env=["MSG=hello world"], command=["echo", "a b", "$HOME", "'q'"])
    fake = tmp_path / "mpirun"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(0o755)
    cmd = executor.session_command(p, grace=None)  # the watchdog off: mpirun's argv as planned
    rc, out, err = session(cmd, {"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert rc == 0, err
    assert out.splitlines() == p.argv[1:]
    assert err == ""
    # with the watchdog, every rank runs the same command behind rank_exit.sh
    rc, out, err = session(executor.session_command(p), {"PATH": f"{tmp_path}:/usr/bin:/bin"})
    wrapped = ["bash", "-c", programs.source("rank_exit.sh"), "mpictl-rank", *p.command]
    assert rc == 0 and out == "".join(f"{a}\n" for a in [*p.mpirun[1:], *wrapped]), err


def test_session_exit_code_is_mpiruns_and_hangup_ends_the_job(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = build(command=["x"])
    fake = tmp_path / "mpirun"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    cmd = executor.session_command(p)
    rc, _, err = session(cmd, env)
    assert rc == 3
    assert err == ""
    # A job that would run for a minute ends when the session's stdin (the SSH channel) closes.
    fake.write_text("#!/bin/sh\nsleep 60 & wait\n")
    import time

    start = time.monotonic()
    running = subprocess.Popen(["sh", "-c", cmd], stdin=subprocess.PIPE, env=env)
    time.sleep(1)
    assert running.poll() is None
    running.stdin.close()  # type: ignore[union-attr]
    rc = running.wait(timeout=20)
    assert rc != 0
    assert time.monotonic() - start < 15


def test_display_is_a_shell_quoted_command() -> None:
    p = build(command=["echo", "a b"])
    assert shlex.split(p.display) == p.argv
