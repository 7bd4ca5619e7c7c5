"""Executors: how one Paddle launcher per host is started.

| executor | where the launchers run | how |
|---|---|---|
| `local`  | this machine, one launcher | a child process (fleetbench.job.paddle_launch) |
| `netns`  | emulated nodes (namespaces) | `ip netns exec NODE` + the launcher |
| `ssh`    | the hosts of a hostfile | OpenSSH to each host runs fleetbench's node agent |
| `slurm`  | the nodes of a Slurm allocation | one `srun --nodes=1 --nodelist=NODE` per node runs the agent |

Every multi-node executor gives node i the same Paddle flags (`node_flags`): collective jobs
rendezvous at node 0 (`--master ADDR:PORT --nnodes N --rank i --nproc_per_node K_i --host
ADDR_i`; a per-node count allows uneven nodes), parameter-server jobs get the full `--servers`/
`--trainers` endpoint lists with servers and workers spread over the nodes in contiguous blocks
(Paddle numbers a node's trainers from its first endpoint in the list). Ranks also get
FLEETBENCH_NODES and FLEETBENCH_LAUNCH (the record's `launch` block: executor and hosts in rank
order of nodes).

ssh: `ssh -T -o BatchMode=yes` (the user's keys, agent and ~/.ssh/config; a password prompt is
never possible), one connection per host, the remote command `cd DIR && exec env NAME=VALUE ...
PYTHON -m fleetbench.hosts.agent SPEC` (every word quoted: ssh hands the remote shell one
string). Only an allow-list of the head's environment is forwarded: FLEETBENCH_*, NCCL_*, FLAGS_*,
GLOO_SOCKET_IFNAME and names the user adds; the node keeps its own login environment otherwise.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterable, Sequence

from fleetbench.hosts import hostlist
from fleetbench.job.paddle_launch import NodeLaunch, child_env, paddle_command
from fleetbench.measure import contract, registry

FORWARD_PREFIXES = ("FLEETBENCH_", "NCCL_", "FLAGS_")
FORWARD_NAMES = ("GLOO_SOCKET_IFNAME",)
SSH_OPTIONS = ("-T", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3")
EXECUTORS = ("local", "netns", "ssh", "slurm")


@dataclasses.dataclass(frozen=True)
class Job:
    """What runs, independent of where: the script, its arguments, and the job's shape."""
    mode: str                 # collective | ps
    script: str
    args: tuple               # script arguments
    nodes: int = 1
    counts: tuple = None      # collective: processes per node, one per node (None: 1 each)
    servers: int = 0          # ps: totals over all nodes
    workers: int = 0
    flags: tuple = ()         # more Paddle launcher flags for every node (e.g. --devices 0,1)

    def __post_init__(self) -> None:
        if self.counts is None:
            object.__setattr__(self, "counts", (1,) * self.nodes)
        if len(self.counts) != self.nodes:
            raise ValueError(f"Job: {len(self.counts)} process counts for {self.nodes} nodes")


def spread(total: int, nodes: int) -> list[int]:
    """`total` processes over `nodes` nodes in contiguous blocks, the first nodes taking the rest."""
    return [total // nodes + (i < total % nodes) for i in range(nodes)]


def free_port() -> int:
    # Ports on other hosts cannot be probed from here; a random high port keeps jobs apart.
    return random.randint(20000, 29999)


def node_flags(job: Job, addresses: Sequence[str]) -> list[list[str] | None]:
    """Paddle launcher flags for each node (None: a PS node with nothing to run)."""
    nodes, extra = len(addresses), list(job.flags)
    if job.mode == "collective":
        master = f"{addresses[0]}:{free_port()}"
        return [["--master", master, "--nnodes", str(nodes), "--rank", str(i), "--nproc_per_node", str(k),
                 "--host", addr, *extra] for i, (addr, k) in enumerate(zip(addresses, job.counts))]
    servers = [[f"{a}:{free_port()}" for _ in range(k)] for a, k in zip(addresses, spread(job.servers, nodes))]
    workers = [[f"{a}:{free_port()}" for _ in range(k)] for a, k in zip(addresses, spread(job.workers, nodes))]
    common = ["--servers", ",".join(sum(servers, [])), "--trainers", ",".join(sum(workers, [])),
              "--gloo_port", str(free_port())]
    return [common + ["--host", a, *extra] if (s or w) else None for a, s, w in zip(addresses, servers, workers)]


def forwarded_env(base: dict, extra_names: Iterable[str] = ()) -> dict:
    """The allow-listed part of the head's environment that a remote node receives."""
    keep = set(FORWARD_NAMES) | set(extra_names)
    return {k: v for k, v in base.items()
            if (k.startswith(FORWARD_PREFIXES) or k in keep) and k not in (contract.JOB_ID, contract.SUPERVISOR)}


def launch_block(executor: str, hosts: Iterable[str], counts: Sequence[int] | None = None) -> dict:
    """The record's `launch` block; `processes` only when nodes differ (3+2)."""
    block = {"executor": executor, "hosts": list(hosts)}
    if counts and len(set(counts)) > 1:
        block["processes"] = list(counts)
    return block


def local_block() -> dict:
    """The `launch` block of a job on this machine alone."""
    return launch_block("local", [socket.gethostname()])


def local_env() -> dict:
    """local_block() as the ranks read it (the launcher-rank contract)."""
    return contract.RankContract(launch=local_block()).to_env()


def rank_env(executor: str, hosts: list[str], job: Job) -> dict:
    block = launch_block(executor, hosts, job.counts if job.mode == "collective" else None)
    return contract.RankContract(nodes=len(hosts), launch=block).to_env()


# ----------------------------------------------------------------------------------------------
# Addresses


def ssh_hostname(host: str, ssh_config: str | None = None) -> str:
    """The HostName ssh would connect to for `host` (aliases of ~/.ssh/config resolved by `ssh -G`)."""
    cmd = ["ssh", "-G"] + (["-F", ssh_config] if ssh_config else []) + [host]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise hostlist.HostsError(f"`{shlex.join(cmd)}` failed: {e}") from None
    if out.returncode != 0:
        raise hostlist.HostsError(f"`{shlex.join(cmd)}` failed: {(out.stderr or out.stdout).strip()[:200]}")
    found = re.search(r"^hostname (\S+)$", out.stdout, re.M)
    return found.group(1) if found else host.rsplit("@", 1)[-1]


def resolve(name: str, node: int, host: str | None = None) -> str:
    """IPv4 address of `name` (Paddle's --host must be an address) or a one-line HostsError."""
    try:
        return socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except (socket.gaierror, UnicodeError) as e:
        shown = host if host in (None, name) else f"{host} (HostName {name})"
        raise hostlist.HostsError(f"node {node}: host {shown or name} does not resolve "
                                 f"({getattr(e, 'strerror', None) or e})") from None


# ----------------------------------------------------------------------------------------------
# Executors


@dataclasses.dataclass(frozen=True)
class Start:
    """One start of a job: what runs, where its logs go, the caller's environment, its id."""
    job: Job
    log_dir: str
    base_env: dict
    job_id: str


@dataclasses.dataclass
class Node:
    """One node as an executor starts it."""
    rank: int
    host: str          # the host's name as the user gave it (ssh destination, Slurm node name)
    address: str       # its IPv4 address (Paddle's --host, POD_IP)
    env: dict = dataclasses.field(default_factory=dict)  # per-node variables (emulated: the veth)


class Executor:
    """Common part: Paddle flags per node, the rank environment, one NodeLaunch per node."""
    name = None

    def __init__(self, nodes: Iterable[Node], forward: Iterable[str] = ()) -> None:
        self.nodes, self.forward = list(nodes), tuple(forward)

    @property
    def hosts(self) -> list[str]:
        return [n.host for n in self.nodes]

    def launch_block(self, job: Job) -> dict:
        return launch_block(self.name, self.hosts[:job.nodes], job.counts if job.mode == "collective" else None)

    def launches(self, job: Job, log_dir: str, base_env: dict, job_id: str) -> list[NodeLaunch]:
        """[fleetbench.job.paddle_launch.NodeLaunch], one per node that runs something."""
        start = Start(job, log_dir, base_env, job_id)
        if len(self.nodes) < job.nodes:
            raise hostlist.HostsError(f"{self.name}: the job needs {job.nodes} nodes, {len(self.nodes)} given")
        nodes = self.nodes[:job.nodes]
        out = []
        for node, flags in zip(nodes, node_flags(job, [n.address for n in nodes])):
            if flags is None:
                continue
            env = dict(rank_env(self.name, [n.host for n in nodes], job), POD_IP=node.address, **node.env)
            out.append(NodeLaunch(self.node_command(start, node, flags, env), self.node_dir(start, node),
                                  child_env(base_env, env), name=node.host))
        return out

    @staticmethod
    def node_dir(start: Start, node: Node) -> str:
        return os.path.join(start.log_dir, f"node{node.rank}")

    def node_command(self, start: Start, node: Node, flags: list[str], env: dict) -> list[str]:
        raise NotImplementedError


class NetnsExecutor(Executor):
    """The emulated cluster's original path: each launcher inside its node's namespace, directly."""
    name = "netns"

    def __init__(self, nodes: list[Node], netns: Iterable[str]) -> None:
        super().__init__(nodes)
        self.netns = dict(zip((n.host for n in nodes), netns))

    def node_command(self, start: Start, node: Node, flags: list[str], env: dict) -> list[str]:
        from fleetbench.emulate import degrade  # a node degraded by `fleetbench cluster degrade`

        return degrade.in_node(self.netns[node.host], paddle_command(
            flags, self.node_dir(start, node), start.job.script, list(start.job.args)))


class AgentExecutor(Executor):
    """Executors that run fleetbench's node agent on each host through a transport (ssh, srun);
    the local command is the agent's mirror around that transport."""

    def __init__(self, nodes: Iterable[Node], forward: Iterable[str] = (), python: str | None = None,
                 workdir: str | None = None) -> None:
        super().__init__(nodes, forward)
        self.python = python or sys.executable
        self.workdir = workdir or str(registry.REPO_ROOT)

    def spec(self, start: Start, node: Node, flags: list[str], env: dict) -> dict:
        """What the node's agent runs (fleetbench.hosts.agent.run_node)."""
        from fleetbench.hosts import agent

        # child_env first: it turns the user's OMP_NUM_THREADS into FLEETBENCH_OMP_THREADS
        node_env = dict(forwarded_env(child_env(start.base_env), self.forward), **env)
        args = _results_to_scratch(list(start.job.args), agent.SCRATCH)
        return {"job": f"{start.job_id}-node{node.rank}", "flags": flags,
                "script": self.script_on_node(start.job.script), "args": args, "env": node_env}

    def script_on_node(self, script: str) -> str:
        """The script's path on the hosts: a file of this repository is found in its copy there
        (relative to the workdir the agent starts in); any other file at its absolute path."""
        path = os.path.abspath(script)
        inside = os.path.commonpath([path, str(registry.REPO_ROOT)]) == str(registry.REPO_ROOT)
        return os.path.relpath(path, registry.REPO_ROOT) if inside else path

    def node_command(self, start: Start, node: Node, flags: list[str], env: dict) -> list[str]:
        spec = json.dumps(self.spec(start, node, flags, env), separators=(",", ":"))
        agent = [self.python, "-m", "fleetbench.hosts.agent", spec]
        return [sys.executable, "-m", "fleetbench.hosts.agent", "--mirror", self.node_dir(start, node), node.host,
                "--", *self.transport(node, agent)]

    def transport(self, node: Node, agent_argv: list[str]) -> list[str]:
        raise NotImplementedError


def _results_to_scratch(args: list[str], scratch: str) -> list[str]:
    """The script's --results on a node is a scratch file there (the head imports the record)."""
    out = list(args)
    for i, a in enumerate(out):
        if a == "--results" and i + 1 < len(out):
            out[i + 1] = f"{scratch}/results.jsonl"
        elif a.startswith("--results="):
            out[i] = f"--results={scratch}/results.jsonl"
    return out if any(a == "--results" or a.startswith("--results=") for a in out) else \
        out + ["--results", f"{scratch}/results.jsonl"]


class SshExecutor(AgentExecutor):
    name = "ssh"

    def __init__(self, nodes: Iterable[Node], forward: Iterable[str] = (), python: str | None = None,
                 workdir: str | None = None, ssh_config: str | None = None, connect_timeout: int = 10) -> None:
        super().__init__(nodes, forward, python, workdir)
        self.ssh_config, self.connect_timeout = ssh_config, connect_timeout

    def transport(self, node: Node, agent_argv: list[str]) -> list[str]:
        return ssh_argv(node.host, remote_command(self.workdir, agent_argv), self.ssh_config, self.connect_timeout)


def ssh_argv(host: str, command: str, ssh_config: str | None = None, connect_timeout: int = 10) -> list[str]:
    return (["ssh", *SSH_OPTIONS, "-o", f"ConnectTimeout={connect_timeout}"] +
            (["-F", ssh_config] if ssh_config else []) + [host, command])


def remote_command(workdir: str, argv: list[str]) -> str:
    """The one string ssh hands the remote shell: every word quoted."""
    return f"cd {shlex.quote(workdir)} && exec {shlex.join(argv)}"


class SlurmExecutor(AgentExecutor):
    """Inside an allocation: one job step per node (`srun --nodes=1 --ntasks=1 --nodelist=NODE`),
    each running the node agent with all the node's CPUs."""
    name = "slurm"

    def __init__(self, nodes: Iterable[Node], forward: Iterable[str] = (), python: str | None = None,
                 workdir: str | None = None, cpus: str | None = None) -> None:
        super().__init__(nodes, forward, python, workdir)
        self.cpus = cpus

    def transport(self, node: Node, agent_argv: list[str]) -> list[str]:
        cpus = [f"--cpus-per-task={self.cpus}"] if self.cpus else []
        return ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={node.host}", *cpus, "--kill-on-bad-exit=1",
                f"--chdir={self.workdir}", *agent_argv]


def ssh_nodes(placements: list[hostlist.Placement], ssh_config: str | None = None) -> list[Node]:
    """Nodes of an ssh job from hosts.select's placements: every address resolved first, so a
    name that does not resolve is one line naming it before anything starts."""
    return [Node(p.rank, p.host.name, resolve(ssh_hostname(p.host.name, ssh_config), p.rank, p.host.name))
            for p in placements]
