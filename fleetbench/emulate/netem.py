"""Emulated cluster: network namespaces on a bridge, links shaped with `tc`.

`fleetbench cluster up --nodes 2 --profile 1gbe` creates namespaces fb-node0..N-1, each joined to
one bridge by a veth pair. Every veth end gets a `tbf` root qdisc, so a node's link is shaped in
BOTH directions (node -> bridge on the namespace end, bridge -> node on the host end), like a port
of a switch. Delay needs `netem`; it is attached under tbf only where the kernel has it, and
`status` says what could not be applied. The plan (names, addresses, tc commands, parsing of tc's
output) is pure and lives in `netem_plan`; this module runs it.

Inside a namespace the machine's hostname must name the node's own address: programs that find
"their" address by resolving the hostname (Paddle's launcher, and the gloo of Fleet's role maker,
which ignores GLOO_SOCKET_IFNAME) would otherwise advertise 127.0.0.1 to the other nodes. `ip netns
exec` bind-mounts /etc/netns/<namespace>/hosts over /etc/hosts, so `up` writes one per node.

Ownership. Names like fb-node1 or fb-br may belong to someone else, so `up` refuses, before it
creates anything, when one of its names is taken. Everything `up` creates carries the mark of that
`up` (a random token kept in the state file): the alias of a host link, the alias of a namespace's
loopback, the first line of a node's hosts file. A name enters the state file only after it was
created and marked. `down`, and an `up` that finds the state of an interrupted, killed or damaged
cluster, delete an object only when it carries the mark, so an object of the same name made by
someone else is never touched. A failed or interrupted `up` removes what it made and its state.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from types import FrameType, ModuleType
from typing import NoReturn

from fleetbench import cmdline
from fleetbench.emulate import degrade, netem_state, orphans
from fleetbench.emulate.netem_plan import (
    DEFAULT_PREFIX,
    DEFAULT_SUBNET,
    ACTION_FLAGS,
    DELAY,
    NAME,
    PROFILES,
    RATE,
    SUBNET,
    Layout,
    Node,
    Shaping,
    describe_link,
    first_free_subnet,
    hosts_file,
    network_dict,
    object_names,
    parse_qdiscs,
    plan_layout,
    shaping_commands,
    shaping_from,
    subnet_users,
    unread_flag,
)
from fleetbench.emulate.netem_state import (
    ClusterError,
    load_state,
    run,
    state_path,
)

DELETE_ORDER = {"link": 0, "netns": 1, "etc": 2}  # a host veth end takes its peer with it


def requirements_problem() -> str | None:
    """None when the cluster can be built here, else the reason (also used by tests to skip)."""
    if os.geteuid() != 0:
        return "fleetbench cluster needs root (network namespaces and tc)"
    missing = [t for t in ("ip", "tc") if shutil.which(t) is None]
    if missing:
        return f"fleetbench cluster needs {' and '.join(missing)} (iproute2) on PATH"
    return None


# ----------------------------------------------------------------------------------------------
# up / down

def up(nodes: int = 2, shaping: Shaping = Shaping("unshaped"), prefix: str = DEFAULT_PREFIX,
       subnet: str | None = None) -> dict:
    """Create (or re-shape) the cluster; returns the state dict. Raises ClusterError/ValueError.

    `subnet` None: the cluster's own when it is up, else the first 10.77.N.0/24 that no route and
    no namespace address of this machine uses, chosen under a machine-wide lock (concurrent `up`s
    get different subnets). A given subnet already in use is refused.
    A failed or interrupted `up` (KeyboardInterrupt, or any exception a signal handler raises)
    removes what it created and its state file before the exception propagates.
    """
    plan_layout(nodes, prefix, subnet or DEFAULT_SUBNET)  # bad flags fail before any command runs
    problem = requirements_problem()
    if problem:
        raise ClusterError(problem)
    with netem_state.locked(prefix):
        state = netem_state.read_state(prefix)
        if state and netem_state.intact(state):
            layout = plan_layout(nodes, prefix, subnet or state["layout"]["subnet"])
            if Layout.from_dict(state["layout"]) != layout:
                raise ClusterError(f"cluster {prefix!r} is already up with a different layout "
                                   f"({len(state['layout']['nodes'])} nodes); run `fleetbench cluster down` first")
            _shape(state, layout, shaping)
            netem_state.save_state(state)
            return state
        if state:  # left by an interrupted or killed `up`, or damaged since: clear what is ours
            _teardown(state)
            netem_state.remove_state(prefix)
        # Another `up` (another run, with a state dir of its own) must not choose between our
        # look at the subnets in use and our nodes holding theirs: both would take the same one.
        with netem_state.subnets_locked():
            in_use = netem_state.host_routes() + netem_state.namespace_addresses()
            layout = plan_layout(nodes, prefix, subnet or first_free_subnet(in_use))
            _refuse_foreign(layout, in_use)
            state = {"layout": layout.to_dict(), "token": uuid.uuid4().hex[:12], "created": [],
                     "complete": False, "shaping": None, "not_applied": []}
            with _undone_on_failure(state):
                netem_state.save_state(state)  # the token first: a killed `up` leaves a state that knows its mark
                _build(state, layout)
        with _undone_on_failure(state):
            _shape(state, layout, shaping)
            state["complete"] = True
            netem_state.save_state(state)
        return state


@contextlib.contextmanager
def _undone_on_failure(state: dict) -> Iterator[None]:
    """A failed or interrupted `up` removes what it created and its state file."""
    try:
        yield
    except BaseException:
        with _signals_deferred():
            _teardown(state)
            netem_state.remove_state(state["layout"]["prefix"])
        raise


def _refuse_foreign(layout: Layout, in_use: list[dict]) -> None:
    users = subnet_users(layout.subnet, in_use)
    if users:
        raise ClusterError(f"cannot bring cluster {layout.prefix!r} up: --subnet {layout.subnet} is already "
                           f"used on this machine by {', '.join(users)}; choose another --subnet "
                           "(nothing was changed)")
    _, foreign = netem_state.survey(layout, None)
    if foreign:
        names = ", ".join(f"{kind} {name}" for kind, name in foreign)
        raise ClusterError(f"cannot bring cluster {layout.prefix!r} up: {names} already exist(s) and "
                           f"{'was' if len(foreign) == 1 else 'were'} not created by it; remove "
                           "them or choose another --name (nothing was changed)")


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Clean-up after a failure must not itself be cut short by a second Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _created(state: dict, kind: str, name: str) -> None:
    state["created"].append([kind, name])
    netem_state.save_state(state)


def _create_marked(state: dict, kind: str, name: str, create: Sequence[str], mark: Sequence[str]) -> None:
    """Run `create`, then `mark` it; record the name only when both succeeded. An object that
    was created but could not be marked is deleted at once: nothing unmarked is left behind."""
    run(create)
    try:
        run(mark)
    except BaseException:
        run(["ip", "link", "del", name] if kind == "link" else ["ip", "netns", "del", name], check=False)
        raise
    _created(state, kind, name)


def _build(state: dict, layout: Layout) -> None:
    mark = netem_state.mark_of(state)
    _create_marked(state, "link", layout.bridge, ["ip", "link", "add", layout.bridge, "type", "bridge"],
                   ["ip", "link", "set", "dev", layout.bridge, "alias", mark])
    run(["ip", "link", "set", layout.bridge, "up"])
    plen = int(layout.subnet.split("/")[1])
    try:
        with open("/etc/hosts") as f:
            etc_hosts = f.read()
    except OSError:
        etc_hosts = "127.0.0.1 localhost\n"
    # iproute2's shared directory, like /run/netns: made when missing, never removed (another
    # cluster, or anything using `ip netns exec`, may have files there at any moment)
    os.makedirs(netem_state.NETNS_ETC, exist_ok=True)
    for n in layout.nodes:
        _create_marked(state, "netns", n.netns, ["ip", "netns", "add", n.netns],
                       ["ip", "-n", n.netns, "link", "set", "dev", "lo", "alias", mark])
        _write_etc(state, n, f"# {mark}\n" + hosts_file(etc_hosts, socket.gethostname(), n.ip))
        _create_marked(state, "link", n.host_if,
                       ["ip", "link", "add", n.host_if, "type", "veth", "peer", "name", n.ifname],
                       ["ip", "link", "set", "dev", n.host_if, "alias", mark])
        run(["ip", "link", "set", n.ifname, "netns", n.netns])
        run(["ip", "link", "set", n.host_if, "master", layout.bridge])
        run(["ip", "link", "set", n.host_if, "up"])
        run(["ip", "-n", n.netns, "addr", "add", f"{n.ip}/{plen}", "dev", n.ifname])
        run(["ip", "-n", n.netns, "link", "set", n.ifname, "up"])
        run(["ip", "-n", n.netns, "link", "set", "lo", "up"])


def _etc_staging(state: dict, netns: str) -> str:
    return os.path.join(netem_state.NETNS_ETC, f".{netns}.{state['token']}")


def _write_etc(state: dict, node: Node, hosts: str) -> None:
    """/etc/netns/<namespace>/hosts, made in a staging directory named after this `up` and renamed
    into place: the directory appears complete, with its mark, or not at all."""
    final, staging = os.path.join(netem_state.NETNS_ETC, node.netns), _etc_staging(state, node.netns)
    try:
        os.makedirs(staging)
        with open(os.path.join(staging, "hosts"), "w") as f:
            f.write(hosts)
        os.rename(staging, final)
    except OSError as e:
        raise ClusterError(f"{final}: cannot write the node's hosts file ({e.strerror})") from None
    _created(state, "etc", final)


def _shape(state: dict, layout: Layout, shaping: Shaping) -> None:
    """Replace the qdiscs of every link with `shaping`; record what the kernel refused."""
    for n in layout.nodes:  # start from a clean slate: deleting a missing root qdisc is harmless
        run(["tc", "qdisc", "del", "dev", n.host_if, "root"], check=False)
        run(["tc", "-n", n.netns, "qdisc", "del", "dev", n.ifname, "root"], check=False)
    not_applied = []
    for what, cmd in shaping_commands(layout, shaping):
        p = run(cmd, check=(what == "rate"))
        if p.returncode != 0:
            reason = (p.stderr or p.stdout).strip().splitlines()[-1] if (p.stderr or p.stdout) else "failed"
            note = f"delay {shaping.delay_ms:g} ms: netem not usable here ({reason})"
            if note not in not_applied:
                not_applied.append(note)
    state["shaping"] = dataclasses.asdict(shaping)
    state["not_applied"] = not_applied


def down(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Remove what `up` created (objects carrying its mark); returns what was removed. Objects
    recorded in the state that no longer carry the mark are kept and named on stderr. Without a
    state here, what carries the name's mark goes (fleetbench.emulate.orphans). Idempotent."""
    problem = requirements_problem()
    if problem:
        raise ClusterError(problem)
    if not netem_state.read_state(prefix):  # checked before the lock: a name never up leaves no lock file
        return orphans.down(prefix)
    with netem_state.locked(prefix):
        state = netem_state.read_state(prefix)
        if not state:
            return []
        degrade.heal_all(state)  # cgroups live outside the namespaces: removed first
        removed, kept = _teardown(state)
        netem_state.remove_state(prefix)
    for name in kept:
        print(f"fleetbench cluster: kept {name}: recorded by `up` but without its mark (replaced "
              "since, or made by an older fleetbench); remove it by hand if it is yours", file=sys.stderr)
    return removed


def _teardown(state: dict) -> tuple[list[str], list[str]]:
    """Delete the objects of the state's layout that carry its mark; (removed, kept) where kept
    are recorded names now held by objects without the mark."""
    layout = Layout.from_dict(state["layout"])
    ours, foreign = netem_state.survey(layout, netem_state.mark_of(state))
    removed = []
    for kind, name in sorted(ours, key=lambda obj: DELETE_ORDER[obj[0]]):
        netem_state.delete(kind, name)
        removed.append(f"{kind} {name}")
    for n in layout.nodes if state.get("token") else ():  # a staging dir an `up` was killed in
        shutil.rmtree(_etc_staging(state, n.netns), ignore_errors=True)
    recorded = {tuple(obj) for obj in state["created"]}
    state["created"] = []
    return removed, [f"{kind} {name}" for kind, name in foreign if (kind, name) in recorded]


def leftovers(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Namespaces and links with this cluster's names that still exist (used to verify `down`)."""
    ns = run(["ip", "netns", "list"], check=False).stdout.split()
    links = [l.split(":")[1].strip().split("@")[0] for l in run(["ip", "-o", "link"], check=False).stdout.splitlines()]
    pat = object_names(prefix)
    return sorted({x for x in ns + links if pat.match(x)})


def status(prefix: str = DEFAULT_PREFIX) -> dict | None:
    """Current cluster as a dict (None when not up, or when what its `up` made is no longer all
    there and marked): nodes, addresses, shaping seen by tc."""
    state = netem_state.read_state(prefix)
    if not state or not netem_state.intact(state):
        return None
    layout = Layout.from_dict(state["layout"])
    shaping = Shaping(**state["shaping"]) if state["shaping"] else Shaping("unshaped")
    nodes = []
    for n in layout.nodes:
        egress = parse_qdiscs(run(["tc", "-n", n.netns, "-s", "qdisc", "show", "dev", n.ifname], check=False).stdout)
        ingress = parse_qdiscs(run(["tc", "-s", "qdisc", "show", "dev", n.host_if], check=False).stdout)
        nodes.append({**dataclasses.asdict(n), "egress": egress, "ingress": ingress})
    return {"prefix": prefix, "bridge": layout.bridge, "subnet": layout.subnet, "nodes": nodes,
            "shaping": dataclasses.asdict(shaping), "not_applied": state["not_applied"],
            "network": network_dict(shaping, len(nodes), state["not_applied"]),
            "degraded": state.get("degraded", {}),
            "state_file": state_path(prefix)}


def format_status(st: dict) -> str:
    lines = [f"cluster {st['prefix']}: {len(st['nodes'])} nodes on bridge {st['bridge']}, subnet {st['subnet']}, "
             f"requested {Shaping(**st['shaping']).describe()}",
             f"{'node':<5} {'namespace':<14} {'interface':<10} {'address':<15} {'out (node->bridge)':<22} in (bridge->node)"]
    for n in st["nodes"]:
        lines.append(f"{n['index']:<5} {n['netns']:<14} {n['ifname']:<10} {n['ip']:<15} "
                     f"{describe_link(n['egress']):<22} {describe_link(n['ingress'])}")
    for note in st["not_applied"]:
        lines.append(f"not applied: {note}")
    for index, what in sorted(st.get("degraded", {}).items()):
        lines.append(f"degraded: node {index}: {json.dumps(what)}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# CLI


def parser() -> cmdline.Parser:
    p = cmdline.Parser(prog="fleetbench cluster",
                       description="Emulated multi-node cluster: namespaces, bridge, tc-shaped links.")
    p.add_argument("action", choices=list(ACTION_FLAGS))
    p.add_argument("node", nargs="?", type=cmdline.NON_NEGATIVE, help="degrade/heal: the node's index (fb-node2 is 2)")
    p.add_argument("--cpu", type=cmdline.FRACTION, help="degrade: the node's share of the machine's CPUs, in (0, 1]")
    p.add_argument("--nodes", type=cmdline.COUNT, help="number of nodes for `up` (default 2)")
    p.add_argument("--profile", choices=list(PROFILES), help=f"link profile: {', '.join(PROFILES)}")
    p.add_argument("--rate", type=RATE, help="custom link rate, e.g. 10gbit (instead of --profile); degrade: the node's link")
    p.add_argument("--delay", type=DELAY, help="added one-way node-to-node delay, e.g. 0.05ms (needs netem)")
    p.add_argument("--name", default=DEFAULT_PREFIX, type=NAME, help="name prefix of namespaces and links (default fb)")
    p.add_argument("--subnet", type=SUBNET, help="private subnet inside the namespaces (default: the first "
                   "10.77.N.0/24 no route or namespace of this machine uses)")
    p.add_argument("--json", action="store_true", help="status as JSON")
    return p


def _not_up(prefix: str) -> str:
    if netem_state.read_state(prefix):
        return (f"cluster {prefix}: not up (the state of an interrupted `up` or of a damaged cluster "
                "is left: `fleetbench cluster down` removes what fleetbench created, `up` rebuilds)")
    return f"cluster {prefix}: not up"


def _act(args: argparse.Namespace) -> None:
    problem = unread_flag(args.action, vars(args))
    if problem:
        raise ValueError(problem)
    if args.action == "up":
        shaping = shaping_from(args.profile, args.rate, args.delay)
        up(2 if args.nodes is None else args.nodes, shaping, args.name, args.subnet)
        print(format_status(status(args.name)))
    elif args.action in ("degrade", "heal"):
        if args.node is None:
            raise ValueError(f"{args.action}: expected the node's index (e.g. `fleetbench cluster {args.action} 2`)")
        done = (degrade.degrade(args.name, args.node, args.cpu, args.rate) if args.action == "degrade"
                else degrade.heal(args.name, args.node))
        print(f"cluster {args.name}: degraded: {json.dumps(done) if done else 'nothing'}")
    elif args.action == "down":
        removed = down(args.name)
        print(f"removed: {', '.join(removed)}" if removed else f"cluster {args.name}: nothing to remove")
    else:
        st = status(args.name)
        if args.json:
            print(json.dumps(st, indent=1))
        else:
            print(format_status(st) if st else _not_up(args.name))


def _interrupt(signum: int, _frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def cli(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _interrupt)  # `kill`: clean up as for Ctrl-C
    try:
        _act(args)
        return 0
    except (ClusterError, ValueError) as e:  # a tool's failure, or a profile's or a flag's refusal
        return cmdline.refused("fleetbench cluster", e)
    except KeyboardInterrupt:
        if args.action == "up":
            left = "the existing cluster is kept" if load_state(args.name) else "nothing it created is left"
        else:
            left = "run it again to finish"
        print(f"fleetbench cluster: {args.action} interrupted; {left}", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def node_daemons_parser(prog: str, description: str) -> cmdline.Parser:
    p = cmdline.Parser(prog=f"fleetbench {prog}", description=description)
    p.add_argument("action", choices=["up", "down"])
    p.add_argument("--name", default=DEFAULT_PREFIX, type=NAME, help="the emulated cluster (default fb)")
    return p


def node_daemons_cli(prog: str, description: str, argv: list[str], daemons: ModuleType,
                     say_up: Callable[[dict], str], say_none: Callable[[str], str]) -> int:
    """`fleetbench PROG up|down [--name N]` for daemons started on every emulated node (sshd,
    slurmd): `daemons` has up(name) and down(name); `say_up(info)` is what up prints and
    `say_none(name)` what down prints when none of ours was running."""
    args = node_daemons_parser(prog, description).parse_args(argv)
    try:
        if args.action == "up":
            print(say_up(daemons.up(args.name)))
        else:
            stopped = daemons.down(args.name)
            print(f"stopped pids {stopped}" if stopped else say_none(args.name))
        return 0
    except ClusterError as e:
        return cmdline.refused(f"fleetbench {prog}", e)

