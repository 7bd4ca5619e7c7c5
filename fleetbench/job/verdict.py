"""Which rank to blame, from what the supervisor observed (pure: no processes, no files).

A failed job usually has one cause and several ranks that failed because of it. The cause is named
by evidence, strongest first, never by the order in which exits were read:
1. a rank whose wrapper vanished before anyone asked it to stop (killed from outside: no exit
   status), or whose script was killed by a signal nobody asked for and that printed no message of
   a lost peer (SIGKILL of the OOM killer or a user, SIGSEGV) is a cause for sure;
2. a rank that exited non-zero by itself, its log naming no lost peer and no timed-out collective
   (messages.py), failed of its own: a cause, unless evidence of (1) arrives within SETTLE_S;
3. a rank whose log says its peer was lost or its collective timed out (messages.VICTIM: which of
   gloo's messages it printed depends on whether it was reading or writing when the peer went) is
   a victim: the cause is a rank of (1) or (2), else the most suspect rank still running (a stopped
   one, then the one furthest behind); a victim is named only when nothing else can be the cause;
4. a rank asked to stop (Paddle's launcher stops the others once one fails; the wrapper records the
   request as it arrives) is an effect, never a cause while another can be.
A stalled (or timed-out) job blames the most suspect running rank: a stopped one; else the one
furthest behind (fewest steps logged; workers before servers, which log no steps); among equals an
idle one (no CPU time over the stall window); else the lowest rank.
Paddle ranks have background threads, so a rank blocked in Python still uses ~0.3% of a core
(measured here): only a stopped or truly blocked process is idle, and idleness only breaks ties.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable

from fleetbench.job import messages, procs
from fleetbench.job.ranks import Rank

# After a first failure that is not proof (an own error, a victim), let stronger evidence arrive
# (a killed peer's exit event, the other victims' time-outs); after a rank was asked to stop, let
# the failure that caused it arrive (cause_pending).
SETTLE_S = 2.0
MIN_IDLE_WINDOW_S = 5.0  # CPU time is read once a second: shorter windows tell nothing
KILLED, OWN, VICTIM, EFFECT = range(4)  # evidence levels, strongest first


@dataclasses.dataclass(frozen=True)
class Evidence:
    level: int      # KILLED, OWN, VICTIM or EFFECT
    says: str       # the evidence in words, for the report
    t: float        # when (the exit event's time; the observation's for a vanished wrapper)


def abnormal(rank: Rank) -> bool:
    return bool(rank.exit and rank.exit["code"] != 0)


def failed(rank: Rank) -> bool:
    return abnormal(rank) or rank.vanished


def evidence(rank: Rank, tail: list[str]) -> Evidence | None:
    """What this rank's end says of it, or None while it has not failed."""
    if rank.vanished:
        if rank.asked_t is not None:
            return Evidence(EFFECT, "its wrapper vanished after it was asked to stop", rank.asked_t)
        return Evidence(KILLED, "its wrapper vanished with no exit status before anyone asked it to stop",
                        rank.gone_t or time.time())
    if not abnormal(rank):
        return None
    t = rank.exit["t"]
    if rank.asked_to_stop:
        return Evidence(EFFECT, "it was asked to stop", t)
    found = messages.meanings(tail)  # one reading of the log serves every rule below
    said = next(((m, found[m]) for m in messages.VICTIM if m in found), None)
    if said is not None:
        return Evidence(VICTIM, f"its log says {said[0]}: {said[1][:160]}", t)
    if rank.exit.get("signal"):
        return Evidence(KILLED, f"killed by {procs.signal_name(rank.exit['signal'])}, which nobody asked for", t)
    own = next(((m, line) for m, line in found.items() if m not in messages.VICTIM), None)
    if own is not None:  # a failed rendezvous, out of memory: its own, and the log says which
        return Evidence(OWN, f"it exited with code {rank.exit['code']}; its log says {own[0]}: {own[1][:160]}", t)
    return Evidence(OWN, f"it exited with code {rank.exit['code']} and its log names no lost peer "
                         f"and no timed-out collective", t)


def any_failure(ranks: Iterable[Rank]) -> bool:
    return any(failed(r) for r in ranks)


def cause_pending(ranks: Iterable[Rank]) -> bool:
    """Some rank failed, but only as an effect: asked to stop (Paddle's launcher stops a job's
    other ranks once one fails, SIGKILLing a wrapper whose script outlives its SIGTERM). The
    failure that caused it may not have been read yet, and naming the stopped peer would blame a
    healthy rank (a PS worker exiting 1 after the workers' barrier, its peer SIGTERMed while it
    waited for the servers: the peer was named when its exit was read first)."""
    ranks = list(ranks)
    effects = [r for r in ranks if failed(r) and (r.asked_to_stop or (r.vanished and r.asked_t is not None))]
    return bool(effects) and len(effects) == sum(failed(r) for r in ranks)


def workers_done_then_stopped(ranks: Iterable[Rank]) -> bool:
    """Every worker finished with exit code 0 and every other abnormal end was asked for: how a
    parameter-server job ends under the legacy launcher, which terminates its servers once its
    workers exit (paddle/distributed/fleet/launch_utils.py). Not a failure."""
    ranks = list(ranks)
    workers = [r for r in ranks if r.role == "worker"]
    return bool(workers) and all(r.exit and r.exit["code"] == 0 for r in workers) \
        and all(r.asked_to_stop for r in ranks if abnormal(r)) \
        and not any(r.vanished and r.asked_t is None for r in ranks)


def victim_how(rank: Rank, tail: list[str]) -> str:
    """How a victim met its end, in words that follow the culprit's name."""
    found = messages.meanings(tail)
    return ("when its connection to it was lost" if messages.PEER_LOST in found
            else "after giving up waiting for it in a collective")


def idle(rank: Rank, window: float, now: float) -> bool:
    return bool(window) and window >= MIN_IDLE_WINDOW_S and rank.idle_for(window, now)


def suspicion(rank: Rank, steps: int, window: float, now: float) -> tuple:
    """Sort key, most suspect first (see the module docstring)."""
    clean_exit = bool(rank.exit) and not abnormal(rank)
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


@dataclasses.dataclass(frozen=True)
class Blame:
    culprit: Rank
    victim: Rank | None   # a rank that died of it, shown beside it
    reason: str | None    # why a running culprit was chosen (most_suspect), None for a failed one
    evidence: str         # the evidence that decided, in words


def blame_failure(ranks: list[Rank], tail_of: Callable[[Rank], list[str]], steps_of: Callable[[Rank], int],
                  window: float, now: float) -> Blame | None:
    """None while stronger evidence may still arrive, else the Blame (module docstring)."""
    seen = {id(r): e for r in ranks for e in [evidence(r, tail_of(r))] if e is not None}
    ranked = sorted((e.level, e.t, r.rank, r) for r in ranks for e in [seen.get(id(r))] if e is not None)
    if not ranked:
        return None
    level, first_t, _, best = ranked[0]
    victims = [r for lv, _, _, r in ranked if lv == VICTIM]
    victim = next((v for v in victims if v is not best), None)
    running = [r for r in ranks if id(r) not in seen and not r.exit]
    settling = time.time() - min(t for _, t, _, _ in ranked) < SETTLE_S
    if level == KILLED:
        return Blame(best, victim, None, seen[id(best)].says)
    if level == OWN:
        if settling and running:
            return None  # a killed peer's exit event may be on its way
        return Blame(best, victim, None, seen[id(best)].says)
    if level == VICTIM and running:
        if settling and not any(r.stopped for r in running):
            return None  # let the other victims time out too
        culprit, reason = most_suspect(running, steps_of, window, now)
        return Blame(culprit, best, reason, f"{best.label()}: {seen[id(best)].says}")
    if level == VICTIM:
        return Blame(best, None, None, f"{seen[id(best)].says}; no other rank can be the cause")
    return Blame(best, None, None, seen[id(best)].says)  # effects only, once cause_pending gave up
