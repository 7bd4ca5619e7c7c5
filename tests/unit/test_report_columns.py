"""The report's tables name only what differs between the rows shown, by plain names (issue 34)."""
import json

from util import REPO

from fleetbench.report import tables
from fleetbench.store import results


def markdown(records):
    planned = tables.plan(records)
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


# ---- old and new runs in one report: keys some records predate are no difference ------------------

EPOCH_KEYS = {"data": {"path": None, "val_path": None}, "epochs": 1, "eval_batch_size": 256, "stop_at_target": False,
              "target_accuracy": None}


def later(threads, batch, i, **keys):
    """A run made after the epoch schedule came: its config has the keys the older runs lack."""
    rec = record(threads, batch, i)
    rec["id"] += "-new"
    rec["config"] = dict(rec["config"], **{**EPOCH_KEYS, **keys})
    return rec


def test_keys_older_runs_lack_at_their_default_make_no_column_and_pool():
    old = [dict(record(1, 8, i), config=dict(record(1, 8, i)["config"], data={"path": None})) for i in range(2)]
    new = [later(1, 8, i) for i in range(2, 4)]
    text = markdown(old + new)
    assert "| Network | Method | 2 devices |" in text  # no data.val_path, epochs, ... columns
    (row,) = [line for line in text.splitlines() if line.startswith("| — | mgwfbp |")]
    assert "11.5 ± 1.3" in row  # one cell: the four runs are repeats of one experiment
    # at another value the key is the work: its own row, the older runs' at the value their lack means
    text = markdown(old + [later(1, 8, i, epochs=3) for i in range(2, 4)])
    assert "| Network | Method | epochs | 2 devices |" in text
    assert [line.split(" | ")[2] for line in text.splitlines() if line.startswith("| — | mgwfbp |")] == ["1", "3"]


def test_a_failed_run_beside_runs_that_differ_names_only_their_difference():
    # two demo sweeps in one report: 1x2 runs with 1 and 2 threads, and a failed run whose record has
    # no runtime block (so fold_failures cannot tell which cell it was): only `threads` differs
    failed = dict(record(1, 8, 9), error="launch: worker rank 1 exited with code 1", metrics=None,
                  config={"batch_size": 8})
    runs = [record(1, 8, 0), record(2, 8, 1)]
    for rec in runs:
        rec["config"]["runtime"]["servers"] = 2
    text = markdown(runs + [failed])
    assert "| Network | Method | threads | 2 devices |" in text, text
    assert [line.split(" | ")[2] for line in text.splitlines() if line.startswith("| — | mgwfbp |")] == ["1", "2", "—"]


def test_mfu_is_shown_beside_the_throughput_of_the_runs_kept():
    runs = [record(1, 8, i) for i in range(3)]
    for run, mfu in zip(runs, (0.070, 0.072, 0.074)):
        run["metrics"]["mfu"] = mfu
    text = markdown(runs)
    (row,) = [line for line in text.splitlines() if line.startswith("| — | mgwfbp |")]
    assert row.endswith("MFU 7.2% |")
    assert "MFU: model FLOPs utilisation" in text
    old = markdown([record(1, 8, i) for i in range(3)])  # records from before MFU: nothing added
    assert "MFU" not in old


def test_charts_carry_mfu_in_their_numbers_and_labels():
    from fleetbench.report import charts

    runs = [record(1, 8, i) for i in range(2)]
    for run in runs:
        run["metrics"]["mfu"] = 0.05
    (table,) = tables.plan(runs)
    (chart,) = charts.plan(table)
    assert [row["mfu"] for row in charts.chart_rows(chart)] == [0.05]
    assert charts.draw(chart)[:8] == b"\x89PNG\r\n\x1a\n"  # a baseline bar labelled with its MFU alone


def test_a_model_definition_is_a_column_of_a_few_words_not_its_layer_list():
    # the third held-out set's records carry each model's layers (hundreds of tensors): shown whole,
    # one table cell ran to 56,000 characters and the reference report took 119 CPU s, not 22
    text = markdown(results.load(REPO / "results/reference/dle-pytorch-efficientnet.jsonl"))
    rows = [line for line in text.splitlines() if line.startswith("| — | mgwfbp |")]
    assert rows and max(len(line) for line in rows) < 300
    b4, wide = (next(r for r in rows if f"| {m} |" in r) for m in ("EfficientNet-B4", "EfficientNet-WideSE-B4"))
    assert "418 tensors, 19.34 M params" in b4 and "418 tensors, 34.93 M params" in wide


def test_two_long_lists_that_differ_never_read_alike():
    one, other = [{"name": f"l{i}", "params": 10} for i in range(9)], [{"name": f"m{i}", "params": 10} for i in range(9)]
    shown = [tables._shown(json.dumps(v)) for v in (one, other)]
    assert shown[0].startswith("9 tensors, 0.00 M params (") and shown[0] != shown[1]
    assert tables._shown(json.dumps(list(range(3)))) == "[0, 1, 2]"  # a short list as it is
    assert tables._shown(json.dumps(list(range(20)))).startswith("20 items (")
