"""fleetbench sweep --until-stable and --warmup-run (issue 23).

The decision loop of the real Sweep class (plan, resume, stop, summary) is driven with scripted
throughputs: `Scripted.run_one` stores the record a run would store (a real demo record, its
throughput replaced, the rank's config.runtime.repeats taken from the environment the sweep gives
the run), so which run the sweep stops at is decided by the figures alone, never by timing. That
the rank really turns the sweep's environment into config.runtime.repeats is checked on one real
run (job marker)."""
import copy
import io
import json
import os
import uuid

import pytest
from util import records, run_script

from fleetbench.job import failure
from fleetbench.measure import contract
from fleetbench.measure.repeats import aggregate, stability
from fleetbench.report import generate
from fleetbench.store import results
from fleetbench.sweep import adaptive, runner, sweepfile

DEMO = os.path.join(sweepfile.REPO_ROOT, "results", "kvm-2vcpu-paddle2.6.2-demo.jsonl")
# stop_reason at target 2 %: CI 4.97 % after 3 runs, 2.60 % after 4, 1.78 % after 5: stable at 5
SETTLES_AT_5 = [100.0, 98.0, 102.0, 100.0, 100.5]


def template() -> dict:
    (base,) = [r for r in records(DEMO) if r["benchmark"] == "resnet50" and r["world_size"] == 1
               and r["error"] is None][:1]
    return base


class Scripted(runner.Sweep):
    """A Sweep whose runs store the next scripted throughput (None: the run fails, storing nothing
    of the cell); Interrupted when the script ends (as a SIGINT would stop a real sweep). `events`
    says what ran, in order."""

    def __init__(self, figures, cells, store, tmp_path, policy):
        super().__init__(cells, str(store), str(tmp_path / "log"), out=io.StringIO(),
                         paddle=sweepfile.record_paddle(template()), policy=policy)
        self.figures, self.events = list(figures), []
        for cell in cells:
            config = copy.deepcopy(template()["config"])
            config.update(dict(s.split("=", 1) for s in cell.extra_sets()))
            self.configs[(cell.script, cell.preset, cell.sets)] = config

    def settle_machine(self):  # the real one: tests/unit/test_steady_probe.py, and real sweeps
        self.say("sweep: machine warm-up (scripted)")

    def run_one(self, i, cell, repeat, base_env):
        if not self.figures:
            raise runner.Interrupted("script ended")
        figure = self.figures.pop(0)
        self.events.append(("run", i, repeat))
        if figure is None:  # a failed run: nothing stored that matches the cell
            self.failed_runs += 1
            return
        record = copy.deepcopy(template())
        record.update(id=uuid.uuid4().hex, config=copy.deepcopy(self.config(cell)))
        record["metrics"]["throughput"] = figure
        said = contract.RankContract.from_env(base_env)
        if said.repeats:  # what fleetbench.train.run does with the sweep's environment
            record["config"]["runtime"]["repeats"] = said.repeats
        if said.seed is not None:
            record["config"]["seed"] = said.seed
        results.append(self.results_path, record)

    def execute(self, cell, log_dir, base_env, limits):  # only warm-up runs get here
        self.events.append(("warmup", self.results_path))
        return failure.Outcome(status="ok", elapsed_s=0.0), None, {}


def cells(*sets, repeats=3):
    groups = [{"benchmark": "resnet50", "preset": "tiny", "set": dict(s)} if s else
              {"benchmark": "resnet50", "preset": "tiny"} for s in sets]
    return sweepfile.expand({"repeats": repeats, "cells": groups}, "s.yaml")


def figures_of(store):
    return [r["metrics"]["throughput"] for r in records(store)]


def test_until_stable_stops_when_the_ci_is_within_target(tmp_path):
    store = tmp_path / "runs.jsonl"
    sweep = Scripted(SETTLES_AT_5 + [50.0], cells({}), store, tmp_path, adaptive.Policy(until_stable=True))
    (row,) = sweep.run({})
    assert figures_of(store) == SETTLES_AT_5  # the sixth figure was never run
    out = sweep.out.getvalue()
    assert "cell 1/1 resnet50 tiny collective 1x1: stable: 95% CI ±1.8% of the mean within ±2% over 5 runs\n" in out
    assert row["until_stable"] == stability.STABLE and row["n"] == 5
    block = records(store)[0]["config"]["runtime"]["repeats"]
    assert block == {"until_stable": True, "target_ci_pct": 2.0, "min_repeats": 3, "max_repeats": 10}


def test_a_cell_that_never_settles_ends_at_its_maximum_and_says_so(tmp_path):
    store = tmp_path / "runs.jsonl"
    noisy = [80.0, 120.0, 85.0, 115.0, 90.0, 110.0]  # spread throughout, no single odd run
    sweep = Scripted(noisy, cells({}), store, tmp_path, adaptive.Policy(until_stable=True, max_repeats=5))
    (row,) = sweep.run({})
    assert figures_of(store) == noisy[:5]
    out = sweep.out.getvalue()
    assert "NOT stable: 95% CI ±" in out and "stopped at the maximum of 5 runs" in out
    assert "UNSTABLE: resnet50 mgwfbp world 1: runs 80, 120, 85, 115, 90 images/s" in out
    assert row["until_stable"] == stability.AT_MAX and row["unstable"]
    # the report reads the same verdict from the records alone
    (group,) = [json.loads(line) for line in generate.groups_json([str(store)]).splitlines()]
    assert group["until_stable"] == "max_repeats" and group["unstable"] is True and group["n"] == 5


DISTURBED = [16.58, 42.08, 42.39]  # issue 23: the demo's first baseline, one run disturbed


def test_a_disturbed_run_costs_one_more_run_not_the_cells_stability(tmp_path):
    store = tmp_path / "runs.jsonl"
    sweep = Scripted(DISTURBED + [42.2, 50.0], cells({}), store, tmp_path,
                     adaptive.Policy(until_stable=True, target_ci_pct=2.0, max_repeats=5))
    (row,) = sweep.run({})
    assert figures_of(store) == DISTURBED + [42.2]  # 3 kept runs within ±2 %: stopped at 4
    out = sweep.out.getvalue()
    assert ("stable: 95% CI ±0.9% of the mean within ±2% over 3 runs, 1 outlier excluded "
            "(run 1: 16.58 images/s)\n") in out
    # the figure is over the kept runs and says so; the cell is stable by the rule it was repeated
    # under (its summary says so as the sweep's line did), the outlier shown
    assert row["until_stable"] == stability.STABLE and row["n"] == 3 and not row["unstable"]
    assert abs(row["mean"] - 42.2233) < 1e-4 and len(row["excluded"]) == 1
    assert "42.22 ± 0.16 (n=3; 1 outlier excluded)" in out  # digits: a spread starting with 1 keeps 2
    assert ("outlier: resnet50 mgwfbp world 1: runs 16.58 (outlier, excluded), 42.08, 42.39, 42.2 "
            "images/s; mean of all 4 runs 35.81") in out
    # the report reads the same verdict and figure from the records alone
    (group,) = [json.loads(line) for line in generate.groups_json([str(store)]).splitlines()]
    assert group["until_stable"] == "stable" and group["n"] == 3 and group["excluded"] == row["excluded"]


def test_five_runs_with_one_disturbed_end_at_the_maximum_when_the_rest_do_not_settle(tmp_path):
    store = tmp_path / "runs.jsonl"
    five = [42.0, 16.6, 42.9, 41.5, 42.4]  # the four kept give ±2.24 %: not within ±2 %
    sweep = Scripted(five + [42.2], cells({}), store, tmp_path, adaptive.Policy(until_stable=True, max_repeats=5))
    (row,) = sweep.run({})
    assert figures_of(store) == five
    assert ("NOT stable: 95% CI ±2.2% of the mean over 4 runs, 1 outlier excluded (run 2: 16.6 images/s), "
            "target ±2%, stopped at the maximum of 5 runs") in sweep.out.getvalue()
    assert row["until_stable"] == stability.AT_MAX and row["n"] == 4
    (group,) = [json.loads(line) for line in generate.groups_json([str(store)]).splitlines()]
    assert group["until_stable"] == "max_repeats"


def test_resume_goes_on_until_stable_and_pools_with_earlier_runs(tmp_path):
    store = tmp_path / "runs.jsonl"
    plain = Scripted([100.0], cells({}, repeats=1), store, tmp_path, adaptive.Policy())
    plain.run({})  # one run without the policy: a repeat of the same experiment
    first = Scripted(SETTLES_AT_5[1:4], cells({}), store, tmp_path, adaptive.Policy(until_stable=True))
    with pytest.raises(runner.Interrupted):
        first.run({})  # interrupted after 4 runs in all, not yet stable (CI 2.6 %)
    assert figures_of(store) == SETTLES_AT_5[:4]
    resumed = Scripted([100.5, 50.0], cells({}), store, tmp_path, adaptive.Policy(until_stable=True))
    assert resumed.plan()[0][1] == 4
    (row,) = resumed.run({})
    assert figures_of(store) == SETTLES_AT_5 and resumed.events == [("run", 1, 5)]
    assert row["n"] == 5 and row["until_stable"] == stability.STABLE
    # a finished cell is skipped on the next resume
    again = Scripted([1.0], cells({}), store, tmp_path, adaptive.Policy(until_stable=True))
    again.run({})
    assert again.events == [] and "5/3 done earlier, skipped" in again.out.getvalue()


def test_warmup_run_once_per_shape_before_the_first_measured_run_and_never_stored(tmp_path):
    store = tmp_path / "runs.jsonl"
    two = cells({"steps": 7}, {"steps": 8}, repeats=1)  # one benchmark, one shape, two configs
    sweep = Scripted([100.0, 101.0], two, store, tmp_path, adaptive.Policy(warmup_run=True))
    sweep.run({})
    (warm, *runs) = sweep.events
    assert warm[0] == "warmup" and runs == [("run", 1, 1), ("run", 2, 1)]
    assert warm[1].startswith(str(tmp_path / "log")) and warm[1] != str(store)
    assert len(records(store)) == 2 and "warm-up run (not recorded)" in sweep.out.getvalue()
    plain = Scripted([102.0], cells({"steps": 9}, repeats=1), tmp_path / "other.jsonl", tmp_path,
                     adaptive.Policy())
    plain.run({})
    assert [e[0] for e in plain.events] == ["run"]  # off unless asked for


def _policy(argv, spec=None, repeats=3):
    args = runner.parser().parse_args([__file__, *argv])  # a file that exists stands for s.yaml
    return adaptive.policy(spec or {}, args, "s.yaml", cells({}, repeats=repeats))


def test_policy_from_keys_and_flags():
    assert _policy([]) == adaptive.Policy()
    assert _policy(["--until-stable", "--target-ci", "5", "--max-repeats", "5"]) == \
        adaptive.Policy(until_stable=True, target_ci_pct=5.0, max_repeats=5)
    from_file = _policy([], {"until_stable": True, "target_ci": 5, "max_repeats": 6, "warmup_run": True})
    assert from_file == adaptive.Policy(True, 5.0, 6, True)
    assert _policy(["--max-repeats", "4"], {"until_stable": True, "max_repeats": 6}).max_repeats == 4
    assert _policy(["--vary-seed"]).vary_seed and _policy([], {"vary_seed": True}).vary_seed
    assert not _policy([]).vary_seed


def test_vary_seed_gives_each_repeat_its_own_seed_and_resume_goes_on_with_the_next(tmp_path):
    store = tmp_path / "runs.jsonl"
    base = template()["config"]["seed"]
    first = Scripted([100.0, 101.0], cells({}), store, tmp_path, adaptive.Policy(vary_seed=True))
    with pytest.raises(runner.Interrupted):
        first.run({})  # two of three runs, then interrupted
    resumed = Scripted([102.0], cells({}), store, tmp_path, adaptive.Policy(vary_seed=True))
    (row,) = resumed.run({})
    assert [r["config"]["seed"] for r in records(store)] == [base, base + 1, base + 2]
    assert row["n"] == 3  # the seed is not part of the experiment: one cell, three repeats
    same = Scripted([103.0], cells({}, repeats=1), tmp_path / "plain.jsonl", tmp_path, adaptive.Policy())
    same.run({})
    assert records(tmp_path / "plain.jsonl")[0]["config"]["seed"] == base  # off unless asked for


@pytest.mark.parametrize("argv, spec, message", [
    (["--target-ci", "5"], None, "s.yaml: target_ci / max_repeats (--target-ci / --max-repeats) need until_stable"),
    (["--until-stable", "--max-repeats", "2"], None, "s.yaml: max_repeats 2 is below the repeats (3) of cell"),
    ([], {"until_stable": "yes"}, "s.yaml: until_stable: 'yes': expected true or false"),
    ([], {"vary_seed": 1}, "s.yaml: vary_seed: 1: expected true or false"),
])
def test_bad_policy_is_one_line_naming_the_flag_or_key(argv, spec, message):
    # a flag's own value (--target-ci 0) is refused by the parser: tests/unit/test_bad_input.py
    with pytest.raises(sweepfile.SweepError) as err:
        _policy(argv, spec)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.job
def test_a_real_run_keeps_the_sweeps_policy_and_seed_in_its_config(tmp_path):
    store = tmp_path / "runs.jsonl"
    block = adaptive.Policy(until_stable=True).record_block(cells({})[0])
    p = run_script("collective/resnet50.py", "--preset", "tiny", "--set", "steps=3", "--set", "warmup_steps=1",
                   "--results", store, **contract.RankContract(repeats=block, seed=77).to_env())
    assert p.returncode == 0, p.stderr
    (record,) = records(store)
    assert record["config"]["runtime"]["repeats"] == block and record["config"]["seed"] == 77
    # not part of the experiment: it pools with a run made without it
    other = dict(record, id="x", config=dict(record["config"], runtime={
        k: v for k, v in record["config"]["runtime"].items() if k != "repeats"}))
    assert len(aggregate.aggregate([record, other])) == 1


def test_a_cell_group_can_ask_for_until_stable_alone():
    spec = {"repeats": 3, "cells": [{"benchmark": "resnet50", "preset": "tiny", "until_stable": True,
                                     "target_ci": 5, "max_repeats": 5},
                                    {"benchmark": "resnet50", "preset": "tiny", "method": "none"}]}
    stable, plain = sweepfile.expand(spec, "s.yaml")
    policy = adaptive.policy(spec, runner.parser().parse_args([__file__]), "s.yaml", [stable, plain])
    assert policy.record_block(stable) == {"until_stable": True, "target_ci_pct": 5.0, "min_repeats": 3,
                                           "max_repeats": 5}
    assert policy.limit(stable) == 5 and policy.limit(plain) == 3 and policy.record_block(plain) is None
    bad = {"cells": [{"benchmark": "resnet50", "preset": "tiny", "max_repeats": 1.5}]}
    with pytest.raises(sweepfile.SweepError, match=r"^s.yaml: cells\[1\]: max_repeats: 1.5: expected a whole number >= 2$"):
        sweepfile.expand(bad, "s.yaml")


def test_make_demo_repeats_its_baselines_until_stable_with_a_small_maximum():
    path = os.path.join(sweepfile.SWEEP_DIR, "demo.yaml")
    spec = sweepfile.load_spec(path)
    demo = sweepfile.expand(spec, path)
    policy = adaptive.policy(spec, runner.parser().parse_args([path]), path, demo)
    baselines = [c for c in demo if c.world_size == 1]
    # ResNet50's baseline varies 4-9 % between quiet runs here: up to 8 runs; CTR's (15-25 s a run) 5
    maxima = {c.benchmark: policy.record_block(c)["max_repeats"] for c in baselines}
    assert maxima == {"resnet50": 8, "ctr": 5}
    assert baselines and all(policy.record_block(c) == {"until_stable": True, "target_ci_pct": 5.0,
                                                        "min_repeats": 3, "max_repeats": maxima[c.benchmark]}
                             for c in baselines)
    # the demo stays short: 3 runs a cell, but 5 more for ResNet50's two until-stable cells and 2
    # more for CTR's six (the four local ones and, since 2026-11-29, the two over emulated links)
    assert sum(policy.limit(c) for c in demo) <= 3 * len(demo) + 2 * 5 + 6 * 2


def test_progress_line_says_when_a_cell_may_run_past_its_repeats():
    (cell,) = cells({})
    assert "repeat 4/3 (up to 5 until stable) | elapsed" in runner.progress_line(1, 2, cell, 4, 10, None, 5)
    assert "repeat 2/3 | elapsed" in runner.progress_line(1, 2, cell, 2, 10, None, 3)


def test_the_slurm_time_limit_allows_every_run_an_until_stable_cell_may_make(tmp_path, monkeypatch, capsys):
    from fleetbench.engines import slurm

    monkeypatch.chdir(tmp_path)
    limits = {}
    for name, top in (("fixed", {}), ("stable", {"until_stable": True, "max_repeats": 7})):
        path = tmp_path / f"{name}.yaml"
        path.write_text(json.dumps(dict(top, cells=[{"benchmark": "resnet50", "preset": "tiny", "timeout": 100}])))
        assert slurm.cli([str(path)]) == 0
        (line,) = [l for l in capsys.readouterr().out.splitlines() if l.startswith("#SBATCH --time=")]
        limits[name] = line
    (cell,) = cells({})
    fixed = slurm.time_limit([cell.__class__(**dict(vars(cell), timeout=100.0))])
    stable = slurm.time_limit([cell.__class__(**dict(vars(cell), timeout=100.0, repeats=7))])
    assert limits == {"fixed": f"#SBATCH --time={fixed}", "stable": f"#SBATCH --time={stable}"}
