"""fleetbench diagnose's rules: the pair rounds, the metric table, the registered criteria, a rules
file refused in one line when it names what does not exist, a rule no test measured."""
import itertools
import json

import pytest

from fleetbench.diagnose import schedule
from fleetbench.diagnose.judging import judge, rules, verdicts
from fleetbench.diagnose.cli import DEFAULT_RULES

RULES = rules.parse_rules(DEFAULT_RULES.read_text(), "shipped")


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_pair_rounds_cover_every_pair_once_in_disjoint_rounds(n):
    rounds = schedule.pair_rounds(list(range(n)))
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == list(itertools.combinations(range(n), 2))
    for r in rounds:  # disjoint: no node twice in a round
        nodes = [x for p in r for x in p]
        assert len(nodes) == len(set(nodes))


def test_node_passes_interleave_nodes():
    assert schedule.node_passes([0, 1, 2], 2) == [0, 1, 2, 0, 1, 2]


def _healthy(n=4, gflops=40.0, gbps=20.0):
    return {i: {"matmul_gflops": gflops, "triad_gbps": gbps} for i in range(n)}


@pytest.mark.parametrize("text, message", [
    ("rules: []", "non-empty list `rules`"),
    ("rules: [{metric: matmul_gflops, below_reference_pct: 120, category: compute}]",
     "rule 1: below_reference_pct: expected a number in (0, 100), got 120"),
    ("rules: [{metric: matmul_gflops, below_reference_pct: 20, category: disk}]", "rule 1: category"),
    ("rules: [{metric: matmul_gflops, below_reference_pct: 20, category: compute, extra: 1}]",
     "unknown key(s) extra (expected metric, category, scope, corroborated_by and one criterion: below_reference_pct, max_value)"),
    ("rules: [", "not YAML"),
    ("rules: [{metric: matmul_gflops, category: compute}]",
     "expected one criterion: below_reference_pct or max_value"),
    ("rules: [{metric: matmul_gflops, below_reference_pct: 20, max_value: 1, category: compute}]",
     "expected one criterion"),
    ("rules: [{metric: gpu_temperature_c, max_value: hot, category: compute}]", "max_value: expected a number"),
    ("rules: [{metric: matmul_gflops, below_reference_pct: 20, category: compute, scope: rack}]",
     "scope: matmul_gflops is a node figure, got 'rack'"),
    ("rules: [{metric: link_gbps, below_reference_pct: 20, category: network, scope: node}]",
     "scope: link_gbps is a link figure"),
    # issue 32: a misspelled metric or criterion judged a 99 °C node healthy; now refused by name
    ("rules: [{metric: gpu_temprature_c, max_value: 85, category: compute}]",
     "rule 1: metric 'gpu_temprature_c': unknown (known metrics: matmul_gflops, triad_gbps"),
    ("rules: [{metric: matmul_gflopz, below_reference_pct: 25, category: compute}]", "metric 'matmul_gflopz': unknown"),
    ("rules: [{metric: matmul_gflops, below_reference_pc: 25, category: compute}]",
     "unknown key(s) below_reference_pc (expected metric, category, scope, corroborated_by and one criterion: "
     "below_reference_pct"),
    # corroborated_by: another node metric, with a rule of its own, on a reference-based node rule
    ("rules: [{metric: matmul_gflops, below_reference_pct: 25, category: compute, corroborated_by: trian_images_per_s}]",
     "rule 1: corroborated_by: expected another node metric (triad_gbps, train_images_per_s, gpu_matmul_fp32_tflops"),
    ("rules: [{metric: matmul_gflops, below_reference_pct: 25, category: compute, corroborated_by: matmul_gflops}]",
     "corroborated_by: expected another node metric"),
    ("rules: [{metric: matmul_gflops, below_reference_pct: 25, category: compute, corroborated_by: link_gbps}]",
     "corroborated_by: expected another node metric"),
    ("rules: [{metric: matmul_gflops, below_reference_pct: 25, category: compute, corroborated_by: [triad_gbps]}]",
     "corroborated_by: expected another node metric"),
    ("rules: [{metric: link_gbps, below_reference_pct: 30, category: network, corroborated_by: matmul_gflops}]",
     "rule 1: corroborated_by: only a node rule judged against a reference (below_reference_pct) takes one"),
    ("rules: [{metric: gpu_temperature_c, max_value: 85, category: compute, corroborated_by: matmul_gflops}]",
     "rule 1: corroborated_by: only a node rule"),
    ("rules: [{metric: matmul_gflops, below_reference_pct: 25, category: compute, corroborated_by: train_images_per_s},"
     " {metric: triad_gbps, below_reference_pct: 25, category: memory}]",
     "rule 1: corroborated_by: train_images_per_s has no rule of its own (expected one of the metrics these rules "
     "judge: matmul_gflops, triad_gbps)"),
])
def test_bad_rules_are_one_line_naming_the_file(text, message):
    with pytest.raises(rules.DiagnoseError) as e:
        rules.parse_rules(text, "my.yaml")
    assert str(e.value).startswith("my.yaml: ") and message in str(e.value) and "\n" not in str(e.value)


def test_every_metric_is_named_once_and_every_shipped_rule_names_one():
    from fleetbench.diagnose.judging import metrics

    assert len(metrics.METRICS) == len(metrics.TABLE)
    assert {r.metric for r in RULES} <= set(metrics.METRICS)
    assert set(rules.CRITERIA) == {"below_reference_pct", "max_value"}


def test_a_criterion_is_one_registered_function():
    @rules.criterion("above_reference_pct_test", needs_reference=True, text=lambda p: f"more than {p:g}% above",
                     valid=lambda p: p > 0, expected="a positive number")
    def above(value, pct, reference):
        return reference is not None and value > reference.value * (1 + pct / 100)

    try:
        (rule,) = rules.parse_rules("rules: [{metric: gpu_temperature_c, above_reference_pct_test: 10, "
                                    "category: compute}]", "t.yaml")
        figures = {i: {"gpu_temperature_c": t} for i, t in enumerate([60.0, 61.0, 80.0])}
        assert [v["verdict"] for v in judge.judge_nodes(figures, [rule])] == ["healthy", "healthy", "defective"]
    finally:
        del rules.CRITERIA["above_reference_pct_test"]


def test_a_rule_no_test_measured_is_reported_not_measured_never_passed():
    figures = _healthy(3)
    m = {"nodes": figures, "links": {(0, 1): {"link_gbps": 9.0}}, "cluster": None}
    missing = verdicts.not_measured(RULES, m)
    names = {x["metric"] for x in missing}
    assert "gpu_temperature_c" in names and "allreduce_busbw_GBps" in names and "matmul_gflops" not in names
    assert all(x["producer"] for x in missing)
    # a metric its peers measured but one node did not: that node is not passed either
    figures[1]["train_images_per_s"] = 100.0
    figures[2]["train_images_per_s"] = 101.0
    found = judge.judge_nodes(figures, RULES)
    assert found[0]["verdict"] == "defective" and found[0]["categories"] == ["failed"]
    assert "train_images_per_s not measured on this node" in found[0]["violations"][0]["rule"]


def test_a_limit_rule_breaks_on_the_value_alone_whatever_the_peers():
    # GPU rules (untested on a GPU here): uncorrected ECC errors above 0 flag a node even when
    # every node has them, a temperature above 85 °C likewise
    figures = {i: {"gpu_ecc_uncorrected_errors": 0.0, "gpu_temperature_c": 60.0} for i in range(3)}
    figures[1]["gpu_ecc_uncorrected_errors"] = 2.0
    figures[2]["gpu_temperature_c"] = 99.0
    found = judge.judge_nodes(figures, RULES)
    assert [v["verdict"] for v in found] == ["healthy", "defective", "defective"]
    (violation,) = found[1]["violations"]
    assert (violation["reference"], violation["reference_kind"], violation["rule"]) == (0.0, "limit", "above 0")
    assert found[1]["categories"] == ["memory"] and found[2]["violations"][0]["metric"] == "gpu_temperature_c"
