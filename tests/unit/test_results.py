"""Result records: validation, the append-only store, loading, aggregation and efficiency."""
import copy
import json
import multiprocessing
import os

import pytest

from fleetbench.machine import stamp
from fleetbench.measure import contract
from fleetbench.measure.repeats import aggregate, experiment
from fleetbench.store import results
from fleetbench.store.results import RecordError


def run(world=1, throughput=10.0, method="allreduce", network=None, nodes=1, error=None,
        benchmark="resnet50", preset="tiny", unit="images/s"):
    metrics = None if error else {"throughput": throughput, "unit": unit}
    return stamp.record(contract.RunIdentity(benchmark=benchmark, mode="collective", method=method,
                                             preset=preset, config={"batch_size": 8}, nodes=nodes,
                                             devices_per_node=world // nodes, world_size=world,
                                             network=network), metrics, error)


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines))


# ---- make_record / validate -------------------------------------------------------------------

def test_make_record_fills_identity_env_and_network_from_environment(monkeypatch):
    monkeypatch.setenv("FLEETBENCH_NETWORK", '{"profile": "10gbe", "rate_gbit": 10}')
    record = run(world=2)
    results.validate(record)
    assert record["schema"] == 1 and len(record["id"]) == 32
    assert record["time"].endswith("+00:00")
    assert isinstance(record["env"], dict) and record["env"]  # every measured record has env
    assert record["network"] == {"profile": "10gbe", "rate_gbit": 10}
    assert record["git"] is None or len(record["git"].removesuffix("-dirty")) == 40
    monkeypatch.setenv("FLEETBENCH_NETWORK", "10gbe")
    with pytest.raises(RecordError, match="FLEETBENCH_NETWORK: expected a JSON object"):
        run()


def test_a_second_attempt_is_written_into_the_launch_block(monkeypatch):
    monkeypatch.setenv("FLEETBENCH_LAUNCH", '{"executor": "local", "hosts": ["h"]}')
    monkeypatch.setenv("FLEETBENCH_ATTEMPT", "")  # a first attempt: nothing added
    assert contract.RankContract.from_env().launch_block() == {"executor": "local", "hosts": ["h"]}
    monkeypatch.setenv("FLEETBENCH_ATTEMPT", '{"attempt": 2, "retried_after": "worker rank 1 exited with code 1"}')
    record = run(world=2)
    results.validate(record)
    assert record["launch"] == {"executor": "local", "hosts": ["h"], "attempt": 2,
                                "retried_after": "worker rank 1 exited with code 1"}


@pytest.mark.parametrize("change, message", [
    (lambda r: r["metrics"].pop("unit"), "metrics.unit: missing"),
    (lambda r: r["metrics"].update(throughput=-1.0), "metrics.throughput: expected >= 0"),
    (lambda r: r["metrics"].update(throughput=float("nan")), "metrics.throughput: expected a finite"),
    (lambda r: r["metrics"].update(unit="img/s"), "metrics.unit: expected one of"),
    (lambda r: r.update(world_size=0), "world_size: expected an integer >= 1"),
    (lambda r: r.update(mode="mpi"), "mode: expected one of collective|ps"),
    (lambda r: r.update(env=None), "env: expected an object"),
    (lambda r: r.update(metrics=None), "metrics: missing"),
])
def test_validation_errors_are_one_line_naming_file_and_line(tmp_path, change, message):
    good, bad = run(), run()
    change(bad)
    path = tmp_path / "runs.jsonl"
    write_lines(path, [results.dumps(good), results.dumps(bad), results.dumps(good)])
    with pytest.raises(RecordError) as caught:
        results.load([str(path)])
    text = str(caught.value)
    assert text.startswith(f"{path}:2: {message}") and "\n" not in text


def test_failed_run_may_omit_metrics_and_published_record_may_omit_env():
    results.validate(run(error="RuntimeError: rank 1 exited with code 9"))
    published = run()
    published.update(env=None, source={"kind": "published", "name": "x", "citation": "paper"})
    results.validate(published)
    published["source"] = {"kind": "published", "name": "x"}
    with pytest.raises(RecordError, match="source.citation"):
        results.validate(published)


def test_append_rejects_invalid_record_and_keeps_the_file(tmp_path):
    path = tmp_path / "r" / "runs.jsonl"
    results.append(str(path), run())
    before = path.read_bytes()
    bad = run()
    bad["metrics"]["throughput"] = -5.0
    with pytest.raises(RecordError, match="new record: metrics.throughput"):
        results.append(str(path), bad)
    assert path.read_bytes() == before


# ---- store ------------------------------------------------------------------------------------

def test_emit_prints_result_line_and_appends(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    record = run()
    results.emit(str(path), record)
    out = capsys.readouterr().out.strip()
    assert out.startswith("FLEETBENCH_RESULT ")
    assert json.loads(out[len("FLEETBENCH_RESULT "):]) == record
    assert results.load(str(path)) == [record]


def test_torn_last_line_is_reported_skipped_and_set_aside_on_next_append(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    first, second, third = run(throughput=1.0), run(throughput=2.0), run(throughput=3.0)
    results.append(str(path), first)
    results.append(str(path), second)
    torn = results.dumps(run())[:57].encode()  # a crash in the middle of a write
    with open(path, "ab") as handle:
        handle.write(torn)
    assert results.load([str(path)]) == [first, second]
    assert f"{path}:3: skipped a torn last line" in capsys.readouterr().err

    results.append(str(path), third)  # must not glue the new line onto the fragment
    assert "moved a torn last line" in capsys.readouterr().err
    assert results.load([str(path)]) == [first, second, third]
    assert (tmp_path / "runs.jsonl.torn").read_bytes() == torn + b"\n"


def test_a_valid_last_record_without_newline_is_kept_on_the_next_append(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    first, second, third = run(throughput=1.0), run(throughput=2.0), run(throughput=3.0)
    # a file edited by hand or concatenated: the last record is complete, only its newline is missing
    path.write_text(results.dumps(first) + "\n" + results.dumps(second))
    assert results.load([str(path)]) == [first, second]
    results.append(str(path), third)
    assert results.load([str(path)]) == [first, second, third]
    assert not (tmp_path / "runs.jsonl.torn").exists()
    assert "torn" not in capsys.readouterr().err
    assert path.read_bytes().endswith(b"}\n") and path.read_bytes().count(b"\n") == 3


def test_emit_prints_the_record_before_storing_and_names_the_path_when_it_cannot_store(
        tmp_path, capsys):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    path = blocker / "runs.jsonl"  # its parent is a file: the append must fail
    record = run()
    with pytest.raises(OSError) as caught:
        results.emit(str(path), record)
    assert isinstance(caught.value, results.StoreError)
    message = str(caught.value)
    assert str(path) in message and "FLEETBENCH_RESULT" in message and "\n" not in message
    out = capsys.readouterr().out.strip()  # the record is not lost: it is in the log
    assert json.loads(out[len(results.RESULT_PREFIX):]) == record


def test_a_bad_line_before_the_last_is_an_error_not_a_tear(tmp_path):
    path = tmp_path / "runs.jsonl"
    write_lines(path, [results.dumps(run()), '{"schema": 1, "id": ', results.dumps(run())])
    with pytest.raises(RecordError, match=r":2: not a JSON record"):
        results.load([str(path)])


def _append_many(path, count, tag):
    for i in range(count):
        record = run(throughput=float(i))
        record["config"]["writer"] = tag
        results.append(path, record)


def test_concurrent_appenders_never_interleave_lines(tmp_path):
    path = str(tmp_path / "runs.jsonl")
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_append_many, args=(path, 40, tag)) for tag in "ab"]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=60)
        assert writer.exitcode == 0
    loaded = results.load([path])
    assert len(loaded) == 80
    assert sorted(r["config"]["writer"] for r in loaded) == ["a"] * 40 + ["b"] * 40


def test_load_names_a_missing_file(tmp_path):
    with pytest.raises(RecordError, match="nope.jsonl: cannot read results file"):
        results.load([str(tmp_path / "nope.jsonl")])


def test_config_hash_is_stable_and_covers_the_run_identity():
    a = run(world=2, network={"profile": "10gbe"})
    b = json.loads(json.dumps(a, sort_keys=False))
    b["config"] = dict(reversed(list(b["config"].items())))
    b["id"], b["time"] = "other", "later"
    assert results.config_hash(a) == results.config_hash(b)
    assert results.config_hash(a) != results.config_hash(run(world=2, network={"profile": "1gbe"}))
    assert results.config_hash(a) != results.config_hash(run(world=1))
    assert results.config_hash({"lr": 0.1}) == results.config_hash({"lr": 0.1})


# ---- aggregation and efficiency -----------------------------------------------------------------

def fixture_records():
    return [run(1, 10.0), run(1, 12.0), run(1, 14.0),
            run(2, 18.0), run(2, 19.0), run(2, error="RuntimeError: rank 1 timed out"),
            run(4, 30.0), run(4, 34.0)]


def group(groups, world, method="allreduce"):
    (found,) = [g for g in groups if g["world_size"] == world and g["method"] == method]
    return found


def test_aggregate_repeats_and_count_failures_apart():
    groups = aggregate.aggregate(fixture_records())
    one, two, four = group(groups, 1), group(groups, 2), group(groups, 4)
    assert (one["n"], one["mean"], one["std"], one["median"], one["min"], one["max"]) == \
        (3, 12.0, 2.0, 12.0, 10.0, 14.0)
    assert (two["n"], two["mean"], two["failed"]) == (2, 18.5, 1)  # failure excluded from mean
    assert two["errors"] == ["RuntimeError: rank 1 timed out"]
    assert four["std"] == pytest.approx(2.8284271247461903)
    assert one["failed"] == 0 and one["unit"] == "images/s"


def test_efficiency_uses_the_baseline_measured_in_the_same_results():
    groups = aggregate.summarize_records(fixture_records())
    four = group(groups, 4)
    assert four["baseline"]["mean"] == 12.0 and four["baseline"]["world_size"] == 1
    assert four["speedup"] == pytest.approx(32.0 / 12.0)
    assert four["efficiency"] == pytest.approx(32.0 / (4 * 12.0))
    assert four["ideal"] == pytest.approx(48.0)
    # a different measured baseline gives a different efficiency: nothing is typed in
    faster = [r for r in fixture_records() if r["world_size"] > 1] + [run(1, 16.0)]
    assert group(aggregate.summarize_records(faster), 4)["efficiency"] == pytest.approx(32.0 / 64.0)


def test_no_baseline_is_said_not_guessed():
    groups = aggregate.summarize_records([run(2, 18.0), run(4, 30.0)])
    for c in groups:
        assert c["efficiency"] is None and c["ideal"] is None
        assert c["baseline_note"].startswith("no efficiency: no world-size-1 or 1-node baseline")


def test_baseline_falls_back_to_unshaped_then_single_and_to_one_node():
    shaped = {"profile": "1gbe", "rate_gbit": 1}
    groups = aggregate.summarize_records([run(1, 10.0), run(2, 15.0, network=shaped, nodes=2)])
    assert group(groups, 2)["baseline_note"] == "baseline: world size 1, same method, no network"
    assert group(groups, 2)["efficiency"] == pytest.approx(0.75)

    groups = aggregate.summarize_records([run(1, 10.0, method="single"), run(4, 20.0, method="geo")])
    assert group(groups, 4, "geo")["baseline_note"] == "baseline: world size 1, single-device run"

    groups = aggregate.summarize_records([run(2, 10.0, nodes=1), run(6, 24.0, nodes=3)])
    six = group(groups, 6)
    assert (six["axis"], six["scale"], six["efficiency"]) == ("nodes", 3, pytest.approx(0.8))


def test_presets_sources_and_units_are_never_pooled():
    records = [run(1, 10.0), run(1, 100.0, preset="full")]
    assert sorted(c["mean"] for c in aggregate.aggregate(records)) == [10.0, 100.0]
    with pytest.raises(aggregate.GroupError, match="different units"):
        aggregate.aggregate([run(1, 10.0), run(1, 10.0, unit="samples/s")])


def test_published_aggregate_passes_through_as_published():
    record = run(4, 925.02)
    record["metrics"].update(throughput_std=4.42, repeats=None)
    record.update(env=None, source={"kind": "published", "name": "ddl", "citation": "table"})
    (only,) = aggregate.aggregate([record])
    assert (only["mean"], only["std"], only["n"], only["source"]) == (925.02, 4.42, None, "ddl")
    # one configuration printed in two of the publisher's tables (NVIDIA repeats a 1-node row in its
    # multi-node table): the figures pooled, their spread the std, and said how many
    again = copy.deepcopy(record)
    again.update(id="other-table-row")
    again["metrics"]["throughput"] = 1025.02
    (pooled,) = aggregate.aggregate([record, again])
    assert (pooled["mean"], pooled["n"], pooled["published_figures"]) == (975.02, 2, 2)
    assert pooled["std"] == pytest.approx(70.71, abs=0.01) and pooled["published_aggregate"]


def with_paddle(record, version, commit="0" * 40):
    record["env"]["paddle"].update(version=version, commit=commit)
    return record


def test_repeats_pool_only_within_one_experiment():
    a, b = run(1, 10.0), run(1, 12.0)
    a["config"]["seed"], b["config"]["seed"] = 1, 2  # another seed: still a repeat
    (only,) = aggregate.aggregate([a, b])
    assert (only["n"], only["mean"], only["noise_differs"]) == (2, 11.0, ["seed"])
    assert "seed" not in only["config"] and only["config"]["batch_size"] == 8

    c = run(1, 20.0)
    c["config"]["batch_size"] = 16  # another batch size: another experiment
    groups = aggregate.aggregate([a, b, c])
    assert sorted((g["config"]["batch_size"], g["mean"]) for g in groups) == [(8, 11.0), (16, 20.0)]
    # a group and the records it pools have one key
    assert {experiment.key_of(g) for g in groups} == {experiment.of(r) for r in (a, b, c)}


def test_two_paddle_versions_and_two_batch_sizes_are_four_groups():
    records = []
    for version, speed in (("2.6.2", 10.0), ("3.3.1", 20.0)):
        for batch in (8, 16):
            for repeat in range(2):
                record = with_paddle(run(1, speed + batch + repeat), version)
                record["config"]["batch_size"] = batch
                records.append(record)
    groups = aggregate.aggregate(records)
    assert sorted((g["paddle"].split()[0], g["config"]["batch_size"], g["n"], g["mean"])
                  for g in groups) == [("2.6.2", 8, 2, 18.5), ("2.6.2", 16, 2, 26.5),
                                       ("3.3.1", 8, 2, 28.5), ("3.3.1", 16, 2, 36.5)]


def test_device_model_and_host_class_separate_groups():
    base = run(1, 10.0)
    other_cpu, more_memory, gpu = run(1, 20.0), run(1, 30.0), run(1, 40.0)
    other_cpu["env"]["cpu"]["model"] = "AMD EPYC 7763"
    more_memory["env"]["memory"]["total_mib"] = base["env"]["memory"]["total_mib"] + 64 * 1024
    gpu["config"]["runtime"] = {"device": "gpu:0"}
    gpu["env"]["gpus"] = [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920}]
    groups = aggregate.aggregate([base, other_cpu, more_memory, gpu])
    assert len(groups) == 4
    by_mean = {g["mean"]: g for g in groups}
    assert by_mean[10.0]["device"] == base["env"]["cpu"]["model"]
    assert by_mean[20.0]["device"] == "AMD EPYC 7763"
    assert by_mean[30.0]["host"] != by_mean[10.0]["host"] and "GiB" in by_mean[30.0]["host"]
    assert by_mean[40.0]["device"] == "NVIDIA A100-SXM4-80GB"
    assert by_mean[40.0]["host"].startswith(base["env"]["cpu"]["model"])  # the host's CPU


def test_a_baseline_comes_from_the_same_build_device_and_host():
    old_one, new_two = with_paddle(run(1, 10.0), "2.6.2"), with_paddle(run(2, 30.0), "3.3.1")
    (_, two) = aggregate.summarize_records([old_one, new_two])
    assert two["efficiency"] is None and two["baseline_note"].startswith("no efficiency")
    new_one = with_paddle(run(1, 20.0), "3.3.1")
    groups = aggregate.summarize_records([old_one, new_two, new_one])
    (two,) = [g for g in groups if g["world_size"] == 2]
    assert two["baseline"]["mean"] == 20.0 and two["efficiency"] == pytest.approx(0.75)


def test_network_names_keep_apart_what_the_links_really_were():
    name = experiment.network_name
    assert name(None) is None and name({"profile": "10gbe", "rate_gbit": 10}) == "10gbe"
    assert name({"profile": "10gbe", "rate_gbit": 10, "delay_ms": 0.05}) == "10gbe+0.05ms"
    assert name({"profile": "custom", "rate_gbit": 2.5, "delay_ms": 0.0}) == "2.5gbit"
    assert name({"profile": "custom", "rate_gbit": None, "delay_ms": 1.0}) == "1ms"


def test_reference_file_loads_and_every_record_names_its_source():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "results", "reference",
                        "ddl-benchmarks-2020-05-29.jsonl")
    records = results.load([path])
    assert len(records) == 3 * 3 * 7 * 4 + 3
    assert all(r["source"]["kind"] == "published" and r["env"] is None for r in records)


def test_a_records_commit_says_when_its_code_was_not_that_commit(tmp_path):
    """git_sha: `-dirty` after the sha when a tracked file differs (git describe --dirty's mark), in
    a real repository; short_commit keeps the mark where people read a commit."""
    import subprocess

    from fleetbench.store import results as res

    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "mod.py").write_text("x = 1\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "one"], check=True)
    here = str(repo / "pkg")
    clean = res.git_sha(here)
    assert clean and len(clean) == 40 and not clean.endswith("-dirty")
    (repo / "pkg" / "new.py").write_text("")  # untracked: the commit's code is still what runs
    assert res.git_sha(here) == clean
    (repo / "pkg" / "mod.py").write_text("x = 2\n")
    assert res.git_sha(here) == clean + "-dirty"
    assert res.short_commit(clean + "-dirty") == clean[:8] + "-dirty" and res.short_commit(clean, 7) == clean[:7]
    assert res.short_commit(None) == ""
