"""Emulated cluster: network namespaces on a bridge, links shaped with `tc`.

`fleetbench cluster up --nodes 2 --profile 1gbe` creates namespaces fb-node0..N-1, each joined to
one bridge by a veth pair. Every veth end gets a `tbf` root qdisc, so a node's link is shaped in
BOTH directions (node -> bridge on the namespace end, bridge -> node on the host end), like a port
of a switch. Delay needs `netem`; it is attached under tbf only where the kernel has it, and
`status` says what could not be applied.

Inside a namespace the machine's hostname must name the node's own address: programs that find
"their" address by resolving the hostname (Paddle's launcher, and the gloo of Fleet's role maker,
which ignores GLOO_SOCKET_IFNAME) would otherwise advertise 127.0.0.1 to the other nodes. `ip netns
exec` bind-mounts /etc/netns/<namespace>/hosts over /etc/hosts, so `up` writes one per node.

What `up` creates is written to a state file BEFORE it is created, so `down` removes exactly that
(and nothing else), also after an interrupted `up`, and is safe to repeat.

The module has two halves: pure functions (parsing rates, delays and `tc -s qdisc` text; planning
names and addresses) and the code that runs `ip`/`tc`.
"""

import argparse
import contextlib
import dataclasses
import fcntl
import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

PROFILES = {  # name -> rate in bit/s (None = no shaping)
    "unshaped": None,
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
NETNS_ETC = "/etc/netns"  # per-namespace configuration files that `ip netns exec` mounts


class ClusterError(RuntimeError):
    """A one-line, user-facing reason why the cluster operation cannot proceed."""


# ----------------------------------------------------------------------------------------------
# Pure part: parsing and planning (no commands run here)

_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_rate(text):
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


def parse_delay(text):
    """'0.05ms', '2ms', '50us', '0.001s', '0' -> milliseconds as float."""
    s = str(text).strip().lower()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(us|ms|s)?", s)
    if not m or (m.group(2) is None and float(m.group(1)) != 0):
        raise ValueError(f"delay {text!r}: expected a duration like 0.05ms, 50us or 1s")
    scale = {"us": 1e-3, "ms": 1.0, "s": 1e3, None: 1.0}[m.group(2)]
    return float(m.group(1)) * scale


def tc_rate(bits):
    """bit/s -> the integer 'NNNbit' form tc accepts exactly."""
    return f"{int(round(bits))}bit"


def tc_delay(ms):
    return f"{ms * 1000:.0f}us"


@dataclasses.dataclass(frozen=True)
class Shaping:
    profile: str            # profile name, or "custom" for --rate/--delay
    rate_bit: float = None  # None: rate not shaped
    delay_ms: float = 0.0   # one-way added latency between two nodes

    def describe(self):
        rate = "unshaped rate" if self.rate_bit is None else f"rate {self.rate_bit / 1e9:g} Gbit/s"
        delay = f", delay {self.delay_ms:g} ms" if self.delay_ms else ""
        return f"{self.profile}: {rate}{delay}"


def shaping_from(profile=None, rate=None, delay=None):
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


def network_dict(shaping, nodes, not_applied=()):
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

    def to_dict(self):
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d):
        return Layout(d["prefix"], d["subnet"], d["bridge"], tuple(Node(**n) for n in d["nodes"]))


def plan_layout(nodes, prefix=DEFAULT_PREFIX, subnet=DEFAULT_SUBNET):
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


def shaping_commands(layout, shaping):
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


def _tc_size_to_bits(text):
    """tc prints rates like 1Gbit, 125Mbit, 999Kbit, 8bit."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)bit", text)
    return float(m.group(1)) * _UNITS[m.group(2).lower()] if m else None


def parse_qdiscs(text):
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


def hosts_file(original, hostname, ip):
    """/etc/hosts for a node: the machine's file without lines naming its hostname, plus
    `ip hostname` so the hostname resolves to the node's own address."""
    names = {hostname, hostname.split(".")[0]}
    kept = [line for line in original.splitlines()
            if not (set(line.split("#")[0].split()[1:]) & names)]
    return "\n".join(kept + [f"{ip} {' '.join(sorted(names, key=len, reverse=True))}"]) + "\n"


def describe_link(qdiscs):
    """One short phrase for the shaping one egress really has, from parse_qdiscs() output."""
    parts = []
    for q in qdiscs:
        if q["kind"] == "tbf" and q["rate_bit"]:
            parts.append(f"tbf {q['rate_bit'] / 1e9:g}Gbit")
        elif q["kind"] == "netem":
            parts.append(f"netem {q['delay'] or ''}".strip())
    return " + ".join(parts) or "unshaped"


# ----------------------------------------------------------------------------------------------
# Command-running part


def state_dir():
    return os.environ.get("FLEETBENCH_CLUSTER_STATE_DIR") or (
        "/run/fleetbench" if os.access("/run", os.W_OK) else os.path.join(tempfile.gettempdir(), "fleetbench"))


def state_path(prefix):
    return os.path.join(state_dir(), f"cluster-{prefix}.json")


def requirements_problem():
    """None when the cluster can be built here, else the reason (also used by tests to skip)."""
    if os.geteuid() != 0:
        return "fleetbench cluster needs root (network namespaces and tc)"
    missing = [t for t in ("ip", "tc") if shutil.which(t) is None]
    if missing:
        return f"fleetbench cluster needs {' and '.join(missing)} (iproute2) on PATH"
    return None


def _run(cmd, check=True):
    """Run one ip/tc argument list; returns CompletedProcess. Raises ClusterError on failure if check."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise ClusterError(f"`{' '.join(cmd)}` failed: {(p.stderr or p.stdout).strip()}")
    return p


@contextlib.contextmanager
def _locked(prefix):
    os.makedirs(state_dir(), exist_ok=True)
    with open(state_path(prefix) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def load_state(prefix=DEFAULT_PREFIX):
    try:
        with open(state_path(prefix)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def _save_state(state):
    path = state_path(state["layout"]["prefix"])
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _create(state, kind, name, cmd):
    """Record the resource first, then create it: an interrupted `up` is still fully undoable."""
    state["created"].append([kind, name])
    _save_state(state)
    _run(cmd)


def up(nodes=2, shaping=Shaping("unshaped"), prefix=DEFAULT_PREFIX, subnet=DEFAULT_SUBNET):
    """Create (or re-shape) the cluster; returns the state dict. Raises ClusterError/ValueError."""
    layout = plan_layout(nodes, prefix, subnet)
    problem = requirements_problem()
    if problem:
        raise ClusterError(problem)
    with _locked(prefix):
        state = load_state(prefix)
        if state and state["created"]:
            if Layout.from_dict(state["layout"]) != layout:
                raise ClusterError(f"cluster {prefix!r} is already up with a different layout "
                                   f"({len(state['layout']['nodes'])} nodes); run `fleetbench cluster down` first")
        else:
            state = {"layout": layout.to_dict(), "created": [], "shaping": None, "not_applied": []}
            try:
                _build(state, layout)
            except BaseException:
                _teardown(state)
                raise
        _shape(state, layout, shaping)
        _save_state(state)
        return state


def _build(state, layout):
    _create(state, "link", layout.bridge, ["ip", "link", "add", layout.bridge, "type", "bridge"])
    _run(["ip", "link", "set", layout.bridge, "up"])
    plen = ipaddress.ip_network(layout.subnet).prefixlen
    try:
        with open("/etc/hosts") as f:
            etc_hosts = f.read()
    except OSError:
        etc_hosts = "127.0.0.1 localhost\n"
    if not os.path.isdir(NETNS_ETC):
        state["created"].append(["etcdir", NETNS_ETC])
        _save_state(state)
    for n in layout.nodes:
        _create(state, "netns", n.netns, ["ip", "netns", "add", n.netns])
        etc_dir = os.path.join(NETNS_ETC, n.netns)
        if not os.path.exists(etc_dir):
            state["created"].append(["etc", etc_dir])
            _save_state(state)
            os.makedirs(etc_dir)
            with open(os.path.join(etc_dir, "hosts"), "w") as f:
                f.write(hosts_file(etc_hosts, socket.gethostname(), n.ip))
        _create(state, "link", n.host_if, ["ip", "link", "add", n.host_if, "type", "veth", "peer", "name", n.ifname])
        _run(["ip", "link", "set", n.ifname, "netns", n.netns])
        _run(["ip", "link", "set", n.host_if, "master", layout.bridge])
        _run(["ip", "link", "set", n.host_if, "up"])
        _run(["ip", "-n", n.netns, "addr", "add", f"{n.ip}/{plen}", "dev", n.ifname])
        _run(["ip", "-n", n.netns, "link", "set", n.ifname, "up"])
        _run(["ip", "-n", n.netns, "link", "set", "lo", "up"])


def _shape(state, layout, shaping):
    """Replace the qdiscs of every link with `shaping`; record what the kernel refused."""
    for n in layout.nodes:  # start from a clean slate: deleting a missing root qdisc is harmless
        _run(["tc", "qdisc", "del", "dev", n.host_if, "root"], check=False)
        _run(["tc", "-n", n.netns, "qdisc", "del", "dev", n.ifname, "root"], check=False)
    not_applied = []
    for what, cmd in shaping_commands(layout, shaping):
        p = _run(cmd, check=(what == "rate"))
        if p.returncode != 0:
            reason = (p.stderr or p.stdout).strip().splitlines()[-1] if (p.stderr or p.stdout) else "failed"
            note = f"delay {shaping.delay_ms:g} ms: netem not usable here ({reason})"
            if note not in not_applied:
                not_applied.append(note)
    state["shaping"] = dataclasses.asdict(shaping)
    state["not_applied"] = not_applied


def down(prefix=DEFAULT_PREFIX):
    """Remove what `up` recorded; returns the list of resources removed. Idempotent."""
    problem = requirements_problem()
    if problem:
        raise ClusterError(problem)
    with _locked(prefix):
        state = load_state(prefix)
        if not state:
            return []
        removed = _teardown(state)
        os.unlink(state_path(prefix))
        return removed


def _teardown(state):
    removed = []
    # Links first (deleting a host veth end deletes its peer inside the namespace), then namespaces
    # and their files, and last /etc/netns itself if we made it and it is empty.
    order = sorted(state["created"], key=lambda r: {"link": 0, "etcdir": 2}.get(r[0], 1))
    for kind, name in order:
        if kind == "etcdir":
            try:
                os.rmdir(name)
                removed.append(f"{kind} {name}")
            except OSError:
                pass  # not empty (someone else's namespaces have files there) or already gone
            continue
        if kind == "etc":
            if os.path.dirname(name) == NETNS_ETC and os.path.isdir(name):  # never anything else
                shutil.rmtree(name)
                removed.append(f"{kind} {name}")
            continue
        cmd = ["ip", "link", "del", name] if kind == "link" else ["ip", "netns", "del", name]
        p = _run(cmd, check=False)
        if p.returncode == 0:
            removed.append(f"{kind} {name}")
        elif not re.search(r"Cannot find|No such file|does not exist", p.stderr):
            raise ClusterError(f"`{' '.join(cmd)}` failed: {p.stderr.strip()}")
    state["created"] = []
    return removed


def leftovers(prefix=DEFAULT_PREFIX):
    """Namespaces and links with this cluster's names that still exist (used to verify `down`)."""
    ns = _run(["ip", "netns", "list"], check=False).stdout.split()
    links = [l.split(":")[1].strip().split("@")[0] for l in _run(["ip", "-o", "link"], check=False).stdout.splitlines()]
    pat = re.compile(rf"{re.escape(prefix)}-(node\d+|br|h\d+|n\d+)$")
    return sorted({x for x in ns + links if pat.match(x)})


def status(prefix=DEFAULT_PREFIX):
    """Current cluster as a dict (None when not up): nodes, addresses, shaping seen by tc."""
    state = load_state(prefix)
    if not state or not state["created"]:
        return None
    layout = Layout.from_dict(state["layout"])
    shaping = Shaping(**state["shaping"]) if state["shaping"] else Shaping("unshaped")
    nodes = []
    for n in layout.nodes:
        egress = parse_qdiscs(_run(["tc", "-n", n.netns, "-s", "qdisc", "show", "dev", n.ifname], check=False).stdout)
        ingress = parse_qdiscs(_run(["tc", "-s", "qdisc", "show", "dev", n.host_if], check=False).stdout)
        nodes.append({**dataclasses.asdict(n), "egress": egress, "ingress": ingress})
    return {"prefix": prefix, "bridge": layout.bridge, "subnet": layout.subnet, "nodes": nodes,
            "shaping": dataclasses.asdict(shaping), "not_applied": state["not_applied"],
            "network": network_dict(shaping, len(nodes), state["not_applied"]),
            "state_file": state_path(prefix)}


def format_status(st):
    lines = [f"cluster {st['prefix']}: {len(st['nodes'])} nodes on bridge {st['bridge']}, subnet {st['subnet']}, "
             f"requested {Shaping(**st['shaping']).describe()}",
             f"{'node':<5} {'namespace':<14} {'interface':<10} {'address':<15} {'out (node->bridge)':<22} in (bridge->node)"]
    for n in st["nodes"]:
        lines.append(f"{n['index']:<5} {n['netns']:<14} {n['ifname']:<10} {n['ip']:<15} "
                     f"{describe_link(n['egress']):<22} {describe_link(n['ingress'])}")
    for note in st["not_applied"]:
        lines.append(f"not applied: {note}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# CLI


def _parser():
    p = argparse.ArgumentParser(prog="fleetbench cluster",
                                description="Emulated multi-node cluster: namespaces, bridge, tc-shaped links.")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument("--nodes", type=int, default=2, help="number of nodes for `up` (default 2)")
    p.add_argument("--profile", help=f"link profile: {', '.join(PROFILES)}")
    p.add_argument("--rate", help="custom link rate, e.g. 10gbit (instead of --profile)")
    p.add_argument("--delay", help="added one-way node-to-node delay, e.g. 0.05ms (needs netem)")
    p.add_argument("--name", default=DEFAULT_PREFIX, help="name prefix of namespaces and links (default fb)")
    p.add_argument("--subnet", default=DEFAULT_SUBNET, help=f"private subnet inside the namespaces ({DEFAULT_SUBNET})")
    p.add_argument("--json", action="store_true", help="status as JSON")
    return p


def cli(argv):
    args = _parser().parse_args(argv)
    try:
        if args.action == "up":
            shaping = shaping_from(args.profile, args.rate, args.delay)
            up(args.nodes, shaping, args.name, args.subnet)
            print(format_status(status(args.name)))
        elif args.action == "down":
            removed = down(args.name)
            print(f"removed: {', '.join(removed)}" if removed else f"cluster {args.name}: nothing to remove")
        else:
            st = status(args.name)
            if args.json:
                print(json.dumps(st, indent=1))
            else:
                print(format_status(st) if st else f"cluster {args.name}: not up")
        return 0
    except (ClusterError, ValueError) as e:
        print(f"fleetbench cluster: {e}", file=sys.stderr)
        return 2
