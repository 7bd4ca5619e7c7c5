"""Hosts of a real cluster: hostfiles, `--hosts` lists, and which hosts a job uses (pure; no I/O
beyond reading the hostfile).

Two conventions the field already uses are accepted:
- a hostfile as DeepSpeed and Horovod write it, one host per line: `node1 slots=4`; `#` starts a
  comment, blank lines are ignored, `slots` defaults to 1;
- a `--hosts` list as Horovod's `-H`: `node1:4,node2:4` (`:N` defaults to 1).

A host is whatever `ssh` accepts as a destination (a name, an alias of the user's ~/.ssh/config,
`user@name`, an IPv4 address); `slots` is how many processes (GPUs) it takes. `Host` is the one
host type of the package: `fleetbench launch`, sweeps and `fleetbench diagnose` all carry it, with
how a command reaches it (`reach`: local, netns, ssh, slurm; fleetbench.hosts.reach spells the
commands).

A job of `nodes` nodes with `per_node` processes each uses the FIRST `nodes` hosts in file order,
and node i is the i-th of them (rank order of nodes = file order, so records name hosts
predictably). Devices per node may differ between nodes, written `"3+2"`: Paddle 2.6.2's launcher
supports it in its `--master` rendezvous (each node's launcher says its own `--nproc_per_node`;
a node's first rank is the sum of the preceding nodes' counts: paddle/distributed/launch/
controllers/collective.py, `_build_pod_with_master`) but not in its `--ips` form, which assumes
equal counts; fleetbench always uses `--master` with an explicit `--rank` per node.
"""
from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Sequence

from fleetbench import cmdline

REACHES = ("local", "netns", "ssh", "slurm")  # how a command reaches a host: fleetbench.hosts.reach
HOST_RE = re.compile(r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]*@)?[A-Za-z0-9_][A-Za-z0-9_.-]*")


class HostsError(cmdline.UserError):
    """One line naming the file (or flag) and what was expected."""


@dataclasses.dataclass(frozen=True)
class Host:
    """One host of a job or a diagnosis, and how a command reaches it."""
    name: str                      # ssh destination, Slurm node name, or what records call an emulated node
    slots: int = 1                 # processes (devices) it takes
    reach: str = "ssh"             # local | netns | ssh | slurm
    index: int = 0                 # node i: its launcher's --rank, its place in a diagnosis
    address: str = ""              # IPv4 address (Paddle's --host, POD_IP, a link test's listener); "" until resolved
    netns: str = ""                # netns: the emulated node's namespace
    env: tuple = ()                # per-node variables as (name, value) pairs (emulated: GLOO_SOCKET_IFNAME)
    ssh_config: str | None = None  # ssh -F FILE
    python: str = sys.executable   # fleetbench's Python there
    workdir: str | None = None     # this repository there (ssh: cd; slurm: --chdir); None: where the login lands
    cpus: str | None = None        # slurm: --cpus-per-task (a step would be pinned to one CPU otherwise)

    def __post_init__(self) -> None:
        if self.reach not in REACHES:
            raise ValueError(f"host {self.name}: reach {self.reach!r}, expected one of {', '.join(REACHES)}")

    @property
    def login_host(self) -> str:
        """The host part without `user@` (what ssh resolves when no alias says otherwise)."""
        return self.name.rsplit("@", 1)[-1]


def _host(where: str, name: str, slots_text: str) -> Host:
    if not HOST_RE.fullmatch(name):
        raise HostsError(f"{where}: host {name!r}: expected a host name, ssh alias, user@host or IPv4 address")
    if not re.fullmatch(r"[1-9]\d*", slots_text):
        raise HostsError(f"{where}: slots {slots_text!r} for host {name}: expected an integer >= 1")
    return Host(name, int(slots_text))


def _no_repeats(where: str, hosts: list[Host]) -> list[Host]:
    seen = set()
    for h in hosts:
        if h.name in seen:
            raise HostsError(f"{where}: host {h.name} is listed twice (give it more slots instead)")
        seen.add(h.name)
    if not hosts:
        raise HostsError(f"{where}: no hosts listed")
    return [dataclasses.replace(h, index=i) for i, h in enumerate(hosts)]  # node i: the i-th host listed


def parse_hostfile(text: str, where: str = "hostfile") -> list[Host]:
    """Hostfile text -> [Host] in file order."""
    hosts = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        at = f"{where}:{number}"
        name, *rest = line.split()
        slots = "1"
        for field in rest:
            key, eq, value = field.partition("=")
            if key != "slots" or not eq:
                raise HostsError(f"{at}: {field!r}: expected `HOST slots=N`")
            slots = value
        hosts.append(_host(at, name, slots))
    return _no_repeats(where, hosts)


def load_hostfile(path: str) -> list[Host]:
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise HostsError(f"hostfile {path}: cannot read ({e.strerror})") from None
    return parse_hostfile(text, f"hostfile {path}")


def parse_hosts_arg(text: str, where: str = "--hosts") -> list[Host]:
    """'a:2,b:2' -> [Host('a', 2), Host('b', 2)]."""
    hosts = []
    for part in str(text).split(","):
        name, colon, slots = part.strip().partition(":")
        hosts.append(_host(where, name, slots if colon else "1"))
    return _no_repeats(where, hosts)


def parse_per_node(value: object, where: str = "devices_per_node") -> tuple[int, ...]:
    """2 -> (2,); '3+2' -> (3, 2): processes per node, one count or one per node."""
    text = str(value).strip()
    if isinstance(value, bool) or not re.fullmatch(r"[1-9]\d*(\s*\+\s*[1-9]\d*)*", text):
        raise HostsError(f"{where} {value!r}: expected a count >= 1 or one per node like 3+2")
    return tuple(int(x) for x in text.split("+"))


def counts_for(nodes: int, per_node: tuple[int, ...], where: str = "devices_per_node") -> tuple[int, ...]:
    """Processes of each of `nodes` nodes from parse_per_node's tuple."""
    if len(per_node) == 1:
        return per_node * nodes
    if len(per_node) != nodes:
        raise HostsError(f"{where} {'+'.join(map(str, per_node))}: {len(per_node)} counts for {nodes} nodes")
    return per_node


@dataclasses.dataclass(frozen=True)
class Placement:
    """One node of a job: which host, and how many processes its launcher starts."""
    rank: int      # the node's rank (its launcher's --rank)
    host: Host
    processes: int


def select(hosts: list[Host], nodes: int, counts: Sequence[int], check_slots: bool = True,
           where: str = "hosts") -> list[Placement]:
    """The first `nodes` hosts with `counts[i]` processes on host i -> [Placement].

    check_slots: a collective job's processes are devices; a host with fewer slots is refused.
    (Parameter-server processes are CPU processes, not devices: their counts are not checked.)
    """
    if nodes > len(hosts):
        raise HostsError(f"{where}: {nodes} nodes asked for, {len(hosts)} host(s) listed "
                         f"({', '.join(h.name for h in hosts)})")
    placements = []
    for rank, (host, count) in enumerate(zip(hosts[:nodes], counts)):
        if check_slots and count > host.slots:
            raise HostsError(f"{where}: host {host.name} has {host.slots} slot(s), node {rank} needs {count}")
        placements.append(Placement(rank, host, count))
    return placements


def describe(placements: list[Placement]) -> str:
    """'a(3) b(2)': for progress lines and reports."""
    return " ".join(f"{p.host.name}({p.processes})" for p in placements)
