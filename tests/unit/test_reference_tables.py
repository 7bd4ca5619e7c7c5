"""The published tables added by issue 47 (held out: converted and reported before any constant was
changed) and the validation's totals: every cell loaded, predicted or listed with why; the figures
docs/validation/explain.md reports; the share of measured values inside their 80% range."""
import json
from pathlib import Path

import pytest

from fleetbench.perfmodel import validate

from fleetbench.perfmodel import published
from fleetbench.store import results

REFERENCE = Path(__file__).resolve().parents[2] / "results" / "reference"
# table: (records, held-out multi-node cells, predicted) as docs/validation/explain.md reports them
NEW = {"dle-tf1-bert": (60, 24, 24), "dle-tf2-bert": (56, 24, 24), "dle-pytorch-txl": (28, 6, 6)}


def _load(name: str) -> list[dict]:
    return [json.loads(line) for line in (REFERENCE / f"{name}.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("name", sorted(NEW))
def test_new_table_loads_and_every_cell_is_predicted_or_says_why(name):
    records = _load(name)
    assert len(records) == NEW[name][0]
    for record in records:
        results.validate(record, name)
        assert record["source"]["kind"] == "published" and record["source"]["url"].startswith("https://github.com/")
        assert record["source"]["name"] == name and name in validate.FITTED_TABLES  # the calibration set
    rows = validate.validate(published.adopt(records, True), {"nodes": 1})
    assert len(rows) == NEW[name][1]
    predicted = [r for r in rows if r.get("throughput_error") is not None]
    assert len(predicted) == NEW[name][2]
    for row in rows:
        assert row.get("throughput_error") is not None or row["not_predicted"]


def test_transformer_xl_is_predicted_from_its_configuration():
    rows = validate.validate(published.adopt(_load("dle-pytorch-txl"), True), {"nodes": 1})
    assert rows and all(r.get("not_predicted") is None for r in rows)
    assert all("config.model_def" in " ".join(r["notes"]) or r["predicted_step_ms"] for r in rows)


def _row(source, error, low, high, measured=100.0):
    return {"source": source, "throughput_error": error, "measured_throughput": measured,
            "predicted_throughput_range": [low, high]}


def test_totals_split_fitted_and_held_out_and_count_the_range():
    rows = [_row("dle-paddle-bert-dgxa100", 0.05, 90, 110), _row("dle-paddle-bert-dgxa100", 0.30, 120, 140),
            _row("a-table-not-in-the-manifest", -0.10, 85, 95), _row("a-table-not-in-the-manifest", 0.0, 95, 105),
            {"source": "a-table-not-in-the-manifest", "throughput_error": None, "not_predicted": "why"}]
    totals = {t["group"]: t for t in validate.totals(rows)}
    assert totals["fitted"] == {"group": "fitted", "cells": 2, "predicted": 2, "within": 1, "ranged": 2,
                                "in_range": 1}
    assert totals["held out"] == {"group": "held out", "cells": 3, "predicted": 2, "within": 2, "ranged": 2,
                                  "in_range": 1}
    assert validate.in_range(rows[-1]) is None


def test_a_work_with_only_its_one_node_run_gets_a_one_gpu_record_from_it():
    records = [r for r in _load("dle-pytorch-txl") if r["config"]["batch_size"] == 4]
    singles = published.single_from_node(records)
    assert len(singles) == 2  # the two precisions of the multi-node table's batch
    for single in singles:
        node = next(r for r in records if r["id"] == single["id"].removesuffix("-1gpu"))
        assert single["world_size"] == 1 and single["nodes"] == 1
        assert single["metrics"]["throughput"] == pytest.approx(node["metrics"]["throughput"] / 16)
        assert "1-node run's micro-step" in single["source"]["derived"][-1]
    assert published.single_from_node(_load("dle-tf1-bert")) == []  # every work has its 1-GPU run


def _all_rows() -> list[dict]:
    records = [r for path in sorted(REFERENCE.glob("*.jsonl")) for r in _load(path.stem)]
    return validate.validate(published.adopt(records, True), {"nodes": 1})


def test_the_calibration_is_what_its_folds_give_and_its_ranges_hold_70_to_90_percent_out_of_sample():
    from fleetbench.perfmodel import calibration, fit_calibration

    refit = fit_calibration.fit(REFERENCE)
    committed = json.loads(calibration.CALIBRATION.read_text())
    for kind in calibration.KINDS:
        assert refit["terms"][kind]["error"] == committed["terms"][kind]["error"]
        cov = refit["terms"][kind]["coverage"]  # each source's cells against the other sources' term
        assert 0.70 <= cov["inside"] / cov["cells"] <= 0.90, (kind, cov["inside"], cov["cells"])
    # from one node: 329 of 444 cross-validated (74%); anchored on <= 2 nodes: 162 of 227 (71%)
    assert [(refit["terms"][k]["coverage"]["inside"], refit["terms"][k]["coverage"]["cells"])
            for k in calibration.KINDS] == [(329, 444), (162, 227)]
    rows = _all_rows()
    totals = {t["group"]: t for t in validate.totals(rows)}
    # every table of records is a calibration table: 368 of 444 from their 1-node cells within 15%
    assert (totals["fitted"]["within"], totals["fitted"]["predicted"]) == (368, 444)


def test_the_80_percent_range_contains_the_inputs_range_and_grows_with_nodes():
    from fleetbench.perfmodel import ranges

    assert ranges.widened(100.0, 99.0, 101.0, 1) == pytest.approx((100 * (1 + ranges.MODEL_ERROR[0]),
                                                                   100 * (1 + ranges.MODEL_ERROR[1])))
    assert ranges.widened(100.0, 50.0, 150.0, 1) == (50.0, 150.0)
    narrow, wide = ranges.widened(100.0, 100.0, 100.0, 2), ranges.widened(100.0, 100.0, 100.0, 32)
    assert wide[0] < narrow[0] < 100.0 < narrow[1] < wide[1]


def test_a_method_slower_on_one_node_than_bsp_pays_its_own_cost_beside_the_wire():
    # ByteScheduler-A2A's ResNet-50 1-node runs are ~110 ms slower than bsp's, which hides nothing;
    # its multi-node steps stay near that (380-430 ms) over 10GbE, IB and 100GbE alike
    cells = [r for r in _all_rows() if r["method"].lower() == "bytescheduler-a2a" and r["benchmark"] == "resnet50"
             and r.get("throughput_error") is not None]
    assert len(cells) == 9
    assert all(any("of the method's own" in n for n in r["notes"]) for r in cells)
    # 7 of 9 within 15% (4 before the rule, 6 before NCCL's socket hop moved 100GbE 2x4 from +15.1% to
    # +14.9%): misses 8x4 over IB (+17%) and 100GbE (+16%)
    assert sum(abs(r["throughput_error"]) <= 0.15 for r in cells) == 7


def _from_one_gpu(names, node_prior: bool) -> list[dict]:
    records = [r for name in sorted(names) for r in _load(name)]
    return validate.validate(published.adopt(records, True), {"world_size": 1}, node_prior=node_prior)


def test_node_prior_is_what_its_tables_give_and_those_tables_are_no_longer_held_out():
    from fleetbench.perfmodel import node

    rows = _from_one_gpu(node.PRIOR_TABLES, node_prior=False)
    assert node.prior_fit(rows) == pytest.approx(node.PRIOR, abs=6e-5)
    assert node.PRIOR_TABLES <= validate.FITTED_TABLES
    third = {"dle-pytorch-efficientnet", "dle-tf2-efficientnet-v1", "dle-pytorch-gnmt", "dle-pytorch-transformer"}
    assert not third & node.PRIOR_TABLES and "dle-tf1-biobert" not in node.PRIOR_TABLES  # the prior never saw them


def test_a_prediction_from_one_gpu_alone_assumes_the_prior_says_so_and_widens_its_range():
    # the third set's TF1 ResNeXt101: 1-GPU rows and 8 and 16 GPUs a node, nothing else
    on = {r["cell"]: r for r in _from_one_gpu({"dle-tf1-resnext101"}, True) if r.get("predicted_step_ms")}
    off = {r["cell"]: r for r in _from_one_gpu({"dle-tf1-resnext101"}, False) if r.get("predicted_step_ms")}
    assert on.keys() == off.keys() and len(on) == 6
    for cell, row in on.items():
        assert any("node-sharing prior" in n for n in row["notes"])
        assert any("the prior off" in n for n in off[cell]["notes"])
        assert row["predicted_step_ms"] > off[cell]["predicted_step_ms"]  # sharing costs time
        (low, high), (low0, high0) = row["predicted_throughput_range"], off[cell]["predicted_throughput_range"]
        assert low / row["predicted_throughput"] < low0 / off[cell]["predicted_throughput"]
    sixteen = [c for c in on if c.endswith("1x16")]
    eight = [c for c in on if c.endswith("1x8")]
    ratio = lambda c: on[c]["predicted_step_ms"] / off[c]["predicted_step_ms"]  # noqa: E731
    assert sixteen and eight and min(map(ratio, sixteen)) > max(map(ratio, eight))  # grows with log2(d)


def test_a_work_with_its_one_node_run_does_not_assume_the_prior():
    rows = validate.validate(published.adopt(_load("dle-tf2-efficientnet-v1"), True), {"nodes": 1})
    assert rows and not any("node-sharing prior" in n for r in rows for n in r["notes"])


def test_a_one_gpu_record_derived_from_the_node_run_does_not_assume_the_prior_again():
    # BioBERT publishes no 1-GPU row: its 1-GPU records are its 1-node runs' micro-steps, which carry
    # the node's sharing already; from them alone (world_size=1) no prior is added on top
    rows = _from_one_gpu({"dle-tf1-biobert"}, True)
    predicted = [r for r in rows if r.get("predicted_step_ms")]
    assert predicted and all(published.from_node(s) for s in published.single_from_node(_load("dle-tf1-biobert")))
    assert not any("node-sharing prior" in n for r in predicted for n in r["notes"])


THIRD_SET = ("dle-pytorch-resnext101", "dle-pytorch-se-resnext101", "dle-pytorch-efficientnet", "dle-tf1-resnext101",
             "dle-tf1-se-resnext101", "dle-pytorch-transformer", "dle-pytorch-gnmt", "dle-tf2-efficientnet-v1",
             "dle-tf2-efficientnet-v2")


def test_the_third_sets_single_node_cells_from_one_gpu_as_the_prior_was_first_judged():
    # docs/validation/explain.md, "A node-sharing prior ...": the judged run (a published table pools with no
    # other, so its tables alone give the figures the run over every table prints): 62 of 88 within
    # 15% and 63 inside their 80% range (43 and 4 with the prior off); 69 (24) inside with the error term
    # calibrated out of sample (perfmodel/calibration.json)
    for prior, expected in ((True, (62, 69, 88)), (False, (43, 24, 88))):
        rows = [r for r in _from_one_gpu(THIRD_SET, prior) if r["nodes"] == 1 and r.get("throughput_error") is not None]
        within = sum(abs(r["throughput_error"]) <= validate.WITHIN for r in rows)
        assert (within, sum(bool(validate.in_range(r)) for r in rows), len(rows)) == expected
