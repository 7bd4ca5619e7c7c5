"""The parameter servers as the workers see them: how busy each was over a worker's timed window
(its process's CPU time there, read from /proc), and its machine-speed probe figures.

Why from the workers' side: a server spends the job inside `fleet.run_server()`, one C++ call,
so it cannot report anything while serving. Its CPU time is in /proc/PID/stat for any process on
the same machine (the emulated cluster's nodes share this machine's /proc); a server on a machine
with no worker is not seen, and its figures are null. A server is found by its environment, as
measure/interference.py finds a job's processes: Paddle's launchers give it TRAINING_ROLE=PSERVER,
POD_IP and PADDLE_PORT (its endpoint) and the job's PADDLE_TRAINER_ENDPOINTS.

The probe (machine/speed.py) runs in the server process itself, just before it starts serving and
just after worker 0 told it to stop, and is handed over in a file named by the server's pid in the
temporary directory (the worker knows the pid from /proc); worker 0 stops the servers and waits for
the after-figures before it stores the record (driver.py).
"""
from __future__ import annotations

import json
import math
import os
import tempfile
import time
from pathlib import Path

from fleetbench.measure import interference, metrics
from fleetbench.train.ps import scratch

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SERVER_ROLE = b"TRAINING_ROLE=PSERVER"
JOB_MARK = "PADDLE_TRAINER_ENDPOINTS"


def _environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return {}
    if SERVER_ROLE not in raw:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def find(endpoints: list[str], env: dict) -> dict[str, int]:
    """{endpoint: pid} of this job's servers on this machine. Where a wrapper and the server it
    runs both carry the environment, the innermost process (the one with no match below it) is
    the server."""
    found: dict[str, list[tuple[int, int]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        theirs = _environ(int(entry))
        if not theirs or theirs.get(JOB_MARK) != env.get(JOB_MARK):
            continue
        endpoint = f"{theirs.get('POD_IP')}:{theirs.get('PADDLE_PORT')}"
        stat = _stat(int(entry))
        if endpoint in endpoints and stat is not None:
            found.setdefault(endpoint, []).append((int(entry), stat[0]))
    out = {}
    for endpoint, matches in found.items():
        parents = {ppid for _, ppid in matches}
        inner = [pid for pid, _ in matches if pid not in parents]
        out[endpoint] = max(inner) if inner else max(pid for pid, _ in matches)
    return out


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, CPU ticks) of a process, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return interference.parse_pid_stat(handle.read())
    except (OSError, IndexError, ValueError):
        return None


def cpu_seconds(pids: list[int | None]) -> list[float]:
    """CPU seconds (user + system, every thread) each process has used so far; NaN where the
    process is unknown or gone. Resolution: one clock tick (1/CLOCK_TICKS s)."""
    out = []
    for pid in pids:
        stat = _stat(pid) if pid is not None else None
        out.append(math.nan if stat is None else stat[1] / CLOCK_TICKS)
    return out


# ------------------------------------------------------------------ the servers' probe figures
def probe_dir(pid: int) -> Path:
    """Where server `pid` leaves its probe figures: a directory of its own (scratch.Scratch, so
    it goes with the server however the server ends), at a name the workers know from the pid."""
    return Path(tempfile.gettempdir()) / f"{scratch.PREFIX}server-{pid}"


def probe_file(pid: int) -> Path:
    return probe_dir(pid) / "probe.json"


def hand_over() -> scratch.Scratch:
    """The server's probe directory, made now; removed when the server process ends."""
    return scratch.Scratch(probe_dir(os.getpid()))


def write_probe(edge: str, figures: list[float]) -> None:
    """This server's probe figures at `edge` ("before" or "after"), added to its file (written
    whole under a temporary name, then renamed: a reader never sees half of it)."""
    path = probe_file(os.getpid())
    held = {} if edge == "before" else read_probe(os.getpid())
    held[edge] = figures
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(held))
    os.replace(tmp, path)


def read_probe(pid: int) -> dict:
    try:
        return json.loads(probe_file(pid).read_text())
    except (OSError, ValueError):
        return {}


def collect_probes(pids: dict[str, int], deadline_s: float) -> dict[str, list[float]]:
    """Each server's probe figures in metrics.PROBE_KEYS' order, waiting up to `deadline_s` for the after-figures of servers told to stop; NaN where a
    server gave none. Workers on one machine read the same files: `forget` removes them once all
    have (after a gather)."""
    end = time.monotonic() + deadline_s
    out = {}
    for endpoint, pid in pids.items():
        held = read_probe(pid)
        while "after" not in held and time.monotonic() < end:
            time.sleep(0.05)
            held = read_probe(pid)
        out[endpoint] = metrics.probe_row(held.get("before"), held.get("after"))
    return out


def forget(pids: dict[str, int]) -> None:
    """The workers have read the files: removed, which tells each server it may leave."""
    for pid in pids.values():
        probe_file(pid).unlink(missing_ok=True)


def wait_read(deadline_s: float) -> None:
    """A stopped server waits for its after-figures to be read (`forget`), at most `deadline_s`:
    with no worker on its machine nobody reads them, and it leaves at the deadline."""
    end = time.monotonic() + deadline_s
    while probe_file(os.getpid()).exists() and time.monotonic() < end:
        time.sleep(0.05)
