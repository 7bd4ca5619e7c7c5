"""Whom a failed or hung job's report blames (fleetbench.job.verdict, on ranks as the
supervisor would have observed them), and the /proc facts it observes them with."""
import contextlib
import os
import signal
import subprocess
import time

from util import PYTHON, wait_for

from fleetbench.job import procs, verdict
from fleetbench.job.ranks import Rank

GLOO_TIMEOUT = "terminate called after throwing an instance of 'gloo::TimeoutException'"


def _rank(rank, state="S", code=None, t=0.0, ticks=None, asked=False):
    r = Rank(node="node0", role="worker", rank=rank, pid=1000 + rank, child=2000 + rank, log=f"workerlog.{rank}",
             state=state)
    if code is not None:
        r.exit = {"code": code, "signal": -code if code < 0 else None, "t": t, "asked_to_stop": asked}
    for when, count in ticks or ():
        r.cpu.append((when, count))
    return r


def test_a_failure_that_is_not_a_collective_timeout_is_its_own_cause():
    r0, r1 = _rank(0, code=3, t=10.0), _rank(1, state="T")
    assert verdict.blame_failure([r0, r1], lambda r: ["Traceback", "ValueError: x"], lambda r: 2, 30, 100.0) == (
        r0, None, None)


def test_a_collective_timeout_victim_points_at_the_rank_it_waited_for():
    now = time.time()
    victim, stopped, waiting = _rank(0, code=-6, t=now - 1), _rank(1, state="T"), _rank(2)
    tails = {0: ["step 4/9", GLOO_TIMEOUT], 1: ["step 4/9"], 2: ["step 4/9"]}
    blamed = verdict.blame_failure([victim, stopped, waiting], lambda r: tails[r.rank], lambda r: 4, 30, 100.0)
    assert blamed == (stopped, victim, "stopped (process state T)")  # a stopped rank: no need to wait
    # no stopped rank: let the other victims time out too before naming anyone
    assert verdict.blame_failure([victim, _rank(1), _rank(2)], lambda r: tails[r.rank], lambda r: 4, 30, 100.0) is None
    victim.exit["t"] = now - verdict.SETTLE_S - 1
    other_victim = _rank(2, code=-6, t=now)
    culprit, _, reason = verdict.blame_failure([victim, _rank(1), other_victim], lambda r: tails[0],
                                               lambda r: 4, 30, 100.0)
    assert culprit.rank == 1  # the one rank that did not time out
    # a timed-out rank with nobody else left is the cause after all
    assert verdict.blame_failure([victim], lambda r: tails[0], lambda r: 4, 30, 100.0) == (victim, None, None)


# what rank 0 logged when rank 1's wrapper was SIGKILLed under load (make test, 2 cores): it exited
# 1 on its own before Paddle's launcher stopped it, and was named as the cause
GLOO_PEER_LOST = ("RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:576] Read error "
                  "[127.0.0.1]:55954: Connection reset by peer")


def test_a_rank_that_lost_its_peer_points_at_the_rank_whose_wrapper_was_killed():
    now = time.time()
    victim, killed, other = _rank(0, code=1, t=now - 0.5), _rank(1), _rank(2)
    tails = {0: ["step 2/9", GLOO_PEER_LOST], 1: ["step 2/9"], 2: ["step 2/9"]}
    # the killed wrapper not seen yet: wait, rather than name the victim
    assert verdict.blame_failure([victim, killed, other], lambda r: tails[r.rank], lambda r: 2, 30, now) is None
    killed.gone = True  # its wrapper is gone with no exit recorded
    blamed = verdict.blame_failure([victim, killed, other], lambda r: tails[r.rank], lambda r: 2, 30, now)
    assert blamed == (killed, victim, "its wrapper was killed")
    assert verdict.victim_how(victim, tails[0]) == "when its connection to it was lost"
    # a rank further behind is not preferred to the one whose wrapper was killed
    blamed = verdict.blame_failure([victim, killed, other], lambda r: tails[r.rank], lambda r: {1: 2, 2: 1}.get(r.rank, 2),
                                   30, now)
    assert blamed[0] is killed
    # with nobody else left, the rank that lost its peer is the cause after all
    assert verdict.blame_failure([victim], lambda r: tails[0], lambda r: 2, 30, now) == (victim, None, None)


def test_a_stall_blames_stopped_then_furthest_behind_then_idle_then_the_lowest_rank():
    steps = {0: 5, 1: 5, 2: 4}
    busy, idle = [(60.0, 100), (100.0, 130)], [(60.0, 100), (100.0, 100)]
    culprit, reason = verdict.most_suspect([_rank(0), _rank(1, state="T"), _rank(2)], lambda r: steps[r.rank], 30, 100.0)
    assert (culprit.rank, reason) == (1, "stopped (process state T)")
    culprit, reason = verdict.most_suspect([_rank(0), _rank(1), _rank(2)], lambda r: steps[r.rank], 30, 100.0)
    assert (culprit.rank, reason) == (2, "furthest behind")
    ranks = [_rank(0, ticks=busy), _rank(1, ticks=idle)]
    culprit, reason = verdict.most_suspect(ranks, lambda r: 5, 30, 100.0)
    assert culprit.rank == 1 and reason.startswith("idle (no CPU time for 30 s")
    culprit, reason = verdict.most_suspect([_rank(0, ticks=busy), _rank(1, ticks=busy)], lambda r: 5, 30, 100.0)
    assert culprit.rank == 0 and "tied" in reason


def test_the_first_failure_is_the_earliest_exit_nobody_asked_for():
    asked = _rank(0, code=-15, t=1.0, asked=True)
    failed = _rank(1, code=1, t=2.0)
    assert verdict.first_failure([asked, failed]) is failed
    gone = _rank(2)
    gone.gone = True
    assert verdict.first_failure([asked, gone]) is gone and gone.status() == "no exit status (its wrapper was killed)"


# ---------------------------------------------------------------------------------------------
# /proc

def test_process_tokens_name_one_process_on_one_machine():
    me = procs.token()
    boot, pid, start = me.split(":")
    assert procs.token_alive(me) and int(pid) == os.getpid()
    assert not procs.token_alive(f"{boot}:{pid}:{int(start) + 1}")  # a reused pid is another process
    assert procs.token_alive(f"another-boot:{pid}:{start}")  # another machine's: cannot tell, alive
    done = subprocess.run([PYTHON, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert not procs.token_alive(f"{boot}:{done.stdout.strip()}:{start}")


def test_a_stopped_process_is_seen_as_stopped():
    child = subprocess.Popen([PYTHON, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        os.kill(child.pid, signal.SIGSTOP)
        assert wait_for(lambda: procs.read_stat(child.pid).state == "T", 10)
        os.kill(child.pid, signal.SIGCONT)
        assert wait_for(lambda: procs.read_stat(child.pid).state != "T", 10)
    finally:
        child.kill()
        child.wait()


def test_signals_reach_a_parent_before_its_child(monkeypatch):
    """procs.send signals parents first, so a rank wrapper has its stop request pending before its
    script can die and be reported as 'not asked' (the race is in send's docstring)."""
    parent = subprocess.Popen([PYTHON, "-c", "import subprocess, sys; "
                               "c = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'], "
                               "stdin=subprocess.PIPE); print(c.pid, flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert procs.depth(child) == procs.depth(parent.pid) + 1
        sent = []
        monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append(pid))
        procs.send([child, parent.pid], signal.SIGTERM)
        assert sent == [parent.pid, child]
        assert procs.depth(2 ** 22 + 7) == 0  # a pid that cannot exist: no ancestors
    finally:
        monkeypatch.undo()
        parent.kill()
        parent.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
