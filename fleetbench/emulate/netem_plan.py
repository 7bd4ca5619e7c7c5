"""The emulated cluster's plan: link profiles, rates and delays, the names and addresses of its
nodes, the `tc` commands that shape its links, and the parsing of what `tc` reports.

Pure functions only (no command runs here); `fleetbench.emulate.netem` runs them. Bad input raises
ValueError with a one-line message naming the flag.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Iterable, Sequence

from fleetbench import cmdline

PROFILES = {  # name -> rate in bit/s (None = no shaping)
    "unshaped": None,
    "100mbe": 100e6,  # Fast Ethernet: a link slow enough that a small job's wire time stands out of CPU noise
    "1gbe": 1e9,
    "10gbe": 10e9,
    "25gbe": 25e9,
    "100gbe": 100e9,
}
DEFAULT_PREFIX = "fb"
DEFAULT_SUBNET = "10.77.0.0/24"
IFNAMSIZ = 15  # Linux interface names are at most 15 characters
# tbf bucket: enough for ~2 ms at line rate (a smaller bucket cannot reach the rate at high speeds
# with coarse timers), never below 64 KB; the queue holds at most 50 ms of traffic.
BURST_S = 0.002
MIN_BURST_BYTES = 64 * 1024
TBF_LATENCY = "50ms"


_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_rate(text: str | float) -> float:
    """'10gbit', '100mbit', '1.5Gbit', '1000000' (bit/s) -> bit/s as float.

    tc's '...bps' means BYTES per second, a classic source of 8x mistakes, so it is refused.
    """
    s = str(text).strip().lower()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(bit)?", s)
    if not m or (m.group(2) and not m.group(3)):
        hint = " (tc reads 'bps' as bytes/s)" if s.endswith("bps") else ""
        raise ValueError(f"rate {text!r}: expected a number with kbit/mbit/gbit/tbit, e.g. 10gbit{hint}")
    value = float(m.group(1)) * _UNITS[m.group(2)]
    if value <= 0:
        raise ValueError(f"rate {text!r}: must be positive")
    return value


def parse_delay(text: str | float) -> float:
    """'0.05ms', '2ms', '50us', '0.001s', '0' -> milliseconds as float."""
    s = str(text).strip().lower()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(us|ms|s)?", s)
    if not m or (m.group(2) is None and float(m.group(1)) != 0):
        raise ValueError(f"delay {text!r}: expected a duration like 0.05ms, 50us or 1s")
    scale = {"us": 1e-3, "ms": 1.0, "s": 1e3, None: 1.0}[m.group(2)]
    return float(m.group(1)) * scale


def _name(text: str) -> str:
    if not re.fullmatch(r"[a-z][a-z0-9]{0,7}", text):
        raise ValueError(text)
    return text


def _subnet(text: str) -> str:
    net = ipaddress.ip_network(text)  # ValueError for anything else, a host address with bits set too
    if net.version != 4 or not net.is_private or net.num_addresses < 4:
        raise ValueError(text)
    return text


# what the flags of `fleetbench cluster` (and the sweep's --cluster-name/--cluster-subnet) take
def _checked(parse):
    """The text itself once `parse` accepts it (the plan parses it where it is used)."""
    def convert(text: str) -> str:
        parse(text)
        return text
    return convert


RATE = cmdline.Kind("a rate like 10gbit, 100mbit (tc's 'bps' is bytes/s: refused)", _checked(parse_rate),
                    ("abc", "", "-5gbit", "0", "10gbps"))
DELAY = cmdline.Kind("a duration like 0.05ms, 50us or 1s", _checked(parse_delay), ("abc", "", "-1ms", "5"))
NAME = cmdline.Kind("1-8 lowercase letters/digits, starting with a letter", _name, ("", "Bad", "toolongname", "1x"))
SUBNET = cmdline.Kind(f"a private IPv4 network such as {DEFAULT_SUBNET}", _subnet,
                      ("abc", "", "8.8.8.0/24", "10.77.0.0/33", "10.77.0.1/24"))


# The flags each action of `fleetbench cluster` reads: one given to an action that does not read
# it is refused, not ignored (`degrade --profile` was).
ACTION_FLAGS = {"up": ("nodes", "profile", "rate", "delay", "subnet"), "down": (), "status": ("json",),
                "degrade": ("node", "cpu", "rate"), "heal": ("node",)}


def unread_flag(action: str, given: dict) -> str | None:
    """The first flag given (not None or False in `given`, argparse's names) that `action` does
    not read, as one line; None when there is none."""
    for dest in ("node", "cpu", "nodes", "profile", "rate", "delay", "subnet", "json"):
        if given.get(dest) not in (None, False) and dest not in ACTION_FLAGS[action]:
            words = ["NODE" if d == "node" else f"--{d}" for d in ACTION_FLAGS[action]]
            flag = "NODE" if dest == "node" else f"--{dest}"
            return f"{flag}: not read by `cluster {action}` (expected {', '.join(words) or 'only --name'})"
    return None


def tc_rate(bits: float) -> str:
    """bit/s -> the integer 'NNNbit' form tc accepts exactly."""
    return f"{int(round(bits))}bit"


def tc_delay(ms: float) -> str:
    return f"{ms * 1000:.0f}us"


@dataclasses.dataclass(frozen=True)
class Shaping:
    profile: str            # profile name, or "custom" for --rate/--delay
    rate_bit: float = None  # None: rate not shaped
    delay_ms: float = 0.0   # one-way added latency between two nodes

    def describe(self) -> str:
        rate = "unshaped rate" if self.rate_bit is None else f"rate {self.rate_bit / 1e9:g} Gbit/s"
        delay = f", delay {self.delay_ms:g} ms" if self.delay_ms else ""
        return f"{self.profile}: {rate}{delay}"


def shaping_from(profile: str | None = None, rate: str | None = None, delay: str | None = None) -> Shaping:
    """Validate the profile/--rate/--delay combination -> Shaping (raises ValueError)."""
    if profile is not None and rate is not None:
        raise ValueError("--profile and --rate are alternatives; give one")
    if profile is not None:
        if profile not in PROFILES:
            raise ValueError(f"--profile {profile!r}: expected one of {', '.join(PROFILES)}")
        return Shaping(profile, PROFILES[profile], parse_delay(delay) if delay else 0.0)
    if rate is None and delay is None:
        return Shaping("unshaped")
    return Shaping("custom", parse_rate(rate) if rate else None, parse_delay(delay) if delay else 0.0)


def network_dict(shaping: Shaping, nodes: int, not_applied: Sequence[str] = ()) -> dict:
    """The `network` field of result records: what the links really were (delay_ms is the delay
    actually applied; delay_ms_requested what was asked for)."""
    delay_missing = any(n.startswith("delay") for n in not_applied)
    return {
        "profile": shaping.profile,
        "rate_gbit": None if shaping.rate_bit is None else shaping.rate_bit / 1e9,
        "delay_ms": 0.0 if delay_missing else shaping.delay_ms,
        "delay_ms_requested": shaping.delay_ms,
        "nodes": nodes,
        "emulated": True,
        "not_applied": list(not_applied),
    }


@dataclasses.dataclass(frozen=True)
class Node:
    index: int
    netns: str    # namespace name, e.g. fb-node0
    ifname: str   # the node's veth inside its namespace (use as GLOO_SOCKET_IFNAME)
    host_if: str  # the peer end on the host, enslaved to the bridge
    ip: str


@dataclasses.dataclass(frozen=True)
class Layout:
    prefix: str
    subnet: str
    bridge: str
    nodes: tuple

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: dict) -> Layout:
        return Layout(d["prefix"], d["subnet"], d["bridge"], tuple(Node(**n) for n in d["nodes"]))


def plan_layout(nodes: int, prefix: str = DEFAULT_PREFIX, subnet: str = DEFAULT_SUBNET) -> Layout:
    """Names and addresses for an N-node cluster (pure; raises ValueError on bad input)."""
    if not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"--nodes {nodes!r}: expected a positive integer")
    if not re.fullmatch(r"[a-z][a-z0-9]{0,7}", prefix):
        raise ValueError(f"--name {prefix!r}: expected 1-8 lowercase letters/digits, starting with a letter")
    try:
        net = ipaddress.ip_network(subnet)
    except ValueError as e:
        raise ValueError(f"--subnet {subnet!r}: {e}") from None
    if net.version != 4 or not net.is_private:
        raise ValueError(f"--subnet {subnet}: expected a private IPv4 network such as {DEFAULT_SUBNET}")
    hosts = list(net.hosts())
    if nodes > len(hosts):
        raise ValueError(f"--subnet {subnet} has {len(hosts)} addresses, fewer than --nodes {nodes}")
    bridge = f"{prefix}-br"
    out = []
    for i in range(nodes):
        ifname, host_if = f"{prefix}-n{i}", f"{prefix}-h{i}"
        if len(host_if) > IFNAMSIZ:
            raise ValueError(f"--nodes {nodes} with --name {prefix}: interface names exceed {IFNAMSIZ} chars")
        out.append(Node(i, f"{prefix}-node{i}", ifname, host_if, str(hosts[i])))
    return Layout(prefix, str(net), bridge, tuple(out))


def object_names(prefix: str) -> re.Pattern:
    """What plan_layout names a cluster's objects, whatever its node count: N-br, N-h<i>, N-n<i>, N-node<i>."""
    return re.compile(rf"{re.escape(prefix)}-(node\d+|br|h\d+|n\d+)$")


def subnet_users(subnet: str, routes: Iterable[dict], own_device: str | None = None) -> list[str]:
    """The routes of this machine (`ip -j -4 route show` rows) that overlap `subnet`, as
    "dev (dst)" texts; a route through `own_device` (the cluster's own bridge) is not a clash."""
    net = ipaddress.ip_network(subnet)
    users = []
    for route in routes:
        dst, dev = route.get("dst"), route.get("dev")
        if dst in (None, "default") or dev == own_device:
            continue
        if ipaddress.ip_network(dst, strict=False).overlaps(net):
            users.append(f"{dev} ({dst})")
    return users


def first_free_subnet(routes: Sequence[dict]) -> str:
    """The first 10.77.N.0/24 that none of `routes` (route-like rows: this machine's routes and
    the addresses in its namespaces) overlaps. A cluster left on the default subnet by a killed
    run (its bridge still routes it) would otherwise take the new cluster's traffic: every
    connection to a node then reaches the old namespace and is refused."""
    for candidate in ipaddress.ip_network(DEFAULT_SUBNET).supernet(new_prefix=16).subnets(new_prefix=24):
        if not subnet_users(str(candidate), routes):
            return str(candidate)
    raise ValueError("--subnet: every 10.77.N.0/24 is routed on this machine; give a free private subnet")


def shaping_commands(layout: Layout, shaping: Shaping) -> list[tuple[str, list[str]]]:
    """(where, cmd) pairs to shape every link in both directions; where is 'rate' or 'delay'.

    Delay goes under tbf as its child (`parent 1:1`); each direction of a node-to-node path
    crosses two shaped egresses, so each gets half of the requested one-way delay.
    """
    cmds = []
    for node in layout.nodes:
        for ns, dev in ((None, node.host_if), (node.netns, node.ifname)):
            tc = ["tc"] + (["-n", ns] if ns else [])
            if shaping.rate_bit is not None:
                burst = max(int(shaping.rate_bit / 8 * BURST_S), MIN_BURST_BYTES)
                cmds.append(("rate", tc + ["qdisc", "replace", "dev", dev, "root", "handle", "1:", "tbf",
                                           "rate", tc_rate(shaping.rate_bit), "burst", str(burst),
                                           "latency", TBF_LATENCY]))
            if shaping.delay_ms:
                parent = ["parent", "1:1"] if shaping.rate_bit is not None else ["root"]
                cmds.append(("delay", tc + ["qdisc", "replace", "dev", dev] + parent +
                             ["handle", "10:", "netem", "delay", tc_delay(shaping.delay_ms / 2)]))
    return cmds


_QDISC_HEAD = re.compile(r"^qdisc (\S+) (\S+) (.*)$")
_SENT = re.compile(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+), overlimits (\d+) requeues (\d+)\)")
_RATE = re.compile(r"\brate (\S+)")
_DELAY = re.compile(r"\bdelay (\S+)")


def _tc_size_to_bits(text: str) -> float | None:
    """tc prints rates like 1Gbit, 125Mbit, 999Kbit, 8bit."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)bit", text)
    return float(m.group(1)) * _UNITS[m.group(2).lower()] if m else None


def parse_qdiscs(text: str) -> list[dict]:
    """Parse `tc -s qdisc show dev X` text -> [{kind, handle, parent, rate_bit, delay, sent_bytes,
    sent_packets, dropped, overlimits}] (fields absent from the text are None)."""
    out = []
    for line in text.splitlines():
        head = _QDISC_HEAD.match(line.strip())
        if head:
            rest = head.group(3)
            rate = _RATE.search(rest)
            delay = _DELAY.search(rest)
            parent = "root" if re.search(r"\broot\b", rest) else (re.search(r"\bparent (\S+)", rest) or [None, None])[1]
            out.append({"kind": head.group(1), "handle": head.group(2), "parent": parent,
                        "rate_bit": _tc_size_to_bits(rate.group(1)) if rate else None,
                        "delay": delay.group(1) if delay else None,
                        "sent_bytes": None, "sent_packets": None, "dropped": None, "overlimits": None})
            continue
        sent = _SENT.search(line)
        if sent and out:
            out[-1].update(sent_bytes=int(sent.group(1)), sent_packets=int(sent.group(2)),
                           dropped=int(sent.group(3)), overlimits=int(sent.group(4)))
    return out


def hosts_file(original: str, hostname: str, ip: str) -> str:
    """/etc/hosts for a node: the machine's file without lines naming its hostname, plus
    `ip hostname` so the hostname resolves to the node's own address."""
    names = {hostname, hostname.split(".")[0]}
    kept = [line for line in original.splitlines()
            if not (set(line.split("#")[0].split()[1:]) & names)]
    return "\n".join(kept + [f"{ip} {' '.join(sorted(names, key=len, reverse=True))}"]) + "\n"


def describe_link(qdiscs: list[dict]) -> str:
    """One short phrase for the shaping one egress really has, from parse_qdiscs() output."""
    parts = []
    for q in qdiscs:
        if q["kind"] == "tbf" and q["rate_bit"]:
            parts.append(f"tbf {q['rate_bit'] / 1e9:g}Gbit")
        elif q["kind"] == "netem":
            parts.append(f"netem {q['delay'] or ''}".strip())
    return " + ".join(parts) or "unshaped"
