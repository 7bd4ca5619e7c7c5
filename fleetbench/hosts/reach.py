"""How a command reaches a host: written once, for `fleetbench launch`, sweeps and `fleetbench
diagnose` (the executors wrap Paddle's launcher or the node agent in it; diagnose its probes).

| reach | where the command runs | argv |
|---|---|---|
| `local` | this machine | the command itself |
| `netns` | an emulated node: its network namespace, and its CPU cgroup when `fleetbench cluster degrade` limited it | `ip netns exec NETNS CMD` (joining the cgroup first) |
| `ssh` | a host over OpenSSH | `ssh -T -o BatchMode=yes ... [-F CONFIG] HOST 'cd DIR && exec CMD'` |
| `slurm` | a node of the Slurm allocation, as one job step | `srun --nodes=1 --ntasks=1 --nodelist=NODE [--cpus-per-task=N] --kill-on-bad-exit=1 [--chdir=DIR] CMD` |

The command's first word is a program on that host (for Python: the host's `python`). ssh: the
user's keys, agent and ~/.ssh/config, never a password prompt (BatchMode), a connect timeout, and
every word quoted (ssh hands the remote shell one string). Slurm would pin a step to one CPU:
`cpus` gives it the node's. Also here: a host's IPv4 address, found as ssh finds the host.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shlex
import socket
import subprocess

from fleetbench.emulate import degrade
from fleetbench.hosts.hostlist import Host, HostsError

SSH_OPTIONS = ("-T", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3")
CONNECT_TIMEOUT_S = 10


def command(host: Host, argv: list[str]) -> list[str]:
    """`argv` run on `host`, as an argument list to run here."""
    if host.reach == "ssh":
        return ssh_argv(host.name, remote_command(host.workdir, argv), host.ssh_config)
    if host.reach == "slurm":
        cpus = [f"--cpus-per-task={host.cpus}"] if host.cpus else []
        chdir = [f"--chdir={host.workdir}"] if host.workdir else []
        return ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={host.name}", *cpus, "--kill-on-bad-exit=1",
                *chdir, *argv]
    if host.reach == "netns":
        return in_netns(host.netns, argv)
    return list(argv)


def in_netns(netns: str, argv: list[str]) -> list[str]:
    """`ip netns exec NETNS argv`, joining the node's CPU cgroup first when the node is degraded.
    First, not inside: `ip netns exec` mounts a fresh /sys for the namespace, without the cgroup
    hierarchy, and membership survives exec."""
    inside = ["ip", "netns", "exec", netns, *argv]
    group = degrade.cgroup_dir(netns)
    if not os.path.isdir(group):
        return inside
    return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', group, *inside]


def ssh_argv(destination: str, remote: str, ssh_config: str | None = None,
             connect_timeout: int = CONNECT_TIMEOUT_S) -> list[str]:
    return (["ssh", *SSH_OPTIONS, "-o", f"ConnectTimeout={connect_timeout}"] +
            (["-F", ssh_config] if ssh_config else []) + [destination, remote])


def remote_command(workdir: str | None, argv: list[str]) -> str:
    """The one string ssh hands the remote shell: every word quoted."""
    return f"cd {shlex.quote(workdir)} && exec {shlex.join(argv)}" if workdir else f"exec {shlex.join(argv)}"


# ----------------------------------------------------------------------------------------------
# Addresses


def ssh_hostname(host: str, ssh_config: str | None = None) -> str:
    """The HostName ssh would connect to for `host` (aliases of ~/.ssh/config resolved by `ssh -G`)."""
    cmd = ["ssh", "-G"] + (["-F", ssh_config] if ssh_config else []) + [host]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HostsError(f"`{shlex.join(cmd)}` failed: {e}") from None
    if out.returncode != 0:
        raise HostsError(f"`{shlex.join(cmd)}` failed: {(out.stderr or out.stdout).strip()[:200]}")
    found = re.search(r"^hostname (\S+)$", out.stdout, re.M)
    return found.group(1) if found else host.rsplit("@", 1)[-1]


def resolve(name: str, node: int, host: str | None = None) -> str:
    """IPv4 address of `name` (Paddle's --host must be an address) or a one-line HostsError."""
    try:
        return socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except (socket.gaierror, UnicodeError) as e:
        shown = host if host in (None, name) else f"{host} (HostName {name})"
        raise HostsError(f"node {node}: host {shown or name} does not resolve "
                         f"({getattr(e, 'strerror', None) or e})") from None


def with_address(host: Host, strict: bool = True) -> Host:
    """`host` with its IPv4 address, found as ssh finds the host (its ~/.ssh/config alias first).
    strict: a host that does not resolve is a one-line HostsError (a job cannot start without it);
    otherwise its name stands in, and whatever runs there says it cannot be reached."""
    try:
        name = ssh_hostname(host.name, host.ssh_config) if host.reach == "ssh" else host.login_host
        return dataclasses.replace(host, address=resolve(name, host.index, host.name))
    except HostsError:
        if strict:
            raise
        return dataclasses.replace(host, address=host.login_host)
