"""fleetbench sweep --interleave (issue 34): the order of a sweep's runs.

The rule (sweep/order.py) is checked on counts; the real Sweep's loop is driven with scripted
throughputs (test_sweep_stable.Scripted: each run stores the next figure, so what runs when is
decided by the figures and counts alone, never by timing): rounds, until-stable cells that end
early, resume in the middle of a round, warm-up, skipped and failing cells. The stored order of a
real interleaved sweep is tests/unit/test_sweep.py's job test."""
import re

import pytest
from test_sweep_stable import Scripted, _policy, cells, figures_of

from fleetbench.emulate import netem
from fleetbench.sweep import adaptive, order, runner, sweepfile


@pytest.mark.parametrize("done, limits, interleave, turns", [
    ([0, 0], [2, 2], False, [(0, 1), (0, 2), (1, 1), (1, 2)]),
    ([0, 0], [2, 2], True, [(0, 1), (1, 1), (0, 2), (1, 2)]),
    # cells with other repeats: those left take the later rounds alone, in cell order
    ([0, 0, 0], [2, 4, 1], True, [(0, 1), (1, 1), (2, 1), (0, 2), (1, 2), (1, 3), (1, 4)]),
    # resumed in the middle of round 2: its rest first, then round 3
    ([2, 1, 1], [3, 3, 3], True, [(1, 2), (2, 2), (0, 3), (1, 3), (2, 3)]),
    ([2, 1, 1], [3, 3, 3], False, [(0, 3), (1, 2), (1, 3), (2, 2), (2, 3)]),
    ([3, 0], [3, 2], True, [(1, 1), (1, 2)]),  # a cell done earlier takes no turn
    ([1], [3], True, [(0, 2), (0, 3)]),
    ([2, 2], [2, 2], True, []),
])
def test_the_order_of_turns(done, limits, interleave, turns):
    assert order.schedule(done, limits, interleave) == turns


def test_the_next_turn_passes_over_cells_that_are_over():
    assert order.next_turn([1, 0, 0], [True, False, True], True) == 2
    assert order.next_turn([1, 0, 0], [True, False, True], False) == 0
    assert order.next_turn([0, 0], [False, False], True) is None
    assert order.next_turn([5, 2, 2], [True, True, True], True) == 1  # the first in cell order among equals


def test_rounds_text():
    assert order.rounds_text([2, 1, 3], [3, 3, 3]) == ("interleaved: rounds of one run of each cell not yet "
                                                       "over, in cell order; round 2 next")
    assert order.rounds_text([3, 3], [3, 3]) == ""


def test_interleave_from_the_flag_or_the_key():
    assert _policy(["--interleave"]).interleave and _policy([], {"interleave": True}).interleave
    assert not _policy([]).interleave and not _policy([], {"interleave": False}).interleave
    with pytest.raises(sweepfile.SweepError, match=r"^s.yaml: interleave: 'yes': expected true or false$"):
        _policy([], {"interleave": "yes"})


def _three(tmp_path, figures, policy, *sets, repeats=2, store="runs.jsonl"):
    return Scripted(figures, cells(*sets, repeats=repeats), tmp_path / store, tmp_path, policy)


def test_an_interleaved_sweep_runs_in_rounds_and_says_so(tmp_path):
    sweep = _three(tmp_path, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], adaptive.Policy(interleave=True),
                   {"steps": 7}, {"steps": 8}, {"steps": 9})
    rows = sweep.run({})
    assert sweep.events == [("run", 1, 1), ("run", 2, 1), ("run", 3, 1), ("run", 1, 2), ("run", 2, 2), ("run", 3, 2)]
    assert [r["n"] for r in rows] == [2, 2, 2] and [r["mean"] for r in rows] == [2.5, 3.5, 4.5]
    out = sweep.out.getvalue()
    assert "interleaved: rounds of one run of each cell not yet over, in cell order; round 1 next\n" in out
    progress = [line.split(" | ")[0] for line in out.splitlines() if " | elapsed" in line]
    assert [p.split(" resnet50")[0] + " " + p.rsplit(" ", 1)[1] for p in progress] == [
        "cell 1/3 1/2", "cell 2/3 1/2", "cell 3/3 1/2", "cell 1/3 2/2", "cell 2/3 2/2", "cell 3/3 2/2"]
    lines = [line for line in out.splitlines() if " | elapsed" in line]
    assert "ETA ?" in lines[0] and "ETA ?" not in lines[2]  # an ETA from the second run
    assert out.splitlines()[2] == "sweep: machine warm-up (scripted)"  # before any run (issue 44)
    assert "sweep finished in" in out and ": 6 runs, 0 failed" in out


def test_an_until_stable_cell_takes_turns_until_it_ends_the_others_are_passed_by(tmp_path):
    settled, noisy = [100.0, 100.0, 100.0], [80.0, 120.0, 85.0, 115.0, 90.0]
    figures = [settled[0], noisy[0], settled[1], noisy[1], settled[2], noisy[2], noisy[3], noisy[4]]
    sweep = _three(tmp_path, figures + [1.0], adaptive.Policy(until_stable=True, max_repeats=5, interleave=True),
                   {"steps": 7}, {"steps": 8}, repeats=3)
    sweep.run({})
    assert sweep.events == [("run", 1, 1), ("run", 2, 1), ("run", 1, 2), ("run", 2, 2), ("run", 1, 3),
                            ("run", 2, 3), ("run", 2, 4), ("run", 2, 5)]
    assert figures_of(tmp_path / "runs.jsonl") == figures
    out = sweep.out.getvalue()
    assert out.index("cell 1/2 resnet50 tiny collective 1x1 steps=7: stable") < out.index("repeat 4/3")
    assert "cell 2/2 resnet50 tiny collective 1x1 steps=8: NOT stable" in out


def test_a_resumed_interleaved_sweep_ends_its_round_then_goes_on(tmp_path):
    first = _three(tmp_path, [1.0, 2.0, 3.0], adaptive.Policy(interleave=True), {"steps": 7}, {"steps": 8}, repeats=3)
    with pytest.raises(runner.Interrupted):
        first.run({})  # cell 1 twice, cell 2 once: stopped in round 2
    assert first.events == [("run", 1, 1), ("run", 2, 1), ("run", 1, 2)]
    resumed = _three(tmp_path, [4.0, 5.0, 6.0], adaptive.Policy(interleave=True), {"steps": 7}, {"steps": 8},
                     repeats=3)
    assert [done for _, done in resumed.plan()] == [2, 1]
    resumed.run({})
    assert resumed.events == [("run", 2, 2), ("run", 1, 3), ("run", 2, 3)]
    assert "round 2 next" in resumed.out.getvalue()


def test_warmup_before_the_first_measured_run_skipped_and_failing_cells(tmp_path):
    # a network cell on a CUDA build is skipped on its turn; a cell whose runs fail takes one turn a
    # round, never more, and its failures do not hold the others up
    net = sweepfile.expand({"repeats": 2, "cells": [{"benchmark": "resnet50", "preset": "tiny", "network": "1gbe"}]})
    plain = cells({"steps": 7}, {"steps": 8}, repeats=2)
    sweep = Scripted([1.0, None, 2.0, None], [plain[0], *net, plain[1]], tmp_path / "runs.jsonl", tmp_path,
                     adaptive.Policy(interleave=True, warmup_run=True))
    sweep.cuda_build = True
    sweep.run({})
    assert [e[0] if e[0] == "warmup" else e for e in sweep.events] == [
        "warmup", ("run", 1, 1), ("run", 3, 1), ("run", 1, 2), ("run", 3, 2)]
    out = sweep.out.getvalue()
    assert f"cell 2/3 resnet50 tiny collective 2x1 net=1gbe: skipped ({runner.EMULATED_ON_CUDA})" in out
    assert figures_of(tmp_path / "runs.jsonl") == [1.0, 2.0]  # cell 3 stored nothing: it failed twice


@pytest.mark.parametrize("euid, tools, fix", [(1000, True, "sudo make demo"), (0, False, "make deps-demo")])
def test_a_network_cell_it_cannot_run_is_skipped_with_the_command_that_enables_it(tmp_path, monkeypatch,
                                                                                   euid, tools, fix):
    # not root, or without ip/tc: the local cells run, the network cell is named with its fix at its
    # turn and again at the end, and the sweep does not fail for it
    monkeypatch.setattr(runner.os, "geteuid", lambda: euid)
    monkeypatch.setattr(netem.os, "geteuid", lambda: euid)
    monkeypatch.setattr(netem.shutil, "which", lambda tool: f"/usr/sbin/{tool}" if tools else None)
    net = sweepfile.expand({"repeats": 1, "cells": [{"benchmark": "resnet50", "preset": "tiny", "network": "1gbe"}]})
    sweep = Scripted([1.0], [*net, cells({"steps": 7}, repeats=1)[0]], tmp_path / "runs.jsonl", tmp_path,
                     adaptive.Policy())
    sweep.run({})
    assert sweep.events == [("run", 2, 1)] and sweep.failed_runs == 0
    lines = sweep.out.getvalue().splitlines()
    at_turn = [line for line in lines if line.startswith("cell 1/2 ") and ": skipped (" in line]
    assert len(at_turn) == 1 and fix in at_turn[0]
    assert ", 1 cell skipped" in [line for line in lines if line.startswith("sweep finished")][0]
    assert [line for line in lines if line.startswith("skipped cell 1/2 ")][0].count(fix) == 1


def test_the_sweep_warms_the_machine_up_with_the_real_probe(tmp_path):
    """runner.Sweep.settle_machine: machine/speed.settle's probes, then one line saying how it went."""
    sweep = _three(tmp_path, [1.0], adaptive.Policy(), {"steps": 7}, repeats=1)
    runner.Sweep.settle_machine(sweep)
    line = sweep.out.getvalue().strip()
    found = re.fullmatch(r"sweep: machine warm-up (settled|NOT settled, stopped) after (\d+) probes "
                         r"\(machine/speed.py\): gemm [\d.]+ -> [\d.]+ GFLOP/s, triad [\d.]+ -> [\d.]+ GB/s, "
                         r"scalar [\d.]+ -> [\d.]+ M iterations/s", line)
    assert found, line
    assert 6 <= int(found[2]) <= runner.MACHINE_WARMUP_TRIES  # two blocks of 3 at least (timing.settled)
    assert found[1] == "settled" or int(found[2]) == runner.MACHINE_WARMUP_TRIES
