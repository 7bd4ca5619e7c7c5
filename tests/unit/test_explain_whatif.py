"""What explain prints (issue 36): validation that lists every held-out cell (predicted, or why
not) with a summary per table; the what-if grid and the slowest network keeping a target
efficiency; README rows whose loss split adds up; cells of one name told apart; the DLE
converter on a table excerpt written here."""
import csv
import json

import pytest
from util import cli_code

from fleetbench.perfmodel import validate, whatif

from fleetbench.perfmodel import published
from fleetbench.perfmodel import explanation
from fleetbench.report import explain
from test_predict_overlap import pub

REFERENCE_HEADING = "###### Pre-training NVIDIA DGX A100 (8x A100 80GB) Multi-node Scaling"


def table():
    rows = [pub("mgwfbp", 1, 1, 250.0, None), pub("mgwfbp", 1, 8, 8 * 250.0 * 0.97),
            pub("mgwfbp", 2, 8, 16 * 250.0 * 0.9), pub("mgwfbp", 4, 8, 32 * 250.0 * 0.85)]
    ps = pub("ASYNC-PS", 2, 8, 3000.0)  # an asynchronous PS of a published table: not predicted, said
    ps["mode"] = "ps"
    failed = pub("mgwfbp", 8, 8, 1.0)
    failed.update(error="rank 3 exited 1", metrics=None)
    other = pub("mgwfbp", 2, 8, 3500.0, framework="MXNet 1.6")  # no fitted run of MXNet's work
    return rows + [ps, failed, other]


def write(tmp_path, records):
    path = tmp_path / "table.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_validation_lists_every_held_out_cell_and_sums_up_the_table(tmp_path, capsys):
    rows = validate.validate(published.adopt(table(), True), {"nodes": 1})
    why = {r["cell"]: r.get("not_predicted") for r in rows}
    assert len(rows) == 5
    assert sum(v is None for v in why.values()) == 2
    assert any(v and v.startswith("parameter-server training") for v in why.values())
    assert any(v and v.startswith("failed run: rank 3 exited 1") for v in why.values())
    assert any(v and "no fitted cell of this work" in v and "MXNet" in k for k, v in why.items())
    (summary,) = validate.summary(rows)
    assert (summary["cells"], summary["predicted"], len(summary["not_predicted"])) == (5, 2, 3)
    assert explain.cli([write(tmp_path, table()), "--published", "--validate", "nodes=1"]) == 0
    out = capsys.readouterr().out
    assert "constructed: 2 of 5 cells predicted" in out and "median error" in out and "worst:" in out
    assert out.count("not predicted:") == 3


def test_a_what_if_grid_gives_the_efficiency_table_and_the_slowest_network(tmp_path, capsys):
    path = write(tmp_path, table()[:4])
    assert explain.cli([path, "--published", "--predict", "nodes=2,8,32,rate_gbit=1,10,100",
                        "--target-efficiency", "0.85"]) == 0
    out = capsys.readouterr().out
    text = out[out.index("predicted efficiency:"):]
    head = text.splitlines()[1].split()
    assert head[:4] == ["GPUs", "1", "Gbit/s", "10"] and "slowest network keeping 85%" in text
    rows = [line.split() for line in text.splitlines()[2:5]]
    assert [r[0] for r in rows] == ["16", "64", "256"]
    for r in rows:  # efficiency can only grow with the rate
        points = [float(v.rstrip("%")) for v in r[1:] if v.endswith("%") and not v.startswith("(")]
        assert points == sorted(points)


def test_slowest_network_is_the_first_rate_keeping_the_target():
    def row(rate, eff):
        return {"benchmark": "resnet50", "method": "mgwfbp", "network": f"{rate:g} Gbit/s", "world_size": 64,
                "predicted_efficiency": eff, "predicted_step_ms": 100.0, "predicted_step_range": [95.0, 110.0]}
    (t,) = whatif.tables([row(10, 0.7), row(100, 0.93), row(25, 0.91), row(400, 0.97)], 0.9)
    assert t["networks"] == ["10 Gbit/s", "25 Gbit/s", "100 Gbit/s", "400 Gbit/s"]
    assert t["slowest"][64] == ("25 Gbit/s", False)  # 0.91 x 100/110 < 0.9 at the slow end
    assert whatif.tables([row(10, 0.7)], 0.9)[0]["slowest"] == {}


@pytest.mark.parametrize("text, expected", [
    ("nodes=1,2,rate_gbit=10,100", ["nodes=1 rate_gbit=10", "nodes=1 rate_gbit=100", "nodes=2 rate_gbit=10",
                                    "nodes=2 rate_gbit=100"]),
    ("nodes=2,4,method=bsp", ["nodes=2 method=bsp", "nodes=4 method=bsp"]),
    ("nodes=3,network=1gbe", ["nodes=3,network=1gbe"]),
])
def test_grid_specs_expand_to_every_combination(text, expected):
    assert validate.expand(text) == expected


def test_target_efficiency_is_checked_before_anything_runs(tmp_path, capsys):
    path = write(tmp_path, table()[:4])
    assert cli_code(explain.cli, [path, "--published", "--predict", "nodes=2", "--target-efficiency", "1.5"]) == 2
    assert explain.cli([path, "--published", "--target-efficiency", "0.9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("--target-efficiency" in line for line in err)


def test_efficiency_chart_per_work_with_its_range(tmp_path):
    path = write(tmp_path, table()[:4])
    assert explain.cli([path, "--published", "--predict", "nodes=2,4,8,rate_gbit=10,100",
                        "--images", str(tmp_path / "img")]) == 0
    (png,) = (tmp_path / "img").glob("explain-efficiency-*.png")
    rows = list(csv.DictReader(open(png.with_suffix(".csv"))))
    assert {r["network"] for r in rows} == {"10 Gbit/s", "100 Gbit/s"}
    assert all(float(r["efficiency_low"]) <= float(r["efficiency"]) <= float(r["efficiency_high"]) for r in rows)


def test_readme_rows_split_the_loss_as_the_console_does_and_add_up():
    cells = [{"benchmark": "resnet50", "preset": "tiny", "method": "mgwfbp", "network": "1gbe", "nodes": 2,
              "devices_per_node": 1, "runs": 3, "measured_step_ms": 1000.0, "compute_ms": 300.0,
              "contention_ms": 50.0, "exposed_comm_ms": 690.0, "predicted_comm_ms": 600.0, "imbalance_ms": 10.0,
              "reader_ms": 0.0, "predicted_step_ms": 800.0, "prediction_error": -0.2, "efficiency": 0.25,
              "losses": {"contention": 0.05, "communication": 0.69, "imbalance": 0.01, "reader": 0.0,
                         "unexplained": 0.0},
              "prediction_notes": ["no comm record of network 1gbe: its rate ...", "link: ... latency unknown)"]}]
    cells = explanation.label_cells(cells)  # the renderer takes the model's cells, labelled
    row = [line for line in explain.markdown(cells, {}, str).splitlines() if line.startswith("| resnet50")][0]
    parts = [p.strip() for p in row.split("|")]
    lost = [float(v.rstrip("%")) for v in parts[11].split(" / ")]
    assert lost == [5, 69, 1, 0, 0] and sum(lost) == pytest.approx(100 - 25)
    assert parts[9] == "-20%" and "no comm record of it" in parts[12] and "latency not measured" in parts[12]
    no_sharing = dict(cells[0], contention_ms=None)
    row = [line for line in explain.markdown([no_sharing], {}, str).splitlines() if line.startswith("| resnet50")][0]
    assert "— / 69% (incl. sharing) / 1% / 0% / 0%" in row


def test_cells_of_one_name_from_different_files_are_told_apart():
    base = {"benchmark": "resnet50", "preset": "tiny", "method": "mgwfbp", "network": None, "nodes": 1,
            "devices_per_node": 2, "config": {"steps": 12}}
    cells = [dict(base, circumstances={"paddle": "2.6.2"}, files=["demo"]),
             dict(base, circumstances={"paddle": "2.6.2"}, files=["explain"]),
             dict(base, circumstances={"paddle": "3.3.1"}, files=["versions"], config={"steps": 50}),
             dict(base, nodes=2, devices_per_node=1, circumstances={}, files=["demo"])]
    labels = [c["label"] for c in explanation.label_cells(cells)]
    assert len(set(labels)) == 4
    assert labels[0] == "resnet50 tiny mgwfbp local 1x2 [paddle 2.6.2; from demo]"
    assert labels[3] == "resnet50 tiny mgwfbp local 2x1"


README_EXCERPT = f"""
{REFERENCE_HEADING}

| Nodes | GPUs / node | Batch size / GPU (TF32 and FP16) | Accumulated Batch size / GPU (TF32 and FP16) | Accumulation steps (TF32 and FP16) | Sequence length | Mixed Precision Throughput | Mixed Precision Strong Scaling | TF32 Throughput | TF32 Strong Scaling | Speedup (Mixed Precision to TF32) |
|-------|-------------|----------------------------------|------------------------------------|-----------------|----------------------------|--------------------------------|-----------------|---------------------|-----------------------------------|-----|
| 1     | 8           | 128 and 256 | 8192 and 8192                    | 64 and 32             | 128             |   5000               | 1                              |   2000          |  1                  |  2.5               |
| 4     | 8           | 128 and 256 | 2048 and 2048                    | 16 and 9              | 128             |   19000              | 3.8                            |   7800          |  3.9                |  2.4               |

text after the table
"""


def test_dle_converter_reads_the_table_as_printed_and_says_what_it_derived():
    from fleetbench.perfmodel.sources import nvidia_dle

    spec = dict(nvidia_dle.SOURCES["paddle-bert"], tables=[REFERENCE_HEADING])
    nvidia_dle.SOURCES["test"] = spec
    try:
        records = nvidia_dle.convert("test", README_EXCERPT)
    finally:
        del nvidia_dle.SOURCES["test"]
    assert len(records) == 4
    amp4 = next(r for r in records if r["nodes"] == 4 and r["config"]["precision"] == "amp")
    assert amp4["metrics"] == {"throughput": 19000.0, "unit": "sequences/s", "repeats": None}
    assert (amp4["config"]["batch_size"], amp4["config"]["grad_merge_steps"]) == (227, 9)
    assert any("not a whole micro-batch" in d for d in amp4["source"]["derived"])  # 2048 / 9, as printed
    tf32 = next(r for r in records if r["nodes"] == 1 and r["config"]["precision"] == "tf32")
    assert (tf32["config"]["batch_size"], tf32["network"]["nics"], tf32["world_size"]) == (128, 8, 8)
    assert "datasheet" in " ".join(tf32["source"]["assumed"])
