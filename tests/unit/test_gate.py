"""fleetbench gate (issue 48): new runs against a baseline in the database, compare's statistics.
Constructed sides from a seeded generator (history/synthetic.py): a 10 % slowdown at 10 runs a
side fails, an A/A pair passes, and over many fixed seeds the A/A false alarms are as rare as the
test's alpha says (a binomial test, not one lucky seed)."""
import copy

import pytest
from scipy import stats

from fleetbench.history import synthetic
from fleetbench.report.regression import gate
from fleetbench.store import cli as importer
from fleetbench.store import results

A_A_SEEDS = range(100)


@pytest.mark.parametrize("change_pct, n, cv, passed", [
    (-10.0, 10, 0.03, False),   # the case
    (-10.0, 6, 0.03, False),    # fewer runs: still found
    (-5.0, 20, 0.01, False),    # a smaller slowdown with quieter runs
    (+10.0, 10, 0.03, True),    # faster is not a regression
    (-1.0, 10, 0.003, True),    # significant, but below the 2 % minimum effect
])
def test_constructed_changes_fail_or_pass_the_gate_on_every_seed(change_pct, n, cv, passed):
    outcomes = [gate.run(new, base)["passed"]
                for base, new in (synthetic.sides(seed, n, change_pct, cv) for seed in range(10))]
    assert outcomes == [passed] * 10


def test_a_a_false_alarms_are_consistent_with_alpha():
    alarms = [not gate.run(new, base)["passed"] for base, new in (synthetic.sides(seed) for seed in A_A_SEEDS)]
    # the example: 19 of 20 pass (or better)
    assert sum(alarms[:20]) <= 1
    # over 100 fixed seeds, a false-alarm rate above alpha = 0.05 would show: binomial test
    assert stats.binomtest(sum(alarms), len(alarms), 0.05, alternative="greater").pvalue > 0.01, sum(alarms)


def _baseline_store(tmp_path, runs=15, factor=1.0, cpu=None):
    """A database whose tag=main holds `runs` runs of one cell (the older first)."""
    base, _ = synthetic.sides(7, n=runs)
    for r in base:
        r["metrics"]["throughput"] *= factor
        if cpu:
            r["env"] = copy.deepcopy(r["env"])
            r["env"]["cpu"]["model"] = cpu
    path = tmp_path / "main.jsonl"
    for r in base:
        results.append(str(path), r)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    importer.index([str(path)], url, tag="main")
    return url, base


def test_the_cli_fails_a_slowdown_with_a_markdown_summary(tmp_path, capsys):
    url, base = _baseline_store(tmp_path, runs=15, factor=1 / 0.9)  # the new runs are 10 % slower
    _, new = synthetic.sides(8)
    path = tmp_path / "pr.jsonl"
    for r in new:
        results.append(str(path), r)
    summary = tmp_path / "comment.md"
    assert gate.cli([str(path), "--db", url, "--base", "tag=main", "--summary", str(summary)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("### fleetbench gate: FAILED, 1 of 1 cell(s) slower")
    assert "Baseline: 10 run(s), the last 10 of each cell" in out and "| SLOWER |" in out
    assert summary.read_text() == out
    # the same runs from the database by their tag; all 15 baseline runs with --last 0
    importer.index([str(path)], url, tag="pr-1")
    assert gate.cli(["--db", url, "--new", "tag=pr-1", "--base", "tag=main", "--last", "0", "--json"]) == 1
    assert '"baseline_runs": 15' in capsys.readouterr().out


def test_an_a_a_passes_and_other_hardware_is_no_baseline(tmp_path, capsys):
    url, _ = _baseline_store(tmp_path)
    _, new = synthetic.sides(9)
    path = tmp_path / "pr.jsonl"
    for r in new:
        results.append(str(path), r)
    assert gate.cli([str(path), "--db", url, "--base", "tag=main"]) == 0
    assert capsys.readouterr().out.startswith("### fleetbench gate: passed")
    (tmp_path / "amd").mkdir()
    other, _ = _baseline_store(tmp_path / "amd", cpu="AMD EPYC 7B13")
    assert gate.cli([str(path), "--db", other, "--base", "tag=main"]) == 2
    assert "the baseline is empty" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["--db", "{url}"], "expected the new runs as results files or as --new KEY=VALUE"),
    (["{pr}", "--db", "{url}", "--base", "tag=nothing"], "the baseline is empty"),
    (["{pr}", "--db", "sqlite:///{tmp}/none.db"], "no fleetbench store there"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, says):
    url, base = _baseline_store(tmp_path)
    pr = tmp_path / "pr.jsonl"
    results.append(str(pr), synthetic.sides(3)[1][0])
    argv = [a.format(url=url, pr=pr, tmp=tmp_path) for a in argv]
    assert gate.cli(argv) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1
