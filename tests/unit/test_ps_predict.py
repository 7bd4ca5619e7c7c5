"""Parameter-server prediction (issue 47, item 3): published synchronous PS tables through the
all-reduce's bus traffic, and this project's own async/GEO PS cells from their 1-node runs and the
link; every PS cell predicted or listed with why."""
import copy
import json
from pathlib import Path

import pytest

from fleetbench.perfmodel import validate

from fleetbench.perfmodel import cells, links, ps, published

ROOT = Path(__file__).resolve().parents[2] / "results"
OWN = ["kvm-2vcpu-paddle2.6.2-arch.jsonl", "kvm-2vcpu-paddle2.6.2-demo.jsonl", "kvm-2vcpu-paddle2.6.2-network.jsonl"]


def _load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_own_ctr_and_resnet18_ps_cells_within_15_percent_from_their_one_node_runs():
    records = [r for name in OWN for r in _load(ROOT / name)]
    rows = [r for r in validate.validate(records, {"nodes": 1}) if " PS" in r["cell"]]
    assert len(rows) == 11  # CTR and ResNet18, async and GEO, 1gbe / 10gbe / unshaped, two k_steps
    assert {r["benchmark"] for r in rows} == {"ctr", "resnet18"} and {r["method"] for r in rows} == {"async", "geo"}
    for row in rows:
        assert abs(row["throughput_error"]) <= 0.15, row["cell"]
        assert row["notes"][0].startswith("base: the 1-node run of 2 workers")


def _ps(nodes, step, method="async", rate=1.0, nbytes=None, k=10):
    metrics = {"step_time_ms": step, "throughput": 1000.0 / step, "unit": "examples/s"}
    if nbytes:
        metrics["grad_bytes"] = nbytes
    return {"mode": "ps", "benchmark": "m", "preset": "p", "method": method, "error": None, "nodes": nodes,
            "devices_per_node": 1, "world_size": 2, "metrics": metrics,
            "config": {"k_steps": k, "runtime": {"servers": nodes}},
            "network": {"profile": "slow", "rate_gbit": rate} if nodes > 1 else None,
            "source": None, "id": f"{nodes}{method}"}


@pytest.mark.parametrize("method, nbytes, expect", [
    ("async", None, 100.0),                     # no bytes: compute alone, said
    ("async", 1e6, 100.0),                      # 1 MB over 1 Gbit/s: hidden behind the step
    ("async", 50e6, 2 * 50e6 / 2 / (1e9 / 8 * 1448 / 1538) * 1e3),  # longer than a step: the wire
    ("geo", 50e6, 100.0),                       # GEO sends the change once every 10 steps: hidden
])
def test_the_wire_shows_only_when_it_is_longer_than_a_step(method, nbytes, expect):
    (row,) = ps.predict([_ps(1, 100.0, method)], [_ps(2, 120.0, method, nbytes=nbytes)])
    assert row["predicted_step_ms"] == pytest.approx(expect, rel=1e-6)
    assert ("wire not priced" in " ".join(row["notes"])) == (nbytes is None)


def test_a_ps_cell_without_a_one_node_run_says_why():
    (row,) = ps.predict([], [_ps(2, 120.0)])
    assert row["predicted_step_ms"] is None and "no fitted 1-node run" in row["not_predicted"]


def test_published_synchronous_ps_cells_are_all_predicted():
    records = _load(ROOT / "reference" / "ddl-benchmarks-2020-05-29.jsonl")
    done = published.complete(next(r for r in records if r["method"] == "WFBP-PS" and r["world_size"] == 8))
    assert done["mode"] == "collective" and done["method"] == "wfbp-ps"
    assert done["metrics"]["comm_buckets_per_step"] == done["metrics"]["grad_tensors"]  # one call a tensor
    rows = validate.validate(published.adopt(records, True), {"nodes": 1})
    ps = [r for r in rows if r["method"].endswith("-ps")]
    assert len(ps) == 81 and all(r.get("throughput_error") is not None for r in ps)
    within = {m: sum(abs(r["throughput_error"]) <= 0.15 for r in ps if r["method"] == m)
              for m in ("bsp-ps", "wfbp-ps", "bytescheduler-ps")}
    # 66 of 81 (64 when the servers shared the workers' nodes): BERT-Base's 100GbE cells still miss
    assert within == {"bsp-ps": 22, "wfbp-ps": 24, "bytescheduler-ps": 20}
    untouched = copy.deepcopy(records[0])
    assert published.complete(untouched)["mode"] == records[0]["mode"]


def test_published_ps_servers_on_their_own_hosts_carry_s_a_step_at_any_size():
    # ddl-benchmarks' byteps/launch.sh starts its servers on hosts of their own (gpu9 on): a worker
    # node pushes and pulls S whatever the nodes, so the ring's 2(n-1)/n S goes at 2(n-1)/n the rate
    share, note = links.servers_apart((0.5, "tcp"), 32)
    assert share == pytest.approx(0.5 * 2 * 31 / 32) and "hosts of their own" in note
    assert links.servers_apart((0.5, "tcp"), 1)[0] == 0.5
    records = _load(ROOT / "reference" / "ddl-benchmarks-2020-05-29.jsonl")
    rows = validate.validate(published.adopt(records, True), {"nodes": 1})
    steps = {r["nodes"]: r["predicted_step_ms"] for r in rows
             if r["method"] == "bsp-ps" and r["benchmark"] == "bert_large" and r["network"] == "10gbe"}
    # the table's own BSP-PS steps are flat from 2 to 8 nodes (2256, 2161, 2170 ms); so is the model
    assert steps[8] == pytest.approx(steps[2], rel=0.03)


def _ps_breakdown(steps, busy):
    rows = [{"step": s, "reader": 0.1, "pull": 0.3 * s, "compute": 0.5 * s, "push": 0.1 * s, "meter": 0.05,
             "client_cpu": 2.0, "other": 0.0, "covered": 1.0} for s in steps]
    return {"family": "ps", "units": "ms per measured step", "ranks": rows,
            "servers": [{"endpoint": f"h:{i}", "busy": b} for i, b in enumerate(busy)]}


def test_a_ps_cells_measured_parts_stand_beside_its_prediction():
    """PS records carrying their step breakdown (train/ps/marks.py): the row names the median
    worker's parts and the servers' busy share, and the collective model reads none of it."""
    fit, held = _ps(1, 100.0), _ps(2, 120.0, nbytes=1e6)
    held["metrics"]["step_breakdown"] = _ps_breakdown([110.0, 120.0, 130.0], [0.5, None, 0.3])
    (row,) = ps.predict([fit], [held])
    assert row["notes"][0].startswith("base:") and row["predicted_step_ms"] == pytest.approx(100.0)
    assert row["notes"][-1] == ("measured a step (median worker): compute 60.0, pull 36.0, push 12.0, reader 0.1, "
                                "client_cpu 2.0 ms; servers busy 0.40 cores")
    assert ps.measured_parts({"step_breakdown": {"ranks": [{"step": 1.0}]}}) is None  # a collective block
    assert cells.measured_parts(held["metrics"]) == dict.fromkeys(cells.MEASURED_PARTS)
    # and the whole validation, as explain runs it, takes such records
    assert any("measured a step" in n for r in validate.validate([fit, held], {"nodes": 1}) for n in r["notes"])
