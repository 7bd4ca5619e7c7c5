"""`fleetbench sshd up|down`: an OpenSSH server on every node of the emulated cluster (root).

Jobs reach the nodes through it the way they reach a real cluster's hosts (the ssh executor).

For a cluster brought up by `fleetbench cluster up --name NAME`, `up`:
- gives this machine (the head, like a cluster's login node) the subnet's last address on the
  cluster's bridge, so it can reach the nodes;
- generates, in a directory of its own (<state dir>/sshd-NAME), a host key, a client key, an
  authorized_keys file, one sshd_config per node (listening on the node's address only, keys only,
  no password, no PAM) and the client side: `ssh_config` (this key, these host keys, BatchMode)
  and `hostfile` (one line per node);
- starts `/usr/sbin/sshd -f <its config>` inside each node's namespace.
Nothing of the system's own ssh setup is read or changed (/etc/ssh, /root/.ssh). `down` stops
exactly the sshd processes whose pid files it wrote, removes the head's address and the
directory. Needs root and Debian's openssh-server (`apt-get install openssh-server`; its service
need not run).
"""
from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import time

from fleetbench.emulate import netem, netem_state

SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = "/run/sshd"  # sshd refuses to start without its privilege-separation directory


def requirements_problem() -> str | None:
    """None when sshd nodes can be made here, else why (tests skip with it)."""
    problem = netem.requirements_problem()
    if problem:
        return problem
    missing = [t for t in (SSHD, "ssh", "ssh-keygen") if not shutil.which(t)]
    if missing:
        return f"emulated sshd nodes need {', '.join(missing)} (Debian: apt-get install openssh-server)"
    return None


def directory(prefix: str) -> str:
    return os.path.join(netem_state.state_dir(), f"sshd-{prefix}")


def head_address(layout: netem.Layout) -> tuple[str, int]:
    net = ipaddress.ip_network(layout.subnet)
    return str(list(net.hosts())[-1]), net.prefixlen


def cluster_layout(prefix: str) -> netem.Layout:
    """The layout of the emulated cluster `prefix` (ClusterError when it is not up)."""
    state = netem.load_state(prefix)
    if not state or not state["created"]:
        raise netem.ClusterError(f"cluster {prefix!r} is not up (fleetbench cluster up --name {prefix})")
    return netem.Layout.from_dict(state["layout"])


def attach_head(layout: netem.Layout) -> None:
    """Give this machine the subnet's last address on the cluster's bridge (idempotent)."""
    users = netem.subnet_users(layout.subnet, netem_state.host_routes(), own_device=layout.bridge)
    if users:  # this machine's packets to the nodes would go there, and every ssh be refused
        raise netem.ClusterError(f"cluster {layout.prefix!r}: its subnet {layout.subnet} is also routed via "
                                 f"{', '.join(users)}; bring the cluster up again on another --subnet")
    addr, plen = head_address(layout)
    netem_state.run(["ip", "addr", "replace", f"{addr}/{plen}", "dev", layout.bridge])


def sshd_config(d: str, node: netem.Node) -> str:
    return "\n".join([
        f"ListenAddress {node.ip}", "Port 22", f"HostKey {d}/host_key",
        f"AuthorizedKeysFile {d}/authorized_keys", f"PidFile {d}/sshd-{node.index}.pid",
        "PubkeyAuthentication yes", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password", "UsePAM no", "StrictModes no", "PrintMotd no",
        "MaxStartups 100", "LogLevel INFO", ""])


def client_config(d: str, layout: netem.Layout) -> str:
    ips = " ".join(n.ip for n in layout.nodes)
    return "\n".join([
        f"Host {ips}", "  User root", f"  IdentityFile {d}/id_ed25519", "  IdentitiesOnly yes",
        f"  UserKnownHostsFile {d}/known_hosts", "  GlobalKnownHostsFile /dev/null",
        "  StrictHostKeyChecking yes", "  BatchMode yes", ""])


def _keygen(path: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fleetbench-emulated", "-f", path],
                   check=True, capture_output=True, timeout=30)


def _write(path: str, text: str, mode: int = 0o600) -> None:
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def up(prefix: str = netem.DEFAULT_PREFIX) -> dict:
    """Start sshd on every node of cluster `prefix`; returns {hostfile, ssh_config, hosts}."""
    problem = requirements_problem()
    if problem:
        raise netem.ClusterError(problem)
    layout = cluster_layout(prefix)
    d = directory(prefix)
    if not os.path.exists(os.path.join(d, "id_ed25519")):
        os.makedirs(d, mode=0o700, exist_ok=True)
        _keygen(os.path.join(d, "host_key"))
        _keygen(os.path.join(d, "id_ed25519"))
        shutil.copy(os.path.join(d, "id_ed25519.pub"), os.path.join(d, "authorized_keys"))
    with open(os.path.join(d, "host_key.pub")) as f:
        host_key = " ".join(f.read().split()[:2])
    _write(os.path.join(d, "known_hosts"), "".join(f"{n.ip} {host_key}\n" for n in layout.nodes))
    _write(os.path.join(d, "ssh_config"), client_config(d, layout))
    _write(os.path.join(d, "hostfile"), "".join(f"{n.ip} slots=1\n" for n in layout.nodes), 0o644)
    attach_head(layout)
    os.makedirs(PRIVSEP_DIR, mode=0o755, exist_ok=True)
    for node in layout.nodes:
        _start(d, node)
    return {"hostfile": os.path.join(d, "hostfile"), "ssh_config": os.path.join(d, "ssh_config"),
            "hosts": [n.ip for n in layout.nodes]}


def _start(d: str, node: netem.Node) -> None:
    if _pid(d, node.index):
        return  # already serving
    cfg = os.path.join(d, f"sshd_config-{node.index}")
    _write(cfg, sshd_config(d, node))
    log = os.path.join(d, f"sshd-{node.index}.log")
    netem_state.run(["ip", "netns", "exec", node.netns, SSHD, "-f", cfg, "-E", log])
    deadline = time.monotonic() + 10
    while not _pid(d, node.index):
        if time.monotonic() > deadline:
            raise netem.ClusterError(f"sshd on {node.netns} did not start (see {log})")
        time.sleep(0.05)


def _pid(d: str, index: int | str) -> int | None:
    """The pid of our sshd for node `index` if it runs, else None."""
    return netem_state.daemon_pid(os.path.join(d, f"sshd-{index}.pid"), [SSHD])


def down(prefix: str = netem.DEFAULT_PREFIX) -> list[int]:
    """Stop our sshd processes, remove the head's address and our directory. Idempotent."""
    d = directory(prefix)
    stopped = []
    if os.path.isdir(d):
        for name in sorted(os.listdir(d)):
            if name.startswith("sshd-") and name.endswith(".pid"):
                pid = _pid(d, name[len("sshd-"):-len(".pid")])
                if pid:
                    os.kill(pid, signal.SIGTERM)
                    stopped.append(pid)
    state = netem.load_state(prefix)
    if state and state["created"]:
        layout = netem.Layout.from_dict(state["layout"])
        addr, plen = head_address(layout)
        netem_state.run(["ip", "addr", "del", f"{addr}/{plen}", "dev", layout.bridge], check=False)
    shutil.rmtree(d, ignore_errors=True)
    return stopped


def parser():
    return netem.node_daemons_parser("sshd", __doc__.splitlines()[0])


def cli(argv: list[str]) -> int:
    return netem.node_daemons_cli(
        "sshd", __doc__.splitlines()[0], argv, sys.modules[__name__],
        lambda info: (f"sshd on {', '.join(info['hosts'])}\nhostfile:   {info['hostfile']}\n"
                      f"ssh config: {info['ssh_config']}\n"
                      f"try: ssh -F {info['ssh_config']} {info['hosts'][0]} hostname"),
        lambda name: f"cluster {name}: no sshd of ours running")
