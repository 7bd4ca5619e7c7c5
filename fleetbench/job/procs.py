"""Facts about processes, read from Linux's /proc, and the few prctl calls the launcher needs.

The supervisor and the rank wrapper both use these: which processes belong to a job, whether a
process is stopped (state T) or burning CPU, and whether a given process (pid plus start time, so
a reused pid is not mistaken for it) still exists.
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import signal
import time
from collections.abc import Callable, Collection, Iterable

from fleetbench.machine.env import boot_id
from fleetbench.measure.contract import JOB_ID

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
STOPPED_STATES = ("T", "t")  # stopped by a signal (SIGSTOP, ^Z) or by a tracer
DEAD_STATES = ("Z", "X")


@dataclasses.dataclass(frozen=True)
class Stat:
    """The fields of /proc/PID/stat that the launcher reads."""
    state: str    # R running, S sleeping, D disk wait, T stopped, Z zombie, ...
    ppid: int
    ticks: int    # utime + stime of all its threads, in clock ticks
    start: int    # start time after boot, in clock ticks: with the pid, names one process


def read_stat(pid: int | str) -> Stat | None:
    """Stat of a process, or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # the command name (field 2) may contain spaces and parentheses: split after the last ")"
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return Stat(fields[0], int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[19]))


def alive(pid: int | str) -> bool:
    stat = read_stat(pid)
    return stat is not None and stat.state not in DEAD_STATES


def process_table() -> dict[int, Stat]:
    """{pid: Stat} of every process on the machine (one pass over /proc)."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = read_stat(entry)
            if stat is not None:
                table[int(entry)] = stat
    return table


def tree_ticks(table: dict[int, Stat], root: int) -> int:
    """CPU ticks of a process and all its descendants (a rank's DataLoader workers count)."""
    children = {}
    for pid, stat in table.items():
        children.setdefault(stat.ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            total += table[pid].ticks
            todo.extend(children.get(pid, ()))
    return total



def job_pids(job_id: str, variable: str = JOB_ID) -> list[int]:
    """Pids of live processes whose environment carries this job's id (zombies and the caller
    excluded): the whole job, whatever its process tree, and nothing else on the machine."""
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
        if alive(int(entry)):
            found.append(int(entry))
    return found


def token(pid: int | None = None) -> str | None:
    """'boot:pid:start' naming one process for as long as it lives (pids are reused; with the
    start time and the machine's boot id they are not)."""
    pid = os.getpid() if pid is None else pid
    stat = read_stat(pid)
    return f"{boot_id()}:{pid}:{stat.start}" if stat else None


def token_alive(text: str) -> bool:
    """Whether the process named by token() still exists. A token of another machine (an
    environment forwarded to a remote host) cannot be checked here: taken as alive."""
    boot, pid, start = (str(text).split(":") + ["", "", ""])[:3]
    if boot != boot_id():
        return True
    stat = read_stat(pid) if pid.isdigit() else None
    return stat is not None and stat.state not in DEAD_STATES and str(stat.start) == start


def depth(pid: int) -> int:
    """How many ancestors `pid` has (0 when it is gone or is init)."""
    n, stat = 0, read_stat(pid)
    while stat is not None and stat.ppid > 1 and n < 4096:  # the bound: a cycle cannot happen, but a loop must end
        n, stat = n + 1, read_stat(stat.ppid)
    return n


def send(pids: Iterable[int], sig: int) -> None:
    """Signal each pid, ignoring those already gone; parents before their children. Why: a rank
    wrapper (job/rankwrap) records whether it was asked to stop; signalled after its script, it could
    see the script die and write 'not asked' before its own signal came (seen in a full-suite run
    beside other work: a PS server stopped by the supervisor recorded as not asked). Sent to the
    wrapper first, the signal is pending before the script can die of its own."""
    for pid in sorted(pids, key=depth):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def terminate(find: Callable[[], Iterable[int]], grace_s: float, kill_wait_s: float = 5.0,
              poll: Callable[[], None] | None = None) -> list[int]:
    """Stop the processes `find()` returns (asked again while waiting, so that children started
    meanwhile are caught too): SIGTERM and SIGCONT (a stopped process acts on SIGTERM only once
    continued), then SIGKILL what is left after grace_s. `poll` runs while waiting (reaping).
    Returns the pids still alive at the end (none, normally)."""
    targets = set(find())
    for sigs, wait_s in (((signal.SIGTERM, signal.SIGCONT), grace_s), ((signal.SIGKILL,), kill_wait_s)):
        for sig in sigs:
            send(targets, sig)
        deadline = time.monotonic() + wait_s
        while targets and time.monotonic() < deadline:
            if poll:
                poll()
            time.sleep(0.05)
            targets = {pid for pid in targets if alive(pid)} | set(find())
        if not targets:
            break
    return sorted(targets)


def reap_children(exclude: Collection[int] = ()) -> None:
    """Collect exited children other than `exclude` (orphans re-parented to us as subreaper;
    the excluded ones are Popen objects' own, whose exit codes Popen must read)."""
    for pid, stat in process_table().items():
        if stat.state == "Z" and stat.ppid == os.getpid() and pid not in exclude:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value)
    except (OSError, AttributeError):  # not Linux: the launcher then has no such safety net
        pass


def become_subreaper() -> None:
    """Orphaned descendants become our children (instead of init's), so we can reap them."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """The calling process gets `sig` when its parent exits. Call it in a child between fork
    and exec (Popen's preexec_fn): it survives exec, and the parent is then the Popen caller."""
    _prctl(PR_SET_PDEATHSIG, sig)


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
