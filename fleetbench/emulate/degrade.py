"""Faults to diagnose: one emulated node given less CPU (a cgroup v1 CPU quota) or a slower link.

`fleetbench cluster degrade INDEX --cpu FRACTION` gives node INDEX's processes FRACTION of the
machine's CPUs: the nodes of the emulated cluster share the machine's cores, so a healthy node may
use all of them and a node at 0.5 gets half as many (cpu.cfs_quota_us = FRACTION x CPUs x period).
"The node's processes" are every process in its namespace when degraded (its sshd and slurmd too,
whose children inherit the cgroup, so jobs started over ssh or srun are slowed) and every process
fleetbench starts there later (fleetbench.hosts.reach joins the cgroup in its `ip netns exec`
commands). `--rate RATE` shapes that node's link, both directions, apart from the others. `heal`
and `cluster down` undo both. cgroup v2 is not handled (say so, exit 2): the machines this was built on have v1.
"""
from __future__ import annotations

import os
import types

from fleetbench.emulate import netem_state
from fleetbench.emulate.netem_plan import Layout, Node, Shaping, parse_rate, shaping_commands

CPU_CGROUP = "/sys/fs/cgroup/cpu"
PERIOD_US = 100_000


def cgroup_dir(netns: str) -> str:
    return os.path.join(CPU_CGROUP, "fleetbench", netns)


def quota_us(fraction: float, cpus: int, period_us: int = PERIOD_US) -> int:
    """CFS quota for `fraction` of `cpus` CPUs per period (the kernel's minimum is 1 ms)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"--cpu: expected a fraction in (0, 1], got {fraction:g}")
    return max(1000, round(fraction * cpus * period_us))


def _node(state: dict, index: int) -> Node:
    nodes = Layout.from_dict(state["layout"]).nodes
    if not 0 <= index < len(nodes):
        raise ValueError(f"node {index}: expected a node index from 0 to {len(nodes) - 1}")
    return nodes[index]


def _write(path: str, value) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def _netns_pids(netns: str) -> list[str]:
    return netem_state.run(["ip", "netns", "pids", netns], check=False).stdout.split()


def _limit_cpu(node: Node, fraction: float) -> None:
    if not os.path.isdir(CPU_CGROUP):
        raise ValueError(f"--cpu: no cgroup v1 cpu controller at {CPU_CGROUP} (cgroup v2 is not handled)")
    group = cgroup_dir(node.netns)
    os.makedirs(group, exist_ok=True)
    _write(os.path.join(group, "cpu.cfs_period_us"), PERIOD_US)
    _write(os.path.join(group, "cpu.cfs_quota_us"), quota_us(fraction, os.cpu_count() or 1))
    for pid in _netns_pids(node.netns):
        try:
            _write(os.path.join(group, "cgroup.procs"), pid)
        except (ProcessLookupError, OSError):
            pass  # exited meanwhile


def _unlimit_cpu(node: Node) -> None:
    release_cgroup(node.netns)


def release_cgroup(netns: str) -> bool:
    """Move the node's processes back to the root cgroup and remove its group; False if it had none."""
    group = cgroup_dir(netns)
    if not os.path.isdir(group):
        return False
    with open(os.path.join(group, "cgroup.procs")) as f:
        pids = f.read().split()
    for pid in pids:  # back to the root cgroup, where they came from
        try:
            _write(os.path.join(CPU_CGROUP, "cgroup.procs"), pid)
        except (ProcessLookupError, OSError):
            pass
    os.rmdir(group)
    try:
        os.rmdir(os.path.dirname(group))  # the fleetbench/ parent, once no node uses it
    except OSError:
        pass
    return True


def _shape_node(node: Node, shaping: Shaping) -> None:
    one = types.SimpleNamespace(nodes=[node])
    netem_state.run(["tc", "qdisc", "del", "dev", node.host_if, "root"], check=False)
    netem_state.run(["tc", "-n", node.netns, "qdisc", "del", "dev", node.ifname, "root"], check=False)
    for what, cmd in shaping_commands(one, shaping):
        netem_state.run(cmd, check=(what == "rate"))


def degrade(prefix: str, index: int, cpu: float | None, rate: str | None) -> dict:
    """Degrade node `index`; returns the cluster's degradations."""
    if cpu is None and rate is None:
        raise ValueError("degrade: expected --cpu FRACTION and/or --rate RATE")
    _up_state(prefix)  # before the lock: a name no cluster has leaves no lock file behind
    with netem_state.locked(prefix):
        state = _up_state(prefix)
        node = _node(state, index)
        entry = state.setdefault("degraded", {}).setdefault(str(index), {})
        if cpu is not None:
            quota_us(cpu, 1)  # validates before anything changes
        if rate is not None:
            bits = parse_rate(rate)
            _shape_node(node, Shaping("degraded", bits, (state.get("shaping") or {}).get("delay_ms", 0.0)))
            entry["rate_bit"] = bits
        if cpu is not None:
            _limit_cpu(node, cpu)
            entry["cpu"] = cpu
        netem_state.save_state(state)
        return state["degraded"]


def heal(prefix: str, index: int) -> dict:
    """Undo node `index`'s degradation (CPU back to the root cgroup, link back to the cluster's)."""
    _up_state(prefix)  # before the lock, as in degrade
    with netem_state.locked(prefix):
        state = _up_state(prefix)
        node = _node(state, index)
        _heal(state, node)
        netem_state.save_state(state)
        return state.get("degraded", {})


def _heal(state: dict, node: Node) -> None:
    entry = state.get("degraded", {}).pop(str(node.index), None) or {}
    _unlimit_cpu(node)
    if "rate_bit" in entry:
        _shape_node(node, Shaping(**state["shaping"]) if state.get("shaping") else Shaping("unshaped"))


def heal_all(state: dict) -> None:
    """Before `cluster down`: no cgroup is left behind (namespaces and links go with the cluster)."""
    for node in Layout.from_dict(state["layout"]).nodes:
        _unlimit_cpu(node)
    state.pop("degraded", None)


def _up_state(prefix: str) -> dict:
    state = netem_state.read_state(prefix)
    if not state or not netem_state.intact(state):
        raise ValueError(f"cluster {prefix}: not up (expected the --name of a cluster `fleetbench cluster up` made)")
    return state
