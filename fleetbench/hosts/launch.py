"""`fleetbench launch [launcher flags] SCRIPT [script args]`: Paddle's launcher, supervised.

What it adds to `python -m paddle.distributed.launch`:
- device ranges (`--gpus 0-3,6`), which Paddle 2.6.2 rejects, expanded to plain lists;
- checks before anything starts: the results file is writable, the devices are visible, a
  benchmark's config is valid (its own `--check`); a bad input is one line and exit code 2;
- a fresh log directory per job, a wall-clock `--timeout` and a stall watchdog (`--stall`);
- on a failed, stalled or timed-out job: every process of the job stopped, a report naming the
  rank to blame (fleetbench.job.verdict) with the log tails, and a failure record stored.

This module is the command line; the job itself is fleetbench.job.paddle_launch (supervisor, rank
wrapper, verdict, failure record).
"""
from __future__ import annotations

import dataclasses
import os
import re
import shlex
import sys
import uuid
from collections.abc import Callable, Sequence

from fleetbench import cmdline
from fleetbench.hosts import allocation, executors, remote
from fleetbench.hosts.executors import local_block, local_env
from fleetbench.hosts.hostlist import HostsError
from fleetbench.job import paddle_launch, preflight
from fleetbench.job.failure import Outcome, store_failure
from fleetbench.job.preflight import LaunchError
from fleetbench.measure import contract, registry, resultline
from fleetbench.store import results

DEVICE_FLAGS = ("--gpus", "--devices", "--xpus", "--npus")
PS_FLAGS = ("--server_num", "--trainer_num", "--servers", "--trainers", "--worker_num", "--workers")
SWITCHES = {"--quiet": ("quiet", True), "--no-check": ("check", False)}


def expand_devices(text: str, flag: str = "--gpus") -> str:
    """'0-3,6' -> '0,1,2,3,6' (Paddle 2.6.2 splits device lists on commas only)."""
    try:
        return _devices(text)
    except (ValueError, cmdline.Refused) as e:
        raise LaunchError(f"{flag} {e if isinstance(e, cmdline.Refused) else repr(text) + ': ' + DEVICES.expected}") from None


def _devices(text: str) -> str:
    out = []
    for part in str(text).split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise ValueError(text)
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        out.extend(range(lo, hi + 1))
    if len(set(out)) != len(out):
        raise cmdline.Refused(f"{text!r}: a device is listed twice (expected each once)")
    return ",".join(map(str, out))


def _matching(pattern: str) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if not re.fullmatch(pattern, text):
            raise ValueError(text)
        return text
    return convert


_HOST = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"
_ENDPOINTS = cmdline.Kind("endpoints like 10.0.0.1:6170,10.0.0.2:6170",
                          _matching(rf"{_HOST}:\d{{1,5}}(,{_HOST}:\d{{1,5}})*"), ("", "a", "a:1,", "a:x"))
_BOOL = cmdline.Kind("true or false (Paddle's strtobool)",
                     _matching(r"(?i)y|yes|t|true|on|1|n|no|f|false|off|0"), ("", "maybe", "2"))
DEVICES = cmdline.Kind("device ids and ranges like 0-3,6", _devices, ("", "a", "3-1", "0,0", "-1"))

# What every flag of Paddle 2.6.2's launcher (paddle/distributed/launch/context/args_envs.py) and of
# the legacy one it falls back to (paddle/distributed/fleet/launch.py) takes, as Paddle reads it,
# and fleetbench's own: each value is checked before anything starts (tests/unit/test_bad_input.py
# tries every entry). Every one takes a value.
PADDLE_KINDS = {
    "--master": cmdline.Kind("IP:PORT or etcd://IP:PORT", _matching(rf"(etcd://)?{_HOST}:\d{{1,5}}"), ("", "host")),
    "--legacy": _BOOL, "--rank": cmdline.integer(-1), "--log_overwrite": _BOOL, "--sort_ip": _BOOL,
    "--log_level": cmdline.Kind("a log level (DEBUG, INFO, WARNING, ERROR, CRITICAL)",
                                _matching(r"(?i)debug|info|warn|warning|error|critical|fatal"), ("", "loud")),
    "--enable_gpu_log": _BOOL, "--nproc_per_node": cmdline.COUNT, "--log_dir": cmdline.OUTPUT_DIR,
    "--nnodes": cmdline.Kind("N or MIN:MAX", _matching(r"[1-9]\d*(:[1-9]\d*)?"), ("", "0", "abc", "2:")),
    "--run_mode": cmdline.Kind("collective, ps, ps-heter or rpc", _matching(r"collective|ps|ps-heter|rpc"), ("", "x")),
    "--job_id": cmdline.TEXT, **{flag: DEVICES for flag in DEVICE_FLAGS},
    "--host": cmdline.Kind("a host name or IP", _matching(_HOST), ("", "a b")),
    "--ips": cmdline.Kind("host names or IPs like 10.0.0.1,10.0.0.2", _matching(rf"{_HOST}(,{_HOST})*"), ("", "a,")),
    "--start_port": cmdline.PORT, "--auto_parallel_config": cmdline.INPUT_FILE, "--auto_tuner_json": cmdline.INPUT_FILE,
    "--servers": _ENDPOINTS, "--trainers": _ENDPOINTS, "--trainer_num": cmdline.COUNT, "--server_num": cmdline.COUNT,
    "--gloo_port": cmdline.PORT, "--with_gloo": cmdline.Kind("0, 1, 2 or 3", _matching(r"[0-3]"), ("", "yes")),
    "--max_restart": cmdline.NON_NEGATIVE, "--elastic_level": cmdline.integer(-1, 1),
    "--elastic_timeout": cmdline.NON_NEGATIVE,
    # legacy launcher only
    "--worker_num": cmdline.COUNT, "--workers": _ENDPOINTS, "--heter_worker_num": cmdline.NON_NEGATIVE,
    "--heter_workers": _ENDPOINTS, "--heter_devices": cmdline.TEXT, "--coordinator_num": cmdline.NON_NEGATIVE,
    "--coordinators": _ENDPOINTS, "--backend": cmdline.Kind("auto, gloo, nccl, bkcl or heter",
                                                           _matching(r"auto|gloo|nccl|bkcl|cncl|heter"), ("", "x")),
    "--http_port": cmdline.PORT,
}
OWN_KINDS = {"--timeout": cmdline.SECONDS, "--stall": cmdline.SECONDS, "--startup": cmdline.SECONDS,
             "--tail": cmdline.COUNT, "--trace": cmdline.OUTPUT_DIR}
PADDLE_FLAGS = set(PADDLE_KINDS)
OWN_FLAGS = set(OWN_KINDS)


# Paddle flags an executor sets per node itself (a user's value would contradict the plan), and
# the ones it reads to make the plan.
PLANNED_FLAGS = ("--master", "--rank", "--host", "--ips", "--servers", "--trainers", "--gloo_port", "--worker_num",
                 "--workers")
SHAPE_FLAGS = ("--nnodes", "--nproc_per_node", "--server_num", "--trainer_num")


@dataclasses.dataclass
class LaunchArgs:
    paddle: list            # Paddle launcher flags (ranges expanded, without --log_dir)
    script: str
    script_args: list
    log_dir: str = None
    timeout: float = None
    stall: float = None
    startup: float = None
    tail: int = 20
    trace: str = None  # handed to the script as its own --trace DIR (train/trace.py)
    quiet: bool = False
    check: bool = True
    hosts: remote.HostOptions = dataclasses.field(default_factory=remote.HostOptions)

    def flag(self, name: str, default: str | None = None) -> str | None:
        """Value of a Paddle flag (aliases of --devices included)."""
        names = DEVICE_FLAGS if name in DEVICE_FLAGS else (name,)
        for i in range(0, len(self.paddle), 2):
            if self.paddle[i] in names:
                return self.paddle[i + 1]
        return default

    def script_flag(self, name: str, default: str | None = None) -> str | None:
        args = self.script_args
        for i, a in enumerate(args):
            if a == name and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(name + "="):
                return a.split("=", 1)[1]
        return default

    def limits(self) -> paddle_launch.Limits:
        return paddle_launch.Limits(timeout=self.timeout, stall=self.stall, startup=self.startup, tail=self.tail)


def parse_argv(argv: Sequence[str]) -> LaunchArgs:
    """Split `[launcher flags] SCRIPT [script args]` into LaunchArgs (raises LaunchError)."""
    argv = list(argv)
    out = LaunchArgs(paddle=[], script=None, script_args=[])
    i = 0
    while i < len(argv):
        tok = argv[i]
        if not tok.startswith("-"):
            out.script, out.script_args = tok, argv[i + 1:]
            break
        i += 1
        if tok in SWITCHES:
            setattr(out, *SWITCHES[tok])
            continue
        name, eq, value = tok.partition("=")
        if name in SWITCHES:
            raise LaunchError(f"{name} {value!r}: expected no value ({name} is a switch)")
        if name not in PADDLE_FLAGS and name not in OWN_FLAGS and name not in remote.FLAGS:
            raise LaunchError(f"unknown launcher flag {name} (expected, before SCRIPT: Paddle launcher flags, "
                              f"--timeout S, --stall S, --startup S, --tail N, --trace DIR, --quiet, --no-check, "
                              f"--hostfile F, --hosts L, --executor E, --ssh-config F, --forward-env A,B)")
        if not eq:
            if i >= len(argv):
                raise LaunchError(f"{name} needs a value")
            value, i = argv[i], i + 1
        _take_flag(out, name, value)
    if out.script is None:
        raise LaunchError("missing SCRIPT (expected: fleetbench launch [launcher flags] SCRIPT [script args])")
    if out.trace is not None:  # the benchmark writes the traces: the flag is its
        if out.script_flag("--trace") is not None:
            raise LaunchError("--trace: given both before and after SCRIPT (expected once)")
        out.script_args = [*out.script_args, "--trace", out.trace]
    return out


def _take_flag(out: LaunchArgs, name: str, value: str) -> None:
    if name in remote.FLAGS:
        try:
            out.hosts.take(name, value)
        except HostsError as e:
            raise LaunchError(str(e)) from None
        return
    try:
        parsed = {**PADDLE_KINDS, **OWN_KINDS}[name](value)
    except cmdline.Refused as e:
        raise LaunchError(f"{name} {e}") from None
    if name in OWN_KINDS:
        setattr(out, name[2:], parsed)
    elif name == "--log_dir":
        out.log_dir = parsed
    else:
        out.paddle += [name, str(parsed)]


def job_shape(args: LaunchArgs, env: dict | None = None, found: dict | None = None) -> tuple[str, int, int, int]:
    """(mode, nodes, devices_per_node, world_size) implied by the launcher flags, the environment
    and, where neither names a count, the devices Paddle's launcher sees (`found`)."""
    ps = any(args.flag(f) for f in PS_FLAGS) or args.flag("--run_mode") == "ps"
    nnodes = args.flag("--nnodes", "1")
    nodes = contract.RankContract.from_env().nodes or int(nnodes.split(":")[-1] or 1)
    if args.flag("--ips"):
        nodes = len(args.flag("--ips").split(","))
    if ps:
        explicit = args.flag("--trainers") or args.flag("--workers")
        workers = len(explicit.split(",")) if explicit else int(
            args.flag("--trainer_num") or args.flag("--worker_num") or 1) * nodes
        return "ps", nodes, max(1, workers // nodes), workers
    per_node = preflight.ranks_per_node(args.flag("--nproc_per_node"), args.flag("--devices"), env or {}, found)
    return "collective", nodes, per_node, per_node * nodes


def identity_for(args: LaunchArgs, config: dict | None = None, network: dict | None = None,
                 shape: tuple | None = None) -> contract.RunIdentity:
    mode, nodes, per_node, world = shape or job_shape(args)
    benchmark = registry.for_script(args.script)
    if benchmark is not None and benchmark.family == "comm":
        mode = "comm"  # launched like a collective job; its records say comm
    if config is None:
        config = {"script": args.script, "script_args": args.script_args}
    method = config.get(registry.METHOD_KEY.get(mode, "method")) or "unknown"
    preset = args.script_flag("--preset", "full" if benchmark else None)
    return contract.RunIdentity(benchmark=registry.name_for_script(args.script), mode=mode, method=str(method),
                                preset=preset, config=config, nodes=nodes, devices_per_node=per_node,
                                world_size=world, network=network, launch=local_block())


def results_path(args: LaunchArgs) -> str:
    return args.script_flag("--results", registry.DEFAULT_RESULTS)


def prepare(args: LaunchArgs, env: dict, on_hosts: bool = False) -> contract.RunIdentity:
    """Every check that can fail before launching; the run's identity for a failure record. With
    hosts, a collective job's device and config checks run on its nodes (nodecheck), not here: the
    head of a job need not have GPUs."""
    if not os.path.exists(args.script):
        raise LaunchError(f"SCRIPT {args.script}: no such file (expected a Python script)")
    results.check_appendable(results_path(args))
    if args.log_dir is None:  # a --log_dir given was checked when read; the default is ./log
        cmdline.check_output_dir(os.path.dirname(paddle_launch.new_log_dir()), "--log_dir (default)")
    device, flag = args.flag("--devices"), next((f for f in DEVICE_FLAGS if f in args.paddle), None)
    problem = preflight.count_problem(args.flag("--nproc_per_node"), flag, device, None)
    if problem:
        raise LaunchError(problem)
    network = contract.RankContract.from_env().network
    if on_hosts and job_shape(args)[0] != "ps":
        return identity_for(args, None, network, job_shape(args))
    found = devices_here(args, env)
    problem = (preflight.device_problem(flag, device, found) if device else None) or \
        preflight.count_problem(args.flag("--nproc_per_node"), flag, device, found)
    if problem:
        raise LaunchError(problem)
    benchmark = registry.for_script(args.script)
    config = preflight.check_config(args.script, args.script_args, env) if args.check and benchmark else None
    return identity_for(args, config, network, job_shape(args, env, found))


def devices_here(args: LaunchArgs, env: dict) -> dict | None:
    """The devices Paddle's launcher will see here, probed when something depends on them: a device
    list to check, a rank count to take from them (seen), or a --nproc_per_node that must not
    exceed a CUDA build's GPUs (a CPU build hands out none, so its launches are not slowed)."""
    from fleetbench.machine import env as machine_env

    found = seen(args, env)
    cuda = (machine_env.read_paddle()[0] or {}).get("compiled_with_cuda")
    if found is None and (args.flag("--devices") or (args.flag("--nproc_per_node") and cuda)):
        found = preflight.visible_devices(env)
    return found


def seen(args: LaunchArgs, env: dict) -> dict | None:
    """The devices Paddle's launcher will count ranks by, probed only where nothing else gives
    the count (on a GPU node Paddle then starts one rank per GPU)."""
    named = args.flag("--nproc_per_node") or args.flag("--devices") or args.flag("--run_mode") == "ps" or \
        any(f in args.paddle for f in PS_FLAGS)
    if named or env.get("PADDLE_NPROC_PER_NODE") or env.get("PADDLE_DEVICES"):
        return None
    return preflight.visible_devices(env)


USAGE = """usage: fleetbench launch [launcher flags] SCRIPT [script args]

launcher flags: any flag of `python -m paddle.distributed.launch` (device lists accept ranges:
  --gpus 0-3,6), plus
  --timeout S   stop the job after S seconds of wall time
  --stall S     stop the job when no rank logs a progress line for S seconds
  --startup S   ... and when none has logged one S seconds after the start (default: --stall)
  --tail N      log lines shown per rank in a report (default 20)
  --trace DIR   the benchmark writes one Chrome trace per rank into DIR (its own --trace)
  --quiet       do not echo rank 0's log
  --no-check    skip the benchmark's `--check` before launching
  --hostfile F | --hosts a:2,b:2   one launcher per host over ssh (docs/guide/clusters.md); also
  --executor ssh|slurm, --ssh-config F, --forward-env A,B, --remote-python P, --remote-dir D
The failure record goes to the script's --results file (default results/runs.jsonl)."""



# ----------------------------------------------------------------------------------------------
# fleetbench launch --hostfile ...


def job_from_launch(args: LaunchArgs, shape: tuple[str, int, int, int], slots: list[int | None]) -> executors.Job:
    """The Job of a `fleetbench launch` on hosts with these slots (one per host, in order; None
    where a host's were not given). A collective job's counts here are provisional: its nodes
    say theirs (checked_on_nodes). shape: launch.job_shape's (mode, ...)."""
    planned = [f for f in PLANNED_FLAGS if args.flag(f)]
    if planned:
        raise HostsError(f"{planned[0]}: with hosts, fleetbench plans it for every node; leave it out")
    nnodes = args.flag("--nnodes")
    nodes = int(nnodes.split(":")[-1]) if nnodes else len(slots)
    if nodes > len(slots):
        raise HostsError(f"--nnodes {nnodes}: {len(slots)} host(s) given")
    other = tuple(x for i in range(0, len(args.paddle), 2) if args.paddle[i] not in SHAPE_FLAGS
                  for x in args.paddle[i:i + 2])
    if shape[0] == "ps":
        servers, trainers = (int(args.flag(f) or 1) for f in ("--server_num", "--trainer_num"))  # per node, as Paddle's
        return executors.Job("ps", args.script, tuple(args.script_args), nodes, servers=servers * nodes,
                   workers=trainers * nodes, flags=other)
    nproc = args.flag("--nproc_per_node")
    counts = (int(nproc),) * nodes if nproc else tuple(s or 1 for s in slots[:nodes])
    return executors.Job("collective", args.script, tuple(args.script_args), nodes, counts, flags=other)


def checked_on_nodes(args: LaunchArgs, ex: executors.Executor, job: executors.Job, slots: list[int | None],
                     env: dict) -> tuple[executors.Job, dict | None]:
    """The job with the ranks each node will start, and the benchmark's config, from the checks
    its nodes ran (fleetbench.hosts.nodecheck: devices, ranks, the benchmark's --check there). A
    node gets --nproc_per_node when given, else its host's slots when they say more than one, else
    what Paddle's launcher counts there: one rank per listed or visible GPU (the head's own
    count ran a 4x8 job as 4 ranks). Slots given bound a node's ranks."""
    from fleetbench.hosts import nodecheck

    devices, nproc = args.flag("--devices"), args.flag("--nproc_per_node")
    answers = nodecheck.check_job(ex, job, env, [nproc or (str(s) if s and s > 1 and not devices else None) for s in slots],
                                  check=bool(args.check and registry.for_script(args.script)),
                                  device_flag=next((f for f in DEVICE_FLAGS if f in args.paddle), None), devices=devices)
    counts = tuple(a["ranks"] for a in answers)
    for node, s, k in zip(ex.nodes, slots, counts):
        if s and s > 1 and k > s:
            raise HostsError(f"hosts: host {node.name} has {s} slot(s), node {node.index} would run {k} ranks "
                             f"(one per device {'listed' if devices else 'visible there'})")
    return dataclasses.replace(job, counts=counts), answers[0]["config"]


def launch_on_hosts(args: LaunchArgs, opts: remote.HostOptions, env: dict) -> int:
    """`fleetbench launch` with hosts: exit code. Bad input (hosts, names that do not resolve, a node
    that refuses the devices or the config) raises before anything starts."""
    identity, shape = prepare(args, env, on_hosts=True), job_shape(args)
    if opts.executor == "slurm":
        slots = [None] * len(allocation.allocation_hosts())  # Slurm says nothing of a node's devices here
    else:
        slots = [h.slots if h.slots > 1 else None for h in opts.host_list()]  # `a` alone: its devices decide
    job = job_from_launch(args, shape, slots)
    ex = remote.host_executor(opts, job.nodes, job.counts, check_slots=False)
    collective = job.mode == "collective"
    if collective:
        job, config = checked_on_nodes(args, ex, job, slots, env)
        identity = identity_for(args, config, identity.network, shape)
    identity = dataclasses.replace(identity, nodes=job.nodes, launch=ex.launch_block(job),
                                   world_size=sum(job.counts) if collective else job.workers,
                                   devices_per_node=max(job.counts) if collective else identity.devices_per_node)
    log_dir, job_id = args.log_dir or paddle_launch.new_log_dir(), uuid.uuid4().hex[:12]
    print(f"fleetbench launch: logs in {log_dir}; job {job_id} on {', '.join(ex.hosts[:job.nodes])} ({ex.name})",
          file=sys.stderr, flush=True)
    outcome = remote.run_job(ex, job, log_dir, env, args.limits(), results_path(args),
                      echo=None if args.quiet else sys.stdout, job_id=job_id)
    return finish(args, identity, outcome, log_dir)


def cli(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    try:
        args = parse_argv(argv)
        env = paddle_launch.child_env()
        if args.hosts.on_hosts():
            return launch_on_hosts(args, args.hosts, env)
        identity = prepare(args, env)
    except cmdline.UserError as e:  # a flag, the script, the results path, the hosts, a launcher variable
        return cmdline.refused("fleetbench launch", e)
    log_dir = args.log_dir or paddle_launch.new_log_dir()

    def plan(dir_: str, extra: dict, _job_id: str | None) -> list[paddle_launch.NodeLaunch]:
        return [paddle_launch.NodeLaunch.paddle(args.paddle, dir_, args.script, args.script_args, dict(env, **local_env(), **extra))]

    print(f"fleetbench launch: logs in {log_dir}; running: {shlex.join(plan(log_dir, {}, None)[0].cmd)}",
          file=sys.stderr, flush=True)
    outcome = paddle_launch.supervise(plan, log_dir, args.limits(), echo=None if args.quiet else sys.stdout)
    return finish(args, identity, outcome, log_dir)


def finish(args: LaunchArgs, identity: contract.RunIdentity, outcome: Outcome, log_dir: str) -> int:
    """Report how the job ended and its exit code, and a job that ended well's summary line; a
    failure is stored as a record (a user's interrupt is not a result of the benchmark: nothing is
    stored, exit 130)."""
    print(outcome.report(), file=sys.stderr, flush=True)
    if outcome.ok:
        print_result(args, log_dir)
        return 0
    if outcome.status == "interrupted":
        return 130
    try:
        store_failure(results_path(args), identity, outcome)
    except results.StoreError as e:
        print(f"fleetbench launch: error: {e}", file=sys.stderr)
        return 1
    print(f"fleetbench launch: failure recorded in {results_path(args)}", file=sys.stderr)
    return 1


def print_result(args: LaunchArgs, log_dir: str) -> None:
    """The summary line (measure/resultline) of the record this job stored, found in the results
    file by the id its rank printed in the job's logs; a benchmark's job that stored none says so."""
    store = results_path(args)
    try:
        record = results.job_record(log_dir, store)
    except results.RecordError as e:
        record, why = None, str(e)
    else:
        why = f"no record of the job's logs ({log_dir}) is in {store}"
    if record is not None:
        print(resultline.line(resultline.fields_of(record, store)), flush=True)
    elif registry.for_script(args.script) is not None:
        print(f"fleetbench launch: no result line: {why}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
