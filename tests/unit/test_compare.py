"""fleetbench compare (issue 34): the statistics on constructed samples against published values,
cells matched on the declared key, verdicts, exit codes, and bad input in one line (exit 2)."""
import json
import random
import re

import pytest

from fleetbench.history import compare
from fleetbench.report.regression import comparison
from fleetbench.store import results

BASE10 = [float(v) for v in range(1, 11)]


def new_with_u(u_last: float) -> list[float]:
    """Ten runs beating 5, 5, 5, 5 and `u_last` - 0.5 of BASE10's runs: U = 20 + that, no ties."""
    return [5.51, 5.52, 5.53, 5.54, u_last, 0.51, 0.52, 0.53, 0.54, 0.55]


def test_mann_whitney_u_against_the_published_critical_value():
    # Critical values of U (two-sided 0.05, n1 = n2 = 10): 23 (Mann and Whitney 1947; e.g. the table
    # in Siegel's Nonparametric Statistics): U = 23 is significant, U = 24 is not.
    assert compare.p_value(BASE10, new_with_u(3.5), compare.MWU) < 0.05
    assert compare.p_value(BASE10, new_with_u(4.5), compare.MWU) > 0.05
    # exact, one side entirely above the other: 2 / C(10, 5) for 5 + 5 runs
    assert compare.p_value([1, 2, 3, 4, 5], [6, 7, 8, 9, 10], compare.MWU) == pytest.approx(2 / 252)
    assert compare.mwu_min_p(5, 5) == pytest.approx(2 / 252) and compare.mwu_min_p(3, 3) == pytest.approx(0.1)


def test_welch_against_the_published_example():
    # Welch's t-test, Wikipedia's example 1 (unequal variances): t = -2.46, df = 24.99, p = 0.021
    a1 = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
    a2 = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]
    assert compare.p_value(a2, a1, compare.WELCH) == pytest.approx(0.021, abs=0.0005)


def test_holm_against_the_textbook_example():
    # four hypotheses, p = 0.01, 0.04, 0.03, 0.005 at alpha 0.05: Holm rejects the first and the
    # last only (adjusted 0.03, 0.06, 0.06, 0.02); untested cells stay None and are not counted
    assert compare.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert compare.holm([0.01, None, 0.04]) == [pytest.approx(0.02), None, pytest.approx(0.04)]
    assert compare.holm([0.5, 0.9]) == [pytest.approx(1.0), pytest.approx(1.0)]


def test_the_test_is_chosen_by_what_the_runs_can_show():
    assert compare.choose_test(10, 10, 0.05) == (compare.MWU, "")
    test, why = compare.choose_test(3, 3, 0.05)
    assert test == compare.WELCH and "least p is 0.1" in why and "4 runs a side would allow it" in why
    # Holm's first step over 10 cells is 0.005: 5 + 5 runs (least p 0.0079) cannot reach it by ranks
    assert compare.choose_test(5, 5, 0.005)[0] == compare.WELCH
    test, why = compare.choose_test(1, 3, 0.05)
    assert test is None and why == "n=1+3: a test needs 2 runs a side; 1 more base run"


def runs(centre, spread=0.01, n=10, seed=0):
    """n runs around `centre` with normal noise of std `spread` (a fraction), the same every time."""
    rng = random.Random(f"{centre} {spread} {n} {seed}")
    return [centre * (1 + rng.gauss(0, spread)) for _ in range(n)]


def test_verdicts_on_constructed_samples():
    slower, same, few, small = compare.compare_many([
        (runs(20.0), runs(18.0)),                # -10 %, 10 + 10 runs
        (runs(20.0), runs(20.0)),                # A/A
        ([20.0], runs(18.0, n=3)),               # one base run
        (runs(20.0, 0.001), runs(20.1, 0.001)),  # +0.5 %: significant, below the 2 % minimum effect
    ])
    assert slower.verdict == compare.SLOWER and slower.change_pct == pytest.approx(-10.0, abs=1.0)
    lo, hi = slower.ci95_pct
    assert lo < slower.change_pct < hi < 0 and slower.test == compare.MWU
    assert same.verdict == compare.SAME and same.ci95_pct[0] < 0 < same.ci95_pct[1]
    assert few.verdict == compare.INSUFFICIENT and "1 more base run" in few.note
    assert small.p_adjusted < 0.05 and small.verdict == compare.SAME and small.min_effect_pct == 2.0
    # Holm over the three tested pairs: the adjusted p is never below the raw one
    assert slower.p_adjusted >= slower.p_value and few.p_value is None


def test_the_minimum_effect_is_the_noise_when_larger_than_the_threshold():
    noisy = [100.0, 110.0, 90.0, 105.0, 95.0]
    assert compare.minimum_effect(noisy, noisy, 2.0) == pytest.approx(compare.cv_pct(noisy))
    assert compare.minimum_effect([100.0, 100.1], [100.0, 100.1], 2.0) == 2.0


def test_the_interval_is_the_same_for_the_same_runs():
    a, b = runs(20.0, 0.05), runs(19.0, 0.05)
    assert compare.change_ci(a, b) == compare.change_ci(a, b)
    assert compare.change_ci([1.0], b) == (None, "")


# ---- files, keys, the command line -------------------------------------------------------------

def record(throughput, paddle="2.6.2", method="mgwfbp", network="10gbe", n=0, interference=1.0, **over):
    rec = {"schema": 1, "id": f"{paddle}-{method}-{network}-{n}-{throughput}", "time": f"2026-11-2{n % 10}T00:00:00+00:00",
           "git": "a" * 40, "benchmark": "resnet50", "preset": "tiny", "mode": "collective", "method": method,
           "network": {"profile": network} if network else None, "nodes": 2, "devices_per_node": 1,
           "world_size": 2, "error": None,
           "config": {"batch_size": 8, "seed": 1, "method": method,
                      "runtime": {"paddle": paddle, "threads": {"omp_num_threads": 1}}},
           "metrics": {"throughput": throughput, "unit": "images/s", "interference_cpu_pct": interference},
           "env": {"paddle": {"version": paddle, "compiled_with_cuda": False, "commit": paddle.replace(".", "")},
                   "cpu": {"model": "EPYC", "cores": 2}, "memory": {"total_mib": 24000}}}
    rec.update(over)
    return rec


def store(path, recs):
    for r in recs:
        results.append(str(path), r)
    return str(path)


def side(tmp_path, name, values, **kw):
    return store(tmp_path / f"{name}.jsonl", [record(v, n=i, **kw) for i, v in enumerate(values)])


def test_cells_match_across_builds_and_a_slower_cell_exits_1(tmp_path, capsys):
    base = side(tmp_path, "base", runs(21.1, 0.02))
    new = side(tmp_path, "new", runs(19.0, 0.02), paddle="3.3.1")
    assert comparison.cli([base, new]) == 1
    out = capsys.readouterr().out
    (line,) = [l for l in out.splitlines() if l.startswith("resnet50 tiny mgwfbp 2x1 10gbe")]
    assert re.search(r" -(9|10|11)\.\d% \[", line) and "(p=" in line and "n=10+10" in line and line.endswith("SLOWER")
    assert comparison.cli([base, base]) == 0
    assert " ~ (p=" in capsys.readouterr().out


def test_json_has_the_issues_shape(tmp_path, capsys):
    base = side(tmp_path, "base", runs(21.1, 0.02))
    new = side(tmp_path, "new", runs(19.0, 0.02), paddle="3.3.1")
    comparison.cli([base, "--", new, "--json"])
    report = json.loads(capsys.readouterr().out)
    (cell,) = report["cells"]
    assert cell["key"]["benchmark"] == "resnet50" and cell["key"]["network"] == "10gbe"
    assert "paddle" not in cell["key"] and "config.runtime.paddle" not in cell["key"]
    assert cell["base"]["n"] == 10 and len(cell["base"]["ids"]) == 10 and cell["new"]["paddle"].startswith("3.3.1")
    assert cell["verdict"] == "slower" and cell["change_pct"] < 0 and len(cell["ci95_pct"]) == 2
    assert 0 < cell["p_value"] < 0.05 and report["counts"]["slower"] == 1


def test_ignore_and_match_choose_the_cells(tmp_path, capsys):
    bsp = side(tmp_path, "bsp", runs(20.0), method="bsp")
    mg = side(tmp_path, "mg", runs(20.0), method="mgwfbp")
    assert comparison.cli([bsp, mg]) == 2  # methods differ: no cell in both
    assert "no cell in both sides" in capsys.readouterr().err
    assert comparison.cli([bsp, mg, "--ignore", "method", "--markdown"]) == 0
    assert "| resnet50 tiny 2x1 10gbe | 19.98 ± 0.14 | 19.98 ± 0.14 | ~ (p=1.000 n=10+10) | ~ |" in capsys.readouterr().out
    # a side holding two builds of one cell is not pooled; --match paddle compares them apart
    both = store(tmp_path / "both.jsonl", [record(v, n=i) for i, v in enumerate(runs(20.0))]
                 + [record(v, paddle="3.3.1", n=i) for i, v in enumerate(runs(25.0))])
    assert comparison.cli([both, mg]) == 2
    assert "never pooled: --match paddle" in capsys.readouterr().err
    assert comparison.cli([both, both, "--match", "paddle"]) == 0
    assert capsys.readouterr().out.count(" ~ (p=") == 2


def test_disturbed_and_outlying_runs_are_left_out_and_named(tmp_path, capsys):
    base = store(tmp_path / "b.jsonl", [record(v, n=i) for i, v in enumerate(runs(20.0))]
                 + [record(12.0, n=11, interference=48.0)])
    new = side(tmp_path, "n", runs(20.0))
    comparison.cli([base, new, "--json"])
    (cell,) = json.loads(capsys.readouterr().out)["cells"]
    assert cell["base"]["n"] == 10 and list(cell["base"]["disturbed"].values()) == ["48% CPU to others"]
    comparison.cli([base, new])
    assert "base: 1 disturbed run(s) left out (" in capsys.readouterr().out


BAD = [
    (["A"], "expected two results files (BASE NEW) or BASE... -- NEW..., got 1 file and no --"),
    (["A", "--"], "the new side is empty"),
    (["--", "A"], "the base side is empty"),
    (["A", "B", "--match", "paddel"], "--match paddel: not a cell key; expected one of"),
    (["A", "B", "--ignore", "config.batchsize"], "--ignore config.batchsize: not a cell key"),
    (["A", "missing.jsonl"], "results missing.jsonl: cannot read it"),  # the shared parser's words (cmdline)
    (["A", "B", "--threshold", "-1"], "--threshold '-1': expected a number >= 0 and < 1000"),
    (["A", "B", "--alpha", "5"], "--alpha '5': expected a number > 0 and < 1"),
    (["A", "EMPTY"], "the new side (EMPTY) has no successful throughput run to compare"),
]


def exit_code(argv) -> int:
    """comparison.cli's return value, or argparse's exit code for a flag it refused."""
    try:
        return comparison.cli(argv)
    except SystemExit as stop:
        return stop.code


@pytest.mark.parametrize("argv, message", BAD)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    store(tmp_path / "A", [record(v, n=i) for i, v in enumerate(runs(20.0))])
    store(tmp_path / "B", [record(v, n=i, network="1gbe") for i, v in enumerate(runs(20.0))])
    (tmp_path / "EMPTY").write_text("")
    code = exit_code(argv)
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_no_common_cell_names_both_sides(tmp_path, capsys):
    a, b = side(tmp_path, "A", runs(20.0)), side(tmp_path, "B", runs(20.0), network="1gbe")
    assert comparison.cli([a, b]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fleetbench compare: error: no cell in both sides: base has 1 (resnet50 tiny mgwfbp 2x1 10gbe)")
    assert "--ignore KEY" in err and err.count("\n") == 1


# ---- how the sides were measured: interleaved or one after the other ----------------------------

def timed(tmp_path, name, values, minutes, day=26, **kw):
    """A side whose run i ran at 15:minutes[i] UTC on 2026-11-`day`."""
    return store(tmp_path / f"{name}.jsonl", [record(v, n=i, time=f"2026-11-{day}T15:{m:02d}:30.250+00:00", **kw)
                                              for i, (v, m) in enumerate(zip(values, minutes))])


def test_design_from_the_sides_spans():
    def side_(a, b):
        return {"from": f"2026-11-26T15:{a:02d}:00+00:00", "to": f"2026-11-26T15:{b:02d}:00+00:00"}
    assert compare.design(side_(2, 5), side_(6, 9)) == compare.SEQUENTIAL
    assert compare.design(side_(6, 9), side_(2, 5)) == compare.SEQUENTIAL
    assert compare.design(side_(2, 8), side_(3, 9)) == compare.INTERLEAVED
    assert compare.design(side_(2, 9), side_(5, 5)) == compare.INTERLEAVED  # one side inside the other
    assert compare.design(side_(2, 5), {"from": None, "to": None}) is None  # a published figure: no runs
    # zones: one instant however written; a time without a zone is UTC
    assert compare.run_time("2026-11-26T17:02:00+02:00") == compare.run_time("2026-11-26T15:02:00Z") \
        == compare.run_time("2026-11-26T15:02:00")
    assert compare.run_time(None) is None and compare.run_time("yesterday") is None


def test_sequential_sides_are_said_and_the_verdict_stands(tmp_path, capsys):
    values_a, values_b = runs(20.0, 0.02, n=4), runs(18.0, 0.02, n=4)
    reports = {}
    for design, (ma, mb) in {"sequential": ([2, 3, 4, 5], [6, 7, 8, 9]),
                             "interleaved": ([2, 4, 6, 8], [3, 5, 7, 9])}.items():
        base, new = timed(tmp_path, f"{design}-a", values_a, ma), timed(tmp_path, f"{design}-b", values_b, mb)
        assert comparison.cli([base, new, "--json"]) == 1
        (reports[design],) = json.loads(capsys.readouterr().out)["cells"]
        comparison.cli([base, new])
        reports[design]["console"] = capsys.readouterr().out
    seq, inter = reports["sequential"], reports["interleaved"]
    assert seq["design"] == "sequential" and inter["design"] == "interleaved"
    assert seq["base"]["from"] == "2026-11-26T15:02:30.250000+00:00" and seq["new"]["to"] == "2026-11-26T15:09:30.250000+00:00"
    assert {k: seq[k] for k in ("verdict", "p_adjusted", "change_pct")} == \
        {k: inter[k] for k in ("verdict", "p_adjusted", "change_pct")}  # the note changes no verdict
    assert ("resnet50 tiny mgwfbp 2x1 10gbe: base's runs all came before new's (15:02-15:05 -> 15:06-15:09 UTC): "
            "a drift of the machine between them reads as a change; interleave the sides "
            "(fleetbench sweep --interleave, docs/guide/compare.md)\n") in seq["console"]
    assert "came before" not in inter["console"]
    # the other way round, and on two days
    base, new = timed(tmp_path, "late", values_a, [2, 3], day=27), timed(tmp_path, "early", values_b, [50, 55])
    comparison.cli([base, new, "--markdown"])
    assert ("- resnet50 tiny mgwfbp 2x1 10gbe: new's runs all came before base's (2026-11-26 15:50-2026-11-26 15:55 "
            "-> 2026-11-27 15:02-2026-11-27 15:03 UTC)") in capsys.readouterr().out


def test_one_line_when_every_cell_was_measured_one_after_the_other(tmp_path, capsys):
    a, b = runs(20.0, n=3), runs(20.0, n=3, seed=1)
    base = store(tmp_path / "base.jsonl", [record(v, n=i, network=net, time=f"2026-11-26T15:0{i + k}:00+00:00")
                                          for k, net in ((0, "10gbe"), (3, "1gbe")) for i, v in enumerate(a)])
    new = store(tmp_path / "new.jsonl", [record(v, n=i, network=net, time=f"2026-11-26T16:0{i + k}:00+00:00")
                                        for k, net in ((0, "10gbe"), (3, "1gbe")) for i, v in enumerate(b)])
    comparison.cli([base, new])
    lines = [line for line in capsys.readouterr().out.splitlines() if "came before" in line]
    assert lines == ["all 2 cells: base's runs all came before new's (15:00-15:05 -> 16:00-16:05 UTC): a drift of "
                     "the machine between them reads as a change; interleave the sides (fleetbench sweep "
                     "--interleave, docs/guide/compare.md)"]
    # one cell interleaved: the other is named alone
    mixed = store(tmp_path / "mixed.jsonl", [record(v, n=i, network=net, time=f"2026-11-26T{h}:0{i + k}:00+00:00")
                                            for k, net, h in ((0, "10gbe", 15), (3, "1gbe", 16)) for i, v in enumerate(b)])
    comparison.cli([base, mixed, "--json"])
    designs = {c["key"]["network"]: c["design"] for c in json.loads(capsys.readouterr().out)["cells"]}
    assert designs == {"10gbe": "interleaved", "1gbe": "sequential"}
    comparison.cli([base, mixed])
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "came before" in line]
    assert line.startswith("resnet50 tiny mgwfbp 2x1 1gbe: base's runs all came before new's (15:03-15:05 -> 16:03-16:05 UTC)")
