"""Cells without a control (issue 22): core sharing from a measured thread-scaling curve
(analysis.scaling) and the bytes a step really sends (analysis.gradbytes), on constructed records."""
import pytest
from test_explain import comm_record, record

from fleetbench.perfmodel import alphabeta, breakdown, cells, gradbytes, predict, scaling
from fleetbench.perfmodel.alphabeta import Link
from fleetbench.perfmodel.cells import Shape


def work(rec, benchmark="resnet18", cpu=None):
    rec["benchmark"] = benchmark
    if cpu:
        rec["env"]["cpu"]["model"] = cpu
    return rec


def lone(ms, threads, benchmark="resnet18", cpu=None):
    """A 1-process run; its thread count is in the config, as the run layer records it."""
    rec = work(record("mgwfbp", 1, 1, None, (ms,), threads=threads), benchmark, cpu)
    rec["config"]["runtime"]["threads"] = {"omp_num_threads": threads}
    return rec


def sharing(records, benchmark="resnet18"):
    pooled, _ = cells.pool(records)
    single = max((c for c in pooled if c.benchmark == benchmark and c.shape.world_size == 1),
                 key=lambda c: c.threads)
    return scaling.core_sharing(single, Shape(2, 1), True, pooled)


# ---- thread scaling ---------------------------------------------------------------------------

def test_core_sharing_from_this_works_runs_at_1_and_2_threads():
    factor, note, kind = sharing([lone(300.0, 2), lone(390.0, 1)])
    # 2 emulated nodes on 2 cores: each process gets 1 thread, which this work runs at 390 ms
    assert factor == pytest.approx(1.3) and kind == scaling.MEASURED
    assert "measured on this work" in note and "2 -> 1 threads" in note


def test_core_sharing_borrowed_from_another_works_control_on_the_same_host_only():
    other = [lone(200.0, 2, "resnet50"), work(record("none", 2, 1, "1gbe", (250.0, 250.0)), "resnet50")]
    factor, note, kind = sharing([lone(300.0, 2)] + other)
    assert factor == pytest.approx(1.25) and kind == scaling.BORROWED
    assert "borrowed from other works on this host" in note and "resnet50 tiny x1.25" in note
    # the same works on another CPU lend nothing: linear, said to be an upper bound
    factor, note, kind = sharing([lone(300.0, 2, cpu="AMD EPYC")] + other)
    assert factor == pytest.approx(2.0) and kind == scaling.ASSUMED and "upper bound" in note


def test_time_slicing_beyond_the_cores_keeps_the_measured_thread_ratio():
    pooled, _ = cells.pool([lone(300.0, 2), lone(390.0, 1)])
    single = max(pooled, key=lambda c: c.threads)
    # 4 emulated nodes on 2 cores: 1 thread each (x1.3 measured), two processes per core (x2)
    assert scaling.core_sharing(single, Shape(4, 1), True, pooled)[0] == pytest.approx(2.6)


def test_breakdown_without_control_counts_measured_core_sharing_as_contention():
    records = [lone(300.0, 2), lone(390.0, 1),
               work(record("mgwfbp", 2, 1, "1gbe", (500.0, 500.0), comm_bytes=1e6))]
    pooled, comm = cells.pool(records)
    (cell,) = breakdown.training_cells(pooled)
    out = breakdown.breakdown(cell, pooled, comm)
    assert out["compute_ms"] == pytest.approx(390.0) and out["exposed_comm_ms"] == pytest.approx(110.0)
    assert out["contention_ms"] == pytest.approx(90.0) and "x1.30 core sharing" in out["compute_source"]
    assert out["accounting_ok"]


def test_prediction_from_a_one_device_run_uses_the_borrowed_curve_and_says_so():
    records = [lone(300.0, 2), lone(200.0, 2, "resnet50"),
               work(record("none", 2, 1, "1gbe", (250.0, 250.0)), "resnet50"),
               work(record("bsp", 2, 1, "1gbe", (300.0, 300.0), comm_bytes=1e6), "resnet50"),
               work(record("mgwfbp", 2, 1, "1gbe", (500.0, 500.0), comm_bytes=1e6)),
               comm_record("1gbe", 2, 1, alpha_us=0.0, bandwidth=0.1, with_fit=True)]
    out = next(b for b in predict.explain(records) if b["benchmark"] == "resnet18")
    notes = " ".join(out["prediction_notes"])
    assert "base: 1-device run x1.25 core sharing" in notes and "borrowed" in notes
    # host cost: resnet50's bsp exposes 50 ms where its link takes 10: 40 ms per MB, borrowed and named
    assert "borrowed from other works' bsp cells measured here (resnet50 tiny)" in notes
    assert out["predicted_step_ms"] == pytest.approx(300 * 1.25 + 10.0 + 40.0)


# ---- the bytes a step sends --------------------------------------------------------------------

CTR_METRICS = {"table_bytes": 3600108, "embedding_grad_bytes_per_step": 36608, "grad_bytes": 3680756}


def test_sparse_table_is_gathered_rows_not_the_dense_table():
    traffic = gradbytes.of_record({"sparse_grad": True}, CTR_METRICS, 3680756.0, 2.0, world_size=2)
    assert traffic.allreduce_bytes == pytest.approx(80648 + 16) and traffic.allreduce_calls == 2
    assert traffic.gather_bytes == 36608 and traffic.gather_calls == 2
    assert traffic.sent_bytes == pytest.approx(80648 + 16 + 36608)
    assert "not the 3.60 MB table" in traffic.note
    # sparse_grad=false: Paddle all-reduces the dense table, as recorded
    dense = gradbytes.of_record({"sparse_grad": False}, CTR_METRICS, 3680756.0, 2.0, world_size=2)
    assert (dense.allreduce_bytes, dense.gather_calls, dense.note) == (3680756.0, 0.0, "")
    # grad_merge syncs accumulated rows once per k steps: not modelled, said so
    merged = gradbytes.of_record({"sparse_grad": True}, CTR_METRICS, 3680756.0 / 4, 0.5, world_size=2)
    assert merged.allreduce_bytes == 3680756.0 / 4 and "upper bound" in merged.note


def test_all_gather_costs_half_a_call_and_n_minus_1_shares_per_rank():
    link = Link(alpha_us=600.0, bandwidth_GBps=0.1, ranks=4, source="t")  # 100 us per ring message
    traffic = gradbytes.Traffic(0.0, 0.0, gather_bytes=1e5, gather_calls=2.0)
    # a ring all-gather: 3 messages of 100 us a call; each rank receives 3 x its 1e5 bytes at 0.1 GB/s
    assert gradbytes.comm_ms(link, traffic, 4) == pytest.approx(2 * 3 * 0.1 + 3 * 1e5 / 1e8 * 1e3)


def test_latency_bound_step_says_its_prediction_is_uncertain():
    link = Link(alpha_us=1000.0, bandwidth_GBps=1.0, ranks=2, source="t")
    small = gradbytes.Traffic(8e4, 2.0, gather_bytes=3.7e4, gather_calls=2.0)
    assert "latency-bound" in gradbytes.latency_note(link, small, 2)
    assert gradbytes.latency_note(link, gradbytes.Traffic(4.5e7, 3.0), 2) == ""


# ---- small calls priced as measured; overlap learned per work -----------------------------------

def test_small_calls_are_priced_as_measured_at_their_sizes_and_large_ones_by_the_fit():
    def rows(*times):  # one comm run's small rows at 1, 4 and 64 KiB, and two large ones on the fit
        small = [{"op": "all_reduce", "bytes": b, "time_us": t} for b, t in zip((1024, 4096, 65536), times)]
        return small + [{"op": "all_reduce", "bytes": b, "time_us": 500.0 + b / 1e3} for b in (2**20, 2**26)]
    runs = rows(2000.0, 2000.0, 1500.0) + rows(2200.0, 1800.0, 1500.0) + rows(300.0, 9000.0, 400.0)
    link = alphabeta.pooled_link([(500.0, 1.0)], 2, "t", runs)
    assert link.small == ((1024, 2000.0), (4096, 2000.0), (65536, 1500.0))  # the median of 3 runs a size
    assert link.measured_call_us(16) == 2000.0  # below the smallest size: its time (latency is flat)
    assert link.measured_call_us(16384) == pytest.approx(1750.0)  # halfway from 4 to 64 KiB in log-size
    assert link.allreduce_ms(2 * 16384, 2) == pytest.approx(2 * 1.75)  # per call, as measured
    assert link.measured_call_us(2**20) is None  # beyond the table: the fit, alpha plus the bytes
    assert link.allreduce_ms(2**20, 1) == pytest.approx((500.0 + 2**20 / 1e3) / 1e3)
    assert link.at(4).small == ()  # measured for 2 ranks: a ring of 4 has only the fit
    assert "calls up to 64 KiB as measured" in link.describe()


def breakdown_of(benchmark, method, hidden_ms, latency_share, comm_ms=10.0, gpu=True):
    return {"benchmark": benchmark, "preset": "tiny", "method": method, "predicted_comm_ms": comm_ms,
            "comm_bytes": 1e5, "exposed_comm_ms": comm_ms - hidden_ms,
            "latency_share": latency_share, "work_key": benchmark, "gpu": gpu}


def test_overlap_is_learned_per_work_and_never_from_a_latency_bound_cell():
    cal = predict.calibrate([breakdown_of("resnet50", "mgwfbp", 6.0, 0.1),
                             breakdown_of("ctr", "mgwfbp", 5.0, 0.95)])
    assert cal["window"] == {("resnet50", "mgwfbp"): pytest.approx(6.0)}
    # on CPU gloo hides nothing (overlap.GLOO_SERIAL): no window, the cell prices a host cost instead
    cpu = predict.calibrate([breakdown_of("resnet50", "mgwfbp", 6.0, 0.1, gpu=False)])
    assert cpu["window"] == {} and ("resnet50", "mgwfbp") in cpu["host"]
    window, note = predict.window_for({"work_key": "resnet50"}, "mgwfbp", cal)
    assert window == pytest.approx(6.0) and "of this work" in note
    # CTR's own cell was latency-bound and ResNet50's backward says nothing of CTR's: none hidden
    window, note = predict.window_for({"work_key": "ctr"}, "mgwfbp", cal)
    assert window is None
    # a latency-bound post-backward cell gives no host cost either
    cal = predict.calibrate([breakdown_of("ctr", "bsp", -3.0, 0.95)])
    assert cal["host"] == {}
