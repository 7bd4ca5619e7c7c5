"""`fleetbench launch [launcher flags] SCRIPT [script args]`: Paddle's launcher, supervised.

What it adds to `python -m paddle.distributed.launch`:
- device ranges (`--gpus 0-3,6`), which Paddle 2.6.2 rejects, expanded to plain lists;
- a fresh log directory per job, and a wall-clock `--timeout`;
- a stall watchdog: no progress line (`step N/M ...` or `FLEETBENCH_RESULT`) in any rank log for
  `--stall S` seconds stops the job (before the first progress line: `--startup S`, default S);
- on a failed or stalled rank: the whole job stops (every process of this job and nothing else),
  the report names the rank, role, exit code or signal and the last lines of that rank's log,
  a record with `error` set is appended to the results file, and the exit code is non-zero.

How ranks are known. Paddle starts every rank in its own session (setsid), so the job is not one
process group, and its "Container failed" message names the first failed rank in container order,
not the first to fail (when rank 1 dies, rank 0 dies of a gloo error a moment later). So each
rank runs under a tiny wrapper (this file, run as a script) that starts the real script, waits for
it and writes start/exit events (pid, role, rank, log file, exit code or signal, time) to the log
directory. The root cause is the earliest abnormal exit. Every process of the job carries a
FLEETBENCH_JOB_ID in its environment; stopping the job signals exactly the processes that carry it.

Commands are argument lists throughout; nothing goes through a shell.
"""
import sys

if __name__ == "__main__" and sys.path and sys.path[0].endswith("fleetbench"):
    # Run as a file (the rank wrapper): our own directory must not shadow standard modules.
    sys.path.pop(0)

import collections
import ctypes
import dataclasses
import glob
import json
import os
import re
import shlex
import signal
import subprocess
import time
import uuid

from fleetbench.measure import registry

REPO_ROOT = str(registry.REPO_ROOT)
JOB_ENV = registry.JOB_ENV
WRAPPER_FLAG = "--fleetbench-rank-wrapper"

# Flags of Paddle 2.6.2's launcher (paddle/distributed/launch/context/args_envs.py) and of the
# legacy one it falls back to (paddle/distributed/fleet/launch.py). Every one takes a value.
PADDLE_FLAGS = {
    "--master", "--legacy", "--rank", "--log_level", "--log_overwrite", "--sort_ip", "--enable_gpu_log",
    "--nnodes", "--nproc_per_node", "--log_dir", "--run_mode", "--job_id", "--devices", "--gpus", "--npus",
    "--xpus", "--host", "--ips", "--start_port", "--auto_parallel_config", "--auto_tuner_json", "--servers",
    "--trainers", "--trainer_num", "--server_num", "--gloo_port", "--with_gloo", "--max_restart",
    "--elastic_level", "--elastic_timeout",
    # legacy launcher only
    "--worker_num", "--workers", "--heter_worker_num", "--heter_workers", "--heter_devices",
    "--coordinator_num", "--coordinators", "--backend", "--http_port",
}
DEVICE_FLAGS = ("--gpus", "--devices", "--xpus", "--npus")
INT_FLAGS = ("--nproc_per_node", "--server_num", "--trainer_num", "--worker_num", "--heter_worker_num",
             "--coordinator_num", "--rank", "--start_port", "--gloo_port", "--max_restart", "--elastic_level",
             "--elastic_timeout", "--http_port")
PS_FLAGS = ("--server_num", "--trainer_num", "--servers", "--trainers", "--worker_num", "--workers")
# Environment a caller may have inherited from an enclosing job; it would re-rank our launcher.
RANK_ENV = ("PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ENDPOINTS", "PADDLE_CURRENT_ENDPOINT",
            "PADDLE_GLOBAL_RANK", "PADDLE_LOCAL_RANK", "PADDLE_GLOBAL_SIZE", "PADDLE_LOCAL_SIZE",
            "PADDLE_RANK_IN_NODE", "PADDLE_MASTER", "PADDLE_NNODES", "PADDLE_RANK", "PADDLE_LOG_DIR",
            "PADDLE_JOB_ID", "PADDLE_PSERVERS_IP_PORT_LIST", "PADDLE_PORT", "PADDLE_ROLE", "TRAINING_ROLE",
            "POD_IP", "POD_NAME", "PADDLE_DISTRI_BACKEND", JOB_ENV)

PROGRESS = re.compile(r"^(?:step (\d+)/(\d+)\b|FLEETBENCH_RESULT )")
RANK_LOG = re.compile(r"^(worker|server|heter|coordinator)log\.(\d+)$")
STOP_GRACE_S = 3.0   # SIGTERM, then SIGKILL after this long
PS_SERVER_GRACE_S = 3.0  # processes still up this long after every worker finished: stop them


class LaunchError(ValueError):
    """Bad command line; the message is one line naming the flag."""


# ----------------------------------------------------------------------------------------------
# Pure part: argument handling


def expand_devices(text, flag="--gpus"):
    """'0-3,6' -> '0,1,2,3,6' (Paddle 2.6.2 splits device lists on commas only)."""
    out = []
    for part in str(text).split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise LaunchError(f"{flag} {text!r}: expected device ids and ranges like 0-3,6")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        out.extend(range(lo, hi + 1))
    if len(set(out)) != len(out):
        raise LaunchError(f"{flag} {text!r}: a device is listed twice")
    return ",".join(map(str, out))


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
    quiet: bool = False
    check: bool = True

    def flag(self, name, default=None):
        """Value of a Paddle flag (aliases of --devices included)."""
        names = DEVICE_FLAGS if name in DEVICE_FLAGS else (name,)
        for i in range(0, len(self.paddle), 2):
            if self.paddle[i] in names:
                return self.paddle[i + 1]
        return default

    def script_flag(self, name, default=None):
        args = self.script_args
        for i, a in enumerate(args):
            if a == name and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(name + "="):
                return a.split("=", 1)[1]
        return default


OWN_FLAGS = {"--timeout": float, "--stall": float, "--startup": float, "--tail": int}


def parse_argv(argv):
    """Split `[launcher flags] SCRIPT [script args]` into LaunchArgs (raises LaunchError)."""
    argv = list(argv)
    out = LaunchArgs(paddle=[], script=None, script_args=[])
    i = 0
    while i < len(argv):
        tok = argv[i]
        if not tok.startswith("-"):
            out.script, out.script_args = tok, argv[i + 1:]
            break
        if tok in ("--quiet", "--no-check"):
            setattr(out, "quiet" if tok == "--quiet" else "check", tok == "--quiet")
            i += 1
            continue
        name, eq, value = tok.partition("=")
        if name not in PADDLE_FLAGS and name not in OWN_FLAGS:
            raise LaunchError(f"unknown launcher flag {name} (before SCRIPT: Paddle launcher flags, "
                              f"--timeout S, --stall S, --startup S, --tail N, --quiet, --no-check)")
        if not eq:
            if i + 1 >= len(argv):
                raise LaunchError(f"{name} needs a value")
            value = argv[i + 1]
            i += 1
        i += 1
        if name in OWN_FLAGS:
            try:
                parsed = OWN_FLAGS[name](value)
            except ValueError:
                raise LaunchError(f"{name} {value!r}: expected a number") from None
            if parsed <= 0:
                raise LaunchError(f"{name} {value!r}: must be > 0")
            setattr(out, name[2:], parsed)
        elif name == "--log_dir":
            out.log_dir = value
        else:
            if name in DEVICE_FLAGS:
                value = expand_devices(value, name)
            if name in INT_FLAGS and not re.fullmatch(r"-?\d+", value):
                raise LaunchError(f"{name} {value!r}: expected an integer")
            if name == "--nnodes" and not re.fullmatch(r"\d+(:\d+)?", value):
                raise LaunchError(f"--nnodes {value!r}: expected N or MIN:MAX")
            out.paddle += [name, value]
    if out.script is None:
        raise LaunchError("missing SCRIPT (usage: fleetbench launch [launcher flags] SCRIPT [script args])")
    return out


def job_shape(args):
    """(mode, nodes, devices_per_node, world_size) implied by the launcher flags."""
    ps = any(args.flag(f) for f in PS_FLAGS) or args.flag("--run_mode") == "ps"
    nnodes = args.flag("--nnodes", "1")
    nodes = int(os.environ.get("FLEETBENCH_NODES") or nnodes.split(":")[-1] or 1)
    if args.flag("--ips"):
        nodes = len(args.flag("--ips").split(","))
    if ps:
        explicit = args.flag("--trainers") or args.flag("--workers")
        workers = len(explicit.split(",")) if explicit else int(
            args.flag("--trainer_num") or args.flag("--worker_num") or 1) * nodes
        return "ps", nodes, max(1, workers // nodes), workers
    per_node = int(args.flag("--nproc_per_node") or 0) or (
        len(args.flag("--devices").split(",")) if args.flag("--devices") else 1)
    return "collective", nodes, per_node, per_node * nodes


def paddle_command(paddle_flags, log_dir, script, script_args, python=sys.executable):
    """The argument list running Paddle's launcher with our rank wrapper around SCRIPT."""
    return [python, "-m", "paddle.distributed.launch", *paddle_flags, "--log_dir", log_dir,
            os.path.abspath(__file__), WRAPPER_FLAG, script, *script_args]


def progress_step(line):
    """None for other lines; (step, total) for a window line; (None, None) for FLEETBENCH_RESULT."""
    m = PROGRESS.match(line)
    if not m:
        return None
    return (int(m.group(1)), int(m.group(2))) if m.group(1) else (None, None)


def signal_name(num):
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


# ----------------------------------------------------------------------------------------------
# The rank wrapper (runs inside the job, once per rank)


def rank_identity(env):
    """(role, rank) of this process from the variables Paddle's launchers set."""
    role = {"PSERVER": "server", "TRAINER": "worker", "HETER_TRAINER": "heter"}.get(
        env.get("TRAINING_ROLE", ""), (env.get("TRAINING_ROLE") or "worker").lower())
    if role == "server":
        me = f"{env.get('POD_IP', '')}:{env.get('PADDLE_PORT', '')}"
        servers = env.get("PADDLE_PSERVERS_IP_PORT_LIST", "").split(",")
        return role, servers.index(me) if me in servers else int(env.get("PADDLE_PORT", "-1"))
    return role, int(env.get("PADDLE_TRAINER_ID", env.get("PADDLE_GLOBAL_RANK", "0")))


def _die_with_parent():
    # If the wrapper is SIGKILLed (Paddle's force-stop kills only the container's first pid),
    # the script must not live on as an orphan.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def rank_main(argv):
    role, rank = rank_identity(os.environ)
    try:
        log = os.readlink("/proc/self/fd/1")
    except OSError:
        log = None
    path = os.path.join(os.environ.get("PADDLE_LOG_DIR") or ".",
                        f".fbrank-{os.environ.get(JOB_ENV, 'nojob')}-{os.getpid()}")

    def event(**fields):
        with open(path, "a") as f:
            f.write(json.dumps(dict(fields, pid=os.getpid(), role=role, rank=rank, log=log,
                                    t=time.time())) + "\n")

    terms = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        # The script shares our process group, so a group signal reaches it directly; we stay
        # to record how it ended.
        signal.signal(sig, lambda s, _f: terms.append(s))
    child = subprocess.Popen([sys.executable, "-u", *argv], preexec_fn=_die_with_parent)
    event(event="start", child=child.pid)
    code = child.wait()
    event(event="exit", code=code, signal=-code if code < 0 else None, stopped=bool(terms))
    if code < 0:  # end the same way, so Paddle's launcher sees what the script saw
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code  # a signal whose default action is not to terminate
    return code


# ----------------------------------------------------------------------------------------------
# Supervising a job (one or more Paddle launchers)


@dataclasses.dataclass
class NodeLaunch:
    """One Paddle launcher process (one per node in a multi-node job)."""
    cmd: list
    log_dir: str
    env: dict
    name: str = "node0"


@dataclasses.dataclass
class Outcome:
    status: str                 # ok | failed | stalled | timeout | interrupted
    elapsed_s: float
    detail: str = ""            # one line: what happened
    node: str = None
    role: str = None
    rank: int = None
    exit_code: int = None
    signal: str = None
    log: str = None
    tail: list = dataclasses.field(default_factory=list)
    stopped: int = 0            # processes we had to stop
    left_running: list = dataclasses.field(default_factory=list)

    @property
    def ok(self):
        return self.status == "ok"


class _Rank:
    def __init__(self, node, role, rank, pid, log):
        self.node, self.role, self.rank, self.pid, self.log = node, role, rank, pid, log
        self.exit = None

    def label(self):
        return f"{self.role} rank {self.rank}" + (f" on {self.node}" if self.node != "node0" else "")


class _LogTail:
    """Incrementally read one rank log: progress lines and the last lines."""

    def __init__(self, path, offset):
        self.path, self.offset, self.partial = path, offset, b""
        self.last_progress = None  # (step, total, line)
        self.lines = collections.deque(maxlen=400)

    def poll(self):
        """New complete lines since the last call."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        self.offset += len(data)
        chunks = (self.partial + data).split(b"\n")
        self.partial = chunks.pop()
        lines = [c.decode("utf-8", "replace").rstrip("\r") for c in chunks]
        self.lines.extend(lines)
        for line in lines:
            step = progress_step(line)
            if step is not None:
                self.last_progress = (step[0], step[1], line)
        return lines

    def tail(self, n):
        lines = list(self.lines) + ([self.partial.decode("utf-8", "replace")] if self.partial else [])
        return lines[-n:]


def job_pids(job_id, variable=JOB_ENV):
    """Pids of live processes whose environment carries this job's id (zombies excluded)."""
    marker = f"{variable}={job_id}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker not in f.read().split(b"\0"):
                    continue
        except OSError:
            continue
        if _alive(int(entry)):
            found.append(int(entry))
    return found


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _become_subreaper():
    # Orphaned ranks (their launcher gone) then become our children, so we can reap them.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


class Supervisor:
    def __init__(self, nodes, timeout=None, stall=None, startup=None, tail=20, echo=None, poll_s=0.2,
                 job_id=None):
        self.nodes = nodes
        self.timeout, self.stall, self.tail_n, self.echo, self.poll_s = timeout, stall, tail, echo, poll_s
        self.startup = startup or stall  # allowance until the first progress line (import, rendezvous)
        self.progressed = False
        self.job_id = job_id or uuid.uuid4().hex[:12]
        self.ranks = {}    # status-file path -> _Rank
        self.logs = {}     # log path -> _LogTail
        self.offsets = {}  # status path -> bytes read
        self.procs = []
        self.interrupted = None

    # -- observation
    def _scan(self):
        for node in self.nodes:
            for path in glob.glob(os.path.join(node.log_dir, f".fbrank-{self.job_id}-*")):
                self._read_events(node, path)
            for path in glob.glob(os.path.join(node.log_dir, "*log.*")):
                path = os.path.realpath(path)
                if RANK_LOG.match(os.path.basename(path)) and path not in self.logs:
                    self.logs[path] = _LogTail(path, self.start_sizes.get(path, 0))
        for path, log in self.logs.items():
            lines = log.poll()
            if any(progress_step(line) is not None for line in lines):
                self.last_progress_t = time.monotonic()
                self.progressed = True
            if self.echo and path == self._echo_path():
                for line in lines:
                    print(line, file=self.echo, flush=True)

    def _echo_path(self):
        workers = sorted((r.rank, r.log) for r in self.ranks.values() if r.role == "worker" and r.log)
        return os.path.realpath(workers[0][1]) if workers else os.path.join(self.nodes[0].log_dir, "workerlog.0")

    def _read_events(self, node, path):
        with open(path) as f:
            f.seek(self.offsets.get(path, 0))
            text = f.read()
        complete = text[:text.rfind("\n") + 1]
        self.offsets[path] = self.offsets.get(path, 0) + len(complete.encode())
        for line in complete.splitlines():
            ev = json.loads(line)
            if ev["event"] == "start":
                log = os.path.realpath(ev["log"]) if ev.get("log") else None
                self.ranks[path] = _Rank(node.name, ev["role"], ev["rank"], ev["pid"], log)
            elif path in self.ranks:
                self.ranks[path].exit = ev

    def _log_of(self, rank):
        return self.logs.get(rank.log) if rank.log else None

    # -- decisions
    def _verdict(self, now):
        """None while the job should go on, else (status, rank or None, detail)."""
        if self.interrupted:
            return "interrupted", None, f"interrupted by {signal_name(self.interrupted)}"
        abnormal = [r for r in self.ranks.values() if r.exit and r.exit["code"] != 0]
        vanished = self._vanished()
        if abnormal or vanished:
            # Root cause: the earliest abnormal exit of a rank nobody had asked to stop.
            abnormal.sort(key=lambda r: (r.exit.get("stopped", False), r.exit["t"]))
            culprit = abnormal[0] if abnormal else vanished[0]
            return "failed", culprit, self._how(culprit)
        codes = [p.poll() for p in self.procs]
        bad = [(n, c) for n, c in zip(self.nodes, codes) if c not in (None, 0)]
        if bad:
            node, code = bad[0]
            return "failed", None, f"the launcher on {node.name} exited with code {code} (see {node.log_dir}/launcher.log)"
        if all(c == 0 for c in codes):
            return "ok", None, "all ranks finished"
        workers = [r for r in self.ranks.values() if r.role == "worker"]
        if workers and all(r.exit for r in workers):  # PS: servers may wait forever for more work
            self.workers_done_t = self.workers_done_t or now
            if now - self.workers_done_t > PS_SERVER_GRACE_S:
                return "ok", None, f"all workers finished; stopped what still ran {PS_SERVER_GRACE_S:g} s later"
            return None
        if self.timeout and now - self.start_t > self.timeout:
            return "timeout", self._laggard(), f"timeout: still running after {self.timeout:g} s"
        if self.progressed and self.stall and now - self.last_progress_t > self.stall:
            return "stalled", self._laggard(), f"stalled: no progress line from any rank for {self.stall:g} s"
        if not self.progressed and self.startup and now - self.start_t > self.startup:
            return "stalled", self._laggard(), f"stalled: no progress line from any rank within {self.startup:g} s of the start"
        return None

    def _vanished(self):
        """Ranks whose wrapper is gone without an exit event. The event is written just before the
        wrapper exits, so read the file again before concluding (it may have exited since _scan)."""
        gone = [(path, r) for path, r in self.ranks.items() if not r.exit and not _alive(r.pid)]
        nodes = {n.name: n for n in self.nodes}
        for path, r in gone:
            self._read_events(nodes[r.node], path)
        return [r for _, r in gone if not r.exit]

    def _how(self, rank):
        if not rank.exit:
            return f"{rank.label()} disappeared without an exit status (its wrapper was killed)"
        if rank.exit["signal"]:
            return f"{rank.label()} was killed by {signal_name(rank.exit['signal'])}"
        return f"{rank.label()} exited with code {rank.exit['code']}"

    def _laggard(self):
        """The running rank furthest behind: fewest steps logged (workers before servers)."""
        running = [r for r in self.ranks.values() if not r.exit]
        if not running:
            return None

        def behind(r):
            log = self._log_of(r)
            step = log.last_progress[0] if log and log.last_progress and log.last_progress[0] else 0
            return (r.role != "worker", step, r.rank)
        return min(running, key=behind)

    # -- actions
    def _stop(self):
        """Stop every process of this job: SIGTERM, then SIGKILL after a grace period."""
        targets = set(job_pids(self.job_id)) | {p.pid for p in self.procs if p.poll() is None}
        for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
            for pid in targets:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                self._reap()
                targets = {p for p in targets if _alive(p)} | set(job_pids(self.job_id))
                if not targets:
                    break
                time.sleep(0.05)
            if not targets:
                break
        self._reap()
        return sorted(targets)

    def _reap(self):
        """Collect exited orphans of the job that were re-parented to us (we are a subreaper).
        Only pids that are not our launchers: their exit codes belong to Popen."""
        for p in self.procs:
            p.poll()
        ours = {p.pid for p in self.procs}
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in ours:
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] == "Z" and int(fields[1]) == os.getpid():
                try:
                    os.waitpid(int(entry), os.WNOHANG)
                except ChildProcessError:
                    pass

    def run(self):
        _become_subreaper()
        self.start_t = self.last_progress_t = time.monotonic()
        self.workers_done_t = None
        self.start_sizes = {}
        for node in self.nodes:
            os.makedirs(node.log_dir, exist_ok=True)
            for path in glob.glob(os.path.join(node.log_dir, "*log.*")):
                self.start_sizes[os.path.realpath(path)] = os.path.getsize(path)  # a reused log dir: read only new lines
        old_handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            for node in self.nodes:
                env = dict(node.env, **{JOB_ENV: self.job_id})
                with open(os.path.join(node.log_dir, "launcher.log"), "ab") as out:
                    self.procs.append(subprocess.Popen(node.cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                                       stdin=subprocess.DEVNULL, start_new_session=True))
            while True:
                self._scan()
                verdict = self._verdict(time.monotonic())
                if verdict:
                    break
                time.sleep(self.poll_s)
            status, culprit, detail = verdict
            culprit_exit = culprit.exit if culprit else None  # later exits are our own stopping
            culprit_tail = self._tail_of(culprit)  # before our stopping adds its noise to the log
            stopped_pids = job_pids(self.job_id) + [p.pid for p in self.procs if p.poll() is None]
            left = self._stop() if stopped_pids else []
            for p in self.procs:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            self._scan()  # the logs are complete now
            if status == "ok" and any(p.returncode not in (0, None) for p in self.procs) and not self.workers_done_t:
                status, detail = "failed", "a launcher exited non-zero after all ranks finished"
            return self._outcome(status, culprit, culprit_exit, culprit_tail, detail, len(set(stopped_pids)), left)
        finally:
            for s, h in old_handlers.items():
                signal.signal(s, h)

    def _on_signal(self, sig, _frame):
        self.interrupted = sig

    def _tail_of(self, rank):
        log = self._log_of(rank) if rank else None
        return log.tail(self.tail_n) if log else []

    def _outcome(self, status, culprit, culprit_exit, tail, detail, stopped, left):
        out = Outcome(status, time.monotonic() - self.start_t, detail, stopped=stopped, left_running=left)
        if culprit is None and status == "failed":
            log = os.path.join(self.nodes[0].log_dir, "launcher.log")
            out.log, out.tail = log, _last_lines(log, self.tail_n)
        if culprit is not None:
            out.node, out.role, out.rank, out.log = culprit.node, culprit.role, culprit.rank, culprit.log
            if culprit_exit:
                out.exit_code = culprit_exit["code"]
                out.signal = signal_name(culprit_exit["signal"]) if culprit_exit["signal"] else None
            log = self._log_of(culprit)
            out.tail = tail
            if status in ("stalled", "timeout"):
                last = log.last_progress[2] if log and log.last_progress else "no progress line yet"
                out.detail = f"{detail}; furthest behind: {culprit.label()} (last: {last})"
        return out


def _last_lines(path, n):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace").splitlines()[-n:]
    except OSError:
        return []


# ----------------------------------------------------------------------------------------------
# Environment, identity of the run, records


def child_env(base=None, extra=None):
    """The launcher's environment: the caller's, minus inherited rank variables, with the
    user's own OMP_NUM_THREADS choice (if any) passed on explicitly (see fleetbench/__init__)."""
    import fleetbench  # noqa: F401  (imported for its record of the user's thread choice)

    env = dict(os.environ if base is None else base)
    for key in RANK_ENV:
        env.pop(key, None)
    env.pop("OMP_NUM_THREADS", None)  # importing fleetbench set it for *this* process
    if fleetbench._USER_THREADS:
        env["FLEETBENCH_OMP_THREADS"] = str(fleetbench._USER_THREADS)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


@dataclasses.dataclass
class RunIdentity:
    """What a failure record says the run was (the successful run's record says it itself)."""
    benchmark: str
    mode: str
    method: str
    preset: str
    config: dict
    nodes: int
    devices_per_node: int
    world_size: int
    network: dict = None


def is_benchmark(script):
    """Registered benchmark scripts have presets and a side-effect-free `--check`."""
    return registry.for_script(script) is not None


def check_config(script, script_args, env, timeout=120):
    """Resolve a benchmark's config with its own `--check` (no training). Raises LaunchError."""
    p = subprocess.run([sys.executable, script, *script_args, "--check"], env=env, capture_output=True,
                       text=True, timeout=timeout)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        err = [l for l in (p.stderr or p.stdout).strip().splitlines() if l.strip()]
        raise LaunchError(err[-1] if err else f"{script} --check failed with code {p.returncode}")
    return json.loads(lines[-1])


def identity_for(args, config=None, network=None):
    stem = registry.name_for_script(args.script)
    mode, nodes, per_node, world = job_shape(args)
    bench = registry.for_script(args.script)
    if bench is not None and bench.family == "comm":
        mode = "comm"  # launched like a collective job; its records say comm
    if config is None:
        config = {"script": args.script, "script_args": args.script_args}
    method = (config.get("method") or config.get("ps_mode") or config.get("mode") or config.get("op")
              or "unknown")
    preset = args.script_flag("--preset", "full" if is_benchmark(args.script) else None)
    return RunIdentity(stem, mode, str(method), preset, config, nodes, per_node, world, network)


def failure_record(identity, outcome):
    from fleetbench.measure import results

    return results.make_record(
        benchmark=identity.benchmark, mode=identity.mode, method=identity.method, preset=identity.preset,
        config=identity.config, nodes=identity.nodes, devices_per_node=identity.devices_per_node,
        world_size=identity.world_size, metrics=None, error=error_text(outcome), network=identity.network)


def error_text(outcome):
    """One line for the record's `error`: what happened and the last log line of that rank."""
    last = next((l.strip() for l in reversed(outcome.tail) if l.strip()), "")
    return f"launch: {outcome.detail}" + (f"; last log line: {last[:300]}" if last else "")


def format_report(outcome):
    lines = [f"fleetbench launch: {outcome.status.upper()} after {outcome.elapsed_s:.1f} s: {outcome.detail}"]
    if outcome.rank is not None:
        how = (f"signal {outcome.signal}" if outcome.signal else
               f"exit code {outcome.exit_code}" if outcome.exit_code is not None else "still running")
        lines.append(f"  rank {outcome.rank}, role {outcome.role}, node {outcome.node}, {how}")
    if outcome.stopped:
        lines.append(f"  stopped {outcome.stopped} process(es) of this job")
    if outcome.left_running:
        lines.append(f"  WARNING: still running after SIGKILL: pids {outcome.left_running}")
    if outcome.tail:
        lines.append(f"  --- last {len(outcome.tail)} lines of {outcome.log} ---")
        lines += [f"  | {l}" for l in outcome.tail]
    return "\n".join(lines)


def new_log_dir(base="log"):
    return os.path.join(base, f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}")


# ----------------------------------------------------------------------------------------------
# CLI


USAGE = """usage: fleetbench launch [launcher flags] SCRIPT [script args]

launcher flags: any flag of `python -m paddle.distributed.launch` (device lists accept ranges:
  --gpus 0-3,6), plus
  --timeout S   stop the job after S seconds of wall time
  --stall S     stop the job when no rank logs a progress line for S seconds
  --startup S   ... and when none has logged one S seconds after the start (default: --stall)
  --tail N      log lines shown for a failed rank (default 20)
  --quiet       do not echo rank 0's log
  --no-check    skip the benchmark's `--check` before launching
The failure record goes to the script's --results file (default results/runs.jsonl)."""


def cli(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    from fleetbench.measure import results

    try:
        args = parse_argv(argv)
        if not os.path.exists(args.script):
            raise LaunchError(f"SCRIPT {args.script}: no such file")
        env = child_env()
        config = check_config(args.script, args.script_args, env) if args.check and is_benchmark(args.script) else None
        identity = identity_for(args, config, results.network_from_env())
    except (LaunchError, results.RecordError, subprocess.TimeoutExpired) as e:
        print(f"fleetbench launch: error: {e}", file=sys.stderr)
        return 2
    log_dir = args.log_dir or new_log_dir()
    cmd = paddle_command(args.paddle, log_dir, args.script, args.script_args)
    print(f"fleetbench launch: logs in {log_dir}; running: {shlex.join(cmd)}", file=sys.stderr, flush=True)
    sup = Supervisor([NodeLaunch(cmd, log_dir, env)], timeout=args.timeout, stall=args.stall,
                     startup=args.startup, tail=args.tail,
                     echo=None if args.quiet else sys.stdout)
    outcome = sup.run()
    print(format_report(outcome), file=sys.stderr, flush=True)
    if outcome.ok:
        return 0
    if outcome.status == "interrupted":  # cancelled by the user: not a result of the benchmark
        return 130
    path = args.script_flag("--results", registry.DEFAULT_RESULTS)
    results.append(path, failure_record(identity, outcome))
    print(f"fleetbench launch: failure recorded in {path}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == WRAPPER_FLAG:
        sys.exit(rank_main(sys.argv[2:]))
    sys.exit(cli(sys.argv[1:]))
