"""Jobs on several hosts, for `fleetbench launch` and `fleetbench sweep`: where the hosts come
from (a hostfile, `--hosts`, a Slurm allocation, the emulated cluster), which executor starts
their launchers, and collecting the record the nodes' rank 0 printed.

Options (both commands): `--hostfile FILE` | `--hosts a:2,b:2`, `--executor
auto|local|netns|ssh|slurm`, `--ssh-config FILE` (`ssh -F`; default: the user's ~/.ssh/config),
`--forward-env NAME,...` (more variables to pass to the nodes), `--remote-python PATH` and
`--remote-dir DIR` (this repository's Python and directory on the hosts; default: the same paths
as here, as on a shared filesystem). `auto` is ssh with hosts, local without; on the emulated
cluster (sweep `network:` cells) ssh into the nodes' sshd when openssh-server is installed, else
`ip netns exec` (the reason is printed once). An explicit `--executor ssh` that cannot be had here
is refused before anything runs (ssh_problem): no silent fallback where the user chose.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from typing import Protocol, TextIO

from fleetbench import cmdline
from fleetbench.emulate import netem, sshd
from fleetbench.hosts import allocation, executors, hostlist
from fleetbench.hosts.executors import Job
from fleetbench.hosts.hostlist import Host
from fleetbench.job.failure import Outcome
from fleetbench.job.paddle_launch import supervise
from fleetbench.job.supervisor import Limits
from fleetbench.measure import registry
from fleetbench.store import results

CHOICES = ("auto",) + executors.EXECUTORS
FLAGS = {"--hostfile": "hostfile", "--hosts": "hosts", "--executor": "executor", "--ssh-config": "ssh_config",
         "--forward-env": "forward", "--remote-python": "python", "--remote-dir": "workdir"}


class SweepCell(Protocol):
    """What cell_job reads of a sweep cell (fleetbench.sweep.sweepfile.Cell, which is above this
    room), read-only as in that frozen dataclass."""
    @property
    def mode(self) -> str: ...
    @property
    def script(self) -> str: ...
    @property
    def nodes(self) -> int: ...
    @property
    def servers(self) -> int: ...
    @property
    def workers(self) -> int: ...
    @property
    def counts(self) -> tuple | None: ...
    @property
    def devices_per_node(self) -> int: ...

    def script_args(self, results_path: str) -> list[str]: ...


@dataclasses.dataclass
class HostOptions:
    executor: str = "auto"
    hostfile: str = None
    hosts: str = None
    ssh_config: str = None
    forward: str = ""
    python: str = None
    workdir: str = None

    def take(self, flag: str, value: str) -> None:
        """Set one option from its command-line flag (HostsError, one line, on a bad value)."""
        try:
            setattr(self, FLAGS[flag], KINDS[flag](value))
        except argparse.ArgumentTypeError as e:
            raise hostlist.HostsError(f"{flag} {e}") from None

    @property
    def forwarded(self) -> tuple[str, ...]:
        return tuple(n.strip() for n in self.forward.split(",") if n.strip())

    def on_hosts(self) -> bool:
        """True when jobs go to other hosts (a host list, or an executor that needs one)."""
        return self.real_hosts() or self.executor == "ssh"

    def real_hosts(self) -> bool:
        """True when there are hosts besides the emulated cluster's (`--executor ssh` alone, in a
        sweep, means the emulated nodes' sshd)."""
        return bool(self.hostfile or self.hosts) or self.executor == "slurm"

    def host_list(self) -> list[hostlist.Host]:
        if self.hostfile and self.hosts:
            raise hostlist.HostsError("--hostfile and --hosts are alternatives; give one")
        if self.hostfile:
            return hostlist.load_hostfile(self.hostfile)
        if self.hosts:
            return hostlist.parse_hosts_arg(self.hosts)
        raise hostlist.HostsError(f"--executor {self.executor} needs hosts: --hostfile FILE or --hosts a:2,b:2")


def _hosts(text: str) -> str:
    try:
        hostlist.parse_hosts_arg(text, "")
    except hostlist.HostsError as e:
        raise cmdline.Refused(cmdline.with_expected(f"{text!r}{e}", HOSTS_EXPECTED)) from None
    return text


def _hostfile(text: str) -> str:
    problem = cmdline.input_file_problem(text)
    if problem:
        raise cmdline.Refused(f"{text or repr(text)}: {cmdline.with_expected(problem, 'a hostfile it can read')}")
    try:
        hostlist.load_hostfile(text)  # its lines, before anything runs
    except hostlist.HostsError as e:
        raise cmdline.Refused(str(e).removeprefix("hostfile ")) from None
    return text


def _env_names(text: str) -> str:
    if not re.fullmatch(r"\s*([A-Za-z_]\w*\s*(,\s*[A-Za-z_]\w*\s*)*)?", text):
        raise ValueError(text)
    return text


def _executor(text: str) -> str:
    if text not in CHOICES:
        raise ValueError(text)
    return text


HOSTS_EXPECTED = "hosts like a:2,b:2, each once"
HOSTS = cmdline.Kind(HOSTS_EXPECTED, _hosts, ("", ",", "a:0", "a,a", "bad host"))
# what each host option takes: the sweep's parser and `fleetbench launch`'s table both read it
KINDS = {"--hostfile": cmdline.Kind("a hostfile: `HOST slots=N` a line", _hostfile, ("", cmdline.MISSING, cmdline.DIRECTORY)),
         "--hosts": HOSTS,
         "--executor": cmdline.Kind(f"one of {', '.join(CHOICES)}", _executor, ("nosuch", "")),
         "--ssh-config": cmdline.INPUT_FILE,
         "--forward-env": cmdline.Kind("environment variable names like A,B", _env_names, ("A B", "1X", "A,,B")),
         "--remote-python": cmdline.TEXT, "--remote-dir": cmdline.TEXT}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options on an argparse parser (fleetbench sweep)."""
    parser.add_argument("--executor", type=KINDS["--executor"], default="auto", metavar="{" + ",".join(CHOICES) + "}",
                        help="how each host's launcher starts")
    parser.add_argument("--hostfile", type=KINDS["--hostfile"], help="hosts, one `HOST slots=N` per line "
                        "(DeepSpeed/Horovod hostfile)")
    parser.add_argument("--hosts", type=HOSTS, help="hosts as a list: a:2,b:2")
    parser.add_argument("--ssh-config", type=KINDS["--ssh-config"], help="ssh -F FILE (default: your ~/.ssh/config)")
    parser.add_argument("--forward-env", default="", type=KINDS["--forward-env"],
                        help="more environment variables for the nodes: A,B")
    parser.add_argument("--remote-python", type=cmdline.TEXT, help="Python on the hosts (default: this one's path)")
    parser.add_argument("--remote-dir", type=cmdline.TEXT, help="this repository on the hosts (default: its path here)")


def from_namespace(ns: argparse.Namespace) -> HostOptions:
    opts = HostOptions(ns.executor, ns.hostfile, ns.hosts, ns.ssh_config, ns.forward_env, ns.remote_python,
                       ns.remote_dir)
    if opts.hostfile or opts.hosts:
        opts.host_list()  # a bad hostfile fails before anything runs
    return opts


def from_sweep(opts: HostOptions, spec: dict, path: str) -> HostOptions:
    """The options of a sweep: its flags, else the sweep file's `hosts:` (a hostfile path relative
    to the file, or a list like [node1:4, node2:4])."""
    value = spec.get("hosts")
    if value is None or opts.hostfile or opts.hosts:
        return opts
    if isinstance(value, list) and value:
        opts.hosts = ",".join(map(str, value))
    elif isinstance(value, str) and value:
        opts.hostfile = os.path.join(os.path.dirname(os.path.abspath(path)), value)
    else:
        raise hostlist.HostsError(f"{path}: hosts: expected a hostfile path or a list like [node1:4, node2:4]")
    opts.host_list()
    return opts


def ssh_problem(opts: HostOptions, emulated: bool) -> str | None:
    """Why the ssh these options ask for cannot be had on this machine, as one line naming what is
    missing and how to install it; None when it can, or when ssh is only the automatic choice on
    the emulated cluster (`emulated`: some cells run there), which falls back to `ip netns exec`."""
    if opts.executor == "ssh" and emulated:
        problem = sshd.requirements_problem()
        if problem:
            return f"--executor ssh: {problem}"
    if opts.executor in ("auto", "ssh") and (opts.hostfile or opts.hosts) and not shutil.which("ssh"):
        return "the hosts are reached with ssh, which is not on PATH (Debian: apt-get install openssh-client)"
    return None


def cell_job(cell: SweepCell, results_path: str) -> Job:
    """The Job of one run of a sweep cell (fleetbench.sweep.sweepfile.Cell)."""
    args = tuple(cell.script_args(results_path))
    if cell.mode == "ps":
        return Job("ps", cell.script, args, cell.nodes, servers=cell.servers, workers=cell.workers)
    counts = cell.counts or (cell.devices_per_node,) * cell.nodes  # comm jobs launch like collective ones
    return Job("collective", cell.script, args, cell.nodes, counts)


def on_nodes(cell: SweepCell) -> bool:
    """Whether a sweep cell on real hosts is checked on its nodes (check_cell), as a `fleetbench
    launch --hosts` of a collective job is: a parameter-server job's config is checked on the head."""
    return cell.mode != "ps"


def check_cell(opts: HostOptions, cell: SweepCell, results_path: str, env: dict) -> dict:
    """The config of a sweep cell that runs on real hosts, from its nodes: each checks the devices
    and the ranks it will start (the cell's count there) and runs the benchmark's --check
    (fleetbench.hosts.nodecheck), so a head without GPUs (a Slurm login node, an ssh jump host)
    refuses neither an amp cell nor the GPU readiness check. HostsError or
    preflight.LaunchError (one line naming the node) when a node refuses."""
    from fleetbench.hosts import nodecheck

    work = cell_job(cell, results_path)
    ex = host_executor(opts, cell.nodes, work.counts)
    return nodecheck.check_job(ex, work, env, [str(k) for k in work.counts], check=True)[0]["config"]


def host_executor(opts: HostOptions, nodes: int, counts: Sequence[int],
                  check_slots: bool = True) -> executors.Executor:
    """The executor for a job of `nodes` nodes on real hosts (addresses resolved first)."""
    workdir = opts.workdir or str(registry.REPO_ROOT)
    if opts.executor == "slurm":
        hosts = allocation.slurm_hosts(python=opts.python, workdir=workdir)
        if nodes > len(hosts):
            raise hostlist.HostsError(f"--executor slurm: {nodes} nodes asked for, the allocation has {len(hosts)}")
        return executors.Executor(hosts[:nodes], opts.forwarded)
    if opts.executor in ("local", "netns"):
        raise hostlist.HostsError(f"--executor {opts.executor} runs on this machine; hosts need ssh or slurm")
    placements = hostlist.select(opts.host_list(), nodes, counts, check_slots)
    return executors.Executor(executors.ssh_hosts(placements, opts.ssh_config, opts.python, workdir), opts.forwarded)


def emulated_host(node: netem.Node, name: str | None = None) -> Host:
    """An emulated node as a host reached by `ip netns exec`, named by its address unless `name`
    is given, its ranks on its own veth (GLOO_SOCKET_IFNAME)."""
    return Host(name or node.ip, reach="netns", index=node.index, address=node.ip, netns=node.netns,
                env=(("GLOO_SOCKET_IFNAME", node.ifname),))


def emulated_executor(opts: HostOptions, state: dict, prefix: str,
                      say: Callable[[str], None] = print) -> executors.Executor:
    """The executor for the emulated cluster `prefix` (its nodes' addresses are the hosts)."""
    layout = netem.Layout.from_dict(state["layout"])
    problem = sshd.requirements_problem()
    if opts.executor in ("auto", "ssh") and problem is None:
        info = sshd.up(prefix)
        return executors.Executor([Host(n.ip, reach="ssh", index=n.index, address=n.ip, ssh_config=info["ssh_config"],
                                        python=opts.python or sys.executable,
                                        workdir=opts.workdir or str(registry.REPO_ROOT)) for n in layout.nodes],
                                  opts.forwarded)
    if opts.executor not in ("auto", "netns"):
        raise netem.ClusterError(f"--executor {opts.executor} on the emulated cluster: "
                                 f"{problem or 'use ssh or netns'}")
    if opts.executor == "auto":
        say(f"emulated cluster: nodes started with ip netns exec ({problem})")
    return executors.Executor([emulated_host(n) for n in layout.nodes])


def run_job(executor: executors.Executor, job: Job, log_dir: str, base_env: dict, limits: Limits,
            results_path: str, *, echo: TextIO | None = None, say: Callable[[str], None] | None = None,
            job_id: str | None = None) -> Outcome:
    """Supervise `job` on `executor`; store the record the nodes printed. Returns the Outcome."""
    outcome = supervise(lambda dir_, extra, job_id_: executor.launches(job, dir_, dict(base_env, **extra), job_id_),
                        log_dir, limits, echo=echo, say=say, job_id=job_id)
    if executor.remote and outcome.status == "ok":
        # a failed job's record is the supervisor's; a line printed while it was being stopped is not one
        results.import_logs(results.rank_logs(log_dir), results_path)
    return outcome
