"""The supervisor's parameter-server rule, on a real `fleetbench launch` of Paddle's launcher: servers
still up PS_SERVER_GRACE_S after every worker finished are stopped, and the run counts as a success.

Paddle's new launcher waits for every process of a PS job, and a server nobody tells to stop
serves forever; fleetbench's own PS driver stops its servers, so this is the safety net for any
other PS script. The stand-in job below (no Paddle training: the rule is the supervisor's, not
Paddle's) has servers that never end by themselves, one of them deaf to SIGTERM.
"""
import contextlib
import os
import signal
import subprocess
import uuid

from util import PYTHON, env, records

from fleetbench.job import procs, supervisor
from fleetbench.job.ranks import read_events

STANDIN_PS = """\
import os, signal, sys, time
from fleetbench.job import rankwrap
from fleetbench.machine import stamp
from fleetbench.measure import contract
from fleetbench.store import results
role, rank = rankwrap.rank_identity(os.environ)
if role == "server":
    if rank == 1:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as Paddle 3.3.1's ranks do for a while
    print(f"server {rank} serving", flush=True)
    time.sleep(600)  # nobody tells it to stop; the test's --timeout ends the job long before
else:
    print("step 1/1 loss 1.0", flush=True)
    record = stamp.record(contract.RunIdentity(benchmark="standin", mode="ps", method="async",
                                               preset="tiny", config={}, nodes=1, devices_per_node=1,
                                               world_size=1), {"throughput": 1.0, "unit": "examples/s"})
    results.emit(sys.argv[sys.argv.index("--results") + 1], record)
"""


def launch(tmp_path, *flags):
    """`fleetbench launch` the stand-in job; returns (completed process, the tag its processes carry)."""
    script, job_id = tmp_path / "standin_ps.py", uuid.uuid4().hex
    script.write_text(STANDIN_PS)
    cmd = [PYTHON, "-m", "fleetbench", "launch", "--quiet", "--log_dir", str(tmp_path / "log"), *flags,
           str(script), "--results", str(tmp_path / "runs.jsonl")]
    try:
        return subprocess.run(cmd, cwd=tmp_path, env=env(FLEETBENCH_TEST_JOB=job_id), capture_output=True,
                              text=True, timeout=300), job_id
    except subprocess.TimeoutExpired:
        for pid in procs.job_pids(job_id, variable="FLEETBENCH_TEST_JOB"):  # every session of the job
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        raise


def rank_events(log_dir):
    """{(role, rank): [events]} from the rank wrappers' event files."""
    found = {}
    for path in log_dir.glob(".fbrank-*"):
        events, _ = read_events(path, 0)
        found[(events[0]["role"], events[0]["rank"])] = events
    return found


def test_ps_servers_still_up_after_the_workers_finish_are_stopped_and_the_run_is_a_success(tmp_path):
    p, job_id = launch(tmp_path, "--server_num", "2", "--trainer_num", "1", "--timeout", "120")
    assert p.returncode == 0, p.stderr
    assert (f"all workers finished; stopped what still ran {supervisor.PS_SERVER_GRACE_S:g} s later" in p.stderr
            and "process(es) of this job" in p.stderr), p.stderr
    # the worker's record stands as the run's result, and nothing else was stored
    [rec] = records(tmp_path / "runs.jsonl")
    assert rec["benchmark"] == "standin" and rec["error"] is None and rec["metrics"]["throughput"] == 1.0
    assert "not stored" not in (tmp_path / "log" / "workerlog.0").read_text()
    # no process of the job is left, in any session
    assert procs.job_pids(job_id, variable="FLEETBENCH_TEST_JOB") == []
    events = rank_events(tmp_path / "log")
    assert sorted(events) == [("server", 0), ("server", 1), ("worker", 0)]
    worker_exit = events[("worker", 0)][-1]
    assert worker_exit["event"] == "exit" and worker_exit["code"] == 0
    # server 0 was stopped by the supervisor's SIGTERM, only after the grace (a lower bound the
    # supervisor keeps by construction: load can only lengthen it)
    stopped = events[("server", 0)][-1]
    assert stopped["event"] == "exit" and stopped["signal"] == signal.SIGTERM and stopped["asked_to_stop"]
    assert stopped["t"] - worker_exit["t"] >= supervisor.PS_SERVER_GRACE_S
    # server 1 ignored SIGTERM: it was killed (its wrapper, killed with it, may not have written an exit)
    deaf = events[("server", 1)]
    assert all(e.get("signal") == signal.SIGKILL for e in deaf if e["event"] == "exit"), deaf
