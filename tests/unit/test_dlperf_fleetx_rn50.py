"""DLPerf's and PaddleFleetX's ResNet-50 tables (fleetbench/perfmodel/sources/dlperf.py, paddle_fleetx.py): published
multi-node ResNet-50 tables from outside DeepLearningExamples. Every file loads with the record
count docs/validation/explain.md reports, is held out, and every multi-node cell is predicted from its
table's 1-node run; the parsers read the two table forms. The accuracy is a reported number
(docs/validation/explain.md, *The fourth held-out set*), not asserted here."""
import json
import re

import pytest

from fleetbench.perfmodel import validate
from fleetbench.store import results
from fleetbench.perfmodel import published
from fleetbench.perfmodel.sources import dlperf, paddle_fleetx
from util import REPO

REFERENCE = REPO / "results" / "reference"
# file: (records, multi-node cells predicted at --validate nodes=1)
FOURTH_SET = {"fleetx-paddle-rn50": (33, 22), "dlperf-paddle-rn50": (21, 8), "dlperf-pytorch-rn50": (20, 8),
              "dlperf-mxnet-rn50v1b": (12, 4), "dlperf-tf2-rn50": (22, 8)}


def _load(name: str) -> list[dict]:
    return [json.loads(line) for line in (REFERENCE / f"{name}.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("name", sorted(FOURTH_SET))
def test_each_published_reference_file_loads_is_held_out_and_every_multi_node_cell_is_predicted(name):
    records = _load(name)
    count, multi_node = FOURTH_SET[name]
    assert len(records) == count
    for record in records:
        results.validate(record, name)
        source = record["source"]
        assert source["name"] == name and name in validate.FITTED_TABLES  # the ranges' calibration set (manifest role fit)
        assert source["url"] == {**dlperf.SOURCES, **paddle_fleetx.SOURCES}[name]["url"]
        assert "DeepLearningExamples" not in source["url"]
        assert source["assumed"] and source["derived"] and record["config"]["variant"]
    rows = validate.validate(published.adopt(records, True), {"nodes": 1})
    assert len(rows) == multi_node
    assert all(r.get("throughput_error") is not None for r in rows)  # none "not predicted"
    assert all(r["nodes"] > 1 for r in rows)


def test_convert_markdown_tables_nest_list_item_headings_and_read_total_or_per_node_gpus():
    text = "\n".join([
        "## FP16 runs", "- ### host A", "  - #### batch_size = 64, loader=x", "",
        "| node_num | gpu_num | samples/s | speedup |", "| --- | --- | --- | --- |",
        "| 1 | 8 | 800.5 | 1 |", "| 2 | 16 | 1500 | 1.9 |", "",
        "## FP32 runs", "### batch size = 32",
        "| node_num | gpu_num_per_node | batch_size_per_device | samples/s(X) | speedup |",
        "| --- | --- | --- | --- | --- |", "| 4 | 8 | 32 | 900 | 1 |"])
    spec = dlperf.SOURCES["dlperf-pytorch-rn50"]
    amp1, amp2, fp32 = dlperf.markdown_tables("dlperf-pytorch-rn50", spec, text)
    assert (amp1["nodes"], amp1["devices_per_node"], amp1["config"]["precision"]) == (1, 8, "amp")
    assert (amp2["nodes"], amp2["devices_per_node"], amp2["config"]["batch_size"]) == (2, 8, 64)
    assert amp1["config"]["variant"] == "FP16 runs / host A / batch_size = 64, loader=x"
    assert (fp32["world_size"], fp32["config"]["precision"], fp32["metrics"]["throughput"]) == (32, "fp32", 900.0)
    assert amp2["network"]["rate_gbit"] == 100 and amp1["network"] is None


def test_convert_rst_tables_skip_empty_cells_and_read_the_shape_from_the_header():
    text = "\n".join(["intro", "===== ===== ===== =====", "b     1 x 1 1 x 8 2 x 8", "===== ===== ===== =====",
                      "32          100.5 201", "64    9     300   590.25", "===== ===== ===== ====="])
    spec = dict(paddle_fleetx.SOURCES["fleetx-paddle-rn50"], tables=[("fp32", "T")])
    records = paddle_fleetx.rst_tables("fleetx-paddle-rn50", spec, text)
    shapes = [(r["config"]["batch_size"], r["nodes"], r["devices_per_node"], r["metrics"]["throughput"])
              for r in records]
    assert shapes == [(32, 1, 8, 100.5), (32, 2, 8, 201.0), (64, 1, 1, 9.0), (64, 1, 8, 300.0),
                      (64, 2, 8, 590.25)]


def test_no_reference_record_carries_text_the_charts_font_cannot_draw():
    """Variants become chart labels, drawn in DejaVu Sans, which has no CJK glyphs: DLPerf's PyTorch
    README heads two tables '物理机环境内' (bare metal), which the converter puts in English."""
    for path in sorted(REFERENCE.glob("*.jsonl")):
        assert not re.search(r"[\u3000-\u9fff]", path.read_text(encoding="utf-8")), path.name
    lines = ["### FP32 & W/O XLA", "- ### 物理机环境内",
             "| node_num | gpu_num_per_node | batch_size_per_device | samples/s |", "|---|---|---|---|",
             "| 1 | 1 | 128 | 350.0 |"]
    (rec,) = dlperf.markdown_tables("dlperf-pytorch-rn50", dlperf.SOURCES["dlperf-pytorch-rn50"],
                                            "\n".join(lines))
    assert "bare metal" in json.dumps(rec) and not re.search(r"[\u3000-\u9fff]", json.dumps(rec, ensure_ascii=False))
    with pytest.raises(SystemExit, match="no English"):
        dlperf.markdown_tables("dlperf-pytorch-rn50", dlperf.SOURCES["dlperf-pytorch-rn50"],
                                       "\n".join(lines).replace("物理机环境内", "云环境内"))
