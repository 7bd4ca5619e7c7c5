"""The rank wrapper: `python -m fleetbench.job.rankwrap SCRIPT [ARGS]`.

`fleetbench launch` has Paddle's launcher run this module in place of each rank's script. It starts
the script, waits for it, and writes what happened as JSON lines to `.fbrank-<job>-<pid>` in the
log directory: a `start` event (role, rank, wrapper and script pids, log file) and an `exit` event
(exit code or signal, whether someone asked it to stop). Paddle's own report names the first
failed rank in container order, not the first to fail; these events let the supervisor tell.

It also ends its job when the supervisor is gone (`kill -9` of `fleetbench launch`): nothing
would stop a hung job then, and rank 0 would still append a record much later. The supervisor
passes its identity (pid and start time) in FLEETBENCH_SUPERVISOR; the wrapper checks it twice a
second and, once it is gone, stops every process carrying the job's id.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping

from fleetbench.job import procs
from fleetbench.measure import contract

WATCH_S = 0.5                             # how often the supervisor's existence is checked
ORPHAN_GRACE_S = 2.0                      # SIGTERM, then SIGKILL after this long
EVENTS_PREFIX = ".fbrank-"
ROLES = {"PSERVER": "server", "TRAINER": "worker", "HETER_TRAINER": "heter"}


def events_path(log_dir: str | None, job_id: str, pid: int | str) -> str:
    return os.path.join(log_dir or ".", f"{EVENTS_PREFIX}{job_id}-{pid}")


def rank_identity(env: Mapping[str, str]) -> tuple[str, int]:
    """(role, rank) of this process from the variables Paddle's launchers set."""
    role = ROLES.get(env.get("TRAINING_ROLE", ""), (env.get("TRAINING_ROLE") or "worker").lower())
    if role == "server":
        me = f"{env.get('POD_IP', '')}:{env.get('PADDLE_PORT', '')}"
        servers = env.get("PADDLE_PSERVERS_IP_PORT_LIST", "").split(",")
        return role, servers.index(me) if me in servers else int(env.get("PADDLE_PORT", "-1"))
    return role, int(env.get("PADDLE_TRAINER_ID", env.get("PADDLE_GLOBAL_RANK", "0")))


class Events:
    """The wrapper's event file; every line carries who we are and when."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.role, self.rank = rank_identity(env)
        try:
            self.log = os.readlink("/proc/self/fd/1")  # the rank log Paddle redirected us to
        except OSError:
            self.log = None
        where = env.get(contract.EVENTS_DIR) or env.get("PADDLE_LOG_DIR")  # the supervisor's, else Paddle's
        self.path = events_path(where, env.get(contract.JOB_ID, "nojob"), os.getpid())

    def write(self, **fields: object) -> None:
        line = dict(fields, pid=os.getpid(), role=self.role, rank=self.rank, log=self.log, t=time.time())
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")


def watch_supervisor(supervisor: str, job_id: str | None, events: Events) -> None:
    """Thread body: end the job once the supervising process no longer exists."""
    while procs.token_alive(supervisor):
        time.sleep(WATCH_S)
    events.write(event="orphaned", supervisor=supervisor)
    print(f"fleetbench rank wrapper: the supervisor ({supervisor}) is gone; stopping job {job_id}",
          file=sys.stderr, flush=True)
    procs.terminate(lambda: procs.job_pids(job_id), ORPHAN_GRACE_S)  # every process of the job but us


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m fleetbench.job.rankwrap SCRIPT [ARGS]", file=sys.stderr)
        return 2
    events = Events(os.environ)
    supervisor = os.environ.get(contract.SUPERVISOR)
    if supervisor and not procs.token_alive(supervisor):
        print(f"fleetbench rank wrapper: the supervisor ({supervisor}) is gone; not starting",
              file=sys.stderr, flush=True)
        return 1
    asked = []

    def on_stop(sig: int, _frame: object) -> None:
        # Recorded as it arrives, not only with the exit: Paddle's launcher SIGKILLs a wrapper
        # whose script outlives its SIGTERM by 3 s, and a wrapper that vanishes *after* being
        # asked is an effect of the job's stop, while one that vanishes unasked was killed from
        # outside (fleetbench.job.verdict tells them apart by this event).
        if not asked:
            events.write(event="asked", signal=sig)
        asked.append(sig)
    for sig in (signal.SIGTERM, signal.SIGINT):
        # The script shares our process group, so a group signal reaches it directly; we stay
        # to record how it ended.
        signal.signal(sig, on_stop)
    # If the wrapper is SIGKILLed (Paddle's force-stop kills only the container's first pid),
    # the script must not live on as an orphan.
    child = subprocess.Popen([sys.executable, "-u", *argv], preexec_fn=procs.die_with_parent)
    events.write(event="start", child=child.pid)
    if supervisor:
        threading.Thread(target=watch_supervisor, args=(supervisor, os.environ.get(contract.JOB_ID), events),
                         daemon=True).start()
    code = child.wait()
    events.write(event="exit", code=code, signal=-code if code < 0 else None, asked_to_stop=bool(asked))
    return end_like(code)


def end_like(code: int) -> int:
    """End the way the script did, so Paddle's launcher sees what the script saw."""
    if code < 0:
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code  # a signal whose default action is not to terminate
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
