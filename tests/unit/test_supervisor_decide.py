"""The supervisor's decisions (fleetbench/job/supervisor.py: _decide, _watchdog) from a state built
by hand: ranks as the wrapper's events leave them, launchers as exit codes, clocks as numbers. No
process starts; tests/job/test_launch.py and tests/job/test_supervisor.py run the real thing."""
import dataclasses
import signal

from fleetbench.job import supervisor
from fleetbench.job.ranks import Rank


@dataclasses.dataclass
class Node:
    name: str
    log_dir: str
    cmd: list = dataclasses.field(default_factory=list)
    env: dict = dataclasses.field(default_factory=dict)


class Launcher:
    """A launcher process as _decide reads it: its exit code, None while it runs."""

    def __init__(self, code=None):
        self.code = code

    def poll(self):
        return self.code


NOW = 1000.0


def _supervisor(codes=(None, None), ranks=(), timeout=None, stall=None, startup=None, progressed_at=None):
    nodes = [Node(f"node{i}", f"/nonexistent/node{i}") for i in range(len(codes))]
    sup = supervisor.Supervisor(nodes, supervisor.Limits(timeout=timeout, stall=stall, startup=startup))
    sup.procs = [Launcher(c) for c in codes]
    sup.ranks = {f"events.{i}": r for i, r in enumerate(ranks)}
    sup.start_t = NOW - 100
    sup.progressed = progressed_at is not None
    sup.last_progress_t = progressed_at if progressed_at is not None else sup.start_t
    return sup


def _worker(rank, code=None, t=NOW - 10, **exit_fields):
    exit = None if code is None else dict(code=code, t=t, **exit_fields)
    return Rank(node="node0", role="worker", rank=rank, pid=100 + rank, exit=exit)


def test_running_job_within_its_limits_goes_on():
    sup = _supervisor(ranks=[_worker(0), _worker(1)], timeout=200, stall=50, progressed_at=NOW - 10)
    assert sup._decide(NOW) is None


def test_every_launcher_done_is_ok():
    decision = _supervisor(codes=(0, 0), ranks=[_worker(0, 0), _worker(1, 0)])._decide(NOW)
    assert (decision.status, decision.detail) == ("ok", "all ranks finished")


def test_an_interrupt_comes_before_anything_else():
    sup = _supervisor(codes=(0, 0))
    sup.interrupted = signal.SIGINT
    decision = sup._decide(NOW)
    assert decision.status == "interrupted" and "SIGINT" in decision.detail


def test_a_failed_rank_is_blamed_by_name():
    decision = _supervisor(ranks=[_worker(0), _worker(1, 3)])._decide(NOW)
    assert decision.status == "failed" and decision.culprit.rank == 1
    assert decision.detail == "worker rank 1 exited with code 3"


def test_a_launcher_failing_before_any_rank_names_its_log():
    decision = _supervisor(codes=(None, 1))._decide(NOW)
    assert decision.status == "failed" and decision.launcher.name == "node1"
    assert "node1 exited with code 1 (see /nonexistent/node1/launcher.log)" in decision.detail


def test_ps_servers_are_stopped_only_after_the_grace_once_workers_finished():
    server = Rank(node="node0", role="server", rank=0, pid=99)
    sup = _supervisor(ranks=[server, _worker(0, 0), _worker(1, 0)])
    assert sup._decide(NOW) is None  # the grace starts now
    assert sup._decide(NOW + supervisor.PS_SERVER_GRACE_S / 2) is None
    decision = sup._decide(NOW + supervisor.PS_SERVER_GRACE_S + 0.1)
    assert decision.status == "ok" and "all workers finished" in decision.detail


def test_timeout_is_measured_from_the_start():
    assert _supervisor(timeout=100.5, ranks=[_worker(0)])._watchdog(NOW) is None
    decision = _supervisor(timeout=99.5, ranks=[_worker(0)])._watchdog(NOW)
    assert decision.status == "timeout" and decision.detail.startswith("timeout: still running after 99.5 s")
    assert decision.culprit.rank == 0


def test_stall_counts_from_the_last_progress_line_once_there_was_one():
    ranks = [_worker(0), _worker(1)]
    assert _supervisor(stall=30, ranks=ranks, progressed_at=NOW - 29)._watchdog(NOW) is None
    decision = _supervisor(stall=30, ranks=ranks, progressed_at=NOW - 31)._watchdog(NOW)
    assert decision.status == "stalled" and "no progress line from any rank for 30 s" in decision.detail


def test_before_the_first_progress_line_the_startup_limit_applies():
    ranks = [_worker(0)]
    # startup defaults to the stall limit
    assert _supervisor(stall=101, ranks=ranks)._watchdog(NOW) is None
    decision = _supervisor(stall=99, ranks=ranks)._watchdog(NOW)
    assert decision.status == "stalled" and "within 99 s of the start" in decision.detail
    assert _supervisor(stall=10, startup=150, ranks=ranks)._watchdog(NOW) is None


def test_a_hang_blames_the_stopped_rank():
    stopped = dataclasses.replace(_worker(1), state="T")
    decision = _supervisor(timeout=50, ranks=[_worker(0), stopped])._watchdog(NOW)
    assert decision.culprit is stopped and "stopped (process state T): worker rank 1" in decision.detail
    assert [r.rank for r in decision.show] == [0]


def _events(path, role, rank, **exit_fields):
    """Append a wrapper's start event, or its exit event when `exit_fields` are given."""
    import json
    event = dict(event="exit", **exit_fields) if exit_fields else dict(event="start", child=None, log=None)
    with open(path, "a") as f:
        f.write(json.dumps(dict(event, pid=100 + rank, role=role, rank=rank, t=NOW)) + "\n")


def test_the_failed_rank_is_named_not_the_peer_stopped_because_of_it_whatever_is_read_first(tmp_path):
    # A PS worker exits 1 after the workers' barrier; its launcher SIGTERMs worker 0, still waiting
    # for the servers. The supervisor's scan read worker 1's events file just before its exit was
    # written and worker 0's just after its (asked) exit: it has seen only the effect.
    sup = supervisor.Supervisor([Node("node0", str(tmp_path))], supervisor.Limits(), job_id="j")
    sup.procs, sup.start_t, sup.last_progress_t = [Launcher()], NOW - 100, NOW - 100
    w0, w1 = (supervisor.rankwrap.events_path(str(tmp_path), "j", pid) for pid in (100, 101))
    for path, rank in ((w0, 0), (w1, 1)):
        _events(path, "worker", rank)
        sup._read_events("node0", path)
    _events(w1, "worker", 1, code=1, signal=None, asked_to_stop=False)
    _events(w0, "worker", 0, code=-15, signal=15, asked_to_stop=True)
    sup._read_events("node0", w0)
    decision = sup._decide(NOW)
    assert decision.status == "failed" and decision.culprit.rank == 1, decision
    assert decision.detail == "worker rank 1 exited with code 1"


def test_a_rank_asked_to_stop_is_named_only_once_no_cause_came_within_the_settling_time():
    # a remote node's events come through a mirror: the cause may arrive after the effect
    stopped = _worker(0, code=-15, signal=15, asked_to_stop=True)
    sup = _supervisor(ranks=[stopped, _worker(1)])
    assert sup._decide(NOW) is None
    assert sup._decide(NOW + supervisor.verdict.SETTLE_S / 2) is None
    late = _worker(1, code=3)
    sup.ranks["events.1"] = late
    assert sup._decide(NOW + supervisor.verdict.SETTLE_S / 2).culprit is late
    alone = _supervisor(ranks=[_worker(0, code=-15, signal=15, asked_to_stop=True), _worker(1)])
    assert alone._decide(NOW) is None
    decision = alone._decide(NOW + supervisor.verdict.SETTLE_S + 0.1)
    assert decision.status == "failed" and decision.culprit.rank == 0 and "SIGTERM" in decision.detail


def test_a_line_a_rank_wrote_before_dying_is_read_with_its_exit(tmp_path, monkeypatch):
    # The race CI met (2026-11-29): a worker printed its last line and SIGKILLed itself, and its
    # wrapper recorded the exit, between one scan's reading of the logs and its look at the
    # processes. Here the rank does exactly that when the supervisor first asks whether it is alive.
    import json

    from fleetbench.job import ranks, rankwrap
    log, pid = tmp_path / "workerlog.1", 4242
    log.write_text("step 3\n")
    events = rankwrap.events_path(str(tmp_path), "job1", pid)
    start = dict(event="start", pid=pid, role="worker", rank=1, log=str(log), child=None, t=NOW)
    with open(events, "w") as f:
        f.write(json.dumps(start) + "\n")

    def dies_now(_pid):
        with open(log, "a") as f:
            f.write("fault: worker 1 injects kill at 4\n")
        with open(events, "a") as f:
            f.write(json.dumps(dict(start, event="exit", code=-9, signal=9, asked_to_stop=False)) + "\n")
        return False
    monkeypatch.setattr(ranks.procs, "alive", dies_now)
    sup = supervisor.Supervisor([Node("node0", str(tmp_path))], supervisor.Limits(), job_id="job1")
    sup.start_sizes, sup.start_t = {}, NOW - 100
    sup._scan(NOW)
    rank, = sup.ranks.values()
    assert rank.exit["signal"] == 9
    assert sup._tail(rank)[-1] == "fault: worker 1 injects kill at 4"
