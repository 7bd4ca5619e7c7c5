"""Issue 44: warm-up until the step time settles, a window calibrated in seconds, per-step times,
and the machine-speed probe's judgement (synthetic figures), its record fields and schema."""
import math

import pytest
from util import reduced

from fleetbench.machine import speed
from fleetbench.measure import metrics, timing
from fleetbench.measure.repeats import aggregate, stability
from fleetbench.measure.timing import Steady, WindowTimer, calibrated_steps, settled
from fleetbench.store import schema


# ---------------------------------------------------------------- the settle rule
@pytest.mark.parametrize("times, expected", [
    ([1.0] * 5, False),  # fewer than two blocks: not yet
    ([1.0] * 6, True),
    ([3.0, 2.0, 1.5, 1.2, 1.1, 1.0], False),  # medians 2.0 then 1.1: still falling
    ([3.0, 2.0, 1.5, 1.04, 1.0, 1.02, 1.0, 1.01, 1.03], True),  # 1.02 vs 1.01
    ([1.0, 1.0, 1.0, 1.0, 9.0, 1.0], True),  # one hiccup is not a trend (medians)
    ([1.0, 1.0, 1.0, 1.1, 1.1, 1.1], False),  # +10 % > 5 %
    ([1.0, 1.0, 1.0, 1.04, 1.04, 1.04], True),  # +4 %
    ([0.5, 0.5, 0.5, 0.2, 0.2, 0.2], False),  # faster by more than 5 % moves too
])
def test_settled_compares_the_medians_of_the_last_two_blocks(times, expected):
    assert settled(times) is expected


def test_settled_block_and_tolerance_are_parameters():
    times = [2.0, 2.0, 1.0, 1.0]
    assert settled(times, block=2) is False and settled(times, block=1) is True
    assert settled([1.0, 1.0, 1.0, 1.2, 1.2, 1.2], tolerance_pct=25) is True


# ---------------------------------------------------------------- calibration
@pytest.mark.parametrize("times, window_s, min_steps, expected", [
    ([0.5, 0.5, 0.5], 10.0, 10, 20),  # 10 s at 0.5 s a step
    ([0.5, 0.5, 0.5], 2.0, 10, 10),  # never fewer than the preset's
    ([0.5, 0.5, 0.5], 0.0, 10, 10),  # 0: the preset's fixed count
    ([0.01, 0.01, 0.01], 100.0, 10, 500),  # at most MAX_CALIBRATED x the preset's
    ([9.0, 0.3, 0.3, 0.3], 3.0, 1, 10),  # the last block's median, not warm-up's first step
    ([0.3, 0.3, 0.31], 3.0, 1, 10),  # ceil: the window is at least 3 s
    ([], 5.0, 7, 7),
])
def test_calibrated_steps(times, window_s, min_steps, expected):
    assert calibrated_steps(times, window_s, min_steps) == expected


def test_steady_fixed_warmup_is_todays_rule():
    steady = Steady(min_warmup=2, max_warmup=0, window_s=0.0, min_measured=10)
    assert not steady.warmup_over([5.0]) and steady.warmup_over([5.0, 1.0])
    assert steady.measured_steps([5.0, 1.0]) == 10 and steady.was_settled is None


def test_steady_waits_for_the_step_time_then_stops_at_the_cap():
    steady = Steady(min_warmup=2, max_warmup=8, window_s=4.0, min_measured=5)
    falling = [3.0, 2.5, 2.0, 1.6, 1.3, 1.1, 1.0, 0.9]
    assert not any(steady.warmup_over(falling[:n]) for n in range(1, 8))
    assert steady.warmup_over(falling)  # the cap
    assert steady.measured_steps(falling) == 5 and steady.was_settled is False
    flat = [3.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert not steady.warmup_over(flat[:6]) and steady.warmup_over(flat)  # settled at 7
    assert steady.measured_steps(flat) == 5 and steady.was_settled is True
    assert Steady(2, 8, 40.0, 5).measured_steps(flat) == 40


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_timer_keeps_step_times_and_probes_outside_the_window():
    clock, probes, calls = Clock(), iter([[100.0, 20.0], [60.0, 18.0]]), []

    def probe():
        calls.append(clock.now)
        clock.now += 0.25  # the probe takes time; the window must not include it
        return next(probes)

    timer = WindowTimer(warmup_steps=3, clock=clock, probe=probe)
    for step, took in enumerate([2.0, 1.5, 1.0, 1.0, 1.0, 2.0], start=1):
        clock.now += took
        timer.step_done(step, samples=1, units=1)
        if step == 3:
            timer.end_warmup(step=3, now=clock.now)  # a caller's `now` is before the probe: ignored
    assert timer.finish() == pytest.approx(4.0)  # steps 4..6, no probe inside
    assert timer.step_s == pytest.approx([2.0, 1.5, 1.0, 1.0, 1.0, 2.0])
    assert timer.measured_step_s == pytest.approx([1.0, 1.0, 2.0])
    assert timer.probe_figures == [100.0, 60.0, 20.0, 18.0] and len(calls) == 2


def test_timer_warm_up_ended_later_than_the_constructor_said():
    clock = Clock()
    timer = WindowTimer(warmup_steps=2, clock=clock)
    for step in range(1, 8):
        clock.now += 1.0
        timer.step_done(step, samples=2, units=2)
        if step == 4:
            timer.end_warmup(step=4)
    assert timer.finish() == pytest.approx(3.0) and timer.measured_samples == 6
    assert len(timer.measured_step_s) == 3 and timer.warmup_steps == 4
    assert all(math.isnan(v) for v in timer.probe_figures)


# ---------------------------------------------------------------- the probe's judgement
def run(gemm_before, gemm_after, triad=(50.0, 50.0), cpu=1.0):
    return {"probe_gemm_gflops_before": gemm_before, "probe_gemm_gflops_after": gemm_after,
            "probe_triad_gbps_before": triad[0], "probe_triad_gbps_after": triad[1],
            "interference_cpu_pct": cpu, "throughput": 10.0}


@pytest.mark.parametrize("before, after, reason", [
    (76.0, 75.0, None),
    (76.0, 66.0, None),  # -13 %: within 15 %
    (76.0, 52.0, "machine slowed in the run: probe gemm \u221232% after vs before"),
    (52.0, 76.0, "machine sped up in the run: probe gemm +46% after vs before"),
    (None, 52.0, None),  # one edge: nothing to compare with
])
def test_probe_against_its_own_other_edge(before, after, reason):
    assert stability.probe_reason(run(before, after)) == reason
    assert stability.is_disturbed(run(before, after)) is (reason is not None)


def test_probe_against_the_cells_median_names_the_run_and_the_amount():
    cell = [run(76, 75), run(77, 76), run(52, 53), run(75, 76), run(76, 78)]
    reasons = stability.disturbed_reasons(cell)
    assert reasons == [None, None, "machine slow: probe gemm \u221231% vs the cell's median", None, None]
    assert stability.probe_medians(cell)["probe_gemm_gflops"] == 75
    assert stability.figure_quiet(cell) == [True, True, False, True, True]


def test_probe_triad_and_interference_reasons_add_up():
    cell = [run(76, 76), run(76, 76, triad=(50, 25), cpu=40.0), run(76, 76), run(76, 76)]
    (reason,) = [r for r in stability.disturbed_reasons(cell) if r]
    assert reason.startswith("40% CPU to others; machine slowed in the run: probe triad \u221250%")
    assert "vs the cell's median" in reason  # 25 against the others' 50


@pytest.mark.parametrize("label, limit", [("gemm", 15), ("triad", 40), ("scalar", None)])
@pytest.mark.parametrize("side", [-1, 1])
def test_each_probe_is_judged_by_its_own_limit_both_ways(label, limit, side):
    """A figure (stability.LIMITS) is named just past its limit, either way, and not just inside
    it, against its own other edge; the other figures stay still. The scalar loop is shown, never
    judged (stability.SCALAR_PCT says why): not even a 60 % move names a run."""
    name = dict(stability.PROBES)[label]
    assert stability.LIMITS[label] == limit
    for pct, named in ((14, False), (60, False)) if limit is None else ((limit - 1, False), (limit + 1, True)):
        m = {f"{n}_{e}": 50.0 for _, n in stability.PROBES for e in ("before", "after")}
        m[f"{name}_after"] = 50.0 * (1 + side * pct / 100)
        reason = stability.probe_reason(m)
        assert (reason is not None) is named, (label, pct, reason)
        if named:
            assert f"probe {label}" in reason and "after vs before" in reason


@pytest.mark.parametrize("fall, named", [(0.30, False), (0.39, False), (0.41, True), (0.60, True)])
def test_the_triad_has_a_wider_limit_than_the_gemm(fall, named):
    """The triad's quiet cv is 10-15 % on a shared guest (stability.TRIAD_PCT says why): a fall the
    GEMM's limit would name is the triad's noise; past 40 % it is named, by its own edge and the cell."""
    low = 50 * (1 - fall)
    cell = [run(76, 76, triad=(50, 50)), run(76, 76, triad=(50, low)), run(76, 76, triad=(50, 50))]
    reason = stability.disturbed_reasons(cell)[1]
    assert (reason is not None) is named
    if named:
        assert "probe triad" in reason and "after vs before" in reason and "vs the cell's median" in reason
    gemm = [run(76, 76), run(76, 76 * (1 - fall)), run(76, 76)]
    assert stability.disturbed_reasons(gemm)[1] is not None  # every fall here is past the GEMM's 15 %


def test_runs_without_a_probe_are_judged_as_before():
    old = [{"throughput": 1.0, "interference_cpu_pct": c} for c in (1.0, 50.0, None)]
    assert stability.disturbed_reasons(old) == [None, "50% CPU to others", None]
    assert stability.probe_medians(old) == {}


def test_the_cells_figure_leaves_the_slow_machines_run_out():
    records = [{"id": f"r{i}", "config": {}, "metrics": dict(run(g, g), throughput=t)}
               for i, (g, t) in enumerate([(76, 21.0), (75, 21.5), (50, 17.2), (77, 21.3)])]
    fields = aggregate.stability_fields(records, 0.05)
    assert fields["disturbed"] == {"r2": "machine slow: probe gemm \u221234% vs the cell's median"}
    assert fields["n"] == 3 and fields["mean"] == pytest.approx((21.0 + 21.5 + 21.3) / 3)
    assert [r["probe_gemm_gflops"] for r in fields["runs"]] == [76, 75, 50, 77]


def test_probe_limit_is_a_parameter():
    cell = [run(76, 76), run(70, 70), run(76, 76)]
    assert stability.disturbed_reasons(cell) == [None] * 3
    assert stability.disturbed_reasons(cell, probe_pct=5)[1] == "machine slow: probe gemm \u22128% vs the cell's median"


# ---------------------------------------------------------------- the record
def figures(rank, steps, probe):
    return metrics.RankFigures(elapsed_s=sum(steps), steps=len(steps), samples=8.0 * len(steps),
                               units=8.0 * len(steps), reader_s=None, peak_mem_mib=1.0, loss_first=1.0,
                               loss_last=0.5, probe=probe, step_s=steps, warmup_steps=10 + rank)


def test_reduce_keeps_the_slowest_probe_and_every_ranks_steps():
    mine = figures(0, [0.1, 0.1, 0.2], [80.0, 70.0, 50.0, math.nan, 21.0, 20.0])
    other = figures(1, [0.1, 0.3], [75.0, 72.0, 55.0, math.nan, 19.5, 22.0])
    totals, seen_by_1 = reduced(mine, other)
    assert totals.probe == {"probe_gemm_gflops_before": 75.0, "probe_gemm_gflops_after": 70.0,
                            "probe_triad_gbps_before": 50.0, "probe_triad_gbps_after": None,
                            "probe_scalar_mops_before": 19.5, "probe_scalar_mops_after": 20.0}
    assert totals.step_times_ms == [[100.0, 100.0, 200.0], [100.0, 300.0]] == seen_by_1.step_times_ms
    assert totals.warmup_steps == 11
    out = metrics.standard(totals, "images/s", 2, 2, threads={"omp_num_threads": 1}, probe=speed.DEFINITION)
    assert out["probe"] == speed.DEFINITION and out["warmup_steps"] == 11
    assert set(metrics.PROBE_KEYS) <= set(out) <= set(metrics.DEFINITIONS)


def test_ranks_without_step_times_gather_none():
    """An epoch run keeps no step times: no gather of empty lists (Paddle refuses a 0-size tensor)."""
    totals = reduced(figures(0, [], [math.nan] * len(metrics.PROBE_KEYS)), figures(1, [], [math.nan] * len(metrics.PROBE_KEYS)))
    assert [t.step_times_ms for t in totals] == [[], []]


def test_alone_without_a_probe_has_null_figures_and_no_definition():
    mine = figures(0, [0.1, 0.2], [math.nan] * len(metrics.PROBE_KEYS))
    out = metrics.standard(metrics.reduce(mine, metrics.Alone()), "images/s", 1, 2,
                           threads={"omp_num_threads": 1}, probe=speed.DEFINITION)
    assert all(out[k] is None for k in metrics.PROBE_KEYS) and out["probe"] is None
    assert out["step_times_ms"] == [[100.0, 200.0]] and out["warmup_settled"] is None


def valid_metrics(**extra):
    return dict({"throughput": 1.0, "unit": "images/s"}, **extra)


@pytest.mark.parametrize("extra, problem", [
    ({"probe_gemm_gflops_before": 76.0, "probe": speed.DEFINITION, "step_times_ms": [[1.0, 2.5], [3.0]]}, None),
    ({"probe_gemm_gflops_before": None, "probe": None, "step_times_ms": None}, None),
    ({"probe_gemm_gflops_after": 0.0}, "metrics.probe_gemm_gflops_after: expected a number > 0 or null"),
    ({"probe_triad_gbps_before": "fast"}, "metrics.probe_triad_gbps_before: expected a number > 0 or null"),
    ({"probe": "gemm"}, "metrics.probe: expected an object"),
    ({"step_times_ms": [1.0, 2.0]}, "metrics.step_times_ms: expected a list (by rank) of lists"),
    ({"step_times_ms": [[1.0, -2.0]]}, "metrics.step_times_ms: expected a list (by rank) of lists"),
])
def test_schema_checks_the_probe_and_step_times(extra, problem):
    found = schema._metrics_problem(valid_metrics(**extra), failed=False)
    assert (found is None) if problem is None else found.startswith(problem)


def test_schema_and_metrics_name_the_same_probe_figures():
    assert schema.PROBE_FIGURES == metrics.PROBE_KEYS
    assert {f"{name}_{edge}" for _, name in stability.PROBES for edge in ("before", "after")} == set(metrics.PROBE_KEYS)


# ---------------------------------------------------------------- the probe itself (cheap, real)
def test_the_probe_measures_every_figure_and_settles():
    probe = speed.Probe()
    gemm, triad, scalar = probe.measure()
    assert gemm > 0 and triad > 0 and scalar > 0
    seen, settled = speed.settle(probe, tolerance_pct=1000.0, max_tries=9)
    assert len(seen) == 6 and settled  # two blocks of 3 (timing.settled) agree within 1000 %
    seen, settled = speed.settle(probe, tolerance_pct=-1.0, max_tries=3)  # never agree: the cap
    assert len(seen) == 3 and not settled
    assert speed.settle_text(seen, settled).startswith("sweep: machine warm-up NOT settled, stopped after 3 probes")
    assert set(speed.DEFINITION) == {label for label, _ in stability.PROBES} and timing.SETTLE_BLOCK >= 2


@pytest.mark.parametrize("values, message", [
    ({"window_s": -1.0}, "config key 'measure.window_s' must be >= 0 seconds (got -1.0)"),
    ({"settle_steps": -2}, "config key 'measure.settle_steps' must be >= 0 (got -2)"),
])
def test_bad_measure_keys_are_refused_by_name(values, message):
    from fleetbench.measure import config

    with pytest.raises(config.ConfigError) as err:
        config.CollectiveConfig(measure=config.MeasureConfig(**values)).validate()
    assert str(err.value) == message


def test_the_measure_keys_are_not_part_of_the_experiment():
    """Records timed with or without the probe, warm-up until settled or a calibrated window are one
    cell with the records before them (the work a step does is the same)."""
    from test_cell_key import record

    from fleetbench.measure.repeats import experiment

    old = record()
    for measure in ({"probe": True, "settle_steps": 10, "window_s": 5.0}, {"probe": False, "settle_steps": 0,
                                                                           "window_s": 0.0}):
        new = record(config=dict(old["config"], measure=measure))
        assert experiment.cell_key(new) == experiment.cell_key(old) and experiment.of(new) == experiment.of(old)


# ---------------------------------------------------------------- the ranks of a machine in turn
@pytest.mark.parametrize("keys", [[7.0, 7.0, 9.0, 7.0], [7.0, 7.0], [1.0, 2.0, 3.0], [5.0] * 5, [3.0, 4.0, 4.0, 3.0]])
def test_ranks_of_one_machine_probe_one_after_the_other_and_machines_at_once(keys):
    """speed.Turns over real threads and a real barrier, one per rank: two ranks of a machine never
    probe at once, every rank probes once, and an edge costs as many rounds as the fullest machine."""
    import threading
    import time

    barrier, lock, spans = threading.Barrier(len(keys)), threading.Lock(), []

    def rank(index: int) -> None:
        turns = speed.Turns(keys, index, barrier.wait)
        assert turns.rounds == max(keys.count(k) for k in keys)

        def measure() -> list:
            start = time.perf_counter()
            sum(range(50_000))  # a probe's span (work, not a wait): the barrier orders the ranks
            with lock:
                spans.append((keys[index], start, time.perf_counter()))
            return [float(index)]
        assert turns(measure) == [float(index)]

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(len(keys))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(spans) == len(keys)
    for i, (key, start, end) in enumerate(spans):
        for other, (key2, start2, end2) in enumerate(spans):
            if other != i and key2 == key:
                assert end <= start2 or end2 <= start  # no overlap on one machine


def test_the_machine_key_is_the_boot_id_and_exact_in_a_float64():
    key = speed.machine_key()
    assert key > 0 and key == int(key) and key < 2 ** 53
    assert int(key) == int(open("/proc/sys/kernel/random/boot_id").read().replace("-", "")[:12], 16)


def test_gpu_ranks_probe_at_once_and_cpu_ranks_gather_their_machines(monkeypatch):
    """A GPU rank's GEMM is its own device's: no gather, no barrier (a round's barrier made every
    rank wait out a slow device's probe, past gloo's 30 s time-out on the simulated host). A CPU
    rank gathers the machine keys and waits its turn."""
    calls = []
    monkeypatch.setattr(speed.Probe, "measure", lambda self: calls.append(self.device) or [1.0, 2.0, 3.0])

    def refuse(*args):
        raise AssertionError("a GPU rank's probe gathered or waited")

    probe = speed.in_turn("gpu:3", refuse, 1, refuse)
    assert probe() == [1.0, 2.0, 3.0] and calls == ["gpu:3"]
    barriers = []
    probe = speed.in_turn("cpu", lambda values: [values, values], 1, lambda: barriers.append(1))
    assert probe() == [1.0, 2.0, 3.0] and len(barriers) == 2  # two ranks of one machine: two rounds


# A fresh interpreter whose numpy BLAS may use 2 threads (as a PS worker's OMP_NUM_THREADS=2 says),
# that forks after building its probe (a worker's data pipes do), then probes.
FORK_THEN_PROBE = """
import os, sys
from fleetbench.machine import speed
threads = lambda: len(os.listdir("/proc/self/task"))
probe = speed.Probe()
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
before = threads()
probe.measure()
print(before, threads())
"""


def test_an_edge_starts_no_blas_thread_after_a_fork():
    # OpenBLAS shuts its pool down at a fork and starts it again when its thread count is next set;
    # a new pool thread spins ~0.1 s. Set at each edge, it took a core from the probe (CTR 2/2 worker
    # 0's before edge: 51-74 GFLOP/s against 85, 8 runs of 11, 2026-11-29).
    import subprocess

    from util import PYTHON, env

    p = subprocess.run([PYTHON, "-c", FORK_THEN_PROBE], env=env(OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2"),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    before, after = map(int, p.stdout.split())
    assert after == before
