"""The comm benchmark names what limited it on a real emulated link (root): all_reduce over two
10gbe nodes, 1-16 MiB. Which limit it names depends on the machine's load (a quiet 2-vCPU guest
gets ~90% of the link's raw TCP rate; a busy one far less); the test holds the naming to the rule
(fleetbench/comm/limits.py) on the figures the run itself stored, and to the report's table."""
import pytest
from util import emulated_sweep, limit_consistent, records

from fleetbench.comm import limits
from fleetbench.emulate import netem
from fleetbench.report import bandwidth

PROBLEM = netem.requirements_problem()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")


def test_an_all_reduce_over_10gbe_names_its_limit_by_its_own_figures(tmp_path, monkeypatch):
    cell = {"benchmark": "comm", "nodes": 2, "network": "10gbe",
            "set": {"op": "all_reduce", "min_bytes": 1 << 20, "max_bytes": 16 << 20, "factor": 4,
                    "warmup_iters": 2, "iters": 5, "tcp_probe_s": 1.0}}
    p, store, _ = emulated_sweep(tmp_path, monkeypatch, {"repeats": 1, "timeout": 300, "stall": 120, "cells": [cell]},
                                 "fbl")
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
