"""Whom a failed or hung job's report blames (fleetbench.job.verdict, on ranks as the
supervisor would have observed them), and the /proc facts it observes them with."""
import contextlib
import os
import signal
import subprocess
import time

import pytest

from util import PYTHON, wait_for

from fleetbench.job import procs, verdict
from fleetbench.job.ranks import Rank

def _rank(rank, state="S", code=None, t=0.0, ticks=None, asked=False, role="worker"):
    r = Rank(node="node0", role=role, rank=rank, pid=1000 + rank, child=2000 + rank, log=f"workerlog.{rank}",
             state=state)
    if code is not None:
        r.exit = {"code": code, "signal": -code if code < 0 else None, "t": t, "asked_to_stop": asked}
    for when, count in ticks or ():
        r.cpu.append((when, count))
    return r


def _vanished(rank, asked_t=None, role="worker"):
    r = _rank(rank, role=role)
    r.gone, r.gone_t, r.asked_t = True, time.time(), asked_t
    return r


def _blame(ranks, tails, steps=lambda r: 2):
    return verdict.blame_failure(ranks, lambda r: tails.get(r.rank, ["step 2/9"]), steps, 30, time.time())


def test_a_failure_that_is_not_a_collective_timeout_is_its_own_cause():
    r0, r1 = _rank(0, code=3, t=10.0), _rank(1, state="T")
    blamed = _blame([r0, r1], {0: ["Traceback", "ValueError: x"]})
    assert (blamed.culprit, blamed.victim, blamed.reason) == (r0, None, None)
    assert blamed.evidence == "it exited with code 3 and its log names no lost peer and no timed-out collective"


def test_an_own_failure_waits_for_stronger_evidence_while_others_run():
    now = time.time()
    own, peer = _rank(0, code=1, t=now), _rank(1)
    assert _blame([own, peer], {0: ["SomeNewError: whatever gloo said"]}) is None  # rank 1 may have been killed
    peer.exit = {"code": -9, "signal": 9, "t": now + 0.1, "asked_to_stop": False}
    blamed = _blame([own, peer], {0: ["SomeNewError: whatever gloo said"]})
    assert blamed.culprit is peer and blamed.evidence == "killed by SIGKILL, which nobody asked for"


GLOO_TIMEOUT = "terminate called after throwing an instance of 'gloo::TimeoutException'"


def test_a_collective_timeout_victim_points_at_the_rank_it_waited_for():
    now = time.time()
    victim, stopped, waiting = _rank(0, code=-6, t=now - 1), _rank(1, state="T"), _rank(2)
    tails = {0: ["step 4/9", GLOO_TIMEOUT], 1: ["step 4/9"], 2: ["step 4/9"]}
    blamed = _blame([victim, stopped, waiting], tails, lambda r: 4)
    assert (blamed.culprit, blamed.victim, blamed.reason) == (stopped, victim, "stopped (process state T)")
    assert blamed.evidence.startswith("worker rank 0: its log says collective timeout")
    # no stopped rank: let the other victims time out too before naming anyone
    assert _blame([victim, _rank(1), _rank(2)], tails, lambda r: 4) is None
    victim.exit["t"] = now - verdict.SETTLE_S - 1
    other_victim = _rank(2, code=-6, t=now)
    blamed = _blame([victim, _rank(1), other_victim], {0: tails[0], 2: tails[0]}, lambda r: 4)
    assert blamed.culprit.rank == 1  # the one rank that did not time out
    # a timed-out rank with nobody else left is the cause after all, and the report says why
    blamed = _blame([victim], tails, lambda r: 4)
    assert blamed.culprit is victim and blamed.evidence.endswith("no other rank can be the cause")


# What a healthy rank 0 prints when rank 1 goes depends on whether it was reading or writing, and in
# which call: each of these has been seen or is written by gloo v0.0.3 / Paddle for a lost peer.
VICTIM_LINES = {
    "read reset": "RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:576] Read error "
                  "[127.0.0.1]:55954: Connection reset by peer",
    "writev broken pipe": "RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:383] writev "
                          "[127.0.0.1]:165: Broken pipe",
    "writev reset": "RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:383] writev "
                    "[127.0.0.1]:165: Connection reset by peer",
    "eof as TIMEOUT": "RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:585] TIMEOUT self_rank = 0 "
                      "pair_rank = 1 peer_str = [127.0.0.1]:40021",
    "reducer abort": "terminate called after throwing an instance of 'gloo::IoException'",
    "pairs closed": "RuntimeError: Application timeout caused pair closure",
}


@pytest.mark.parametrize("said", sorted(VICTIM_LINES))
@pytest.mark.parametrize("how", ["wrapper killed", "script SIGKILLed", "script SIGSEGV"])
@pytest.mark.parametrize("rank0_exit", ["before", "after"])  # rank 0's exit read before or after rank 1's end
@pytest.mark.parametrize("world", [2, 4])
def test_the_killed_rank_is_named_whatever_its_peer_printed_and_whatever_order(said, how, rank0_exit, world):
    now = time.time()
    t0, t1 = (now - 0.3, now) if rank0_exit == "before" else (now, now - 0.3)
    victim = _rank(0, code=-6 if said == "reducer abort" else 1, t=t0)
    if how == "wrapper killed":
        killed = _vanished(1)
    else:
        killed = _rank(1, code=-9 if how == "script SIGKILLed" else -11, t=t1)
    others = [_rank(r) for r in range(2, world)]
    tails = {0: ["step 2/9", "Traceback (most recent call last):", VICTIM_LINES[said]]}
    for ranks in ([victim, killed, *others], [killed, *others, victim]):
        blamed = _blame(ranks, tails)
        assert blamed.culprit is killed and blamed.victim is victim, (said, how, blamed)
        assert "nobody asked" in blamed.evidence or "before anyone asked" in blamed.evidence


def test_a_killed_rank_is_named_when_its_peer_printed_nothing():
    killed, quiet = _vanished(1), _rank(0)
    assert verdict.cause_pending([killed, quiet]) is False  # unasked: evidence, not an effect
    blamed = _blame([quiet, killed], {})
    assert blamed.culprit is killed and blamed.victim is None
    # rank 0 then stopped by its launcher: still rank 1
    asked = _rank(0, code=-15, t=time.time(), asked=True)
    assert _blame([asked, killed], {}).culprit is killed


def test_a_wrapper_that_vanished_after_being_asked_is_an_effect():
    now = time.time()
    cause = _rank(0, code=3, t=now - 5)
    effect = _vanished(1, asked_t=now - 4.5)  # Paddle's launcher SIGKILLs it 3 s after its SIGTERM
    assert verdict.cause_pending([effect]) is True
    blamed = _blame([effect, cause], {0: ["ValueError: x"]})
    assert blamed.culprit is cause
    assert not verdict.workers_done_then_stopped([_rank(0, code=0), _vanished(1)])
    assert verdict.workers_done_then_stopped([_rank(0, code=0), _vanished(1, asked_t=now, role="server")])


@pytest.mark.parametrize("role", ["server", "worker"])
def test_a_parameter_server_role_killed_mid_training_is_named(role):
    now = time.time()
    killed = _rank(1, role=role, code=-9, t=now)
    worker = _rank(0, code=1, t=now - 0.2)
    said = ("E1127 20:31:02.123 brpc_ps_client.cc:195] resquest cmd_id:2 failed, err:[E111]Fail to connect "
            "SocketId=8589934593@127.0.0.1:6071: Connection refused")
    blamed = _blame([worker, killed], {0: [said]})
    assert blamed.culprit is killed and blamed.victim is worker


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


def test_an_effect_is_never_the_cause_while_another_can_be():
    asked = _rank(0, code=-15, t=1.0, asked=True)
    failed = _rank(1, code=1, t=2.0)
    assert verdict.any_failure([asked]) and verdict.cause_pending([asked]) and not verdict.cause_pending([asked, failed])
    assert _blame([asked, failed], {1: ["ValueError"]}).culprit is failed
    gone = _vanished(2)
    assert gone.status() == "no exit status (its wrapper was killed)"
    assert _blame([asked, gone], {}).culprit is gone


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
