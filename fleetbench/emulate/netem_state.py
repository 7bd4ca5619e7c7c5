"""The emulated cluster's state file and the marks that prove an object is ours.

`up` writes a state file per cluster name: its layout, a random token, the names it created (each
only after it was created and marked), whether it finished, and the shaping. Every object `up`
creates carries the mark `fleetbench-cluster <name> <token>`: the alias of a host link, the alias of
a namespace's loopback, the first line (a comment) of a node's hosts file. `survey` sorts the
objects that hold a layout's names into ours (marked) and foreign (not), so nothing someone else
made is ever deleted, also after an `up` that was killed before it could clean up.
Its daemons (sshd, slurmd) are ours by the same rule: `daemon_pid` believes a pidfile only when
the process it names runs the daemon's executable.
"""
from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Sequence

from fleetbench.emulate.netem_plan import DEFAULT_PREFIX, Layout

NETNS_ETC = "/etc/netns"  # per-namespace configuration files that `ip netns exec` mounts
MARK = "fleetbench-cluster"


class ClusterError(RuntimeError):
    """A one-line, user-facing reason why the cluster operation cannot proceed."""


def state_dir() -> str:
    return os.environ.get("FLEETBENCH_CLUSTER_STATE_DIR") or (
        "/run/fleetbench" if os.access("/run", os.W_OK) else os.path.join(tempfile.gettempdir(), "fleetbench"))


def state_path(prefix: str) -> str:
    return os.path.join(state_dir(), f"cluster-{prefix}.json")


def run(cmd: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
    """Run one ip/tc argument list; returns CompletedProcess. Raises ClusterError on failure if check."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise ClusterError(f"`{' '.join(cmd)}` did not finish within 30 s") from None
    if check and p.returncode != 0:
        raise ClusterError(f"`{' '.join(cmd)}` failed: {(p.stderr or p.stdout).strip()}")
    return p


@contextlib.contextmanager
def locked(prefix: str) -> Iterator[None]:
    os.makedirs(state_dir(), exist_ok=True)
    with open(state_path(prefix) + ".lock", "w") as lock:  # a lock, not state: it stays empty
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def subnet_lock_path() -> str:
    # Machine-wide, not under state_dir(): concurrent runs (two pytest processes, a sweep and a
    # test) have state dirs of their own but share this machine's subnets.
    base = "/run" if os.access("/run", os.W_OK) else tempfile.gettempdir()
    return os.path.join(base, "fleetbench-subnets.lock")


@contextlib.contextmanager
def subnets_locked() -> Iterator[None]:
    """Held by an `up` from choosing its subnet until its nodes hold their addresses, so the next
    `up` sees that subnet taken. flock is released by the kernel when a holder dies."""
    with open(subnet_lock_path(), "a") as lock:  # a lock, not state: it stays empty
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def read_state(prefix: str) -> dict | None:
    """The state file as written, complete or not; None when there is none."""
    try:
        with open(state_path(prefix)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ClusterError(f"{state_path(prefix)}: unreadable cluster state ({e}); "
                           "remove it after checking `ip netns list` and `ip link`") from None


def load_state(prefix: str = DEFAULT_PREFIX) -> dict | None:
    """The state of a cluster that is up (its `up` finished), else None."""
    state = read_state(prefix)
    return state if state and state.get("complete") else None


def save_state(state: dict) -> None:
    path = state_path(state["layout"]["prefix"])
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def remove_state(prefix: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(state_path(prefix))


def mark_of(state: dict) -> str | None:
    """The mark of the `up` that wrote `state`; None for a state without a token (nothing in it
    can be proven ours)."""
    token = state.get("token")
    return f"{MARK} {state['layout']['prefix']} {token}" if token else None


def host_links() -> dict[str, str | None]:
    """{name: alias or None} of the links in the host's namespace."""
    return {link["ifname"]: link.get("ifalias")
            for link in json.loads(run(["ip", "-j", "link", "show"]).stdout or "[]")}


def host_routes() -> list[dict]:
    """This machine's IPv4 routes (main table) as `ip -j` rows: {dst, dev, ...}."""
    return json.loads(run(["ip", "-j", "-4", "route", "show"]).stdout or "[]")


def netns_names() -> set[str]:
    return {line.split()[0] for line in run(["ip", "netns", "list"]).stdout.splitlines() if line.strip()}


def namespace_addresses() -> list[dict]:
    """The IPv4 addresses of every named namespace as route-like rows {dst: "ip/len", dev}. A
    cluster's subnet lives only in its nodes' namespaces (no route of this machine shows it until
    `sshd up` gives the head an address), so choosing a subnet by routes alone hands every
    cluster the same one."""
    rows = []
    for ns in sorted(netns_names()):
        p = run(["ip", "-n", ns, "-j", "-4", "addr", "show"], check=False)
        if p.returncode != 0:  # deleted since it was listed
            continue
        for link in json.loads(p.stdout or "[]"):
            for addr in link.get("addr_info", []):
                if not ipaddress.ip_address(addr["local"]).is_loopback:
                    rows.append({"dst": f"{addr['local']}/{addr['prefixlen']}",
                                 "dev": f"{link['ifname']} in netns {ns}"})
    return rows


def netns_mark(ns: str) -> str | None:
    p = run(["ip", "-n", ns, "-j", "link", "show", "dev", "lo"], check=False)
    links = json.loads(p.stdout or "[]") if p.returncode == 0 else []
    return links[0].get("ifalias") if links else None


def etc_mark(path: str) -> str | None:
    try:
        with open(os.path.join(path, "hosts")) as f:
            first = f.readline()
    except OSError:
        return None
    return first[2:].strip() if first.startswith("# ") else None


def objects(layout: Layout) -> list[tuple[str, str]]:
    """(kind, name) of everything `up` makes for `layout`, in creation order."""
    out = [("link", layout.bridge)]
    for n in layout.nodes:
        out += [("netns", n.netns), ("etc", os.path.join(NETNS_ETC, n.netns)), ("link", n.host_if)]
    return out


def survey(layout: Layout, mark: str | None) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(ours, foreign): the objects with `layout`'s names that exist, split by whether they carry
    `mark` (None: nothing is ours). A veth end still in the host's namespace counts as part of its
    peer on the host side, which was created in the same command."""
    links, namespaces = host_links(), netns_names()
    ours, foreign = [], []
    for kind, name in objects(layout):
        if kind == "link":
            present, marked = name in links, mark is not None and links.get(name) == mark
        elif kind == "netns":
            present = name in namespaces
            marked = present and mark is not None and netns_mark(name) == mark
        else:
            present = os.path.lexists(name)
            marked = present and mark is not None and etc_mark(name) == mark
        if present:
            (ours if marked else foreign).append((kind, name))
    for n in layout.nodes:
        if n.ifname in links and ("link", n.host_if) not in ours:
            foreign.append(("link", n.ifname))
    return ours, foreign


def delete(kind: str, name: str) -> None:
    """Delete one object `survey` found ours (a link, a namespace, a node's hosts directory); one
    already gone is not an error (a host veth end takes its peer with it)."""
    if kind == "etc":
        shutil.rmtree(name, ignore_errors=True)
        return
    cmd = ["ip", "link", "del", name] if kind == "link" else ["ip", "netns", "del", name]
    p = run(cmd, check=False)
    if p.returncode != 0 and not re.search(r"Cannot find|No such file|does not exist", p.stderr):
        raise ClusterError(f"`{' '.join(cmd)}` failed: {p.stderr.strip()}")


def intact(state: dict) -> bool:
    """A finished `up` whose objects all still exist and carry its mark."""
    if not state.get("complete"):
        return False
    layout = Layout.from_dict(state["layout"])
    ours, _ = survey(layout, mark_of(state))
    return len(ours) == len(objects(layout))


def daemon_pid(pidfile: str, executables: Iterable[str]) -> int | None:
    """The pid in `pidfile` if that process runs one of `executables` (links resolved), else None.
    Daemons rewrite their titles, so the executable, not the command line, says what runs."""
    try:
        with open(pidfile) as f:
            pid = int(f.read().strip())
        exe = os.readlink(f"/proc/{pid}/exe")
    except (OSError, ValueError):
        return None
    return pid if exe in {os.path.realpath(p) for p in executables} else None
