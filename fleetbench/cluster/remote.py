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
import dataclasses
import os
import shutil
import sys
import uuid

from fleetbench.cluster import executors, hosts as hostlib, netem, sshd
from fleetbench.cluster.executors import Job, Node
from fleetbench.cluster.job import supervise
from fleetbench.measure import result_logs

CHOICES = ("auto",) + executors.EXECUTORS
FLAGS = {"--hostfile": "hostfile", "--hosts": "hosts", "--executor": "executor", "--ssh-config": "ssh_config",
         "--forward-env": "forward", "--remote-python": "python", "--remote-dir": "workdir"}
# Paddle flags an executor sets per node itself (a user's value would contradict the plan), and
# the ones it reads to make the plan.
PLANNED_FLAGS = ("--master", "--rank", "--host", "--ips", "--servers", "--trainers", "--gloo_port", "--worker_num",
                 "--workers")
SHAPE_FLAGS = ("--nnodes", "--nproc_per_node", "--server_num", "--trainer_num")


@dataclasses.dataclass
class HostOptions:
    executor: str = "auto"
    hostfile: str = None
    hosts: str = None
    ssh_config: str = None
    forward: str = ""
    python: str = None
    workdir: str = None

    def take(self, flag, value):
        """Set one option from its command-line flag (HostsError on a bad executor name)."""
        if flag == "--executor" and value not in CHOICES:
            raise hostlib.HostsError(f"--executor {value!r}: expected one of {', '.join(CHOICES)}")
        setattr(self, FLAGS[flag], value)

    @property
    def forwarded(self):
        return tuple(n.strip() for n in self.forward.split(",") if n.strip())

    def on_hosts(self):
        """True when jobs go to other hosts (a host list, or an executor that needs one)."""
        return self.real_hosts() or self.executor == "ssh"

    def real_hosts(self):
        """True when there are hosts besides the emulated cluster's (`--executor ssh` alone, in a
        sweep, means the emulated nodes' sshd)."""
        return bool(self.hostfile or self.hosts) or self.executor == "slurm"

    def host_list(self):
        if self.hostfile and self.hosts:
            raise hostlib.HostsError("--hostfile and --hosts are alternatives; give one")
        if self.hostfile:
            return hostlib.load_hostfile(self.hostfile)
        if self.hosts:
            return hostlib.parse_hosts_arg(self.hosts)
        raise hostlib.HostsError(f"--executor {self.executor} needs hosts: --hostfile FILE or --hosts a:2,b:2")


def add_arguments(parser):
    """The options on an argparse parser (fleetbench sweep)."""
    parser.add_argument("--executor", choices=CHOICES, default="auto", help="how each host's launcher starts")
    parser.add_argument("--hostfile", help="hosts, one `HOST slots=N` per line (DeepSpeed/Horovod hostfile)")
    parser.add_argument("--hosts", help="hosts as a list: a:2,b:2")
    parser.add_argument("--ssh-config", help="ssh -F FILE (default: your ~/.ssh/config)")
    parser.add_argument("--forward-env", default="", help="more environment variables for the nodes: A,B")
    parser.add_argument("--remote-python", help="Python on the hosts (default: this one's path)")
    parser.add_argument("--remote-dir", help="this repository on the hosts (default: its path here)")


def from_namespace(ns):
    opts = HostOptions(ns.executor, ns.hostfile, ns.hosts, ns.ssh_config, ns.forward_env, ns.remote_python,
                       ns.remote_dir)
    if opts.hostfile or opts.hosts:
        opts.host_list()  # a bad hostfile fails before anything runs
    return opts


def from_sweep(opts, spec, path):
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
        raise hostlib.HostsError(f"{path}: hosts: expected a hostfile path or a list like [node1:4, node2:4]")
    opts.host_list()
    return opts


def ssh_problem(opts, emulated):
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


def cell_job(cell, results_path):
    """The Job of one run of a sweep cell (fleetbench.cluster.sweep_spec.Cell)."""
    args = tuple(cell.script_args(results_path))
    if cell.mode == "ps":
        return Job("ps", cell.script, args, cell.nodes, servers=cell.servers, workers=cell.workers)
    counts = cell.counts or (cell.devices_per_node,) * cell.nodes  # comm jobs launch like collective ones
    return Job("collective", cell.script, args, cell.nodes, counts)


def host_executor(opts, nodes, counts, check_slots=True):
    """The executor for a job of `nodes` nodes on real hosts (addresses resolved first)."""
    if opts.executor == "slurm":
        from fleetbench.cluster import slurm

        ex = slurm.executor(forward=opts.forwarded)
        if nodes > len(ex.nodes):
            raise hostlib.HostsError(f"--executor slurm: {nodes} nodes asked for, the allocation has {len(ex.nodes)}")
        ex.python, ex.workdir = opts.python or ex.python, opts.workdir or ex.workdir
        ex.nodes = ex.nodes[:nodes]
        return ex
    if opts.executor in ("local", "netns"):
        raise hostlib.HostsError(f"--executor {opts.executor} runs on this machine; hosts need ssh or slurm")
    placements = hostlib.select(opts.host_list(), nodes, counts, check_slots)
    return executors.SshExecutor(executors.ssh_nodes(placements, opts.ssh_config), opts.forwarded, opts.python,
                                 opts.workdir, opts.ssh_config)


def emulated_executor(opts, state, prefix, say=print):
    """The executor for the emulated cluster `prefix` (its nodes' addresses are the hosts)."""
    layout = netem.Layout.from_dict(state["layout"])
    problem = sshd.requirements_problem()
    if opts.executor in ("auto", "ssh") and problem is None:
        info = sshd.up(prefix)
        nodes = [Node(n.index, n.ip, n.ip) for n in layout.nodes]
        return executors.SshExecutor(nodes, opts.forwarded, opts.python, opts.workdir, info["ssh_config"])
    if opts.executor not in ("auto", "netns"):
        raise netem.ClusterError(f"--executor {opts.executor} on the emulated cluster: "
                                 f"{problem or 'use ssh or netns'}")
    if opts.executor == "auto":
        say(f"emulated cluster: nodes started with ip netns exec ({problem})")
    nodes = [Node(n.index, n.ip, n.ip, {"GLOO_SOCKET_IFNAME": n.ifname}) for n in layout.nodes]
    return executors.NetnsExecutor(nodes, [n.netns for n in layout.nodes])


def run_job(executor, job, log_dir, base_env, limits, results_path, *, echo=None, say=None, job_id=None):
    """Supervise `job` on `executor`; store the record the nodes printed. Returns the Outcome."""
    outcome = supervise(lambda dir_, extra, job_id_: executor.launches(job, dir_, dict(base_env, **extra), job_id_),
                        log_dir, limits, echo=echo, say=say, job_id=job_id)
    if isinstance(executor, executors.AgentExecutor) and outcome.status == "ok":
        # a failed job's record is the supervisor's; a line printed while it was being stopped is not one
        result_logs.import_logs(result_logs.rank_logs(log_dir), results_path)
    return outcome


# ----------------------------------------------------------------------------------------------
# fleetbench launch --hostfile ...


def job_from_launch(args, shape, slots):
    """The Job of a `fleetbench launch` on hosts with these slots (one per host, in order).
    shape: launch.job_shape's (mode, ...)."""
    planned = [f for f in PLANNED_FLAGS if args.flag(f)]
    if planned:
        raise hostlib.HostsError(f"{planned[0]}: with hosts, fleetbench plans it for every node; leave it out")
    nnodes = args.flag("--nnodes")
    nodes = int(nnodes.split(":")[-1]) if nnodes else len(slots)
    other = tuple(x for i in range(0, len(args.paddle), 2) if args.paddle[i] not in SHAPE_FLAGS
                  for x in args.paddle[i:i + 2])
    if shape[0] == "ps":
        servers, trainers = (int(args.flag(f) or 1) for f in ("--server_num", "--trainer_num"))  # per node, as Paddle's
        return Job("ps", args.script, tuple(args.script_args), nodes, servers=servers * nodes,
                   workers=trainers * nodes, flags=other)
    nproc = args.flag("--nproc_per_node")
    counts = (int(nproc),) * nodes if nproc else tuple(slots[:nodes])
    return Job("collective", args.script, tuple(args.script_args), nodes, counts, flags=other)


def launch_on_hosts(args, opts, identity, env, shape):
    """`fleetbench launch` with hosts: exit code. Bad input (hosts, names that do not resolve)
    raises HostsError before anything starts."""
    from fleetbench.cluster import failure, launch

    if opts.executor == "slurm":
        from fleetbench.cluster import slurm

        slots = [1] * len(slurm.allocation_hosts())
    else:
        slots = [h.slots for h in opts.host_list()]
    job = job_from_launch(args, shape, slots)
    ex = host_executor(opts, job.nodes, job.counts, check_slots=job.mode == "collective")
    collective = job.mode == "collective"
    identity = dataclasses.replace(identity, nodes=job.nodes, launch=ex.launch_block(job),
                                   world_size=sum(job.counts) if collective else job.workers,
                                   devices_per_node=max(job.counts) if collective else identity.devices_per_node)
    log_dir, job_id = args.log_dir or launch.job.new_log_dir(), uuid.uuid4().hex[:12]
    print(f"fleetbench launch: logs in {log_dir}; job {job_id} on {', '.join(ex.hosts[:job.nodes])} ({ex.name})",
          file=sys.stderr, flush=True)
    outcome = run_job(ex, job, log_dir, env, args.limits(), launch.results_path(args),
                      echo=None if args.quiet else sys.stdout, job_id=job_id)
    print(outcome.report(), file=sys.stderr, flush=True)
    if outcome.ok or outcome.status == "interrupted":
        return 0 if outcome.ok else 130
    try:
        failure.store_failure(launch.results_path(args), identity, outcome)
    except failure.StoreError as e:
        print(f"fleetbench launch: error: {e}", file=sys.stderr)
        return 1
    print(f"fleetbench launch: failure recorded in {launch.results_path(args)}", file=sys.stderr)
    return 1
