"""The report's tables name only what differs between the rows shown, by plain names (issue 34)."""
from util import REPO

from fleetbench.measure import results
from fleetbench.report import tables


def markdown(records):
    planned = tables.plan(records)
    for table in planned:
        table["charts"] = []
    return tables.report_markdown("R", planned, {}, ["x"], len(records))


def test_a_failed_run_without_a_runtime_block_makes_no_column():
    # the demo of 2026-11-22: a failed geo run's record has no config.runtime; it made runtime.paddle,
    # runtime.servers, runtime.threads.omp_num_threads and runtime.workers columns of the whole CTR table
    text = markdown(results.load(REPO / "results/kvm-2vcpu-paddle2.6.2-demo-2026-11-22.jsonl"))
    ctr = text[text.index("### ctr [tiny]"):]
    assert "| Network | Method | 1 (1×1) worker | 2 (1×2) workers | 2 (2×1) workers |" in ctr
    assert "runtime." not in ctr
    (geo,) = [line for line in ctr.splitlines() if line.startswith("| — | geo (ps) |")]
    assert geo.endswith("+1 failed |  |")  # counted in its cell, not a row of its own


def record(threads, batch, i):
    return {"schema": 1, "id": f"{threads}-{batch}-{i}", "time": "2026-11-25T00:00:00+00:00", "git": None,
            "benchmark": "resnet50", "preset": "tiny", "mode": "collective", "method": "mgwfbp", "network": None,
            "nodes": 1, "devices_per_node": 2, "world_size": 2, "error": None,
            "config": {"batch_size": batch, "runtime": {"paddle": "2.6.2", "threads": {"omp_num_threads": threads}}},
            "metrics": {"throughput": 10.0 + i, "unit": "images/s"}, "env": {"paddle": {"version": "2.6.2"}}}


def test_columns_have_plain_names():
    text = markdown([record(t, b, i) for t in (1, 2) for b in (8,) for i in range(2)])
    assert "| Network | Method | threads | 2 devices |" in text
    text = markdown([record(1, b, i) for b in (8, 16) for i in range(2)])
    assert "| Network | Method | batch_size | 2 devices |" in text and "Paddle" not in text.split("| Network")[1][:40]
