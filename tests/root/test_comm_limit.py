"""The comm benchmark names what limited it on a real emulated link (root): all_reduce over two
10gbe nodes, 1-16 MiB. Which limit it names depends on the machine's load (a quiet 2-vCPU guest
gets ~90% of the link's raw TCP rate; a busy one far less); the test holds the naming to the rule
(fleetbench/comm/limits.py) on the figures the run itself stored, and to the report's table."""
import subprocess

import pytest
import yaml
from util import PYTHON, REPO, cluster_name, env, limit_consistent, records

from fleetbench.comm import limits
from fleetbench.emulate import netem
from fleetbench.report import bandwidth

PROBLEM = netem.requirements_problem()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")


def test_an_all_reduce_over_10gbe_names_its_limit_by_its_own_figures(tmp_path, monkeypatch):
    name = cluster_name("fbl")
    spec = tmp_path / "comm.yaml"
    cell = {"benchmark": "comm", "nodes": 2, "network": "10gbe",
            "set": {"op": "all_reduce", "min_bytes": 1 << 20, "max_bytes": 16 << 20, "factor": 4,
                    "warmup_iters": 2, "iters": 5, "tcp_probe_s": 1.0}}
    spec.write_text(yaml.safe_dump({"repeats": 1, "timeout": 300, "stall": 120, "cells": [cell]}))
    store, state_dir = tmp_path / "runs.jsonl", tmp_path / "state"
    try:
        p = subprocess.run([PYTHON, "-m", "fleetbench", "sweep", str(spec), "--results", str(store),
                            "--log-dir", str(tmp_path / "log"), "--cluster-name", name], cwd=REPO,
                           env=env(FLEETBENCH_CLUSTER_STATE_DIR=state_dir), capture_output=True, text=True,
                           timeout=600)
    finally:
        monkeypatch.setenv("FLEETBENCH_CLUSTER_STATE_DIR", str(state_dir))
        netem.down(name)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (rec,) = records(store)
    m = rec["metrics"]
    limit = limits.Limit(**m["limit"])
    assert limit.limit in limits.NAMES and limit_consistent(limit), limit
    # the figures it judged are the run's own: busbw, raw TCP (never above the shaped 1.25 GB/s), triad
    assert limit.busbw_GBps == m["busbw_GBps"] and limit.ceilings["link"] == m["link_tcp_GBps"] <= 1.25
    triad = (m["probe_triad_gbps_before"] + m["probe_triad_gbps_after"]) / 2
    share = min(1.0, rec["env"]["cpu"]["usable_threads"] / 2)  # both nodes' ranks share this machine
    assert limit.ceilings["cpu_reduction"] == pytest.approx(triad * share / 5.5)
    print(limit.text)
    assert f"# all_reduce: {limit.text}" in (tmp_path / "log").joinpath(*_rank0_log(tmp_path / "log")).read_text()
    # the report's table judges the same record alike
    (chart,) = bandwidth.plan([rec])
    assert bandwidth.table_markdown(chart).splitlines()[2].endswith(f"| {limit.text} |")


def _rank0_log(log_dir):
    (log,) = [p.relative_to(log_dir).parts for p in log_dir.rglob("workerlog.0") if "node0" in p.parts]
    return log
