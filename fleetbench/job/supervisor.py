"""Supervising one job: start its Paddle launchers, watch its ranks, decide, stop it, report.

Paddle starts every rank in its own session (setsid), so a job is not one process group. Every
process of a job carries FLEETBENCH_JOB_ID in its environment instead; stopping the job signals
exactly the live processes that carry it. Each rank runs under fleetbench.job.rankwrap, whose
event files tell how each rank ended; fleetbench.job.verdict decides whom to blame.
"""
from __future__ import annotations

import dataclasses
import glob
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Sequence
from types import FrameType
from typing import Protocol, TextIO

from fleetbench.job import messages, procs, ranks, rankwrap, verdict
from fleetbench.job.failure import Outcome, RankReport
from fleetbench.measure import contract

STOP_GRACE_S = 3.0       # SIGTERM, then SIGKILL after this long
PS_SERVER_GRACE_S = 3.0  # processes still up this long after every worker finished: stop them
CPU_SAMPLE_S = 1.0       # how often ranks' CPU time is read (one pass over /proc)


@dataclasses.dataclass
class Limits:
    timeout: float = None   # wall-clock seconds for the whole job
    stall: float = None     # seconds without a progress line from any rank
    startup: float = None   # seconds until the first progress line (import, rendezvous); default: stall
    tail: int = 20          # log lines shown per rank


class Node(Protocol):
    """What the supervisor reads of a paddle_launch.NodeLaunch (which imports this module)."""
    cmd: list
    log_dir: str
    env: dict
    name: str


@dataclasses.dataclass
class Decision:
    status: str
    culprit: ranks.Rank = None
    detail: str = ""
    show: list = dataclasses.field(default_factory=list)  # other ranks whose logs the report shows
    launcher: Node = None  # a NodeLaunch whose launcher failed before any rank did: its log is shown
    evidence: str = ""     # what decided whom a failure blames (verdict.Blame.evidence)


class Supervisor:
    def __init__(self, nodes: Sequence[Node], limits: Limits, echo: TextIO | None = None, poll_s: float = 0.2,
                 job_id: str | None = None) -> None:
        self.nodes, self.limits, self.echo, self.poll_s = nodes, limits, echo, poll_s
        self.startup = limits.startup or limits.stall
        self.job_id = job_id or uuid.uuid4().hex[:12]
        self.ranks = {}      # event-file path -> Rank
        self.logs = {}       # log path -> LogTail
        self.offsets = {}    # event-file path -> bytes read
        self.procs = []
        self.interrupted = None
        self.progressed = False
        self.workers_done_t = self.cpu_sampled_t = self.effect_seen_t = None

    # -- observation
    def _scan(self, now: float) -> None:
        # Events and process states first, logs last: whatever a rank wrote before the exit or the
        # state a decision acts on is then read with it. Logs first lose a self-killed worker's last
        # line: it prints, dies and its wrapper records the exit between the two.
        self._read_all_events()
        self._sample(now)
        self._poll_logs(now)

    def _poll_logs(self, now: float) -> None:
        for node in self.nodes:
            for path in glob.glob(os.path.join(node.log_dir, "*log.*")):
                path = os.path.realpath(path)
                if ranks.RANK_LOG.match(os.path.basename(path)) and path not in self.logs:
                    self.logs[path] = ranks.LogTail(path, self.start_sizes.get(path, 0))
        for path, log in self.logs.items():
            lines = log.poll()
            if any(ranks.progress_step(line) is not None for line in lines):
                self.last_progress_t, self.progressed = now, True
            if self.echo and path == self._echo_path():
                for line in lines:
                    print(line, file=self.echo, flush=True)

    def _sample(self, now: float) -> None:
        table = None
        if self.cpu_sampled_t is None or now - self.cpu_sampled_t >= CPU_SAMPLE_S:
            table, self.cpu_sampled_t = procs.process_table(), now
        ranks.sample(self.ranks.values(), now, table)
        for path, r in list(self.ranks.items()):
            if r.vanished:  # the exit event is written just before the wrapper exits: read again
                self._read_events(r.node, path)

    def _read_all_events(self) -> None:
        for node in self.nodes:
            for path in glob.glob(rankwrap.events_path(node.log_dir, self.job_id, "*")):
                self._read_events(node.name, path)

    def _read_events(self, node_name: str, path: str) -> None:
        events, self.offsets[path] = ranks.read_events(path, self.offsets.get(path, 0))
        for event in events:
            ranks.apply_event(self.ranks, path, node_name, event)

    def _echo_path(self) -> str:
        workers = sorted((r.rank, r.log) for r in self.ranks.values() if r.role == "worker" and r.log)
        return workers[0][1] if workers else os.path.join(self.nodes[0].log_dir, "workerlog.0")

    def _log_of(self, rank: ranks.Rank | None) -> ranks.LogTail | None:
        return self.logs.get(rank.log) if rank is not None and rank.log else None

    def _tail(self, rank: ranks.Rank | None, n: int | None = None) -> list[str]:
        log = self._log_of(rank)
        return log.tail(n or self.limits.tail) if log else []

    def _recent(self, rank: ranks.Rank | None) -> list[str]:
        """All the lines kept of a rank's log (a timeout message can be far from its end)."""
        return self._tail(rank, ranks.KEPT_LINES)

    def _steps(self, rank: ranks.Rank) -> int:
        log = self._log_of(rank)
        return log.steps() if log else 0

    # -- decisions
    def _decide(self, now: float) -> Decision | None:
        """None while the job should go on, else a Decision."""
        if self.interrupted:
            return Decision("interrupted", detail=f"interrupted by {procs.signal_name(self.interrupted)}")
        if verdict.any_failure(self.ranks.values()) and not verdict.workers_done_then_stopped(self.ranks.values()):
            return self._blame_failure(now)
        codes = [p.poll() for p in self.procs]
        bad = [(n, c) for n, c in zip(self.nodes, codes) if c not in (None, 0)]
        if bad:
            node, code = bad[0]
            return Decision("failed", detail=f"the launcher on {node.name} exited with code {code} "
                                             f"(see {node.log_dir}/launcher.log)", launcher=node)
        if all(c == 0 for c in codes):
            return Decision("ok", detail="all ranks finished")
        workers = [r for r in self.ranks.values() if r.role == "worker"]
        if workers and all(r.exit for r in workers):  # PS: servers may wait forever for more work
            self.workers_done_t = self.workers_done_t or now
            if now - self.workers_done_t > PS_SERVER_GRACE_S:
                return Decision("ok", detail=f"all workers finished; stopped what still ran "
                                             f"{PS_SERVER_GRACE_S:g} s later")
            return None
        return self._watchdog(now)

    def _watchdog(self, now: float) -> Decision | None:
        lim = self.limits
        if lim.timeout and now - self.start_t > lim.timeout:
            return self._blame_hang(now, "timeout", f"timeout: still running after {lim.timeout:g} s")
        if self.progressed and lim.stall and now - self.last_progress_t > lim.stall:
            return self._blame_hang(now, "stalled", f"stalled: no progress line from any rank for {lim.stall:g} s")
        if not self.progressed and self.startup and now - self.start_t > self.startup:
            return self._blame_hang(now, "stalled", f"stalled: no progress line from any rank within "
                                                    f"{self.startup:g} s of the start")
        return None

    def _idle_window(self, now: float) -> float:
        """Seconds since the last progress line anywhere: the window over which a hung rank
        has done nothing."""
        return max(0.0, now - self.last_progress_t)

    def _blame_hang(self, now: float, status: str, detail: str) -> Decision:
        running = [r for r in self.ranks.values() if not r.exit and not r.vanished]
        culprit, reason = verdict.most_suspect(running, self._steps, self._idle_window(now), now)
        if culprit is not None:
            log = self._log_of(culprit)
            last = log.last_progress[2] if log and log.last_progress else "no progress line yet"
            detail = f"{detail}; {reason}: {culprit.label()} (last: {last})"
        others = [r for r in self.ranks.values() if r is not culprit]
        return Decision(status, culprit, detail, sorted(others, key=lambda r: (r.role, r.rank)))

    def _cause_seen(self, now: float) -> bool:
        """False while every failure seen is an effect (a rank asked to stop, or whose wrapper was
        killed) and the failure that caused it may still be on its way (verdict.cause_pending)."""
        if not verdict.cause_pending(self.ranks.values()):
            return True
        # On one node the cause's exit event is written before its launcher can see it exit and
        # stop the others, so it is in its file now even if this scan read that file too early.
        self._read_all_events()
        if not verdict.cause_pending(self.ranks.values()):
            return True
        # A remote node's events come through the agent's mirror, possibly after its peers'.
        self.effect_seen_t = self.effect_seen_t if self.effect_seen_t is not None else now
        return now - self.effect_seen_t >= verdict.SETTLE_S

    def _blame_failure(self, now: float) -> Decision | None:
        if not self._cause_seen(now):
            return None
        blamed = verdict.blame_failure(list(self.ranks.values()), self._recent, self._steps,
                                       self._idle_window(now), now)
        if blamed is None:
            return None  # stronger evidence, or the other victims, may still arrive
        culprit, victim = blamed.culprit, blamed.victim
        why = f" ({blamed.reason})" if blamed.reason and not (culprit.stopped or culprit.vanished) else ""
        detail = f"{culprit.label()} {culprit.how(self._idle_window(now), now)}{why}"
        if victim is not None:
            detail += (f"; {victim.label()} {victim.how()} {verdict.victim_how(victim, self._recent(victim))} "
                       f"(a victim, not the cause)")
        return Decision("failed", culprit, detail, [victim] if victim else [], evidence=blamed.evidence)

    # -- actions
    def _start(self) -> None:
        me = procs.token()
        for node in self.nodes:
            said = contract.RankContract(job_id=self.job_id, supervisor=me, stopped_file=self._stopped_file(node),
                                         events_dir=node.log_dir)
            env = dict(node.env, **said.to_env())
            with open(os.path.join(node.log_dir, "launcher.log"), "ab") as out:
                # The launcher dies with us; the rank wrappers then stop the rest of the job.
                self.procs.append(subprocess.Popen(node.cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                                   preexec_fn=procs.die_with_parent))

    def _stopped_file(self, node: Node) -> str:
        return os.path.join(node.log_dir, f".fbstopped-{self.job_id}")

    def _mark_stopped(self) -> None:
        """Before the stop: a rank that still finishes must not store a success (results.emit)."""
        for node in self.nodes:
            with open(self._stopped_file(node), "w"):
                pass

    def _job_processes(self) -> set[int]:
        """Live processes of this job: those carrying its id, and our launchers."""
        return set(procs.job_pids(self.job_id)) | {p.pid for p in self.procs if p.poll() is None}

    def _stop(self) -> list[int]:
        """Stop every process of this job (procs.terminate). Returns the pids still alive."""
        left = procs.terminate(self._job_processes, STOP_GRACE_S, poll=self._reap)
        self._reap()
        return left

    def _reap(self) -> None:
        for p in self.procs:
            p.poll()
        procs.reap_children(exclude={p.pid for p in self.procs})

    def _on_signal(self, sig: int, _frame: FrameType | None) -> None:
        self.interrupted = sig

    def run(self) -> Outcome:
        procs.become_subreaper()  # orphaned ranks (their launcher gone) become ours to reap
        self.start_t = self.last_progress_t = time.monotonic()
        self.start_sizes = {}
        for node in self.nodes:
            os.makedirs(node.log_dir, exist_ok=True)
            for path in glob.glob(os.path.join(node.log_dir, "*log.*")):
                self.start_sizes[os.path.realpath(path)] = os.path.getsize(path)  # a reused log dir: read only new lines
        old_handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            self._start()
            decision = None
            while decision is None:
                time.sleep(self.poll_s)
                self._scan(time.monotonic())
                decision = self._decide(time.monotonic())
            return self._finish(decision)
        finally:
            for s, h in old_handlers.items():
                signal.signal(s, h)

    def _finish(self, decision: Decision) -> Outcome:
        culprit = self._report(decision.culprit) if decision.culprit else None
        others = [self._report(r) for r in decision.show]  # before our stopping adds its noise
        stopping = self._job_processes()
        if decision.status != "ok":
            self._mark_stopped()
        left = self._stop() if stopping else []
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._scan(time.monotonic())  # the logs are complete now
        out = Outcome(status=decision.status, elapsed_s=time.monotonic() - self.start_t, detail=decision.detail,
                      culprit=culprit, others=others, stopped=len(stopping), left_running=left,
                      evidence=decision.evidence)
        if out.status == "ok" and any(p.returncode not in (0, None) for p in self.procs) and not self.workers_done_t:
            out.status, out.detail = "failed", "a launcher exited non-zero after all ranks finished"
        # before any progress line, a failure that names gloo (or a stuck PS start-up barrier) is the
        # start-up's, not the benchmark's
        out.start_up = (out.status == "failed" and not self.progressed and decision.culprit is not None
                        and any(messages.start_up_failure(line) for line in self._recent(decision.culprit)))
        if culprit is None and out.status == "failed":
            out.launcher_log = os.path.join((decision.launcher or self.nodes[0]).log_dir, "launcher.log")
            out.launcher_tail = _last_lines(out.launcher_log, self.limits.tail)
        return out

    def _report(self, rank: ranks.Rank) -> RankReport:
        empty = bool(rank.log) and os.path.isfile(rank.log) and os.path.getsize(rank.log) == 0
        return RankReport(label=rank.label(), role=rank.role, rank=rank.rank, node=rank.node,
                          status=rank.status(), log=rank.log, tail=self._tail(rank), log_empty=empty)


def _last_lines(path: str, n: int) -> list[str]:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace").splitlines()[-n:]
    except OSError:
        return []
