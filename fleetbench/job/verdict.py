"""Which rank to blame, from what the supervisor observed (pure: no processes, no files).

A failed job usually has one cause and several ranks that failed because of it. The rules:
- The root cause of a failure is the earliest abnormal exit that nobody asked for (Paddle's
  launcher stops the other ranks after a failure; those exits are effects). While only effects
  are known, the supervisor reads every rank's events again and waits up to SETTLE_S for the
  cause (cause_pending): whichever exit it reads first, the failed rank is named, not its peer.
- Unless that rank died of a collective timeout (gloo gives up after ~30 s, compiled into Paddle
  2.6.2) or of its peer's connection lost (gloo's "Read error ... Connection reset by peer"): then
  it was a victim, of a rank that never arrived or went away, and the cause is among the ranks that
  did not die so. A rank that is stopped (SIGSTOP: state T), or whose wrapper was killed, is such a
  cause for sure.
- A stalled (or timed-out) job blames the most suspect running rank: a stopped one; else the one
  furthest behind (fewest steps logged; workers before servers, which log no steps); among equals
  an idle one (no CPU time over the stall window); else the lowest rank.
Paddle ranks have background threads, so a rank blocked in Python still uses ~0.3% of a core
(measured here): only a stopped or truly blocked process is idle, and idleness only breaks ties.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from fleetbench.job.ranks import COLLECTIVE_TIMEOUT, PEER_LOST, Rank

# After a first collective timeout, let the other victims time out too; after a rank asked to stop,
# let the failure that caused it arrive (cause_pending).
SETTLE_S = 2.0
MIN_IDLE_WINDOW_S = 5.0  # CPU time is read once a second: shorter windows tell nothing


def abnormal(rank: Rank) -> bool:
    return bool(rank.exit and rank.exit["code"] != 0)


def first_failure(ranks: Iterable[Rank]) -> Rank | None:
    """The rank whose failure came first, or None."""
    failed = sorted((r for r in ranks if abnormal(r)), key=lambda r: (r.asked_to_stop, r.exit["t"]))
    if failed and not failed[0].asked_to_stop:
        return failed[0]
    vanished = [r for r in ranks if r.vanished]
    return vanished[0] if vanished else (failed[0] if failed else None)


def cause_pending(ranks: Iterable[Rank]) -> bool:
    """Some rank failed, but only as an effect: asked to stop (Paddle's launcher stops a job's
    other ranks once one fails) or gone without an exit status (its wrapper killed). The failure
    that caused it may not have been read yet, and naming the stopped peer would blame a healthy
    rank (a PS worker exiting 1 after the workers' barrier, its peer SIGTERMed while it waited for
    the servers: the peer was named when its exit was read first)."""
    ranks = list(ranks)
    return any(abnormal(r) or r.vanished for r in ranks) and \
        not any(abnormal(r) and not r.asked_to_stop for r in ranks)


def workers_done_then_stopped(ranks: Iterable[Rank]) -> bool:
    """Every worker finished with exit code 0 and every other abnormal end was asked for: how a
    parameter-server job ends under the legacy launcher, which terminates its servers once its
    workers exit (paddle/distributed/fleet/launch_utils.py). Not a failure."""
    ranks = list(ranks)
    workers = [r for r in ranks if r.role == "worker"]
    return bool(workers) and all(r.exit and r.exit["code"] == 0 for r in workers) \
        and all(r.asked_to_stop for r in ranks if abnormal(r)) and not any(r.vanished for r in ranks)


def died_waiting(rank: Rank, tail: list[str]) -> bool:
    """Did this rank end because a collective timed out or its peer's connection was lost (a victim
    of another rank)?"""
    return abnormal(rank) and any(COLLECTIVE_TIMEOUT.search(line) or PEER_LOST.search(line) for line in tail)


def victim_how(rank: Rank, tail: list[str]) -> str:
    """How a victim (died_waiting) met its end, in words that follow the culprit's name."""
    lost = any(PEER_LOST.search(line) for line in tail)
    return "when its connection to it was lost" if lost else "after giving up waiting for it in a collective"


def idle(rank: Rank, window: float, now: float) -> bool:
    return bool(window) and window >= MIN_IDLE_WINDOW_S and rank.idle_for(window, now)


def suspicion(rank: Rank, steps: int, window: float, now: float) -> tuple:
    """Sort key, most suspect first (see the module docstring)."""
    clean_exit = bool(rank.exit) and not abnormal(rank)
    # a rank whose wrapper was killed is a cause for sure, as a stopped one is: no peer kills a wrapper
    return (not rank.stopped, not rank.vanished, clean_exit, rank.role != "worker", steps, not idle(rank, window, now), rank.rank)


def most_suspect(candidates: list[Rank], steps_of: Callable[[Rank], int], window: float,
                 now: float) -> tuple[Rank | None, str | None]:
    """(rank, reason) of the most suspect candidate, or (None, None)."""
    if not candidates:
        return None, None
    ordered = sorted(candidates, key=lambda r: suspicion(r, steps_of(r), window, now))
    first, runner = ordered[0], (ordered[1] if len(ordered) > 1 else None)
    if first.stopped:
        return first, "stopped (process state T)"
    if first.vanished:
        return first, "its wrapper was killed"
    if runner is None or (first.role, steps_of(first)) != (runner.role, steps_of(runner)):
        return first, "furthest behind"
    if idle(first, window, now) and not idle(runner, window, now):
        return first, f"idle (no CPU time for {window:g} s; others as far)"
    return first, "furthest behind (tied with others; the lowest rank is named)"


def blame_failure(ranks: list[Rank], tail_of: Callable[[Rank], list[str]], steps_of: Callable[[Rank], int],
                  window: float, now: float) -> tuple[Rank, Rank | None, str | None] | None:
    """None while waiting for other victims to settle, else (culprit, victim or None, reason)."""
    failed = first_failure(ranks)
    if not died_waiting(failed, tail_of(failed)):
        return failed, None, None
    others = [r for r in ranks if r is not failed and not died_waiting(r, tail_of(r))]
    if not others:
        return failed, None, None
    settling = time.time() - failed.exit["t"] < SETTLE_S
    if settling and not any(r.stopped or r.vanished for r in others):
        return None
    culprit, reason = most_suspect(others, steps_of, window, now)
    return culprit, failed, reason
