"""The fifth held-out set (fleetbench/perfmodel/sources/dlperf_bert.py): DLPerf's
BERT-Base pretraining tables of PaddlePaddle 1.8, TensorFlow 2.3 and MXNet 1.6. Every file loads with
the record count docs/validation/explain.md reports, is held out, and every multi-node cell is predicted from
its table's 1-node run; the reader takes DLPerf's headings. The accuracy is a reported number
(docs/validation/explain.md, *The fifth held-out set*), not asserted here."""
import json
import re

import pytest

from fleetbench.perfmodel import validate
from fleetbench.store import results
from fleetbench.perfmodel import published
from fleetbench.perfmodel.sources import dlperf_bert
from util import REPO

REFERENCE = REPO / "results" / "reference"
# file: (records, tables, multi-node cells predicted at --validate nodes=1)
FIFTH_SET = {"dlperf-paddle-bert": (38, 7, 14), "dlperf-tf2-bert": (66, 11, 22), "dlperf-mxnet-bert": (36, 6, 12)}


def _load(name: str) -> list[dict]:
    return [json.loads(line) for line in (REFERENCE / f"{name}.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("name", sorted(FIFTH_SET))
def test_each_file_loads_is_held_out_new_and_every_multi_node_cell_is_predicted(name):
    records = _load(name)
    count, tables, multi_node = FIFTH_SET[name]
    assert len(records) == count
    assert len({r["config"]["variant"] for r in records}) == tables
    for record in records:
        results.validate(record, name)
        source, config = record["source"], record["config"]
        assert source["name"] == name and name in validate.FITTED_TABLES  # the ranges' calibration set (manifest role fit)
        assert source["url"] == dlperf_bert.SOURCES[name]["url"] and dlperf_bert.COMMIT in source["url"]
        assert source["assumed"] and source["derived"]
        assert (config["model"], config["seq_len"], record["metrics"]["unit"]) == ("BERT-Base", 128, "sequences/s")
        assert (record["network"] is None) == (record["nodes"] == 1)
    rows = validate.validate(published.adopt(records, True), {"nodes": 1})
    assert len(rows) == multi_node
    assert all(r.get("throughput_error") is not None for r in rows)  # none "not predicted"
    assert all(r["nodes"] > 1 for r in rows)


def test_no_table_of_the_fifth_set_was_in_an_earlier_set():
    earlier = {json.loads(line)["source"]["url"] for path in REFERENCE.glob("*.jsonl")
               if path.stem not in FIFTH_SET for line in path.read_text().splitlines()}
    assert not {s["url"] for s in dlperf_bert.SOURCES.values()} & earlier


def test_reader_takes_the_batch_from_any_heading_case_and_the_precision_from_fp16_or_fp32():
    text = "\n".join([
        "## BERT-Base  FP16", "### batch size=64 & without xla", "",
        "| node_num | gpu_num | samples/s | speedup |", "| --- | --- | --- | --- |",
        "| 1 | 1 | 289.23 | 1 |", "| 2 | 16 | 1999.38 | 6.91 |", "",
        "### BERT-base FP32", "#### Batch size = 48 & W/O xla",
        "| node_num | gpu_num | samples/s | speedup |", "| --- | --- | --- | --- |", "| 4 | 32 | 4105.29 | 26.7 |"])
    one, two, fp32 = dlperf_bert.markdown_tables("dlperf-mxnet-bert", text)
    assert (one["world_size"], one["config"]["precision"], one["config"]["grad_dtype"]) == (1, "amp", "float16")
    assert (two["nodes"], two["devices_per_node"], two["config"]["batch_size"]) == (2, 8, 64)
    assert (fp32["nodes"], fp32["devices_per_node"], fp32["config"]["batch_size"]) == (4, 8, 48)
    assert fp32["config"]["precision"] == "fp32" and "grad_dtype" not in fp32["config"]
    assert two["network"]["rate_gbit"] == 100 and one["network"] is None
    with pytest.raises(SystemExit, match="Chinese"):
        dlperf_bert.markdown_tables("dlperf-mxnet-bert", text.replace("W/O xla", "W/O xla 混合"))
    assert not any(re.search(r"[\u3000-\u9fff]", (REFERENCE / f"{n}.jsonl").read_text(encoding="utf-8"))
                   for n in FIFTH_SET)
