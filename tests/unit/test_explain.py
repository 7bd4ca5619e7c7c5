"""fleetbench.perfmodel: the all-reduce model, the breakdown's accounting, prediction and validation,
on constructed records (pure: no Paddle process)."""
import json
import os
import uuid

import pytest
from util import cli_code

from fleetbench.perfmodel import validate

from fleetbench.perfmodel import alphabeta, breakdown, cells, overlap, predict, scaling
from fleetbench.perfmodel.alphabeta import Hierarchical, Link
from fleetbench.perfmodel.cells import Shape
from fleetbench.store import results
from fleetbench.measure.repeats import aggregate
from fleetbench.perfmodel import explanation
from fleetbench.report import explain
from fleetbench.store import results

RATES = {"1gbe": 1.0, "10gbe": 10.0, "unshaped": None}


def record(method="bsp", nodes=2, per_node=1, network="1gbe", rank_ms=(100.0, 100.0), reader_ms=0.0,
           comm_bytes=None, buckets=1, threads=1, cores=2, batch=8, steps=10, preset="tiny"):
    """A collective run: per-rank step times as the loop stores them (elapsed per rank)."""
    world = nodes * per_node
    step = max(rank_ms)
    metrics = {"throughput": batch * world / step * 1e3, "unit": "images/s", "step_time_ms": step,
               "reader_time_ms": reader_ms, "measured_steps": steps,
               "rank_elapsed_s": [r * steps / 1e3 for r in rank_ms], "omp_num_threads": threads}
    if comm_bytes is not None:
        metrics.update(comm_bytes_per_step=comm_bytes, comm_buckets_per_step=buckets)
    net = None if network is None else {"profile": network, "rate_gbit": RATES.get(network),
                                        "emulated": True, "nodes": nodes}
    return {"schema": 1, "id": uuid.uuid4().hex, "time": "2026-01-01T00:00:00.000+00:00",
            "benchmark": "resnet50", "mode": "collective", "method": method, "preset": preset,
            "config": {"batch_size": batch, "method": method, "runtime": {"device": "cpu"}},
            "nodes": nodes, "devices_per_node": per_node, "world_size": world, "network": net,
            "metrics": metrics, "env": {"cpu": {"usable_threads": cores}}, "topology": None,
            "git": None, "error": None}


def comm_record(network="1gbe", nodes=2, per_node=1, alpha_us=100.0, bandwidth=0.12, with_fit=False):
    """An all_reduce comm run whose rows follow time = alpha + factor * bytes / B exactly."""
    ranks = nodes * per_node
    factor = alphabeta.allreduce_factor(ranks)
    rows = [{"op": "all_reduce", "bytes": size, "count": size // 4, "wrong": 0,
             "time_us": alpha_us + factor * size / (bandwidth * 1e3)} for size in (1024, 2**20, 2**26)]
    metrics = {"rows": rows, "throughput": bandwidth, "unit": "GB/s", "op": "all_reduce"}
    if with_fit:
        metrics["ops"] = {"all_reduce": {"alpha_us": alpha_us, "bandwidth_GBps": bandwidth}}
    rec = record(nodes=nodes, per_node=per_node, network=network)
    rec.update(mode="comm", method="all_reduce", metrics=metrics,
               config={"op": "all_reduce", "dtype": "float32"})
    return rec


def only(items, **match):
    found = [i for i in items if all(i[k] == v for k, v in match.items())]
    assert len(found) == 1, found
    return found[0]


# ---- the alpha-beta model ---------------------------------------------------------------------

def test_fit_rows_recovers_latency_and_bandwidth_of_constructed_timings():
    rows = comm_record(alpha_us=150.0, bandwidth=0.12)["metrics"]["rows"]
    rows.append({"op": "all_gather", "bytes": 4096, "time_us": 1e9, "wrong": 0})  # other op: ignored
    alpha, bandwidth = alphabeta.fit_rows(rows, ranks=2)
    assert alpha == pytest.approx(150.0, rel=1e-6)
    assert bandwidth == pytest.approx(0.12, rel=1e-6)
    with pytest.raises(alphabeta.FitError, match="2 sizes"):
        alphabeta.fit_rows(rows[:1], ranks=2)


def test_ring_allreduce_time_per_bucket_sequence_and_other_ring_sizes():
    link = Link(alpha_us=200.0, bandwidth_GBps=0.1, ranks=2, source="t")
    # 3 calls x 200 us + 2(2-1)/2 x 1e7 B / 0.1 GB/s = 0.6 ms + 100 ms
    assert link.allreduce_ms(1e7, calls=3) == pytest.approx(100.6)
    assert link.hop_alpha_us == pytest.approx(100.0)  # 2(n-1) = 2 messages per call
    three = link.at(3)  # 4 messages of 100 us per call; each link carries 2(3-1)/3 of the bytes
    assert three.allreduce_ms(1e7, calls=3) == pytest.approx((3 * 400 + 4 / 3 * 1e5) / 1e3)
    assert link.at(1).allreduce_ms(1e7, 3) == 0.0
    intra = Link(50.0, 5.0, 2, "intra")
    assert Hierarchical(intra, link).allreduce_ms(1e7, 1) == pytest.approx(
        intra.allreduce_ms(1e7, 1) + link.allreduce_ms(1e7, 1))


def test_link_for_prefers_the_exact_record_then_extrapolates_then_goes_hierarchical():
    _, comm = cells.pool([comm_record("1gbe", 2, 1, 100.0, 0.12),
                          comm_record(None, 1, 2, 20.0, 4.0, with_fit=True)])
    exact, _ = cells.link_for("1gbe", Shape(2, 1), comm)
    assert (exact.ranks, exact.alpha_us) == (2, pytest.approx(100.0))
    wider, _ = cells.link_for("1gbe", Shape(4, 1), comm)
    assert (wider.ranks, wider.alpha_us) == (4, pytest.approx(300.0))  # 6 messages of 50 us
    both, _ = cells.link_for("1gbe", Shape(2, 2), comm)
    assert isinstance(both, Hierarchical)
    assert both.intra.bandwidth_GBps == pytest.approx(4.0) and both.inter.bandwidth_GBps == pytest.approx(0.12)
    by_rate, _ = cells.link_for("1gbe", Shape(2, 1), comm, rate_gbit=5.0)
    assert by_rate.bandwidth_GBps == pytest.approx(5.0 / 8) and by_rate.alpha_us == pytest.approx(100.0)
    profile_only, _ = cells.link_for("10gbe", Shape(2, 1), comm)  # no 10gbe record: its rate
    assert profile_only.bandwidth_GBps == pytest.approx(10.0 / 8)
    missing, problem = cells.link_for("unshaped", Shape(2, 1), comm)
    assert missing is None and "no all_reduce comm record" in problem


# ---- the breakdown ------------------------------------------------------------------------------

def shared_machine_records(cell_reader=2.0):
    """1 device at 60 ms; the none control at 100/120 ms per rank; bsp at 300 ms over 1gbe."""
    return [record("bsp", 1, 1, None, (60.0,), reader_ms=1.0, threads=2),
            record("none", 2, 1, "1gbe", (100.0, 120.0), reader_ms=2.0),
            record("bsp", 2, 1, "1gbe", (300.0, 300.0), reader_ms=cell_reader, comm_bytes=1.2e7, buckets=2),
            comm_record("1gbe", 2, 1, alpha_us=100.0, bandwidth=0.12)]


def test_breakdown_parts_sum_to_measured_and_losses_to_one_minus_efficiency():
    out = only(predict.explain(shared_machine_records()), method="bsp")
    assert out["compute_ms"] == pytest.approx(120.0 - 2.0 - 10.0)  # median rank (110) minus reader
    assert out["imbalance_ms"] == pytest.approx(10.0)  # slowest (120) minus median rank (110)
    assert out["exposed_comm_ms"] == pytest.approx(300.0 - 120.0)  # measured(bsp) - measured(none)
    assert out["reader_ms"] == pytest.approx(2.0)
    assert out["explained_step_ms"] == pytest.approx(300.0) and out["accounting_ok"]
    assert "method=none control" in out["compute_source"]
    # 2 calls x 100 us + 1.2e7 B x 2(2-1)/2 / 0.12 GB/s
    assert out["predicted_comm_ms"] == pytest.approx(0.2 + 100.0)
    assert out["overlap_ms"] == pytest.approx(100.2 - 180.0)
    assert out["predicted_step_ms"] == pytest.approx(120.0 + 100.2)  # bsp: nothing hidden
    assert out["efficiency"] == pytest.approx(60.0 / 300.0)
    assert out["contention_ms"] == pytest.approx(108.0 - 59.0)  # control compute - 1-device compute
    assert sum(out["losses"].values()) == pytest.approx(1 - out["efficiency"])
    assert out["losses"]["contention"] == pytest.approx(49.0 / 300.0)
    assert out["losses"]["communication"] == pytest.approx(180.0 / 300.0)


def test_accounting_check_fails_when_the_reader_is_counted_twice():
    # the reader wait that appears only under synchronisation is already in measured - control
    out = only(predict.explain(shared_machine_records(cell_reader=50.0)), method="bsp")
    assert out["accounting_error"] == pytest.approx(48.0 / 300.0)
    assert not out["accounting_ok"]


def test_without_a_control_compute_comes_from_the_single_device_run_and_says_so():
    records = [r for r in shared_machine_records() if r["method"] != "none"]
    out = only(predict.explain(records), method="bsp")
    assert out["compute_ms"] == pytest.approx(59.0) and out["exposed_comm_ms"] == pytest.approx(240.0)
    assert out["compute_source"].startswith("1-device run") and "core sharing" in out["compute_source"]
    assert out["contention_ms"] is None and out["losses"]["contention"] == 0.0


def test_method_none_is_never_a_baseline_nor_a_training_cell():
    records = shared_machine_records() + [record("none", 1, 1, None, (10.0,), threads=2)]
    explained = predict.explain(records)
    assert [c["method"] for c in explained] == ["bsp"]  # the controls are not explained as training
    assert explained[0]["efficiency"] == pytest.approx(60.0 / 300.0)  # not 10 / 300
    pooled, _ = cells.pool(records)
    bsp = next(c for c in pooled if c.method == "bsp" and c.shape.world_size == 2)
    assert cells.find_single(bsp, pooled).method == "bsp"
    assert all(not c.control for c in breakdown.training_cells(pooled))


def test_reports_never_use_a_control_as_baseline_nor_show_it_as_training():
    from fleetbench.report import charts, tables

    records = [record("none", 1, 1, None, (10.0,), threads=2), record("bsp", 1, 1, None, (60.0,), threads=2),
               record("none", 2, 1, "1gbe", (100.0, 100.0)), record("bsp", 2, 1, "1gbe", (300.0, 300.0))]
    groups = {(g["method"], g["world_size"]): g for g in aggregate.summarize_records(records)}
    assert groups[("bsp", 2)]["baseline"]["method"] == "bsp"
    assert groups[("bsp", 2)]["efficiency"] == pytest.approx(60.0 / 300.0)
    assert groups[("none", 2)]["efficiency"] is None and groups[("none", 1)]["efficiency"] is None
    assert "not a training result" in groups[("none", 2)]["baseline_note"]
    planned = tables.plan(records)
    shown = [g["method"] for table in planned for g in table["groups"]]
    assert sorted(shown) == ["bsp", "bsp"]
    drawn = [c["method"] for table in planned for chart in charts.plan(table)
             for series in chart["series"] for c in series["groups"]]
    assert drawn and "none" not in drawn


def test_host_cost_per_byte_of_post_backward_cells_is_calibrated_on_the_other_cells():
    # bsp exposes link + 20 ms per 1e7 B at 1gbe and at 10gbe: each cell is predicted from the other
    records = [record("none", 2, 1, "1gbe", (100.0, 100.0)),
               record("bsp", 2, 1, "1gbe", (100.0 + 100.0 + 20.0,) * 2, comm_bytes=6e6),
               record("bsp", 2, 1, "10gbe", (100.0 + 10.0 + 20.0,) * 2, comm_bytes=6e6),
               comm_record("1gbe", 2, 1, alpha_us=0.0, bandwidth=0.06, with_fit=True),
               comm_record("10gbe", 2, 1, alpha_us=0.0, bandwidth=0.6, with_fit=True)]
    for cell in predict.explain(records):
        assert cell["predicted_step_ms"] == pytest.approx(cell["measured_step_ms"])
        assert any("host cost" in note and "bsp" in note for note in cell["prediction_notes"])
    only_one = predict.explain(records[:2] + records[3:])
    assert only_one[0]["predicted_step_ms"] == pytest.approx(200.0)  # no other bsp cell: host cost 0


def on_gpu_of_unknown_order(rec):
    """The record as a GPU run of a model whose gradient order nobody computed: the overlap window
    measured on other cells is what the model has (a CPU cell's is GLOO_SERIAL: nothing hides)."""
    if rec["mode"] == "collective":
        rec["config"]["runtime"]["device"] = "gpu:0"
        rec["benchmark"] = "mystery"
    return rec


def test_overlap_is_the_time_backward_hides_measured_on_the_other_cells():
    # mgwfbp hides 50 ms of a 100 ms link at 1gbe and all 10 ms of its link at 10gbe. Backward
    # hides at most its own length whatever the link, so what is carried over is a time, not a share
    records = [record("none", 2, 1, "1gbe", (100.0, 100.0)),
               record("mgwfbp", 2, 1, "1gbe", (150.0, 150.0), comm_bytes=6e6),
               record("mgwfbp", 2, 1, "10gbe", (100.0, 100.0), comm_bytes=6e6),
               comm_record("1gbe", 2, 1, alpha_us=0.0, bandwidth=0.06, with_fit=True),
               comm_record("10gbe", 2, 1, alpha_us=0.0, bandwidth=0.6, with_fit=True)]
    # gloo: the reducer's all-reduce blocks backward, nothing hides; what the other cell exposes
    # beyond its link is a host cost per byte (negative here: its link was cheaper than modelled)
    cpu = {c["network"]: c for c in predict.explain(records)}
    assert cpu["1gbe"]["predicted_step_ms"] == pytest.approx(100.0 + 100.0 + (0.0 - 10.0))
    assert cpu["10gbe"]["predicted_step_ms"] == pytest.approx(100.0 + 10.0 + (50.0 - 100.0))
    for cell in cpu.values():
        assert overlap.GLOO_SERIAL in cell["prediction_notes"]
        assert any("measured on other resnet50 tiny mgwfbp cells" in n for n in cell["prediction_notes"])
    out = predict.explain([on_gpu_of_unknown_order(r) for r in records])
    slow, fast = only(out, network="1gbe"), only(out, network="10gbe")
    assert slow["overlap_fraction"] == pytest.approx(0.5) and fast["overlap_fraction"] == pytest.approx(1.0)
    # 10gbe shows only a lower bound of the window (10 ms, all it had); a share (100%) would
    # have predicted 1gbe as free
    assert slow["predicted_step_ms"] == pytest.approx(100.0 + 100.0 - 10.0)
    assert fast["predicted_step_ms"] == pytest.approx(100.0 + 10.0 - 10.0)  # a 50 ms window covers it
    assert any("overlap window 10.0 ms" in n for n in slow["prediction_notes"])


def test_host_cost_is_taken_from_the_same_work_before_any_other():
    # the same bytes cost resnet50 small more host time than tiny (larger activations beside them)
    records = [record("none", 2, 1, "1gbe", (100.0, 100.0)),
               record("none", 2, 1, "1gbe", (100.0, 100.0), preset="small"),
               record("bsp", 2, 1, "1gbe", (220.0, 220.0), comm_bytes=6e6),
               record("bsp", 2, 1, "10gbe", (130.0, 130.0), comm_bytes=6e6),
               record("bsp", 2, 1, "1gbe", (260.0, 260.0), comm_bytes=6e6, preset="small"),
               record("bsp", 2, 1, "10gbe", (170.0, 170.0), comm_bytes=6e6, preset="small"),
               comm_record("1gbe", 2, 1, alpha_us=0.0, bandwidth=0.06, with_fit=True),
               comm_record("10gbe", 2, 1, alpha_us=0.0, bandwidth=0.6, with_fit=True)]
    for cell in predict.explain(records):
        assert cell["predicted_step_ms"] == pytest.approx(cell["measured_step_ms"])


# ---- prediction and validation --------------------------------------------------------------------

def test_core_sharing_scale():
    pooled, _ = cells.pool([record("bsp", 1, 1, None, (60.0,), threads=2),
                            record("none", 2, 1, "1gbe", (100.0, 100.0), threads=1)])
    single = next(c for c in pooled if c.shape.world_size == 1)
    control = next(c for c in pooled if c.control)
    # the control is this work's measured thread scaling: 2 processes of 1 thread run 100/60 slower
    assert scaling.core_sharing(single, Shape(1, 2), False, pooled)[0] == pytest.approx(100 / 60)
    assert scaling.core_sharing(control, Shape(3, 1), True, pooled)[0] == pytest.approx(1.5)
    # on hosts of their own each rank gets both cores (2 threads): 60/100 measured
    scale, note, _ = scaling.core_sharing(control, Shape(3, 1), False, pooled)
    assert scale == pytest.approx(0.6) and "1 -> 2 threads" in note
    single.gpu = True
    assert scaling.core_sharing(single, Shape(1, 8), False, pooled)[0] == 1.0


def two_node_records():
    return [record("none", 2, 1, "1gbe", (100.0, 100.0)),
            record("bsp", 2, 1, "1gbe", (220.0, 220.0), comm_bytes=1.2e7, buckets=2),
            comm_record("1gbe", 2, 1, alpha_us=100.0, bandwidth=0.12)]


# the 2-node bsp cell exposes 120 ms where the link takes 100.2: 19.8 ms of host work for 1.2e7 B
HOST_MS = 220.0 - 100.0 - 100.2


def three_node_prediction_ms():
    link = Link(100.0, 0.12, 2, "t").at(3)
    return 100.0 * 1.5 + link.allreduce_ms(1.2e7, 2) + HOST_MS  # 3 processes on 2 cores: x1.5


def test_predict_three_nodes_from_two():
    (out,) = validate.predict_spec(two_node_records(), {"nodes": 3})
    assert out["predicted_step_ms"] == pytest.approx(three_node_prediction_ms())
    assert out["target"] == "resnet50 tiny bsp 1gbe 3x1"
    units_per_rank_step = 8
    assert out["predicted_throughput"] == pytest.approx(units_per_rank_step * 3 / out["predicted_step_ms"] * 1e3)
    (by_rate,) = validate.predict_spec(two_node_records(), {"rate_gbit": 8.0})
    # 8 Gbit/s = 1 GB/s nominal, of which TCP over Ethernet delivers 1448/1538; the measured latency
    link = Link(100.0, 1.0 * 1448 / 1538, 2, "t")
    assert by_rate["predicted_step_ms"] == pytest.approx(100.0 + link.allreduce_ms(1.2e7, 2) + HOST_MS)
    assert validate.predict_spec(two_node_records(), {"method": "mgwfbp", "nodes": 3}) == []


def test_validate_fits_on_the_selected_records_only():
    held_out = [record("bsp", 3, 1, "1gbe", (300.0, 300.0, 300.0), comm_bytes=1.2e7, buckets=2),
                record("none", 3, 1, "1gbe", (1000.0, 1000.0, 1000.0)),  # must not be used
                comm_record("1gbe", 3, 1, alpha_us=1e5, bandwidth=0.001)]  # must not be used
    rows = validate.validate(two_node_records() + held_out, {"nodes": 2})
    (row,) = rows
    assert row["cell"] == "resnet50 tiny [batch 8] bsp 1gbe 3x1" and row["measured_step_ms"] == 300.0
    assert row["predicted_step_ms"] == pytest.approx(three_node_prediction_ms())
    assert row["error"] == pytest.approx(three_node_prediction_ms() / 300.0 - 1)
    (reverse,) = validate.validate(two_node_records() + held_out, {"nodes": 3})  # and the other way
    link, link3 = Link(1e5, 0.001, 3, "t").at(2), Link(1e5, 0.001, 3, "t")
    host = 300.0 - 1000.0 - link3.allreduce_ms(1.2e7, 2)  # what the 3-node bsp cell shows
    assert reverse["predicted_step_ms"] == pytest.approx(1000.0 / 1.5 + link.allreduce_ms(1.2e7, 2) + host)


@pytest.mark.parametrize("text, message", [
    ("nodes=x", "nodes must be an integer >= 1"),
    ("color=red", "expected key=value pairs with keys from"),
    ("nodes", "expected key=value pairs"),
    ("rate_gbit=fast", "rate_gbit must be a number"),
])
def test_bad_specs_are_one_line_naming_the_flag(text, message):
    with pytest.raises(validate.SpecError) as caught:
        validate.parse_spec(text, validate.FILTER_KEYS + validate.CHANGE_KEYS, "--predict")
    assert str(caught.value).startswith("--predict") and message in str(caught.value)


# ---- command line -----------------------------------------------------------------------------------

def write(path, records):
    path.write_text("".join(results.dumps(r) + "\n" for r in records))
    return str(path)


def test_cli_json_lists_cells_with_their_parts(tmp_path, capsys):
    path = write(tmp_path / "runs.jsonl", shared_machine_records())  # comm record included
    assert explain.cli([path, "--json", "--predict", "nodes=3"]) == 0
    items = json.loads(capsys.readouterr().out)
    measured = only(items, kind="measured")
    for key in ("benchmark", "method", "network", "nodes", "devices_per_node", "measured_step_ms",
                "explained_step_ms", "predicted_step_ms", "compute_ms", "exposed_comm_ms",
                "imbalance_ms", "reader_ms", "overlap_ms"):
        assert key in measured
    assert measured["explained_step_ms"] == pytest.approx(measured["measured_step_ms"])
    assert measured["predicted_comm_ms"] == pytest.approx(100.2)
    assert only(items, kind="predicted")["target"] == "resnet50 tiny bsp 1gbe 3x1"


def test_cli_table_chart_and_markdown(tmp_path, capsys):
    path = write(tmp_path / "runs.jsonl", [r for r in shared_machine_records() if r["mode"] != "comm"])
    images = tmp_path / "images"
    assert explain.cli([path, "--images", str(images), "--markdown"]) == 0
    text = capsys.readouterr().out
    assert "#### resnet50 [tiny]" in text and "| resnet50 tiny bsp 1gbe 2x1 | 300.0 | 108.0 (control)" in text
    csv_text = (images / "explain-resnet50-tiny.csv").read_text().splitlines()
    assert csv_text[0].startswith("cell,method,network") and len(csv_text) == 2
    assert (images / "explain-resnet50-tiny.png").read_bytes()[:4] == b"\x89PNG"
    assert explain.cli([path]) == 0
    assert "resnet50 tiny bsp 1gbe 2x1" in capsys.readouterr().out


def test_report_section_for_fleetbench_report(tmp_path):
    records = shared_machine_records()
    section, files = explain.section(records, str(tmp_path / "images"), lambda png: os.path.relpath(png, tmp_path))
    assert section.startswith("### Why not better") and "](images/explain-resnet50-tiny.png)" in section
    assert sorted(os.path.basename(f) for f in files) == ["explain-resnet50-tiny.csv", "explain-resnet50-tiny.png"]
    no_breakdown = [r for r in records if r["world_size"] > 1 and r["method"] != "none"]
    assert explain.section(no_breakdown, str(tmp_path / "other"), lambda png: png) == ("", [])


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert cli_code(explain.cli, [str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fleetbench explain: ") and "missing.jsonl" in err and err.count("\n") == 1
    path = write(tmp_path / "runs.jsonl", two_node_records()[:2])
    assert explain.cli([path, "--validate", "nodes=two"]) == 2
    assert "--validate" in capsys.readouterr().err


def test_images_of_a_validation_beside_a_prediction_skip_rows_not_predicted(tmp_path, capsys):
    """The committed explain runs: --validate nodes=2 holds 1-device rows (not predicted, no world
    size of their own) of a work that --predict nodes=3 draws a scaling curve of."""
    images = tmp_path / "images"
    path = os.path.join(os.path.dirname(__file__), "..", "..", "results", "kvm-2vcpu-paddle2.6.2-explain.jsonl")
    assert explain.cli([path, "--predict", "nodes=3", "--validate", "nodes=2", "--images", str(images)]) == 0
    assert "validation: fitted on" in capsys.readouterr().out
    assert (images / "explain-resnet50-tiny.png").read_bytes()[:4] == b"\x89PNG"


def test_post_backward_bucket_count_is_what_paddles_build_groups_makes():
    import paddle
    from paddle.distributed.parallel import build_groups

    from fleetbench.train.methods import bucket_count

    tensors = [paddle.zeros([n]) for n in (100, 30, 1, 250, 7, 7, 400, 3)]  # float32: 4 bytes each
    sizes = [4 * int(t.numel()) for t in tensors]
    for limit in (1, 400, 500, 1000, 10**6):
        assert bucket_count(sizes, limit) == len(build_groups(tensors, limit)), limit


# ---- real jobs: what the records carry (2 gloo processes, ResNet50 tiny) ------------------------------

@pytest.mark.job
def test_real_control_and_bsp_records_explain_a_slow_rank(tmp_path):
    """Rank 1 sleeps 600 ms after every step in both runs. In the method=none control the ranks run
    free, so the record shows where rank 1's time went (its step time holds the sleep beside its
    step's own span) and explain's imbalance is the ranks' difference; bsp carries its gradient
    bytes. Four measured steps: the delay is on every one."""
    import subprocess

    from util import PYTHON, REPO, env

    store = tmp_path / "r.jsonl"
    for method in ("none", "bsp"):
        # through `fleetbench launch`, which runs a job once more when gloo's rendezvous fails before
        # the first step: under load Paddle's launcher alone failed here twice in CI-like runs
        # ("gloo ... connect [127.0.0.1]:15749: Connection refused" while creating Fleet's groups)
        proc = subprocess.run([PYTHON, "-m", "fleetbench", "launch", "--log_dir", str(tmp_path / f"log-{method}"),
                               "--nproc_per_node", "2", "--timeout", "240", "collective/resnet50.py",
                               "--preset", "tiny", "--set", f"method={method}", "--set", "debug.delay_rank=1",
                               "--set", "debug.delay_ms=600", "--set", "steps=6", "--results", str(store)],
                              cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    control, bsp = (json.loads(line) for line in store.read_text().splitlines())
    m = control["metrics"]
    assert m["control"] is True and m["comm_bytes_per_step"] == 0 and m["comm_buckets_per_step"] == 0
    fast, slow = m["rank_step_ms"]
    # Rank 1 sleeps after its step's span (train/phases.py's `step` ends before it): its step time
    # less that span holds the 600 ms whatever else runs; rank 0's holds only the loop's own lines.
    # How much faster rank 0 runs meanwhile is the scheduler's: beside two busy loops and four test
    # sessions (steps of 5.2 s) it was 5217 ms a step against rank 1's 5464, 247 ms apart, where the
    # test asked for 300 (a fresh clone beside a CPU hog, 2026-11-29)
    outside = [total - row["step"] for total, row in zip(m["rank_step_ms"], m["step_breakdown"]["ranks"])]
    assert outside[1] >= 0.99 * 600 and outside[0] < outside[1] - 0.5 * 600
    assert m["rank_step_ms"] == pytest.approx([1000 * e / m["measured_steps"] for e in m["rank_elapsed_s"]])
    b = bsp["metrics"]
    assert b["control"] is False and b["grad_tensors"] > 100  # ResNet50: 161 trainable tensors
    assert b["comm_bytes_per_step"] == b["grad_bytes"] > 50e6 and b["comm_buckets_per_step"] == 1
    (out,) = predict.explain([control, bsp])
    assert out["imbalance_ms"] == pytest.approx((slow - fast) / 2)  # slowest - median of 2 ranks
    assert out["accounting_ok"] and "method=none control" in out["compute_source"]


def breakdown_rows(compute_ms, comm_ms, waits):
    """step_breakdown rows of ranks whose waits for peers differ (train/phases.py's fields)."""
    rows = []
    for wait in waits:
        row = {"reader": 0.0, "forward": compute_ms / 3, "backward": compute_ms / 2, "optimizer": compute_ms / 6,
               "other": 0.0, "comm": comm_ms, "comm_blocking": comm_ms, "comm_in_backward": comm_ms,
               "comm_wait": wait}
        row["step"] = compute_ms + comm_ms
        rows.append(row)
    return {"units": "ms per measured step", "ranks": rows, "adds_up": True, "steps": 10, "tolerance": 0.05}


def test_measured_parts_from_the_step_breakdown():
    parts = cells.measured_parts({"step_breakdown": breakdown_rows(90.0, 60.0, (20.0, 0.0))})
    assert parts == pytest.approx({"compute_ms": 90.0, "exposed_comm_ms": 50.0, "imbalance_ms": 10.0,
                                   "reader_ms": 0.0})
    assert cells.measured_parts({}) == dict.fromkeys(cells.MEASURED_PARTS)


@pytest.mark.parametrize("comm_ms, misses", [(100.0, None), (40.0, "exposed_comm_ms")])
def test_explain_puts_each_part_predicted_beside_measured(comm_ms, misses):
    # the control says compute 100; the 1gbe link predicts 100 ms of all-reduce, all exposed (gloo)
    cell = record("mgwfbp", 2, 1, "1gbe", (200.0, 200.0), comm_bytes=6e6)
    cell["metrics"]["step_breakdown"] = breakdown_rows(100.0, comm_ms, (0.0, 0.0))
    cell["metrics"]["mfu"] = 0.07
    records = [record("none", 2, 1, "1gbe", (100.0, 100.0)), cell,
               comm_record("1gbe", 2, 1, alpha_us=0.0, bandwidth=0.06, with_fit=True)]
    (b,) = predict.explain(records)
    check = b["parts_check"]
    assert check["predicted"]["exposed_comm_ms"] == pytest.approx(100.0)
    assert check["measured"]["exposed_comm_ms"] == pytest.approx(comm_ms) and check["misses"] == misses
    text = explain.markdown(explanation.label_cells([b]), {}, str)
    assert "| 7% |" in text  # MFU beside the row
    line = next(t for t in text.splitlines() if "part by part" in t)
    assert ("exposed comm 100/40 (misses)" in line) == (misses is not None)
    assert ("every part within 15%" in line) == (misses is None)


def test_a_row_off_by_more_than_15_percent_says_why_from_its_own_parts():
    """The demo's 10gbe row (2026-11-28): predicted +33%, no weak input in its notes; its breakdown
    shows the exposed communication missing because the host cost came from the 1gbe cell."""
    from fleetbench.report.explain import _why_off

    cell = {"prediction_error": 0.33, "prediction_notes": ["base: control 1x2", "host cost 2.62e+03 ms/GB measured "
                                                              "on other resnet50 tiny mgwfbp cells"],
            "predicted_host_ms": 246.7, "predicted_comm_ms": 99.9, "exposed_comm_ms": 145.7,
            "parts_check": {"predicted": {"compute_ms": 462.0, "exposed_comm_ms": 346.5, "imbalance_ms": 0.1, "reader_ms": 0.0},
                            "measured": {"compute_ms": 458.0, "exposed_comm_ms": 140.1, "imbalance_ms": 9.1, "reader_ms": 0.0},
                            "off_ms": {"compute_ms": 4.0, "exposed_comm_ms": 206.4, "imbalance_ms": -9.0, "reader_ms": 0.0},
                            "misses": "exposed_comm_ms"}}
    assert _why_off(cell) == ("exposed comm predicted 346 ms, measured 140: host cost 247 ms from the work's other "
                              "cells, 46 here beyond the link model (it is not one cost per byte across these links)")
    # no part alone beyond the tolerance: the largest miss is named as such
    cell["parts_check"] = dict(cell["parts_check"], misses=None)
    assert _why_off(cell).startswith("no part alone beyond 15% of the step, the largest miss exposed comm predicted 346")
    # within 15%: nothing to say; and a note that explains it wins over the parts
    assert _why_off(dict(cell, prediction_error=0.1)) == ""
    cell["prediction_notes"].append("link from no comm record of network 10gbe")
    assert _why_off(cell) == "link from the network's rate (a ceiling), no comm record of it"
