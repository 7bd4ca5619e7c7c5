"""The run layer (fleetbench.train.run) and the metrics vocabulary, without a job: the
results-path check, the record, the supervised guard, a store that fails after training, and
the reduction across ranks both families share."""
import json
import re

import pytest
import util
from util import REPO, records, run_script

from fleetbench.measure import config, contract, metrics, registry
from fleetbench.store import results
from fleetbench.train import run

THREADS = {"omp_num_threads": 2, "source": "user"}  # a thread record, as fleetbench.threads_info() gives


def test_an_unwritable_results_path_is_found_before_anything_runs(tmp_path):
    with pytest.raises(results.PathError, match=r"^--results /proc/forbidden/r.jsonl: cannot create files in /proc"):
        results.check_appendable("/proc/forbidden/r.jsonl")
    with pytest.raises(results.PathError, match="is a directory"):
        results.check_appendable(str(tmp_path))
    (tmp_path / "file").write_text("x")
    with pytest.raises(results.PathError, match="is not a directory"):
        results.check_appendable(str(tmp_path / "file" / "r.jsonl"))
    results.check_appendable(str(tmp_path / "new" / "deeper" / "r.jsonl"))  # made by the append
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # the probe leaves nothing


def test_the_script_says_so_in_one_line_and_exits_2(tmp_path):
    for script in ("collective/resnet50.py", "parameter_server/ctr.py"):
        done = run_script(script, "--preset", "tiny", "--check", "--results", "/proc/forbidden/r.jsonl")
        errors = [line for line in done.stderr.splitlines() if "error:" in line]
        assert done.returncode == 2 and len(errors) == 1 and "--results /proc/forbidden/r.jsonl" in errors[0]


def make_run(tmp_path, family="collective", name="resnet50"):
    from collective import (
        resnet50,  # a namespace package: the script imports without running
    )
    from parameter_server import ctr
    cls = resnet50.ResNet50Config if family == "collective" else ctr.CTRConfig
    script = REPO / registry.BENCHMARKS[name].script
    return run.start(script, cls, family, ["--preset", "tiny", "--results", str(tmp_path / "r.jsonl")])


def test_the_record_of_each_family(tmp_path):
    where = run.Placement(rank=0, world_size=3, nodes=2, runtime={"servers": 2, "workers": 3})
    rec = make_run(tmp_path, "ps", "ctr").record_for(where, {"throughput": 1.0, "unit": "examples/s"}, None)
    assert (rec["benchmark"], rec["mode"], rec["method"], rec["preset"]) == ("ctr", "ps", "async", "tiny")
    assert (rec["nodes"], rec["devices_per_node"], rec["world_size"]) == (2, 2, 3)
    runtime = rec["config"]["runtime"]
    assert runtime["servers"] == 2 and runtime["workers"] == 3 and "omp_num_threads" in runtime["threads"]
    assert "steps" not in rec["config"]  # PS runs whole passes; it has no step count to ignore
    bench = make_run(tmp_path)
    rec = bench.record_for(run.Placement(0, 2, 1, {"device": "cpu"}), None, "ValueError: x")
    assert (rec["mode"], rec["method"], rec["devices_per_node"], rec["error"]) == ("collective", "mgwfbp", 2, "ValueError: x")
    assert rec["config"]["steps"] == 12 and bench.unit == "images/s"


def test_failures_are_stored_by_rank_0_unless_a_supervisor_does(tmp_path, monkeypatch):
    bench = make_run(tmp_path)
    monkeypatch.delenv(contract.JOB_ID, raising=False)
    bench.store_failure(run.Placement(1, 2, 1), RuntimeError("rank 1's"))
    assert records(tmp_path / "r.jsonl") == []
    bench.store_failure(run.Placement(0, 2, 1), RuntimeError("boom"))
    assert [r["error"] for r in records(tmp_path / "r.jsonl")] == ["RuntimeError: boom"]
    monkeypatch.setenv(contract.JOB_ID, "job-1")
    bench.store_failure(run.Placement(0, 2, 1), RuntimeError("again"))
    assert len(records(tmp_path / "r.jsonl")) == 1


def test_a_store_that_fails_after_training_keeps_the_result_in_the_log(tmp_path, capsys):
    bench = make_run(tmp_path)
    bench.results_path = str(tmp_path / "gone" / "r.jsonl")
    (tmp_path / "gone").write_text("a file where the store's directory should be")
    assert bench.store_result(run.Placement(0, 1, 1), {"throughput": 5.0, "unit": "images/s"}) == 1
    out, err = capsys.readouterr()
    line = next(line for line in out.splitlines() if line.startswith(results.RESULT_PREFIX))
    assert json.loads(line[len(results.RESULT_PREFIX):])["metrics"]["throughput"] == 5.0
    (message,) = err.strip().splitlines()
    assert message.startswith("resnet50: error: ") and str(tmp_path / "gone" / "r.jsonl") in message
    assert "FLEETBENCH_RESULT" in message and "Traceback" not in err
    assert bench.store_result(run.Placement(1, 2, 1), {"throughput": 5.0}) == 0  # other ranks store nothing


def test_check_prints_the_config_and_sets_check_only(tmp_path, capsys):
    from parameter_server import ctr
    bench = run.start(REPO / "parameter_server/ctr.py", ctr.CTRConfig, "ps", ["--preset", "tiny", "--check"])
    assert bench.check_only and json.loads(capsys.readouterr().out)["batch_size"] == 32
    with pytest.raises(RuntimeError, match="registered as a ps benchmark"):
        run.start(REPO / "parameter_server/ctr.py", ctr.CTRConfig, "collective", ["--check"])


def test_step_time_is_the_slowest_ranks_own_step_in_both_families():
    """PS workers run different numbers of steps: the slowest worker's time per its own step,
    not the window times the worker count over all workers' steps (the old PS figure)."""
    fast = metrics.RankFigures(elapsed_s=2.0, steps=400, samples=4000, units=4000, reader_s=None,
                               peak_mem_mib=100, loss_first=0.7, loss_last=0.5)
    slow = metrics.RankFigures(elapsed_s=3.0, steps=200, samples=2000, units=2000, reader_s=None,
                               peak_mem_mib=300, loss_first=0.9, loss_last=0.3)
    totals = util.reduced(fast, slow)[0]
    m = metrics.standard(totals, "examples/s", 2, 10, threads=THREADS)
    assert m["step_time_ms"] == pytest.approx(15.0) and m["measured_steps"] == 200
    assert m["elapsed_s"] == 3.0 and m["rank_elapsed_s"] == [2.0, 3.0] and m["throughput"] == pytest.approx(2000)
    assert m["reader_time_ms"] is None and m["peak_mem_mib"] == 300 and m["loss_first"] == pytest.approx(0.8)
    assert m["throughput_per_device"] == pytest.approx(1000) and m["omp_num_threads"] == 2  # the record passed in
    alone = metrics.standard(metrics.reduce(fast, metrics.Alone()), "examples/s", 1, 10, threads=THREADS)
    assert alone["step_time_ms"] == pytest.approx(5.0) and alone["rank_elapsed_s"] == [2.0]


def test_every_metric_name_has_one_definition_in_code_and_docs():
    documented = set(re.findall(r"^\| `([a-z0-9_]+)` \|", (REPO / "docs/reference/metrics.md").read_text(), re.M))
    assert documented == set(metrics.DEFINITIONS)
    fast = metrics.RankFigures(1.0, 10, 10, 10, 0.1, 1.0, 1.0, 1.0)
    alone = metrics.standard(metrics.reduce(fast, metrics.Alone()), "images/s", 1, 0, threads=THREADS)
    assert set(alone) <= set(metrics.DEFINITIONS)
