"""A rank killed from outside is named, whatever its healthy peer printed and whenever in a step
the kill landed (fleetbench.job.verdict's evidence rules, on real 2-rank gloo jobs).

Where the kill lands decides what rank 0 prints: inside the all-reduce it is mostly writing
(`writev ... Broken pipe` / `Connection reset by peer`), between all-reduces it is waiting to read
(gloo's `TIMEOUT ...` for the peer's orderly close, or `Read error ... reset by peer`); with the
DataParallel reducer it aborts (SIGABRT). Each case asserts only what must hold whatever rank 0
printed: rank 1 is named, with the evidence, and rank 0 is not the cause.
"""
import os
import signal
import subprocess
import uuid

import pytest
from test_launch import FAULT_SCRIPT, _head, _job_processes, _launch_cmd, _wait_for_rank
from util import CPU_RANKS, env, records

from fleetbench.job import messages

pytestmark = pytest.mark.job


@pytest.mark.parametrize("target, step_s, sync", [
    ("wrapper", "0.0", "allreduce"),   # the kill lands inside an all-reduce, mostly
    # these three on 2.6.2 only (build_neutral): both builds' gloo is Paddle's one fork
    # (job/messages.py), and the first and last two cases take each kind of kill on 3.x
    pytest.param("wrapper", "0.15", "allreduce", marks=pytest.mark.build_neutral),  # mostly between all-reduces: rank 0 waits to read
    pytest.param("script", "0.0", "allreduce", marks=pytest.mark.build_neutral),
    pytest.param("script", "0.15", "allreduce", marks=pytest.mark.build_neutral),
    ("wrapper", "0.05", "dp"),         # rank 0 aborts from the reducer's hook thread
    ("script", "0.05", "dp"),
])
def test_a_rank_killed_from_outside_is_named_whatever_its_peer_printed(tmp_path, target, step_s, sync):
    store, token = tmp_path / "runs.jsonl", uuid.uuid4().hex
    proc = subprocess.Popen(_launch_cmd(tmp_path, store, "--nproc_per_node", "2", "--timeout", "120"), cwd=tmp_path,
                            env=env(STEPS="100000", STEP_S=step_s, SYNC=sync, FAULT_TEST_TOKEN=token, **CPU_RANKS),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        start = _wait_for_rank(tmp_path / "log", rank=1)
        os.kill(start["pid"] if target == "wrapper" else start["child"], signal.SIGKILL)
        _, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    status, _, detail = _head(err)
    rank0 = (tmp_path / "log" / "workerlog.0").read_text().splitlines()
    said = messages.victim_line(rank0) or "(nothing of the table)"
    assert status == "FAILED" and detail.startswith("worker rank 1 "), f"rank 0 said: {said}\n{err}"
    assert "\n  evidence: " in err and "worker rank 0 " not in detail.split(";")[0], err
    if target == "wrapper":
        assert "worker rank 1 disappeared: its wrapper was killed" in detail
        assert "\n  evidence: its wrapper vanished with no exit status before anyone asked it to stop\n" in err, err
        assert "rank 1, role worker, node node0, no exit status (its wrapper was killed)" in err
    else:
        assert detail.startswith("worker rank 1 was killed by SIGKILL"), err
        assert "\n  evidence: killed by SIGKILL, which nobody asked for\n" in err, err
    (rec,) = records(store)
    assert rec["error"].startswith("launch: worker rank 1 ")
    assert _job_processes(token) == []
