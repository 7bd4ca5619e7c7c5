"""The parameter-server shape of a generated PaddleJob, run through the emulated training operator
(tests/k8s_emulator.py: the operator's environment rules, each pod at its own loopback address)."""
import pytest
from k8s_emulator import generate, import_logs, run_job

import util

pytestmark = [pytest.mark.job, *util.NEEDS_PS]  # its one job is a parameter-server job (Paddle 2.6.2)


def test_ps_job_runs_2_servers_and_4_trainers_and_brings_one_record_back(tmp_path):
    doc = generate(tmp_path, "ctr", "--preset", "tiny", "--servers-workers", "2/4")
    pods = run_job(doc, tmp_path)
    assert all(code == 0 for code, _, _ in pods.values()), {p: c for p, (c, _, _) in pods.items()}
    logs = {p: sorted(x.name for x in d.iterdir() if x.name.startswith(("serverlog", "workerlog")))
            for p, (_, _, d) in pods.items()}
    assert sum(x.startswith("serverlog") for v in logs.values() for x in v) == 2, logs
    assert sum(x.startswith("workerlog") for v in logs.values() for x in v) == 4, logs
    assert all(v == ["serverlog.0"] for p, v in logs.items() if "-master-" in p), logs
    assert all(v == ["workerlog.0"] for p, v in logs.items() if "-worker-" in p), logs
    with_record = [p for p, (_, out, _) in pods.items() if "FLEETBENCH_RESULT" in out]
    assert with_record == [f"{doc['metadata']['name']}-worker-0"]
    records = import_logs([tmp_path / p / "stdout" for p in pods], tmp_path / "store.jsonl")
    assert len(records) == 1
    runtime = records[0]["config"]["runtime"]
    assert (runtime["servers"], runtime["workers"]) == (2, 4)
