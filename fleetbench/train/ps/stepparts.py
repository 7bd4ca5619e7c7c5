"""The parameter-server record's `step_breakdown`: every worker's parts of its measured step
(ps/marks.py), its PS client's threads' CPU time (ps/commthread.py), and how busy every
server was over the timed window (ps/servers.py). Pure but for the gathers (every worker calls
`block` together; `comm` is the workers' gloo, a metrics.Communicator)."""
from __future__ import annotations

import math
from typing import Optional

from fleetbench.measure import metrics
from fleetbench.train.ps.marks import PARTS

# the parts must explain the measured step to within this share (the rest is "other"), as the
# collective breakdown's (train/phases.TOLERANCE)
TOLERANCE = 0.05
# a worker's row: its step, the parts, the communicator's own threads, what no part covers
ROW = ("step", *PARTS, "client_cpu", "other")


def row(totals: dict, threads: int, steps: int, elapsed_s: float, client_cpu_s: float) -> list[float]:
    """One worker's row (ROW's order), ms per measured step. `totals`: seconds per part summed over
    its trainer threads (marks.Marks.totals); `client_cpu_s`: CPU seconds of the PS client's own
    threads in the window (commthread.py), NaN where not measured."""
    count = max(1, steps)
    step = 1000 * elapsed_s / count
    parts = [1000 * totals[p] / max(1, threads) / count for p in PARTS]
    return [step, *parts, 1000 * client_cpu_s / count, step - sum(parts)]


def server_rows(endpoints: list[str], seen: list[list[float]], windows: list[float], slowest: int) -> list[dict]:
    """Each server's CPU use over the slowest worker's window (the job's elapsed_s), or over the
    window of the first worker that saw it when the slowest did not. `seen[w][s]`: the CPU seconds
    worker w read for server s over its own window (NaN: not on its machine)."""
    out = []
    for s, endpoint in enumerate(endpoints):
        order = [slowest] + [w for w in range(len(seen)) if w != slowest]
        by = next((w for w in order if seen[w][s] == seen[w][s]), None)
        cpu = None if by is None else float(seen[by][s])
        window = None if by is None else float(windows[by])
        out.append({"endpoint": endpoint, "cpu_s": cpu, "window_s": window, "seen_by_worker": by,
                    "busy": cpu / window if cpu is not None and window else None})
    return out


def block(mine: list[float], servers_cpu: list[float], elapsed_s: float, comm: metrics.Communicator,
          endpoints: list[str], threads: int) -> dict:
    """The record's step_breakdown (every worker calls it together): ROW by worker, with `covered`
    (1 - |other| / step) and `adds_up`; the servers' CPU use; what each figure is in."""
    rows = [dict(zip(ROW, r)) for r in comm.gather(mine)]
    for r in rows:
        r["client_cpu"] = None if r["client_cpu"] != r["client_cpu"] else r["client_cpu"]
        r["covered"] = 1 - abs(r["other"]) / r["step"] if r["step"] > 0 else math.nan
    windows = [w[0] for w in comm.gather([elapsed_s])]
    seen = comm.gather(list(servers_cpu)) if endpoints else []
    slowest = max(range(len(windows)), key=lambda w: windows[w])
    return {"family": "ps", "units": "ms per measured step", "tolerance": TOLERANCE, "dataset_threads": threads,
            "adds_up": all(r["covered"] >= 1 - TOLERANCE for r in rows), "ranks": rows,
            "servers": server_rows(endpoints, seen, windows, slowest) if endpoints else [],
            "server_units": {"cpu_s": "CPU seconds (user + system, all threads) in the window",
                             "window_s": "s", "busy": "cpu_s / window_s: cores' worth busy (1.0 = one core)"}}


def probes(comm: metrics.Communicator, mine: list[float], endpoints: list[str], by_server: dict) -> dict:
    """The record's `ps_probe`: every worker's probe figures (metrics.PROBE_KEYS) by worker
    and every server's by server, NaN stored as null where a process was not probed or not seen."""
    keys = metrics.PROBE_KEYS
    workers = comm.gather(list(mine))
    nan = [math.nan] * len(keys)
    # each worker holds the figures of the servers on its machine; the first that has one gives it
    rows = comm.gather([v for e in endpoints for v in by_server.get(e, nan)]) if endpoints else []
    servers = []
    for s, endpoint in enumerate(endpoints):
        k = len(keys)
        seen = [r[k * s:k * s + k] for r in rows if any(v == v for v in r[k * s:k * s + k])]
        servers.append({"endpoint": endpoint, **dict(zip(keys, _nulls(seen[0] if seen else nan)))})
    return {"workers": [dict(zip(keys, _nulls(w))) for w in workers], "servers": servers}


def _nulls(values: list[float]) -> list[Optional[float]]:
    return [None if v != v else float(v) for v in values]
