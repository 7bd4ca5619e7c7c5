"""Interference (issue 34): what else used the machine in a run's timed window, from /proc/stat and
the job's own processes; a disturbed run is shown, left out of its cell's figure and of the
until-stable stop, and a neighbour that stays cannot make a disturbed majority look stable."""
import os
import subprocess
import sys

import pytest

from fleetbench.machine import gpu_procs
from fleetbench.measure import interference, metrics
from fleetbench.measure.repeats import aggregate, stability
from fleetbench.measure.contract import JOB_ID
from fleetbench.report import tables

STAT = """cpu  100 10 50 800 20 5 5 10 7 0
cpu0 50 5 25 400 10 3 2 5 3 0
intr 1 2 3
"""


def test_proc_stat_counts_steal_as_busy_and_guest_once():
    busy, total = interference.parse_proc_stat(STAT)
    assert busy == 100 + 10 + 50 + 5 + 5 + 10 and total == busy + 800 + 20
    with pytest.raises(ValueError):
        interference.parse_proc_stat("intr 1\n")


def test_pid_stat_with_parentheses_in_the_name():
    text = "4242 (python (rank) 0) S 17 1 1 0 -1 4194304 1 0 0 0 30 12 4 2 20 0 5 0 900 1 1"
    assert interference.parse_pid_stat(text) == (17, 30 + 12 + 4 + 2)


def test_the_window_subtracts_the_job_and_clamps():
    start = interference.CpuSample(busy=1000, total=4000, job=300)
    end = interference.CpuSample(busy=1800, total=5000, job=800)
    assert interference.window(start, end) == {"interference_cpu_pct": pytest.approx(30.0),
                                               "job_cpu_pct": pytest.approx(50.0)}
    # a job process that died unreaped took its time along: the job never counts above the busy time
    over = interference.CpuSample(busy=1800, total=5000, job=2000)
    assert interference.window(start, over)["interference_cpu_pct"] == 0.0
    assert interference.window(None, end)["interference_cpu_pct"] is None


def test_ranks_combine_as_the_most_disturbed_machine():
    nan = float("nan")
    assert interference.combine([[3.0, 40.0, nan], [12.0, 35.0, nan]]) == {
        "interference_cpu_pct": 12.0, "job_cpu_pct": 35.0, "interference_gpu_procs": None}
    assert interference.combine([[3.0, 40.0, 1.0], [2.0, 35.0, 0.0]])["interference_gpu_procs"] == 1
    assert interference.combine([[nan, nan, nan]])["interference_cpu_pct"] is None
    totals = metrics.reduce(metrics.RankFigures(1.0, 10, 10, 10, 0.1, 1.0, 1.0, 1.0, [7.0, 50.0, 2.0]), metrics.Alone())
    threads = {"omp_num_threads": 1, "source": "user"}  # the process's thread record, passed in
    assert metrics.standard(totals, "images/s", 1, 0, threads=threads)["interference_gpu_procs"] == 2


def test_the_jobs_processes_are_found_by_its_marker_and_no_others(tmp_path):
    sleep = [sys.executable, "-c", "import time; time.sleep(30)"]
    plain = {k: v for k, v in os.environ.items() if k not in (JOB_ID, "PADDLE_TRAINER_ENDPOINTS")}
    endpoints = "10.9.0.1:6170,10.9.0.2:6170"
    mine = subprocess.Popen(sleep, env=dict(plain, **{JOB_ID: "job34test-node0", "PADDLE_TRAINER_ENDPOINTS": endpoints}))
    # the same job's rank on another emulated node of this machine: its node's id, the job's endpoints
    peer = subprocess.Popen(sleep, env=dict(plain, **{JOB_ID: "job34test-node1", "PADDLE_TRAINER_ENDPOINTS": endpoints}))
    other = subprocess.Popen(sleep, env=dict(plain, PADDLE_TRAINER_ENDPOINTS="10.9.0.1:6171"))
    try:
        stats = interference._stats()
        markers = interference.job_markers({JOB_ID: "job34test-node0", "PADDLE_TRAINER_ENDPOINTS": endpoints})
        found = interference.job_processes(stats, markers, os.getpid())
        assert {mine.pid, peer.pid, os.getpid()} <= found and other.pid not in found
        found = interference.job_processes(stats, interference.job_markers({JOB_ID: "job34test-node0"}), os.getpid())
        assert mine.pid in found and peer.pid not in found and other.pid not in found
        # without a marker: this process and its children (all three sleepers are)
        tree = interference.job_processes(stats, [], os.getpid())
        assert {mine.pid, peer.pid, other.pid, os.getpid()} <= tree
        assert interference.job_markers({"PADDLE_TRAINER_ENDPOINTS": "a:1,b:2"}) == ["PADDLE_TRAINER_ENDPOINTS=a:1,b:2"]
        assert interference.job_markers({}) == []
    finally:
        for p in (mine, peer, other):
            p.kill()
            p.wait()


def test_a_sample_reads_this_machine():
    sample = interference.sample()
    assert sample.total >= sample.busy > 0 and os.getpid() in sample.pids


def test_gpu_processes_of_the_jobs_gpus():
    text = "101, GPU-a\n102, GPU-a\n103, GPU-b\n[N/A], GPU-c\nNo running processes found\n"
    apps = gpu_procs.parse(text)
    assert apps == [(101, "GPU-a"), (102, "GPU-a"), (103, "GPU-b")]
    assert gpu_procs.count_others(apps, {101}) == 1  # 102 shares GPU-a; 103 is on a GPU the job does not use
    assert gpu_procs.count_others(apps, {999}) is None  # the job's pids not listed: nothing can be told


# ---- disturbed runs in figures and stops ---------------------------------------------------------

def run(value, cpu=1.0, i=0):
    return {"schema": 1, "id": f"r{i}-{value}", "time": f"2026-11-25T00:00:0{i}+00:00", "git": None,
            "benchmark": "resnet50", "preset": "demo", "mode": "collective", "method": "mgwfbp", "network": None,
            "nodes": 1, "devices_per_node": 2, "world_size": 2, "error": None,
            "config": {"batch_size": 8, "runtime": {"paddle": "2.6.2"}},
            "metrics": {"throughput": value, "unit": "images/s", "interference_cpu_pct": cpu},
            "env": {"paddle": {"version": "2.6.2"}, "cpu": {"cores": 2}}}


def test_the_issues_demo_keeps_the_one_quiet_run():
    # make demo, fresh machine: 32.53 quiet, then 19.23, 18.70, 18.92 under a neighbour; the sweep had
    # called the slow three stable and the quiet one the outlier
    recs = [run(32.53, 2.0, 0), run(19.23, 47.0, 1), run(18.70, 49.0, 2), run(18.92, 45.0, 3)]
    (group,) = aggregate.aggregate(recs)
    assert group["mean"] == 32.53 and group["n"] == 1 and group["excluded"] == []
    assert sorted(group["disturbed"]) == ["r1-19.23", "r2-18.7", "r3-18.92"]
    assert aggregate.figure_note(group) == " (n=1; 3 disturbed runs excluded)"
    values = [r["metrics"]["throughput"] for r in recs]
    quiet = [not stability.is_disturbed(r["metrics"]) for r in recs]
    assert stability.stop_reason(values, 5.0, 3, 10, quiet) is None  # one quiet run: go on
    assert stability.stop_reason(values, 5.0, 3, 4, quiet) == stability.AT_MAX
    assert stability.stop_reason(values, 5.0, 3, 10) == stability.STABLE  # what it said without interference


def test_every_run_disturbed_keeps_a_figure_that_says_so():
    (group,) = aggregate.aggregate([run(19.2, 47.0, 0), run(18.7, 49.0, 1), run(18.9, 45.0, 2)])
    assert group["n"] == 3 and group["figure_disturbed"]
    assert "(all 3 runs disturbed: no undisturbed figure)" in aggregate.figure_note(group)
    assert stability.stop_reason([19.2, 18.7, 18.9], 5.0, 3, 3, [False] * 3) == stability.AT_MAX


def test_the_report_marks_disturbed_runs():
    planned = tables.plan([run(32.53, 2.0, 0), run(32.0, 3.0, 1), run(19.23, 47.0, 2)])
    text = tables.report_markdown("R", planned, {}, ["x"], 3)
    assert "19.23 [r2-19.23] (disturbed: 47% CPU to others)" in text
    assert "1 run(s) were disturbed: more than 10% of the machine's CPU time" in text
    assert "(n=2; 1 disturbed run excluded)" in text


# ---- stability verdicts judge the undisturbed runs (issue 34: "Stability verdicts use it") -------

def test_one_disturbed_run_does_not_make_an_undisturbed_cell_unstable_and_is_counted():
    # issue 23's runs with the far one measured as disturbed: over every run the cv was 44%
    recs = [run(42.08, 2.0, 0), run(42.39, 3.0, 1), run(42.2, 1.0, 2), run(16.58, 47.0, 3)]
    (group,) = aggregate.aggregate(recs)
    assert group["cv"] == pytest.approx(stability.cv([42.08, 42.39, 42.2])) and group["unstable"] is False
    assert aggregate.agreement(group) == "stable (cv 0%) over 3 undisturbed runs; 1 disturbed run left out"
    # an undisturbed cell that varies is still unstable, its disturbed runs counted
    (varies,) = aggregate.aggregate([run(30.0, 1.0, 0), run(36.0, 1.0, 1), run(18.0, 60.0, 2), run(18.5, 60.0, 3)])
    assert varies["unstable"] is True
    assert aggregate.agreement(varies, "! ") == "! unstable: cv 13% > 5% over 2 undisturbed runs; 2 disturbed runs left out"


def test_a_sustained_neighbour_cannot_make_its_runs_look_stable():
    # every run slowed alike by a neighbour that stayed: they agree (cv 1%), and say nothing of the job
    disturbed = [run(19.2, 47.0, 0), run(18.7, 49.0, 1), run(18.9, 45.0, 2)]
    (group,) = aggregate.aggregate(disturbed)
    assert group["cv"] is None and group["unstable"] is False and group["figure_disturbed"]
    assert aggregate.agreement(group) == "no stability verdict: all 3 runs were disturbed"
    assert aggregate.agreement(aggregate.aggregate(disturbed[:1])[0]) == "no stability verdict: its one run was disturbed"
    # a disturbed majority beside one quiet run: no cv, one undisturbed run, the rest said
    (majority,) = aggregate.aggregate([run(32.53, 2.0, 0), run(19.23, 47.0, 1), run(18.70, 49.0, 2), run(18.92, 45.0, 3)])
    assert majority["cv"] is None and majority["unstable"] is False
    assert aggregate.agreement(majority) == "cv undefined: one undisturbed run; 3 disturbed runs left out"
    planned = tables.plan(disturbed)
    assert tables.stability_lines(planned[0]) == [
        "mgwfbp, world size 2: no stability verdict: all 3 runs were disturbed; runs in images/s: 19.2 [r0-19.2] "
        "(disturbed: 47% CPU to others), 18.7 [r1-18.7] (disturbed: 49% CPU to others), 18.9 [r2-18.9] "
        "(disturbed: 45% CPU to others)."]


def test_the_until_stable_verdict_counts_only_undisturbed_runs():
    policy = {"until_stable": True, "target_ci_pct": 5.0, "min_repeats": 3, "max_repeats": 3}

    def under_policy(value, cpu, i):
        rec = run(value, cpu, i)
        rec["config"]["runtime"]["repeats"] = policy
        return rec
    quiet = [under_policy(v, 1.0, i) for i, v in enumerate((19.2, 18.7, 18.9))]
    noisy = [under_policy(v, 47.0, i) for i, v in enumerate((19.2, 18.7, 18.9))]
    assert aggregate.aggregate(quiet)[0]["until_stable"] == stability.STABLE
    assert aggregate.aggregate(noisy)[0]["until_stable"] == stability.AT_MAX
    mixed = quiet[:2] + noisy[2:]  # two undisturbed runs: fewer than the minimum of 3
    assert aggregate.aggregate(mixed)[0]["until_stable"] == stability.AT_MAX


def test_a_cell_repeated_until_stable_is_judged_by_its_own_rule_in_words_too():
    """The report and the sweep say one thing of an adaptive cell: eight runs whose cv is 6 % have
    a mean known to ±4.8 %, stable by the ±5 % it repeated for; the same runs without the policy
    are unstable by the cv rule; at ±2 % they are unstable by the CI rule, both said with figures."""
    values = (24.08, 25.02, 25.93, 27.73, 28.29, 27.78, 27.79, 26.4)

    def cell(target):
        recs = [run(v, 1.0, i) for i, v in enumerate(values)]
        for rec in recs:
            if target is not None:
                rec["config"]["runtime"]["repeats"] = {"until_stable": True, "target_ci_pct": target,
                                                       "min_repeats": 3, "max_repeats": 8}
        return aggregate.aggregate(recs)[0]
    met, plain, missed = cell(5.0), cell(None), cell(2.0)
    assert met["until_stable"] == stability.STABLE and met["unstable"] is False
    assert aggregate.agreement(met, "! ") == "stable: the mean's 95% CI ±4.8% within the ±5% it repeated for (runs' cv 6%)"
    assert plain["until_stable"] is None and plain["unstable"] is True
    assert aggregate.agreement(plain, "! ") == "! unstable: cv 6% > 5%"
    assert missed["until_stable"] == stability.AT_MAX and missed["unstable"] is True
    assert aggregate.agreement(missed, "! ").startswith("! unstable: the mean's 95% CI ±4.8% > the ±2% it repeated for")


def test_an_until_stable_cell_with_one_undisturbed_run_has_no_spread_to_judge_and_draws():
    """Four of five runs disturbed (the 2026-11-28 demo's CTR async 1/1 cell): the cell stopped at
    its maximum, but one run has no spread: `cv undefined`, not unstable, and a chart's caption and
    table print it (the report crashed on its cv of None)."""
    from fleetbench.report import charts

    policy = {"until_stable": True, "target_ci_pct": 5.0, "min_repeats": 3, "max_repeats": 5}
    recs = [run(v, c, i) for i, (v, c) in enumerate([(20.0, 1.0), (19.0, 40.0), (18.0, 45.0), (18.5, 50.0), (19.5, 42.0)])]
    for rec in recs:
        rec["config"]["runtime"]["repeats"] = policy
    (group,) = aggregate.aggregate(recs)
    assert group["until_stable"] == stability.AT_MAX and group["cv"] is None and group["unstable"] is False
    assert aggregate.agreement(group).startswith("cv undefined: one undisturbed run; 4 disturbed runs left out")
    chart = {"series": [{"groups": [group]}]}
    assert "UNSTABLE" not in charts.caption_text(chart, {"x"})
    unstable = dict(group, unstable=True, cv=0.12, ci95_pct=9.1, until_stable=stability.AT_MAX)
    assert aggregate.why_unstable(unstable) == "95% CI ±9.1% > ±5%"
    assert aggregate.why_unstable(dict(unstable, until_stable=None)) == "cv 12% > 5%"
