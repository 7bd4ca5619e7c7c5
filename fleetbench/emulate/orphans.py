"""`fleetbench cluster down --name N` where N's state file is not: a cluster orphaned by its state.

`up` keeps a cluster's state in FLEETBENCH_CLUSTER_STATE_DIR (else /run/fleetbench), so a cluster
made under another state directory (a test's temporary one, a run killed before it could clean
up) leaves nothing where a later `down` looks: it answered "nothing to remove" and left the
namespaces, links and daemons of N running.

Without the state, what proves an object is N's is the mark `up` gave it, `fleetbench-cluster N
<token>`, whatever the token: a link's alias, a namespace's loopback alias, a hosts file's first
line (fleetbench.emulate.netem_state). Objects with N's names but without the mark are someone
else's and are kept, as `down` with a state keeps them. The cluster's processes are its nodes'
(every process in a marked namespace: sshd, slurmd and what they started) and the two daemons
fleetbench.emulate.slurmd starts on the host, munged and slurmctld, known by their executable and
a command line naming N's Slurm directory (`<state dir>/slurm-N/`). Bringing the cluster down
powers its nodes off: those processes are stopped (TERM, then KILL after a grace period), and the
CPU cgroups of `cluster degrade` are removed.
"""
from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Iterable

from fleetbench.emulate import degrade, netem_state
from fleetbench.emulate.netem_plan import object_names
from fleetbench.emulate.netem_state import MARK, run

HOST_DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld")  # fleetbench.emulate.slurmd starts them
GRACE_S = 10.0  # from TERM to KILL: slurmd's KillWait is 5 s


def _is_ours(mark: str | None, prefix: str) -> bool:
    return bool(mark) and mark.startswith(f"{MARK} {prefix} ")


def marked_objects(prefix: str) -> list[tuple[str, str]]:
    """(kind, name) of every link, namespace and hosts directory with one of N's names that carries
    N's mark, in the order they are deleted (a host veth end takes its peer with it)."""
    named = object_names(prefix)
    links = [("link", name) for name, alias in sorted(netem_state.host_links().items())
             if named.match(name) and _is_ours(alias, prefix)]
    namespaces = [("netns", ns) for ns in sorted(netem_state.netns_names())
                  if named.match(ns) and _is_ours(netem_state.netns_mark(ns), prefix)]
    etc, etc_dir = [], netem_state.NETNS_ETC
    if os.path.isdir(etc_dir):
        etc = [("etc", path) for path in (os.path.join(etc_dir, d) for d in sorted(os.listdir(etc_dir)))
               if named.match(os.path.basename(path)) and _is_ours(netem_state.etc_mark(path), prefix)]
    return links + namespaces + etc


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [arg.decode(errors="replace") for arg in f.read().split(b"\0") if arg]
    except OSError:
        return []


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def host_daemons(prefix: str) -> list[int]:
    """munged and slurmctld processes serving N's emulated Slurm (their command lines name
    `<state dir>/slurm-N/`), whichever state directory it was in."""
    executables = {os.path.realpath(p) for p in HOST_DAEMONS}
    directory = re.compile(rf"(^|[=/])slurm-{re.escape(prefix)}/")
    return [pid for pid in (int(p) for p in os.listdir("/proc") if p.isdigit())
            if _exe(pid) in executables and any(directory.search(arg) for arg in _cmdline(pid))]


def namespace_processes(namespaces: Iterable[str]) -> list[int]:
    pids = []
    for ns in namespaces:
        pids += [int(p) for p in run(["ip", "netns", "pids", ns], check=False).stdout.split()]
    return sorted(set(pids) - {os.getpid()})


def stop(pids: list[int], grace_s: float | None = None) -> list[str]:
    """TERM each process, KILL those still there after `grace_s` (GRACE_S); what was stopped, as
    'process PID (NAME)' (a process already gone is left out)."""
    grace_s = GRACE_S if grace_s is None else grace_s
    stopped = []
    for pid in pids:
        name = os.path.basename(_exe(pid) or "?")
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        stopped.append((pid, name))
    deadline = time.monotonic() + grace_s
    while any(_exe(pid) for pid, _ in stopped) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid, _ in stopped:
        if _exe(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return [f"process {pid} ({name})" for pid, name in stopped]


def down(prefix: str) -> list[str]:
    """Remove what carries N's mark and stop N's processes; what was done, as `down` reports it."""
    objects = marked_objects(prefix)
    namespaces = [name for kind, name in objects if kind == "netns"]
    done = stop(namespace_processes(namespaces) + host_daemons(prefix))
    for ns in namespaces:
        if degrade.release_cgroup(ns):
            done.append(f"cgroup {degrade.cgroup_dir(ns)}")
    for kind, name in objects:
        netem_state.delete(kind, name)
        done.append(f"{kind} {name}")
    if done:
        print(f"fleetbench cluster: no state of cluster {prefix} at {netem_state.state_path(prefix)} (made under "
              "another FLEETBENCH_CLUSTER_STATE_DIR, or lost): removed what carries its mark", file=sys.stderr)
    return done
