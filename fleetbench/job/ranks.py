"""What the supervisor knows about each rank: its wrapper's events, its log, its process state.

A rank is seen through three windows: the wrapper's event file (start, exit code or signal), the
rank's log (progress lines, the last lines), and /proc (is the script stopped, does it use CPU).
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import time
from collections.abc import Iterable

from fleetbench.job import procs

PROGRESS = re.compile(r"^(?:step (\d+)/(\d+)\b|FLEETBENCH_RESULT )")
RANK_LOG = re.compile(r"^(worker|server|heter|coordinator)log\.(\d+)$")
KEPT_LINES = 400   # last lines kept per rank log
CPU_HISTORY = 600  # samples kept per rank (one a second: ten minutes of history)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def progress_step(line: str) -> tuple[int, int] | tuple[None, None] | None:
    """None for other lines; (step, total) for a window line; (None, None) for FLEETBENCH_RESULT."""
    m = PROGRESS.match(line)
    if not m:
        return None
    return (int(m.group(1)), int(m.group(2))) if m.group(1) else (None, None)


class LogTail:
    """Incrementally read one rank log: progress lines and the last lines."""

    def __init__(self, path: str, offset: int) -> None:
        self.path, self.offset, self.partial = path, offset, b""
        self.last_progress = None  # (step, total, line)
        self.lines = collections.deque(maxlen=KEPT_LINES)

    def poll(self) -> list[str]:
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

    def tail(self, n: int) -> list[str]:
        lines = list(self.lines) + ([self.partial.decode("utf-8", "replace")] if self.partial else [])
        return lines[-n:]

    def steps(self) -> int:
        """Steps this rank has logged (0 before its first window line)."""
        return (self.last_progress[0] or 0) if self.last_progress else 0


@dataclasses.dataclass(kw_only=True)
class Rank:
    node: str
    role: str
    rank: int
    pid: int                 # the wrapper
    child: int = None        # the script
    log: str = None          # its log file (real path)
    exit: dict = None        # the wrapper's exit event
    state: str = None        # the script's /proc state when last seen alive ("T": stopped)
    gone: bool = False       # its wrapper no longer exists
    gone_t: float = None     # when that was first seen (time.time())
    asked_t: float = None    # when its wrapper was first asked to stop (its `asked` event)
    cpu: collections.deque = dataclasses.field(default_factory=lambda: collections.deque(maxlen=CPU_HISTORY))

    def label(self) -> str:
        return f"{self.role} rank {self.rank}" + (f" on {self.node}" if self.node != "node0" else "")

    @property
    def stopped(self) -> bool:
        """Stopped by a signal when last seen alive: it cannot take part in anything."""
        return self.state in procs.STOPPED_STATES

    @property
    def vanished(self) -> bool:
        """Its wrapper is gone without recording an exit (it was killed)."""
        return self.gone and not self.exit

    @property
    def asked_to_stop(self) -> bool:
        return bool(self.exit and self.exit.get("asked_to_stop"))

    def idle_for(self, window: float, now: float) -> bool:
        """True when the script (with its children) used no CPU time over the last `window`
        seconds, judged from samples that span it."""
        old = [(t, ticks) for t, ticks in self.cpu if t <= now - window]
        return bool(old and self.cpu) and self.cpu[-1][1] == old[-1][1]

    def cpu_share(self, window: float, now: float) -> float | None:
        """Fraction of one core used over the last `window` seconds (None without samples)."""
        recent = [(t, ticks) for t, ticks in self.cpu if t >= now - window]
        if len(recent) < 2 or recent[-1][0] <= recent[0][0]:
            return None
        return (recent[-1][1] - recent[0][1]) / CLOCK_TICKS / (recent[-1][0] - recent[0][0])

    def status(self) -> str:
        """Short form for the report: exit code or signal, or what it was when last seen."""
        if self.exit and self.exit.get("signal"):
            return f"signal {procs.signal_name(self.exit['signal'])}"
        if self.exit:
            return f"exit code {self.exit['code']}"
        if self.stopped:
            return "stopped (process state T)"
        return "no exit status (its wrapper was killed)" if self.vanished else "running until the job was stopped"

    def how(self, window: float | None = None, now: float | None = None) -> str:
        """What became of it, in words."""
        if self.exit and self.exit.get("signal"):
            return f"was killed by {procs.signal_name(self.exit['signal'])}"
        if self.exit:
            return f"exited with code {self.exit['code']}"
        if self.stopped:
            return ("was stopped (process state T) until its wrapper was killed" if self.gone else
                    "is stopped (process state T: a SIGSTOP or a debugger), so it cannot run")
        if self.vanished:
            return "disappeared: its wrapper was killed before recording how the script ended"
        share = self.cpu_share(window, now) if window else None
        return "is still running" + (f" ({100 * share:.1f}% of a core over the last {window:g} s)"
                                     if share is not None else "")


def read_events(path: str, offset: int) -> tuple[list[dict], int]:
    """(complete event dicts after `offset`, new offset) of one wrapper event file."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return [], offset
    complete = data[:data.rfind(b"\n") + 1]
    return [json.loads(line) for line in complete.splitlines() if line.strip()], offset + len(complete)


def apply_event(ranks: dict[str, Rank], key: str, node: str, event: dict) -> None:
    """Update `ranks` (events path -> Rank) with one wrapper event."""
    if event["event"] == "start":
        log = os.path.realpath(event["log"]) if event.get("log") else None
        # A remote rank's events come through a mirror (fleetbench.hosts.agent): `pid` is then
        # the mirror's, and the script's pid means nothing on this machine.
        child = None if "remote_pid" in event else event.get("child")
        ranks[key] = Rank(node=node, role=event["role"], rank=event["rank"], pid=event["pid"],
                         child=child, log=log)
    elif event["event"] == "exit" and key in ranks:
        ranks[key].exit = event
    elif event["event"] == "asked" and key in ranks and ranks[key].asked_t is None:
        ranks[key].asked_t = event["t"]


def sample(ranks: Iterable[Rank], now: float, table: dict[int, procs.Stat] | None = None) -> None:
    """Observe each running rank's script: its state always, its CPU ticks (with its children's)
    when a process table (one pass over /proc) is given. A rank whose wrapper no longer exists and
    has recorded no exit is marked gone (read its event file again before believing it vanished)."""
    for r in ranks:
        if r.exit:
            continue
        if not procs.alive(r.pid):
            r.gone, r.gone_t = True, r.gone_t or time.time()
            continue
        stat = ((table or {}).get(r.child) or procs.read_stat(r.child)) if r.child else None
        if stat is not None:
            r.state = stat.state
            if table is not None:
                r.cpu.append((now, procs.tree_ticks(table, r.child)))
