"""The declared cell key (measure/repeats/experiment.py: WORK, CIRCUMSTANCES): what defines a cell of work
is matched across files; the Paddle build, host, device, time and commit are circumstances."""
import pytest

from fleetbench.measure.repeats import aggregate, experiment


def record(**over):
    base = {"schema": 1, "id": "a", "time": "2026-11-20T00:00:00+00:00", "git": "1" * 40, "benchmark": "resnet50",
            "preset": "tiny", "mode": "collective", "method": "mgwfbp", "network": {"profile": "10gbe"},
            "nodes": 2, "devices_per_node": 1, "world_size": 2, "error": None,
            "config": {"batch_size": 8, "seed": 1, "runtime": {"paddle": "2.6.2", "threads": {"omp_num_threads": 1}}},
            "metrics": {"throughput": 10.0, "unit": "images/s"},
            "env": {"paddle": {"version": "2.6.2", "compiled_with_cuda": False, "commit": "abc"},
                    "cpu": {"model": "EPYC", "cores": 2}, "memory": {"total_mib": 24000}}}
    base.update(over)
    return base


def paddle3(**over):
    r = record(**over)
    r["env"] = dict(r["env"], paddle={"version": "3.3.1", "compiled_with_cuda": False, "commit": "def"})
    r["config"] = dict(r["config"], runtime=dict(r["config"]["runtime"], paddle="3.3.1"))
    return r


def test_circumstances_do_not_change_the_key_but_the_work_does():
    a = record()
    b = paddle3(time="2026-11-26T00:00:00+00:00", git="2" * 40, id="b")
    b["env"]["cpu"] = {"model": "Xeon", "cores": 2}
    assert experiment.cell_key(a) == experiment.cell_key(b)
    assert experiment.of(a) != experiment.of(b)  # repeats never pool across builds or hosts
    for changed in (record(method="bsp"), record(network={"profile": "1gbe"}), record(nodes=1, world_size=1),
                    record(config=dict(record()["config"], batch_size=16))):
        assert experiment.cell_key(changed) != experiment.cell_key(a)
    # noise keys (the seed) never split a cell
    assert experiment.cell_key(record(config=dict(record()["config"], seed=7))) == experiment.cell_key(a)


def test_ignore_and_match_choose_what_the_key_holds():
    a, b = record(), paddle3(network={"profile": "1gbe"})
    assert experiment.cell_key(a, ignore=["network"]) == experiment.cell_key(b, ignore=["network"])
    assert experiment.cell_key(a, ignore=["network"], match=["paddle"]) != \
        experiment.cell_key(b, ignore=["network"], match=["paddle"])
    # a prefix ignores every config key below it
    c = record(config=dict(record()["config"], runtime={"paddle": "2.6.2", "threads": {"omp_num_threads": 2}}))
    assert experiment.cell_key(c) != experiment.cell_key(a)
    assert experiment.cell_key(c, ignore=["config.runtime"]) == experiment.cell_key(a, ignore=["config.runtime"])


def test_groups_and_records_have_one_key():
    rec = record()
    (group,) = aggregate.aggregate([rec])
    assert experiment.cell_key(group) == experiment.cell_key(rec)
    assert experiment.cell_key(group, match=["paddle", "host"]) == experiment.cell_key(rec, match=["paddle", "host"])


@pytest.mark.parametrize("name", ["paddle", "network", "config.batch_size", "config.runtime", "git", "time"])
def test_known_key_names_pass(name):
    experiment.check_key_names([name], [record()], "--match")


@pytest.mark.parametrize("name", ["netwrk", "config.batchsize", "batch_size", ""])
def test_an_unknown_key_name_is_one_line_naming_the_flag(name):
    with pytest.raises(experiment.KeyNameError, match=rf"^--ignore {name}: not a cell key; expected one of") as e:
        experiment.check_key_names([name], [record()], "--ignore")
    assert "\n" not in str(e.value)


def test_the_scaling_baseline_shares_the_work_but_for_size_network_and_method():
    one = dict(experiment.of(record(nodes=1, world_size=1, network=None, method="single")).fields(), unit="images/s")
    two = dict(experiment.of(record()).fields(), unit="images/s")
    assert experiment.comparable(one) == experiment.comparable(two)
    other_build = dict(experiment.of(paddle3()).fields(), unit="images/s")
    assert experiment.comparable(other_build) != experiment.comparable(two)


def test_a_key_older_records_lack_is_no_difference_at_the_value_its_absence_means():
    old = record()
    new = record(config=dict(record()["config"], epochs=1, eval_batch_size=256, stop_at_target=False,
                             target_accuracy=None, data={"path": None, "val_path": None}))
    old["config"] = dict(old["config"], data={"path": None})
    assert experiment.of(new) == experiment.of(old) and experiment.cell_key(new) == experiment.cell_key(old)
    (group,) = aggregate.aggregate([old, new])  # repeats of one experiment, for report, compare and scaling
    assert group["n"] == 2 and experiment.comparable(group) == experiment.comparable(aggregate.aggregate([old])[0])
    assert experiment.cell_key(record(config=dict(new["config"], epochs=3))) != experiment.cell_key(old)
    # the PS family's `steps` went (it was unused, 0): a record that has it is the same work
    ps = record(mode="ps", method="async", config={"batch_size": 8, "runtime": {"paddle": "2.6.2"}})
    assert experiment.cell_key(dict(ps, config=dict(ps["config"], steps=0))) == experiment.cell_key(ps)
    assert experiment.cell_key(dict(ps, config=dict(ps["config"], steps=5))) != experiment.cell_key(ps)


def test_what_an_absent_key_means_is_its_configs_default():
    import dataclasses

    from fleetbench.measure import config
    from fleetbench.train import epochs
    from fleetbench.train.ps.config import PSConfig

    def defaults(cls):
        flat = {}
        for name, value in dataclasses.asdict(cls()).items():
            flat.update({f"{name}.{k}": v for k, v in value.items()} if isinstance(value, dict) else {name: value})
        return flat
    for mode, cls in (("collective", epochs.EpochConfig), ("ps", PSConfig)):
        mine = defaults(cls)
        for key, value in experiment.ABSENT_MEANS[mode].items():
            assert mine.get(key, value) == value, (mode, key)  # a key still there: its default; else gone
    assert "steps" not in defaults(PSConfig) and defaults(config.BenchConfig)["data.val_path"] is None


def test_a_ps_runs_breakdown_marks_split_its_cell_and_a_collective_runs_key_does_not():
    """measure.breakdown is timing noise for the collective loop (its timers are always on) and work
    for a parameter-server worker (py_func marks in its program, 5.8% of a CTR tiny step): PS runs
    with and without the marks never pool; PS records from before the key ran without marks."""
    def measured(mode: str, breakdown) -> dict:
        cfg = dict(record()["config"])
        if breakdown is not None:
            cfg["measure"] = {"breakdown": breakdown, "probe": True}
        return record(mode=mode, benchmark="ctr" if mode == "ps" else "resnet50", config=cfg)
    assert experiment.cell_key(measured("collective", True)) == experiment.cell_key(measured("collective", False))
    assert experiment.cell_key(measured("ps", True)) != experiment.cell_key(measured("ps", False))
    assert experiment.cell_key(measured("ps", None)) == experiment.cell_key(measured("ps", False))
