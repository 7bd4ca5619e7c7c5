"""Executors: how one Paddle launcher per host is started.

| executor | where the launchers run | how (each node's command through fleetbench.hosts.reach) |
|---|---|---|
| `local`  | this machine, one launcher | a child process (fleetbench.job.paddle_launch) |
| `netns`  | emulated nodes (namespaces) | `ip netns exec NODE` + the launcher (in the node's CPU cgroup when degraded) |
| `ssh`    | the hosts of a hostfile | OpenSSH to each host runs fleetbench's node agent |
| `slurm`  | the nodes of a Slurm allocation | one `srun --nodes=1 --nodelist=NODE` per node runs the agent |

An executor is one class over hosts of one reach (fleetbench.hosts.hostlist.Host); its name is
that reach. Every multi-node job gives node i the same Paddle flags (`node_flags`): collective jobs
rendezvous at node 0 (`--master ADDR:PORT --nnodes N --rank i --nproc_per_node K_i --host
ADDR_i`; a per-node count allows uneven nodes), parameter-server jobs get the full `--servers`/
`--trainers` endpoint lists with servers and workers spread over the nodes in contiguous blocks
(Paddle numbers a node's trainers from its first endpoint in the list). Ranks also get
FLEETBENCH_NODES and FLEETBENCH_LAUNCH (the record's `launch` block: executor and hosts in rank
order of nodes).

ssh and slurm nodes run the agent (`PYTHON -m fleetbench.hosts.agent SPEC`, in the host's
workdir). Only an allow-list of the head's environment is forwarded in the spec: FLEETBENCH_*,
NCCL_*, FLAGS_*, GLOO_SOCKET_IFNAME and names the user adds; the node keeps its own login
environment otherwise.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import socket
import sys
from collections.abc import Iterable, Sequence

from fleetbench.hosts import hostlist, reach
from fleetbench.hosts.hostlist import Host
from fleetbench.job.paddle_launch import LAUNCHER_PORT_RANGE, NodeLaunch, child_env, paddle_command
from fleetbench.measure import contract, registry

FORWARD_PREFIXES = ("FLEETBENCH_", "NCCL_", "FLAGS_")
FORWARD_NAMES = ("GLOO_SOCKET_IFNAME",)
EXECUTORS = hostlist.REACHES  # an executor is named by how it reaches its hosts
AGENT_REACHES = ("ssh", "slurm")  # hosts whose process table is not this machine's: the node agent runs there


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


# Linux's ephemeral ports start here (ip_local_port_range's default): any outgoing connection can
# take one of them before a server listens; nothing below 10000 is chosen either (well-known services)
EPHEMERAL_START, PORT_FLOOR = 32768, 10000


def free_port(port_range: str | None = None) -> int:
    """A port to tell a node's Paddle launcher (`--master`, PS endpoints, `--gloo_port`), outside the
    range that launcher probes for its own ports: LAUNCHER_PORT_RANGE (what fleetbench gives it) and
    `port_range` (PORT_RANGE here, if set). Node 0's launcher picks its collective master's port
    before it starts the `--master` server, so from one range it can pick the very port it was told,
    and rank 0's TCP store then fails to bind it ("Bind network on IP_ANY:PORT failed"; ~1 in 12,000
    jobs). Ports on other hosts cannot be probed from here: a random one keeps concurrent jobs apart."""
    given = port_range or os.environ.get("PORT_RANGE") or LAUNCHER_PORT_RANGE
    free = [range(PORT_FLOOR, EPHEMERAL_START)]  # what no launcher's range covers, cut range by range
    for text in (LAUNCHER_PORT_RANGE, given):
        try:
            low, high = (int(part) for part in text.split(":"))
        except ValueError:
            raise ValueError(f"PORT_RANGE: expected LOW:HIGH port numbers, got {text!r}") from None
        free = [part for r in free for part in (range(r.start, min(r.stop, low)), range(max(r.start, high + 1), r.stop))
                if part]
    # the largest free stretch: by default 10000-19999, not 32001-32767, where tests and users fix ports
    choices = max(free, key=len, default=range(0))
    if len(choices) < 100:
        raise ValueError(f"PORT_RANGE {given}: leaves fewer than 100 ports between {PORT_FLOOR} and the "
                         f"ephemeral range ({EPHEMERAL_START}-) for fleetbench's own")
    return random.choice(choices)


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
# The executor


@dataclasses.dataclass(frozen=True)
class Start:
    """One start of a job: what runs, where its logs go, the caller's environment, its id."""
    job: Job
    log_dir: str
    base_env: dict
    job_id: str


class Executor:
    """One Paddle launcher per host, each started through fleetbench.hosts.reach: Paddle's launcher
    itself where this machine shares the host's process table (local, netns); fleetbench's node
    agent elsewhere (ssh, slurm), with its mirror here around the transport. Its name (the
    record's `launch.executor`) is the hosts' reach."""

    def __init__(self, hosts: Iterable[Host], forward: Iterable[str] = ()) -> None:
        self.nodes, self.forward = list(hosts), tuple(forward)
        reaches = {h.reach for h in self.nodes}
        if len(reaches) != 1:
            raise hostlist.HostsError(f"executor: expected hosts reached one way, got {sorted(reaches) or 'none'}")
        self.name = reaches.pop()

    @property
    def remote(self) -> bool:
        """True when the nodes run the agent (their records come back in the mirrored logs)."""
        return self.name in AGENT_REACHES

    @property
    def hosts(self) -> list[str]:
        return [n.name for n in self.nodes]

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
            env = dict(rank_env(self.name, [n.name for n in nodes], job), POD_IP=node.address, **dict(node.env))
            out.append(NodeLaunch(self.node_command(start, node, flags, env), node_dir(start, node),
                                  child_env(base_env, env), name=node.name))
        return out

    def node_command(self, start: Start, node: Host, flags: list[str], env: dict) -> list[str]:
        if not self.remote:
            return reach.command(node, paddle_command(flags, node_dir(start, node), start.job.script,
                                                      list(start.job.args)))
        spec = json.dumps(agent_spec(start, node, flags, env, self.forward), separators=(",", ":"))
        agent = [node.python, "-m", "fleetbench.hosts.agent", spec]
        return [sys.executable, "-m", "fleetbench.hosts.agent", "--mirror", node_dir(start, node), node.name,
                "--", *reach.command(node, agent)]


def node_dir(start: Start, node: Host) -> str:
    return os.path.join(start.log_dir, f"node{node.index}")


def agent_spec(start: Start, node: Host, flags: list[str], env: dict, forward: tuple[str, ...] = ()) -> dict:
    """What the node's agent runs (fleetbench.hosts.agent.run_node)."""
    from fleetbench.hosts import agent

    # child_env first: it turns the user's OMP_NUM_THREADS into FLEETBENCH_OMP_THREADS
    node_env = dict(forwarded_env(child_env(start.base_env), forward), **env)
    args = _results_to_scratch(list(start.job.args), agent.SCRATCH)
    return {"job": f"{start.job_id}-node{node.index}", "flags": flags,
            "script": script_on_node(start.job.script), "args": args, "env": node_env}


def script_on_node(script: str) -> str:
    """The script's path on the hosts: a file of this repository is found in its copy there
    (relative to the workdir the agent starts in); any other file at its absolute path."""
    path = os.path.abspath(script)
    inside = os.path.commonpath([path, str(registry.REPO_ROOT)]) == str(registry.REPO_ROOT)
    return os.path.relpath(path, registry.REPO_ROOT) if inside else path


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


def ssh_hosts(placements: list[hostlist.Placement], ssh_config: str | None = None, python: str | None = None,
              workdir: str | None = None) -> list[Host]:
    """The hosts of an ssh job from hosts.select's placements: every address resolved first, so a
    name that does not resolve is one line naming it before anything starts."""
    return [reach.with_address(dataclasses.replace(
        p.host, index=p.rank, ssh_config=ssh_config, python=python or sys.executable,
        workdir=workdir or str(registry.REPO_ROOT))) for p in placements]
