"""One node of a multi-host job: the agent that runs on the node, and its mirror on the head.

An executor (ssh, srun) starts, on every host, `python -m fleetbench.hosts.agent SPEC`. The
agent starts Paddle's launcher there (with fleetbench's rank wrapper, exactly as `fleetbench
launch` does locally), and streams every new line of the launcher's log directory back over its
stdout: rank logs (`workerlog.N`, `serverlog.N`), `launcher.log` and the rank wrapper's start/exit
events. The head runs one mirror per node (`python -m fleetbench.hosts.agent --mirror DIR --
ssh HOST ...`) that writes those lines into DIR, so the supervisor reads a remote node exactly
like a local one: the same files, the same fault reports (host, rank, role, exit code, log tail).

Stopping. A node's processes carry FLEETBENCH_JOB_ID=<job>-node<i>: the agent stops exactly those
(SIGTERM, SIGKILL after a grace period) when its stdin closes (the head's ssh/srun went away: the
supervisor stopped the job, or the head died), on SIGTERM/SIGHUP (srun forwards signals), when
its stdout breaks, and when the launcher has exited (nothing of the job outlives it). The id is
per node so that, on the emulated cluster where every node shares one process table, the head's
own stop cannot do the nodes' work for them: what the tests prove is what a real cluster does.

What the mirror changes in a forwarded event: `pid` becomes the mirror's own pid (the supervisor
checks a rank's wrapper is alive by its pid, and a remote pid means nothing on the head: while
the mirror runs, the node's stream is alive), `log` the mirrored file, `t` the time the head
received it (hosts' clocks differ; the root cause is the earliest failure as the head saw it).
The originals are kept as remote_pid, remote_log, remote_t.

The node's rank 0 writes its record to a scratch file on the node (`@NODE_SCRATCH@` in the script
arguments is replaced by the agent's scratch directory); the head imports the FLEETBENCH_RESULT
line from the mirrored rank log into its own store (fleetbench.store.results), so the record
is stored once, on the head, whether or not the hosts share a filesystem.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import IO, TextIO

from fleetbench.job import paddle_launch, procs
from fleetbench.measure.contract import EVENTS_DIR, JOB_ID, SUPERVISOR

SCRATCH = "@NODE_SCRATCH@"
LOG_MARK = "FBLOG "    # FBLOG <file name>\t<line>
FILE_MARK = "FBFILE "  # FBFILE <file name>: it exists (an empty rank log is a fact worth reporting)
EXIT_MARK = "FBEXIT "  # FBEXIT <launcher exit code>
POLL_S = 0.1
STOP_GRACE_S = 2.0     # less than the supervisor's own grace: a node is clean before the head gives up


# ----------------------------------------------------------------------------------------------
# On the node


class _Forwarder:
    """New complete lines of the files in a log directory, sent as FBLOG lines."""

    def __init__(self, log_dir: str, out: TextIO) -> None:
        self.log_dir, self.out, self.offsets, self.partial = log_dir, out, {}, {}
        self.broken = False

    def send(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except (BrokenPipeError, OSError, ValueError):
            self.broken = True  # the head is gone: the caller stops the job

    def poll(self) -> None:
        # The wrappers' events are read before the logs and sent after them: every line a rank
        # wrote before its exit event then reaches the head first, where the supervisor also reads
        # events before logs (Supervisor._scan); a rank's last line is never missing from its report.
        events = sorted(os.path.basename(p) for p in glob.glob(os.path.join(self.log_dir, ".fbrank-*")))
        logs = sorted(os.path.basename(p) for p in glob.glob(os.path.join(self.log_dir, "*log*")))
        read = [(name, self._new_lines(name)) for name in events + logs]
        for name, lines in read[len(events):] + read[:len(events)]:
            for line in lines:
                self.send(f"{LOG_MARK}{name}\t{line}\n")

    def _new_lines(self, name: str) -> list[str]:
        """Complete lines added to one file since the last poll (announcing a new file)."""
        try:
            with open(os.path.join(self.log_dir, name), "rb") as f:
                f.seek(self.offsets.get(name, 0))
                data = f.read()
        except OSError:
            return []
        if name not in self.offsets:
            self.send(f"{FILE_MARK}{name}\n")
        self.offsets[name] = self.offsets.get(name, 0) + len(data)
        lines = (self.partial.get(name, b"") + data).split(b"\n")
        self.partial[name] = lines.pop()
        return [line.decode("utf-8", "replace").rstrip(chr(13)) for line in lines]


def _watch_stdin(flag: threading.Event) -> None:
    """Set `flag` when stdin reaches end of file (the head's connection is gone)."""
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    flag.set()


def stop_job(job_id: str, children: Sequence[subprocess.Popen] = (), grace_s: float = STOP_GRACE_S) -> list[int]:
    """SIGTERM (and SIGCONT) every live process of this job on this host, SIGKILL what is left
    after grace_s. Returns the pids still alive at the end (none, normally)."""
    targets = set(procs.job_pids(job_id)) | {p.pid for p in children if p.poll() is None}
    for sigs, wait_s in (((signal.SIGTERM, signal.SIGCONT), grace_s), ((signal.SIGKILL,), 3.0)):
        for sig in sigs:
            procs.send(targets, sig)
        deadline = time.monotonic() + wait_s
        while targets and time.monotonic() < deadline:
            for p in children:
                p.poll()
            time.sleep(0.05)
            targets = {pid for pid in targets if procs.alive(pid)} | set(procs.job_pids(job_id))
        if not targets:
            break
    return sorted(targets)


def interface_of(address: str) -> str | None:
    """The network interface holding `address` on this host (`ip -o -4 addr`), or None."""
    try:
        out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3].split("/")[0] == address:
            return fields[1]
    return None


def node_env(spec: dict) -> dict:
    """The launcher's environment on this node. Gloo must use the interface of the node's own
    address (the one the other nodes reach it at) unless the user named one."""
    extra = dict(spec["env"], **{JOB_ID: spec["job"], SUPERVISOR: procs.token()})
    if "GLOO_SOCKET_IFNAME" not in extra and "GLOO_SOCKET_IFNAME" not in os.environ:
        ifname = interface_of(extra.get("POD_IP", ""))
        if ifname:
            extra["GLOO_SOCKET_IFNAME"] = ifname
    return paddle_launch.child_env(extra=extra)


def node_command(spec: dict, scratch: str) -> list[str]:
    """Paddle's launcher for this node, with the rank wrapper (fleetbench.job.rankwrap)."""
    args = [a.replace(SCRATCH, scratch) for a in spec["args"]]
    return paddle_launch.paddle_command(spec["flags"], os.path.join(scratch, "log"), spec["script"], args)


def run_node(spec: dict, out: TextIO = sys.stdout) -> int:
    """Run this node's launcher and forward its logs until it ends or the head goes away."""
    scratch = tempfile.mkdtemp(prefix=f"fleetbench-{spec['job']}-")
    log_dir = os.path.join(scratch, "log")
    os.makedirs(log_dir)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=_watch_stdin, args=(stop,), daemon=True).start()
    env = node_env(spec)  # this agent is the node's supervisor (SUPERVISOR): if it vanishes, the ranks stop
    env[EVENTS_DIR] = log_dir  # the rank wrappers' events, forwarded with the logs
    fwd = _Forwarder(log_dir, out)
    with open(os.path.join(log_dir, "launcher.log"), "ab") as log:
        proc = subprocess.Popen(node_command(spec, scratch), env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)  # cwd: the remote workdir
    while proc.poll() is None and not stop.is_set() and not fwd.broken:
        fwd.poll()
        time.sleep(POLL_S)
    left = stop_job(spec["job"], [proc])
    fwd.poll()
    code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    if left:
        fwd.send(f"{LOG_MARK}launcher.log\tfleetbench agent: pids {left} of job {spec['job']} "
                 f"survived SIGKILL\n")
    fwd.send(f"{EXIT_MARK}{code}\n")
    shutil.rmtree(scratch, ignore_errors=True)  # the head has the logs; the record went with them
    return 0 if code == 0 else 1


# ----------------------------------------------------------------------------------------------
# On the head


class Mirror:
    """Writes one node's forwarded lines into a local log directory."""

    def __init__(self, log_dir: str, out: TextIO = sys.stdout) -> None:
        self.log_dir, self.out, self.exit_code = log_dir, out, None
        os.makedirs(log_dir, exist_ok=True)
        self.files = {}

    def line(self, text: str) -> None:
        if text.startswith(EXIT_MARK):
            self.exit_code = int(text[len(EXIT_MARK):].strip() or 1)
        elif text.startswith(FILE_MARK):
            self._file(os.path.basename(text[len(FILE_MARK):]))
        elif text.startswith(LOG_MARK) and "\t" in text:
            name, body = text[len(LOG_MARK):].split("\t", 1)
            self._write(os.path.basename(name), body)
        else:  # the transport's own words (or a login script's): keep them with the launcher's
            self._write("launcher.log", text)

    def _write(self, name: str, body: str) -> None:
        if name == "launcher.log":
            print(body, file=self.out, flush=True)
            return
        if name.startswith(".fbrank-"):
            body = json.dumps(self.local_event(json.loads(body)))
        self._file(name).write(body + "\n")
        self.files[name].flush()

    def _file(self, name: str) -> IO[str] | None:
        if name not in self.files and name != "launcher.log":
            self.files[name] = open(os.path.join(self.log_dir, name), "a", encoding="utf-8")
        return self.files.get(name)

    def local_event(self, ev: dict) -> dict:
        ev = dict(ev, remote_pid=ev.get("pid"), remote_log=ev.get("log"), remote_t=ev.get("t"))
        ev["pid"], ev["t"] = os.getpid(), time.time()
        if ev.get("log"):
            ev["log"] = os.path.join(self.log_dir, os.path.basename(ev["log"]))
        return ev

    def close(self) -> None:
        for f in self.files.values():
            f.close()


def run_mirror(log_dir: str, transport: list[str], host: str) -> int:
    """Run the transport (ssh/srun argv) and mirror what the node's agent sends into log_dir.
    Exit code: the node launcher's, or the transport's own when the agent never reported.

    Stopping (SIGTERM from the supervisor) closes the transport's stdin: the agent stops the
    node's job and reports, and only then does the connection end, so a stopped job is gone from
    every node when the supervisor is done. The transport does not carry the job's id (the
    supervisor would kill it first); it dies with the mirror (PR_SET_PDEATHSIG)."""
    mirror = Mirror(log_dir)
    env = {k: v for k, v in os.environ.items() if k not in (JOB_ID, SUPERVISOR)}
    proc = subprocess.Popen(transport, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                            preexec_fn=procs.die_with_parent)

    def stop(*_: object) -> None:
        proc.stdin.close()
        timer = threading.Timer(STOP_GRACE_S + 3.0, proc.kill)  # an agent that does not answer
        timer.daemon = True
        timer.start()

    signal.signal(signal.SIGTERM, stop)
    for raw in proc.stdout:
        mirror.line(raw.decode("utf-8", "replace").rstrip("\n"))
    code = proc.wait()
    mirror.close()
    if mirror.exit_code is None:
        print(f"fleetbench: {transport[0]} to {host} ended with exit code {code} before the node reported "
              f"its launcher's exit status", flush=True)
        return code if code else 1
    return exit_status(mirror.exit_code)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--mirror"]:
        log_dir, host, transport = argv[1], argv[2], argv[4:]
        return run_mirror(log_dir, transport, host)
    return run_node(json.loads(argv[0]))


def exit_status(code: int) -> int:
    """A launcher killed by a signal (negative code) is a failure, like any code outside 0..255."""
    return code if 0 <= code <= 255 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
