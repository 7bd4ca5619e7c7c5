"""How a supervised job ended, the report a user reads, and the failure record that is stored.

Failures are results: a failed, stalled or timed-out run is appended to the results store with
`error` set and no metrics, so a sweep's table counts it and nothing is silently missing.
"""
from __future__ import annotations

import dataclasses

from fleetbench.machine import stamp
from fleetbench.measure.contract import RunIdentity
from fleetbench.store import results


@dataclasses.dataclass(kw_only=True)
class RankReport:
    """One rank as the report shows it, captured when the verdict was reached (before the
    supervisor's stopping adds its noise to the logs)."""
    label: str
    role: str
    rank: int
    node: str
    status: str          # "exit code 3", "signal SIGABRT", "stopped (process state T)", ...
    log: str = None
    tail: list = dataclasses.field(default_factory=list)
    log_empty: bool = False


@dataclasses.dataclass(kw_only=True)
class Outcome:
    status: str                 # ok | failed | stalled | timeout | interrupted
    elapsed_s: float
    detail: str = ""            # one line: what happened and whom it blames
    culprit: RankReport = None
    others: list = dataclasses.field(default_factory=list)  # other ranks worth showing
    launcher_log: str = None    # a launcher that failed before any rank: its own log
    launcher_tail: list = dataclasses.field(default_factory=list)
    stopped: int = 0            # processes the supervisor had to stop
    left_running: list = dataclasses.field(default_factory=list)
    start_up: bool = False      # failed starting up (Paddle's gloo rendezvous, or a PS worker's start-up
                                # barrier that never released), before any rank logged a step
    retried_after: str = None   # this is a second attempt: summary() of the first
    evidence: str = ""          # what decided whom a failure blames

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def report(self) -> str:
        """The multi-line report on stderr (the sweep indents all but the first line)."""
        lines = [f"fleetbench launch: {self.status.upper()} after {self.elapsed_s:.1f} s: {self.detail}"]
        if self.evidence:
            lines.append(f"  evidence: {self.evidence}")
        if self.retried_after:
            lines.append(f"  (second attempt; the first failed in Paddle's start-up: {self.retried_after})")
        c = self.culprit
        if c is not None:
            lines.append(f"  rank {c.rank}, role {c.role}, node {c.node}, {c.status}")
        if self.stopped:
            lines.append(f"  stopped {self.stopped} process(es) of this job")
        if self.left_running:
            lines.append(f"  WARNING: still running after SIGKILL: pids {self.left_running}")
        if c is not None:
            lines += _log_section(c, "")
        elif self.launcher_tail:
            lines.append(f"  --- last {len(self.launcher_tail)} lines of {self.launcher_log} ---")
            lines += [f"  | {line}" for line in self.launcher_tail]
        for other in self.others:
            lines += _log_section(other, f"{other.label} ({other.status}): ")
        return "\n".join(lines)

    def summary(self) -> str:
        """One line: what happened and the last log line of the rank to blame."""
        last = self.last_line()
        evidence = f" [evidence: {self.evidence}]" if self.evidence else ""
        return self.detail + evidence + (f"; last log line: {last[:300]}" if last else "")

    def last_line(self) -> str:
        tail = self.culprit.tail if self.culprit else self.launcher_tail
        return next((line.strip() for line in reversed(tail) if line.strip()), "")


def _log_section(rank: RankReport, heading: str) -> list[str]:
    if not rank.log:
        return [f"  --- {heading}no log file is known for this rank ---"]
    if rank.log_empty:
        return [f"  --- {heading}{rank.log} is empty: the rank logged nothing ---"]
    if not rank.tail:
        return [f"  --- {heading}nothing new in {rank.log} since the job started ---"]
    return [f"  --- {heading}last {len(rank.tail)} lines of {rank.log} ---"] + [f"  | {line}" for line in rank.tail]


def error_text(outcome: Outcome) -> str:
    """One line for the record's `error`: what happened and the last log line of that rank."""
    text = f"launch: {outcome.summary()}"
    return text + (f" (second attempt; first: {outcome.retried_after})" if outcome.retried_after else "")


def failure_record(identity: RunIdentity, outcome: Outcome) -> dict:
    return stamp.record(identity, None, error_text(outcome))


def store_failure(path: str, identity: RunIdentity, outcome: Outcome) -> None:
    """Append the failure record to `path`; results.StoreError (one line) when it cannot be stored."""
    try:
        results.append(path, failure_record(identity, outcome))
    except (OSError, results.RecordError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise results.StoreError(f"{path}: cannot store the failure record ({reason})") from None
