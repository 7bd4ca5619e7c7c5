"""What else used the machine while a run was timed: the share of the machine's CPU time spent
outside the job during its measured window, and other processes on its GPUs.

Why: runs alone cannot see a neighbour that stays. In a fresh-machine `make demo` other commands
ran on the same two cores for a minute: the ResNet50 1x2 cell ran 32.53, then 19.23, 18.70 and
18.92 images/s, and the sweep called the three slow runs stable and the one quiet run the outlier.
The machine knew: /proc/stat counts every CPU's time, and /proc/PID/stat each process's.

    other = busy CPU time of the machine (user, nice, system, irq, softirq, steal) in the window
            - CPU time of the job's processes in the window
    interference_cpu_pct = 100 x other / all CPU time of the machine in the window (busy + idle)

Steal counts as other: it is time a hypervisor gave another guest while this one wanted the CPU.
The job's processes are those whose environment carries its FLEETBENCH_JOB_ID (the node's launcher,
wrappers, ranks, PS servers, data-loader workers; measure/contract.py) or its PADDLE_TRAINER_ENDPOINTS
(every rank of the job on every node: emulated nodes share this machine); a process started by hand
is its own process tree. A process's time
includes its reaped children's (cutime, cstime), so a data-loader worker that ends in the window
still counts for the job. Ranks on one machine measure the same thing; ranks on several machines
each measure theirs, and the record keeps the most disturbed (`combine`), as throughput keeps the
slowest rank.

Pure but for `sample`, which reads /proc (a file read, not a tool); nvidia-smi is asked by
machine/gpu_procs.py.
"""
from __future__ import annotations

import dataclasses
import os

from fleetbench.measure.contract import JOB_ID, RankContract


@dataclasses.dataclass(frozen=True)
class CpuSample:
    """Counters at one moment, in clock ticks (USER_HZ, as both /proc files count)."""

    busy: int  # the machine's CPUs, not idle
    total: int  # the machine's CPUs, all time
    job: int  # the job's processes (utime + stime + cutime + cstime)
    pids: frozenset = frozenset()  # the job's processes then (for the GPU check)


def parse_proc_stat(text: str) -> tuple[int, int]:
    """(busy, total) ticks from /proc/stat's aggregate `cpu` line. guest and guest_nice are already
    inside user and nice (proc(5)), so they are not added twice."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1:9]] + [0] * (8 - len(fields[1:9]))
            user, nice, system, idle, iowait, irq, softirq, steal = values
            busy = user + nice + system + irq + softirq + steal
            return busy, busy + idle + iowait
    raise ValueError("/proc/stat: no aggregate 'cpu' line")


def parse_pid_stat(text: str) -> tuple[int, int]:
    """(ppid, utime + stime + cutime + cstime) from /proc/PID/stat (the name, field 2, may hold
    spaces and parentheses: split after the last ')')."""
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), sum(int(v) for v in fields[11:15])


def _read(path: str, mode: str = "r"):
    try:
        with open(path, mode) as handle:
            return handle.read()
    except OSError:
        return None


def _stats() -> dict[int, tuple[int, int]]:
    """{pid: (ppid, ticks)} of every process."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            text = _read(f"/proc/{entry}/stat")
            if text:
                out[int(entry)] = parse_pid_stat(text)
    return out


# Every rank (and PS role) of a job started by Paddle's launcher carries the job's endpoint list,
# and nothing else on the machine does. It is the mark shared by all nodes of a job: fleetbench
# names each node's part of a multi-node job apart (FLEETBENCH_JOB_ID "<job>-node<i>"), so on
# emulated nodes, which share this machine, the other node's rank would be "others" (every 2-node
# emulated run was "disturbed, 47% CPU to others" on a quiet machine).
PADDLE_JOB_MARK = "PADDLE_TRAINER_ENDPOINTS"


def job_markers(env: dict) -> list[str]:
    """The environment entries that tell this job's processes: its FLEETBENCH_JOB_ID (the node's
    launcher, wrappers, ranks, data-loader workers) and Paddle's endpoint list (every rank of the
    job, on every node); empty for a job of one process started by hand."""
    job_id = RankContract.from_env(env).job_id
    marks = [f"{JOB_ID}={job_id}"] if job_id else []
    return marks + ([f"{PADDLE_JOB_MARK}={env[PADDLE_JOB_MARK]}"] if env.get(PADDLE_JOB_MARK) else [])


def job_processes(stats: dict[int, tuple[int, int]], markers: list[str], me: int) -> set[int]:
    """The job's pids: those whose environment holds any of `markers` (and this process), or
    without one, this process and its descendants."""
    if markers:
        marks = {m.encode() for m in markers}
        found = {pid for pid in stats if marks & set((_read(f"/proc/{pid}/environ", "rb") or b"").split(b"\0"))}
        return found | {me}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [me]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return found


def sample() -> CpuSample | None:
    """The counters now; None where /proc cannot be read (not Linux)."""
    text = _read("/proc/stat")
    if text is None:
        return None
    busy, total = parse_proc_stat(text)
    stats = _stats()
    pids = job_processes(stats, job_markers(dict(os.environ)), os.getpid())
    return CpuSample(busy=busy, total=total, job=sum(stats[p][1] for p in pids if p in stats), pids=frozenset(pids))


def window(start: CpuSample | None, end: CpuSample | None) -> dict:
    """{"interference_cpu_pct", "job_cpu_pct"} of the window between two samples; both None when
    either is missing or no time passed. A process of the job that exited unreaped in the window
    takes its time with it; the job is then undercounted and `other` can only be overstated, so
    it is clamped at 0 below and never above what the machine was busy."""
    if start is None or end is None or end.total <= start.total:
        return {"interference_cpu_pct": None, "job_cpu_pct": None}
    total = end.total - start.total
    busy = end.busy - start.busy
    job = max(0, min(busy, end.job - start.job))
    return {"interference_cpu_pct": 100.0 * (busy - job) / total, "job_cpu_pct": 100.0 * job / total}


def combine(per_rank: list[list[float]]) -> dict:
    """The record's figures from every rank's [interference %, job %, other GPU processes] (NaN
    where a rank measured nothing): the most disturbed rank's machine decides, and the job's share
    is that rank's (so the two never add up past 100); other GPU processes, the most any rank saw."""
    measured = [row for row in per_rank if row[0] == row[0]]  # NaN != NaN
    worst = max(measured, key=lambda row: row[0]) if measured else None
    gpu = [row[2] for row in per_rank if row[2] == row[2]]
    return {"interference_cpu_pct": worst[0] if worst else None,
            "job_cpu_pct": worst[1] if worst and worst[1] == worst[1] else None,
            "interference_gpu_procs": int(max(gpu)) if gpu else None}
