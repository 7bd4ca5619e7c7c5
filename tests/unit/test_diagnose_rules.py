"""fleetbench diagnose's pure parts: the pair rounds, the rules, the judgement, the baseline."""
import itertools
import json

import pytest

from fleetbench.diagnose import output, plan, rules
from fleetbench.diagnose.cli import DEFAULT_RULES, exit_code

RULES = rules.parse_rules(DEFAULT_RULES.read_text(), "shipped")


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_pair_rounds_cover_every_pair_once_in_disjoint_rounds(n):
    rounds = plan.pair_rounds(list(range(n)))
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == list(itertools.combinations(range(n), 2))
    for r in rounds:  # disjoint: no node twice in a round
        nodes = [x for p in r for x in p]
        assert len(nodes) == len(set(nodes))


def test_node_passes_interleave_nodes():
    assert plan.node_passes([0, 1, 2], 2) == [0, 1, 2, 0, 1, 2]


def _healthy(n=4, gflops=40.0, gbps=20.0):
    return {i: {"matmul_gflops": gflops, "triad_gbps": gbps} for i in range(n)}


def test_a_node_at_half_compute_is_flagged_compute_and_nothing_else():
    figures = _healthy()
    figures[2]["matmul_gflops"] = 20.0
    verdicts = rules.judge_nodes(figures, RULES)
    assert [v["verdict"] for v in verdicts] == ["healthy", "healthy", "defective", "healthy"]
    (violation,) = verdicts[2]["violations"]
    assert verdicts[2]["categories"] == ["compute"] and violation["reference"] == 40.0
    assert violation["reference_kind"] == "peer median"


def test_a_spread_within_the_rule_flags_nothing():
    figures = {i: {"matmul_gflops": 40.0 * (1 - 0.05 * i), "triad_gbps": 20.0} for i in range(4)}
    assert all(v["verdict"] == "healthy" for v in rules.judge_nodes(figures, RULES))


def test_a_slow_link_is_blamed_on_the_node_common_to_the_slow_pairs():
    links = {p: {"link_gbps": 1.0 if 3 in p else 5.0} for p in itertools.combinations(range(4), 2)}
    verdicts, blamed = rules.judge_links(links, RULES)
    assert {(l["a"], l["b"]) for l in verdicts if l["verdict"] == "slow"} == {(0, 3), (1, 3), (2, 3)}
    assert set(blamed) == {3} and len(blamed[3]) == 3
    merged = rules.merge(rules.judge_nodes(_healthy(), RULES), blamed)
    assert [n["verdict"] for n in merged] == ["healthy"] * 3 + ["defective"]
    assert merged[3]["categories"] == ["network"]


def test_two_nodes_have_one_link_and_no_peers_to_judge_it_by():
    verdicts, blamed = rules.judge_links({(0, 1): {"link_gbps": 0.1}}, RULES)
    assert verdicts[0]["verdict"] == "healthy" and blamed == {}  # one figure: no median to compare with


def test_against_a_baseline_one_slow_link_of_two_nodes_names_both_ends():
    base = {"kind": "fleetbench-diagnose-baseline", "machine": {}, "metrics": {"link_gbps": {"mean": 5.0}}}
    _, blamed = rules.judge_links({(0, 1): {"link_gbps": 1.0}}, RULES, base)
    assert set(blamed) == {0, 1}


def test_unreachable_and_failed_are_verdicts_and_the_others_still_judged():
    figures = _healthy(3)
    figures.pop(1)
    verdicts = rules.judge_nodes(figures, RULES, problems={1: ("unreachable", "node 1: gone"),
                                                           2: ("failed", "node 2: exit 1")})
    assert [(v["index"], v["verdict"]) for v in verdicts] == [(0, "healthy"), (1, "unreachable"), (2, "defective")]
    report = {"nodes": [dict(v, host=f"h{v['index']}") for v in verdicts], "links": [], "reference": "peer median",
              "elapsed_s": 1.0, "phases": {}}
    assert exit_code(report) == 1 and "node 1: gone" in output.console(report)


def test_baseline_drops_an_outlier_and_refuses_another_machine():
    figures = {i: {"matmul_gflops": g} for i, g in enumerate([40.0, 41.0, 39.0, 40.5, 10.0])}
    base = rules.make_baseline(figures, {}, {"cpu": "X", "paddle": "2.6.2"})
    assert base["metrics"]["matmul_gflops"]["dropped"] == 1
    assert base["metrics"]["matmul_gflops"]["mean"] == pytest.approx(40.125)
    assert rules.check_baseline(json.loads(json.dumps(base)), {"cpu": "X", "paddle": "2.6.2"}, "b.json") == base
    with pytest.raises(rules.DiagnoseError, match=r"^b.json: made on paddle '2.6.2', this run is on '3.3.1'"):
        rules.check_baseline(base, {"cpu": "X", "paddle": "3.3.1"}, "b.json")
    with pytest.raises(rules.DiagnoseError, match="not a diagnose baseline"):
        rules.check_baseline({"metrics": {}}, {}, "b.json")


@pytest.mark.parametrize("text, message", [
    ("rules: []", "non-empty list `rules`"),
    ("rules: [{metric: matmul_gflops, below_reference_pct: 120, category: compute}]",
     "rule 1: below_reference_pct: expected a number in (0, 100), got 120"),
    ("rules: [{metric: matmul_gflops, below_reference_pct: 20, category: disk}]", "rule 1: category"),
    ("rules: [{metric: matmul_gflops, below_reference_pct: 20, category: compute, extra: 1}]",
     "unknown key(s) extra (expected metric, category, scope and one criterion: below_reference_pct, max_value)"),
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
     "unknown key(s) below_reference_pc (expected metric, category, scope and one criterion: below_reference_pct"),
])
def test_bad_rules_are_one_line_naming_the_file(text, message):
    with pytest.raises(rules.DiagnoseError) as e:
        rules.parse_rules(text, "my.yaml")
    assert str(e.value).startswith("my.yaml: ") and message in str(e.value) and "\n" not in str(e.value)


def test_every_metric_is_named_once_and_every_shipped_rule_names_one():
    from fleetbench.diagnose import metrics

    assert len(metrics.METRICS) == len(metrics.TABLE)
    assert {r.metric for r in RULES} <= set(metrics.METRICS)
    assert set(rules.CRITERIA) == {"below_reference_pct", "max_value"}


def test_a_criterion_is_one_registered_function():
    @rules.criterion("above_reference_pct_test", needs_reference=True, text=lambda p: f"more than {p:g}% above",
                     valid=lambda p: p > 0, expected="a positive number")
    def above(value, pct, reference):
        return reference is not None and value > reference * (1 + pct / 100)

    try:
        (rule,) = rules.parse_rules("rules: [{metric: gpu_temperature_c, above_reference_pct_test: 10, "
                                    "category: compute}]", "t.yaml")
        figures = {i: {"gpu_temperature_c": t} for i, t in enumerate([60.0, 61.0, 80.0])}
        assert [v["verdict"] for v in rules.judge_nodes(figures, [rule])] == ["healthy", "healthy", "defective"]
    finally:
        del rules.CRITERIA["above_reference_pct_test"]


def test_a_rule_no_test_measured_is_reported_not_measured_never_passed():
    figures = _healthy(3)
    missing = rules.not_measured(RULES, figures, {(0, 1): {"link_gbps": 9.0}})
    names = {m["metric"] for m in missing}
    assert "gpu_temperature_c" in names and "allreduce_busbw_GBps" in names and "matmul_gflops" not in names
    assert all(m["producer"] for m in missing)
    # a metric its peers measured but one node did not: that node is not passed either
    figures[1]["train_images_per_s"] = 100.0
    figures[2]["train_images_per_s"] = 101.0
    verdicts = rules.judge_nodes(figures, RULES)
    assert verdicts[0]["verdict"] == "defective" and verdicts[0]["categories"] == ["failed"]
    assert "train_images_per_s not measured on this node" in verdicts[0]["violations"][0]["rule"]


def test_a_limit_rule_breaks_on_the_value_alone_whatever_the_peers():
    # GPU rules (untested on a GPU here): uncorrected ECC errors above 0 flag a node even when
    # every node has them, a temperature above 85 °C likewise
    figures = {i: {"gpu_ecc_uncorrected_errors": 0.0, "gpu_temperature_c": 60.0} for i in range(3)}
    figures[1]["gpu_ecc_uncorrected_errors"] = 2.0
    verdicts = rules.judge_nodes(figures, RULES)
    assert [v["verdict"] for v in verdicts] == ["healthy", "defective", "healthy"]
    (violation,) = verdicts[1]["violations"]
    assert (violation["reference"], violation["reference_kind"], violation["rule"]) == (0.0, "limit", "above 0")
    assert verdicts[1]["categories"] == ["memory"]


def test_paddle_busbw_per_pair_blames_the_node_common_to_the_slow_pairs():
    links = {p: {"link_gbps": 9.5, "sendrecv_busbw_GBps": 0.6, "allreduce_busbw_GBps": 0.11 if 3 in p else 0.65}
             for p in itertools.combinations(range(4), 2)}
    verdicts, blamed = rules.judge_links(links, RULES)
    assert {(l["a"], l["b"]) for l in verdicts if l["verdict"] == "slow"} == {(0, 3), (1, 3), (2, 3)}
    assert set(blamed) == {3}
    assert {v["metric"] for v in blamed[3]} == {"allreduce_busbw_GBps (0-3)", "allreduce_busbw_GBps (1-3)",
                                                 "allreduce_busbw_GBps (2-3)"}


def test_a_failed_pair_test_is_a_failed_verdict_of_the_link_and_its_nodes():
    links = {p: {"link_gbps": 9.5, "allreduce_busbw_GBps": 0.6} for p in itertools.combinations(range(3), 2)}
    links[(0, 2)] = {"link_gbps": 9.5, "error": "Paddle comm job: comm job failed: rank 1 exit code 1"}
    verdicts, blamed = rules.judge_links(links, RULES)
    assert [l["verdict"] for l in verdicts] == ["healthy", "failed", "healthy"]
    merged = rules.merge(rules.judge_nodes({i: {} for i in range(3)}, RULES), blamed)
    assert [(n["verdict"], n["categories"]) for n in merged] == [
        ("defective", ["failed"]), ("healthy", []), ("defective", ["failed"])]  # node 1's links are fine
    report = {"nodes": [dict(n, host=f"h{n['index']}") for n in merged], "links": verdicts,
              "reference": "peer median", "elapsed_s": 1.0, "phases": {}}
    text = output.console(report)
    assert "test (0-2) failed: Paddle comm job: comm job failed" in text and exit_code(report) == 1


def test_the_all_node_job_is_judged_against_a_baseline_and_a_failure_is_its_verdict():
    base = {"metrics": {"cluster_allreduce_busbw_GBps": {"mean": 0.4}}}
    assert rules.judge_cluster({"cluster_allreduce_busbw_GBps": 0.38}, RULES, base)["verdict"] == "healthy"
    assert rules.judge_cluster({"cluster_allreduce_busbw_GBps": 0.1}, RULES, base)["verdict"] == "slow"
    assert rules.judge_cluster({"cluster_allreduce_busbw_GBps": 0.1}, RULES, None)["verdict"] == "healthy"  # no peers
    failed = rules.judge_cluster({"nodes": [0, 1, 2], "error": "comm job timeout"}, RULES, None)
    assert failed["verdict"] == "failed" and failed["categories"] == ["failed"]
    report = {"nodes": [{"index": 0, "host": "h", "verdict": "healthy", "categories": [], "violations": []}],
              "links": [], "cluster": failed, "reference": "peer median", "elapsed_s": 1.0, "phases": {}}
    assert exit_code(report) == 1 and "all nodes 0,1,2" in output.console(report)
