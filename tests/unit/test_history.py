"""fleetbench history (issue 34): series in order, change points found where the mean shifts and
judged by compare's tests, none in a flat series, a chart per cell with more than one point."""
import csv
import json

from fleetbench.history import changepoints
from fleetbench.report.regression import history_view
from test_compare import record, runs, store


def steps(first, second, n=6):
    """n runs at `first`, then n at `second`, on two days and two commits, 1 % spread."""
    out = [record(v, n=i, time=f"2026-11-20T00:00:{i:02d}+00:00", git="a" * 40) for i, v in enumerate(runs(first, 0.01, n))]
    out += [record(v, n=n + i, time=f"2026-11-21T00:00:{i:02d}+00:00", git="b" * 40)
            for i, v in enumerate(runs(second, 0.01, n))]
    return out


def test_a_step_is_found_where_it_is_and_called_slower():
    assert changepoints.change_points(runs(20.0, 0.01, 6) + runs(18.0, 0.01, 6)) == [6]
    assert changepoints.change_points(runs(20.0, 0.01, 12)) == []
    assert changepoints.change_points([20.0] * 12) == []  # equal runs: the noise floor, not every run a change
    assert changepoints.change_points([20.0, 18.0, 20.0]) == []  # too short to show a change


def test_history_orders_points_and_judges_the_change(tmp_path, capsys):
    path = store(tmp_path / "h.jsonl", list(reversed(steps(20.0, 18.0))))  # stored out of order
    assert history_view.cli([path, "--images", str(tmp_path / "img")]) == 0
    out = capsys.readouterr().out
    assert "resnet50 tiny mgwfbp 2x1 10gbe (images/s): 12 runs, 2 point(s)" in out
    assert out.index("2026-11-20 2.6.2 aaaaaaa") < out.index("2026-11-21 2.6.2 bbbbbbb")
    (line,) = [l for l in out.splitlines() if "change at run 7" in l]
    assert " -10." in line or " -9." in line or " -11." in line
    assert "  SLOWER; what changed: fleetbench commit aaaaaaaa → bbbbbbbb; Paddle unchanged" in line
    rows = list(csv.DictReader(open(tmp_path / "img" / "history-resnet50-tiny-mgwfbp-2x1-10gbe.csv")))
    assert [r["segment"] for r in rows] == ["0"] * 6 + ["1"] * 6
    assert (tmp_path / "img" / "history-resnet50-tiny-mgwfbp-2x1-10gbe.png").stat().st_size > 0


def test_by_paddle_and_json(tmp_path, capsys):
    recs = [record(v, paddle="3.3.1", n=i, time=f"2026-11-20T00:00:{i:02d}+00:00") for i, v in enumerate(runs(25.0, 0.01, 5))]
    recs += [record(v, paddle="2.6.2", n=i, time=f"2026-11-21T00:00:{i:02d}+00:00") for i, v in enumerate(runs(20.0, 0.01, 5))]
    path = store(tmp_path / "v.jsonl", recs)
    assert history_view.cli([path, "--by", "paddle", "--json"]) == 0
    (cell,) = json.loads(capsys.readouterr().out)["cells"]
    assert [p["label"] for p in cell["points"]] == ["Paddle 2.6.2", "Paddle 3.3.1"]
    (change,) = cell["changes"]
    assert change["at"] == 5 and change["verdict"] == "faster" and change["change_pct"] > 20


def test_disturbed_runs_are_shown_and_left_out_of_the_detection(tmp_path, capsys):
    recs = steps(20.0, 20.0)
    recs[3]["metrics"]["interference_cpu_pct"] = 60.0
    recs[3]["metrics"]["throughput"] = 11.0
    path = store(tmp_path / "d.jsonl", recs)
    history_view.cli([path, "--images", str(tmp_path / "img")])
    out = capsys.readouterr().out
    assert "12 runs, 2 point(s), 1 disturbed (not in figures)" in out and "no change point" in out


def test_bad_input_is_one_line(tmp_path, capsys):
    path = store(tmp_path / "h.jsonl", steps(20.0, 18.0))
    assert history_view.cli([path, "--match", "paddel"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fleetbench history: error: --match paddel: not a cell key") and err.count("\n") == 1
    (tmp_path / "empty.jsonl").write_text("")
    assert history_view.cli([str(tmp_path / "empty.jsonl")]) == 2
    assert "no successful measured throughput run" in capsys.readouterr().err


def test_the_c_pelt_finds_what_ruptures_python_pelt_finds():
    """change_points runs ruptures' KernelCPD (linear kernel: the l2 cost, in C) for speed; on
    seeded series with 0-2 shifts it splits where ruptures.Pelt(model="l2") splits, exactly."""
    import math

    import numpy as np
    import ruptures
    rng = np.random.default_rng(34)
    for _ in range(60):
        n = int(rng.integers(changepoints.MIN_SERIES, 60))
        x = 1000 * (1 + 0.02 * rng.standard_normal(n))
        for _ in range(int(rng.integers(0, 3))):
            x[int(rng.integers(1, n)):] *= 1 + rng.normal(0, 0.08)
        penalty = changepoints.PENALTY * math.log(n) * changepoints.noise(list(x)) ** 2
        pelt = ruptures.Pelt(model="l2", min_size=changepoints.MIN_SEGMENT, jump=1)
        ends = pelt.fit(x.reshape(-1, 1)).predict(pen=penalty)
        assert changepoints.change_points(list(x)) == [e for e in ends if e < n]


def test_the_permutation_test_in_blocks_is_the_test_one_order_at_a_time(monkeypatch):
    """split_p draws its random orders a block of rows at a time (Generator.permuted) for speed: on
    seeded series, flat and shifted, short and long, and with blocks cut mid-way, its p is exactly
    the p of drawing one order at a time with Generator.permutation."""
    import numpy as np

    def one_at_a_time(values, permutations=changepoints.PERMUTATIONS, seed=changepoints.SEED):
        rng = np.random.default_rng(seed)
        observed = changepoints.split_statistic(values)
        stronger = sum(changepoints.split_statistic(rng.permutation(values)) >= observed
                       for _ in range(permutations))
        return (stronger + 1) / (permutations + 1)
    rng = np.random.default_rng(48)
    for n, shift in ((4, 0.0), (7, 0.05), (40, 0.0), (40, 0.02), (300, 0.01)):
        x = list(1000 * (1 + 0.02 * rng.standard_normal(n)) * np.where(np.arange(n) < n // 2, 1, 1 - shift))
        assert changepoints.split_p(x) == one_at_a_time(x)
    monkeypatch.setattr(changepoints, "PERMUTED_BLOCK", 1000)  # 3 orders of 300 a block
    assert changepoints.split_p(x) == one_at_a_time(x)


def test_charts_drawn_by_worker_processes_are_the_charts_drawn_here(tmp_path, monkeypatch):
    """Many charts are drawn by worker processes (write_charts): the same PNG and CSV bytes, and the
    same links, as drawing them in this process."""
    recs = steps(20.0, 18.0)
    recs += [dict(r, id=r["id"] + "-bert", benchmark="bert") for r in steps(30.0, 30.0)]
    report = history_view.run([store(tmp_path / "two.jsonl", recs)])
    monkeypatch.setattr(history_view, "CHARTS_A_WORKER", 1)  # two charts are enough for two workers
    here = history_view.write_charts(report, str(tmp_path / "here"), lambda p: p.split("/")[-1], jobs=1)
    there = history_view.write_charts(report, str(tmp_path / "there"), lambda p: p.split("/")[-1], jobs=2)
    assert here[0] == there[0] and len(here[0]) == 2
    for name in sorted(p.name for p in (tmp_path / "here").iterdir()):
        assert (tmp_path / "here" / name).read_bytes() == (tmp_path / "there" / name).read_bytes(), name
