"""bench/noise_parts.py on constructed sweeps: a drift common to every cell's round is found as
the rounds' level and trend and not counted as run-to-run noise; a spread between processes is; a
run's own sub-windows give the within-process part; and the probe is said to track the throughput
only where it does."""
import importlib.util
import math
import sys

import pytest
from util import REPO

spec = importlib.util.spec_from_file_location("noise_parts", REPO / "bench" / "noise_parts.py")
noise_parts = sys.modules["noise_parts"] = importlib.util.module_from_spec(spec)  # dataclasses look it up
spec.loader.exec_module(noise_parts)


def _record(cell: int, k: int, rate: float, steps=None, gemm=80.0):
    steps = steps or [[10.0] * 40]
    return {"benchmark": f"b{cell}", "mode": "ps", "method": "async", "preset": "tiny", "nodes": 1,
            "devices_per_node": 1, "world_size": 1, "config": {}, "network": None, "env": None, "error": None,
            "time": f"2026-01-01T00:{k:02d}:{cell:02d}", "metrics": {
                "throughput": rate, "step_times_ms": steps, "interference_cpu_pct": 0.0,
                "probe_gemm_gflops_before": gemm, "probe_gemm_gflops_after": gemm}}


DRIFT = (1.0, 0.9, 0.8, 0.7, 0.6)  # the machine slows 10% a round, every cell alike


def test_a_drift_common_to_the_rounds_is_drift_not_run_to_run_noise():
    records = [_record(c, k, base * d) for c, base in enumerate((1000.0, 5000.0, 300.0)) for k, d in enumerate(DRIFT)]
    p = noise_parts.parts(noise_parts.runs_of(records, 4), 4)
    assert p.runs == 15 and p.cells == 3 and p.between == pytest.approx(0.0, abs=1e-9)
    levels = [math.log1p(v) for v in p.rounds]
    steps = [math.log(d1 / d0) for d0, d1 in zip(DRIFT, DRIFT[1:])]
    assert [b - a for a, b in zip(levels, levels[1:])] == pytest.approx(steps, rel=1e-3)  # levels kept to 4 places
    assert p.drift_per_round < -0.1 and p.within == pytest.approx(0.0)
    # a ratio within a round cancels the drift: two runs suffice; an absolute figure needs many
    ratio, absolute = noise_parts.cheapest(p, 0.05)[2], noise_parts.cheapest(p, 0.05)[0]
    assert "2 runs" in ratio and "more than 100" not in ratio and "2 runs" not in absolute


def test_noise_between_processes_is_between_and_sub_windows_are_within():
    wobble = (1.1, 0.9, 1.05, 0.95)  # run to run, not shared by the round's other cell
    steps = [[10.0] * 10 + [12.0] * 10 + [10.0] * 10 + [8.0] * 10]  # one run's windows differ
    records = [_record(c, k, 1000.0 * (w if c == 0 else 1 / w), steps) for c in (0, 1) for k, w in enumerate(wobble)]
    p = noise_parts.parts(noise_parts.runs_of(records, 4), 4)
    assert p.between > 0.05 and p.drift == pytest.approx(0.0, abs=1e-9)  # opposite in the two cells: no drift
    rates = [10 / 0.1, 10 / 0.12, 10 / 0.1, 10 / 0.08]
    mean = sum(rates) / 4
    assert p.within == pytest.approx(math.sqrt(sum((r - mean) ** 2 for r in rates) / 3) / mean)


def test_the_probe_is_said_to_track_the_throughput_only_where_it_does():
    slow = (1.0, 0.8, 0.9, 0.7, 1.1, 0.85)  # the machine's speed, run by run
    tracked = [_record(c, k, 1000.0 * (c + 1) * s, gemm=80.0 * s) for c in (0, 1) for k, s in enumerate(slow)]
    (gemm, *_) = noise_parts.probe_tracks(noise_parts.runs_of(tracked, 4))
    assert gemm.startswith("  probe_gemm_gflops: r +1.00") and "holds" in gemm and "does not" not in gemm
    flat = [_record(c, k, 1000.0 * (c + 1) * s, gemm=80.0 * (1 + 0.01 * (k % 2)))
            for c in (0, 1) for k, s in enumerate(slow)]
    (gemm, *_) = noise_parts.probe_tracks(noise_parts.runs_of(flat, 4))
    assert "does not hold: no normalised figure" in gemm
