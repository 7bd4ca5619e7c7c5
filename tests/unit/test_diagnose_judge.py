"""fleetbench diagnose's judgement on constructed figures (issue 35): the rule that knows its noise,
per-node and per-link baselines, a peer reference robust to one bad node in any cluster size
(3 nodes included), blame that follows cause, re-measurement, and what the report says it
could not see."""
import dataclasses
import itertools
import json

import pytest

from fleetbench.diagnose import output, session
from fleetbench.diagnose.judging import baseline as baselines
from fleetbench.diagnose.judging import judge, resolution, rules, verdicts
from fleetbench.diagnose.cli import DEFAULT_RULES
from fleetbench.hosts.hostlist import Host

RULES = rules.parse_rules(DEFAULT_RULES.read_text(), "shipped")
LINK_RULE = next(r for r in RULES if r.metric == "link_gbps")
MACHINE = {"cpu": "X", "cpus": 2, "paddle": "2.6.2"}


def _m(nodes, links=None, problems=None, cluster=None, remeasured=None):
    return {"nodes": nodes, "problems": problems or {}, "links": links or {}, "cluster": cluster,
            "remeasured": remeasured or {}, "elapsed_s": 1.0, "phases": {}}


def _hosts(n):
    return [Host(f"h{i}", reach="netns", index=i, address=f"10.0.0.{i + 1}") for i in range(n)]


def _report(m, base=None):
    return verdicts.report(m, RULES, base, _hosts(len(m["nodes"]) + len(m["problems"])))


def _nodes(n, gflops=40.0):
    return {i: {"matmul_gflops": gflops, "triad_gbps": 20.0, "train_images_per_s": 500.0} for i in range(n)}


def _cpu(figures, gflops):
    """A node short of CPU: matmul at `gflops` and its training step slowed alike (every CPU
    fault of the matrix slowed both; the shipped rules need both: corroborated_by)."""
    figures["train_images_per_s"] *= gflops / figures["matmul_gflops"]
    figures["matmul_gflops"] = gflops


def _links(n, rate=9.5, slow_node=None, slow_rate=1.0):
    return {p: {"link_gbps": slow_rate if slow_node in p else rate} for p in itertools.combinations(range(n), 2)}


def _flagged(report):
    return verdicts.flagged(report)


# ------------------------------------------------------------------------------------------
# The rule that knows its noise


def test_below_the_percentage_but_inside_the_references_spread_does_not_break():
    (rule,) = rules.parse_rules("rules: [{metric: link_gbps, below_reference_pct: 30, category: network}]", "r")
    noisy = rules.Reference(3.8, spread=0.7, kind="baseline", n=10)  # the probe: 3.8 +- 0.7 Gbit/s
    assert not rule.broken_by(2.5, noisy)  # 34% below, but within 3 spreads (3.8 - 2.1 = 1.7)
    assert rule.broken_by(1.5, noisy)  # below both
    tight = rules.Reference(9.5, spread=0.1, kind="baseline", n=10)
    assert rule.broken_by(6.0, tight) and not rule.broken_by(7.0, tight)  # the percentage binds
    assert rules.flagged_below(30, noisy) == pytest.approx(1.7) and rules.flagged_below(30, tight) == pytest.approx(6.65)


def test_a_node_is_judged_against_the_other_nodes_not_a_median_it_pulled_down():
    figures = _nodes(3)
    _cpu(figures[2], 20.0)
    found = judge.judge_nodes(figures, RULES)
    assert [v["verdict"] for v in found] == ["healthy", "healthy", "defective"]
    violation = found[2]["violations"][0]
    assert (violation["reference"], violation["reference_kind"]) == (40.0, "peer median")


def test_a_figure_far_below_every_peer_is_flagged_however_widely_two_peers_disagree():
    figures = {0: {"matmul_gflops": 2.0}, 1: {"matmul_gflops": 10.0}, 2: {"matmul_gflops": 25.0}}
    # node 1, 26% under the middle of 2 and 25, inside their spread: cannot tell, not healthy
    assert [v["verdict"] for v in judge.judge_nodes(figures, RULES)] == ["defective", "unresolved", "healthy"]
    figures[0]["matmul_gflops"] = 9.0  # below the median by 49%, but not 25% below its lowest peer
    # nor is node 1 (10 against 9 and 25): 9, 10 and 25 cannot tell which is off; never healthy
    assert [v["verdict"] for v in judge.judge_nodes(figures, RULES)] == ["unresolved", "unresolved", "healthy"]


def test_peers_that_spread_widely_flag_nothing_a_tight_cluster_would():
    figures = {i: {"matmul_gflops": g} for i, g in enumerate([40.0, 30.0, 50.0, 41.0, 28.0])}
    # node 4 is 31% below the others' median (40.5) but the others spread +-7.4 GFLOP/s (scaled MAD);
    # node 1 (30) is 26% below its own: neither is flagged, neither is called healthy
    found = judge.judge_nodes(figures, RULES)
    assert [v["verdict"] for v in found] == ["healthy", "unresolved", "healthy", "healthy", "unresolved"]
    (hidden,) = found[4]["unresolved"]
    assert (hidden["value"], hidden["reference"], hidden["below_pct"]) == (28.0, 40.5, 30.9)
    assert hidden["flagged_below"] < 28.0 and hidden["spread"] == pytest.approx(1.4826 * 5, abs=1e-3)
    figures = {i: {"matmul_gflops": g} for i, g in enumerate([40.0, 40.5, 39.5, 41.0, 28.0])}
    assert [v["verdict"] for v in judge.judge_nodes(figures, RULES)][-1] == "defective"


# ------------------------------------------------------------------------------------------
# Baselines per node and per link, from several runs


def _runs(n=4, runs=5, jitter=0.02):
    out = []
    for r in range(runs):
        wiggle = 1 + jitter * ((r % 3) - 1)
        nodes = {i: {"matmul_gflops": 40.0 * wiggle * (1 + 0.1 * i), "triad_gbps": 20.0}
                 for i in range(n)}  # nodes differ: node 3 is 30% faster than node 0
        links = {p: {"link_gbps": (9.5 if 1 not in p else 4.0) * wiggle, "a_cpu_wait": 0.01}
                 for p in itertools.combinations(range(n), 2)}  # links of node 1 are slower by design
        out.append({"nodes": nodes, "links": links, "cluster": None})
    return out


def test_a_baseline_holds_each_node_and_link_with_its_spread_over_the_runs():
    # and one disturbed run hardly moves its reference (the median) or its spread (scaled MAD)
    made = baselines.make_baseline(_runs(), MACHINE, ["h0", "h1", "h2", "h3"])
    assert made["runs"] == 5 and set(made["nodes"]) == {"0", "1", "2", "3"} and "0-1" in made["links"]
    assert made["links"]["0-1"]["link_gbps"]["median"] == pytest.approx(4.0)
    assert made["links"]["0-2"]["link_gbps"]["median"] == pytest.approx(9.5)
    assert made["nodes"]["3"]["matmul_gflops"]["spread"] > 0 and "a_cpu_wait" not in made["links"]["0-1"]
    assert json.loads(json.dumps(made)) == made  # a JSON file
    runs = _runs()
    runs[2]["links"][(0, 2)]["link_gbps"] = 2.0  # a neighbour in one run
    disturbed = baselines.make_baseline(runs, MACHINE, ["h0", "h1", "h2", "h3"])
    assert disturbed["links"]["0-2"]["link_gbps"]["median"] == pytest.approx(9.5, rel=0.03)  # one rank, not 15%
    assert disturbed["links"]["0-2"]["link_gbps"]["spread"] < 0.5
    ref = baselines.reference(made, "links", "0-2", "link_gbps")
    stats = made["links"]["0-2"]["link_gbps"]
    assert ref.kind == "baseline" and ref.n == 5
    assert ref.value == stats["median"]
    assert ref.spread == pytest.approx(max(stats["spread"], made["cv"]["link_gbps"] * stats["median"]))


def test_per_link_baselines_judge_each_link_against_its_own_figure_not_a_pool():
    made = baselines.make_baseline(_runs(), MACHINE, ["h0", "h1", "h2", "h3"])
    clean = _runs(runs=1)[0]
    report = _report(_m(clean["nodes"], clean["links"]), made)
    assert _flagged(report) == []  # node 1's slower links are its normal (a pooled mean flagged them)
    slower = {p: dict(f, link_gbps=f["link_gbps"] * (0.5 if 3 in p else 1.0)) for p, f in clean["links"].items()}
    report = _report(_m(clean["nodes"], slower), made)
    assert _flagged(report) == ["node 3 network", "link 0-3", "link 1-3", "link 2-3"]


def test_a_node_slower_than_its_own_baseline_is_flagged_though_its_peers_are_slower_still():
    made = baselines.make_baseline(_runs(), MACHINE, ["h0", "h1", "h2", "h3"])
    nodes = _runs(runs=1)[0]["nodes"]
    nodes[3]["matmul_gflops"] = 30.0  # its baseline is 52, node 0's is 40
    report = _report(_m(nodes), made)
    assert _flagged(report) == ["node 3 compute"]
    assert report["nodes"][3]["violations"][0]["reference_kind"] == "baseline"


@pytest.mark.parametrize("change, message", [
    ({"version": 1}, "an older baseline"),
    ({"machine": dict(MACHINE, paddle="3.3.1")}, "made on paddle '3.3.1', this run is on '2.6.2'"),
    ({"hosts": ["h0", "h1", "h2"]}, "made on hosts h0,h1,h2, this run has h0,h1,h2,h3"),
    ({"kind": "x"}, "not a diagnose baseline"),
])
def test_a_baseline_of_another_machine_build_or_host_set_is_refused_in_one_line(change, message):
    made = dict(baselines.make_baseline(_runs(), MACHINE, ["h0", "h1", "h2", "h3"]), **change)
    with pytest.raises(rules.DiagnoseError, match=message) as e:
        baselines.check_baseline(made, MACHINE, ["h0", "h1", "h2", "h3"], "--baseline b.json")
    assert "\n" not in str(e.value) and str(e.value).startswith("--baseline b.json: ")


# ------------------------------------------------------------------------------------------
# A peer reference robust to one bad node in any cluster size


@pytest.mark.parametrize("n", [3, 4, 5, 6, 8])
def test_one_bad_nodes_slow_links_are_caught_by_peers_in_any_cluster_size(n):
    for bad in (0, n // 2, n - 1):  # the first node, one in the middle, the last
        report = _report(_m(_nodes(n), _links(n, slow_node=bad)))
        slow = [f"link {a}-{b}" for a, b in itertools.combinations(range(n), 2) if bad in (a, b)]
        assert _flagged(report) == [f"node {bad} network"] + slow, (n, bad)


def test_three_nodes_one_slow_the_peer_median_would_have_passed_it():
    # issue 35: links 0-2 0.94 and 1-2 0.95 beside 0-1 9.51: the median of the 3 links is 0.95
    links = {(0, 1): {"link_gbps": 9.51}, (0, 2): {"link_gbps": 0.94}, (1, 2): {"link_gbps": 0.95}}
    report = _report(_m(_nodes(3), links))
    assert _flagged(report) == ["node 2 network", "link 0-2", "link 1-2"]
    assert report["links"][1]["violations"][0]["reference"] == 9.51  # the one link with no suspect end
    assert report["links"][1]["blamed_on"] == [2]


def test_when_every_link_touches_a_suspect_the_peers_say_they_cannot_judge():
    # 3 nodes, 2 of them slow: every link is slow alike, nothing to compare with
    links = {(0, 1): {"link_gbps": 1.0}, (0, 2): {"link_gbps": 1.0}, (1, 2): {"link_gbps": 1.0}}
    report = _report(_m(_nodes(3), links))
    assert _flagged(report) == []
    (entry,) = [r for r in report["resolution"] if r["metric"] == "link_gbps"]
    assert entry["judged"]  # all alike: judged, and nothing stands out
    refs, suspects = judge.peer_link_references({(0, 1): 9.0, (0, 2): 1.0, (1, 2): 1.0, (0, 3): 1.0,
                                                 (1, 3): 1.0, (2, 3): 1.0}, LINK_RULE)
    assert suspects == {2, 3} and refs[(0, 1)].value == 9.0
    refs, suspects = judge.peer_link_references({(0, 1): 9.0, (0, 2): 1.0, (1, 2): 1.0}, LINK_RULE)
    assert suspects == {2} and refs[(0, 2)].value == 9.0


def test_two_nodes_have_one_link_and_no_peers_to_judge_it_by():
    report = _report(_m(_nodes(2), {(0, 1): {"link_gbps": 0.1}}))
    assert _flagged(report) == []
    (entry,) = [r for r in report["resolution"] if r["metric"] == "link_gbps"]
    assert not entry["judged"] and "no peers" in entry["why"]
    assert "link_gbps: not judged (no peers; a baseline judges it)" in output.console(report)


# ------------------------------------------------------------------------------------------
# Blame that follows cause


def test_a_cpu_starved_nodes_slow_link_is_explained_by_it_not_charged_to_its_healthy_peer():
    # issue 35: node 0 at 0.6 CPU flagged compute, and its link to node 2 slow: node 2 is healthy
    nodes = _nodes(4)
    _cpu(nodes[0], 20.0)
    links = _links(4)
    links[(0, 2)] = {"link_gbps": 3.0}
    report = _report(_m(nodes, links))
    assert _flagged(report) == ["node 0 compute", "link 0-2"]
    assert report["links"][1]["explained_by"] == [0] and report["nodes"][0]["explains"] == ["0-2"]
    assert "explained by node(s) 0" in output.console(report)


def test_a_link_end_saturated_during_the_test_explains_its_slow_link():
    links = _links(4)
    links[(1, 3)] = {"link_gbps": 3.0, "a_cpu_wait": 0.45, "b_cpu_wait": 0.02}  # node 1 (sender) waited
    report = _report(_m(_nodes(4), links))
    assert _flagged(report) == ["link 1-3"] and report["links"][4]["explained_by"] == [1]
    links[(1, 3)] = {"link_gbps": 3.0, "a_cpu_wait": 0.15, "b_cpu_wait": 0.10}  # both ends a little busy
    report = _report(_m(_nodes(4), links))
    assert "explained_by" not in report["links"][4] and "neither end set apart" in report["links"][4]["note"]


def test_a_slow_link_whose_ends_both_waited_for_a_cpu_is_cpu_bound_not_a_finding():
    # measured beside other work (load 10 on 2 cores): a healthy link's ends waited 40-75% of the
    # test, while the ends of a link shaped to 1 Gbit/s waited 1-7%: they sleep on the socket
    links = _links(4)
    links[(0, 1)] = {"link_gbps": 3.8, "a_cpu_wait": 0.50, "b_cpu_wait": 0.62}
    links[(2, 3)] = {"link_gbps": 0.96, "a_cpu_wait": 0.01, "b_cpu_wait": 0.05}
    report = _report(_m(_nodes(4), links))
    assert report["links"][0]["verdict"] == "cpu-bound" and "cpu-bound: both ends waited" in report["links"][0]["note"]
    assert _flagged(report) == ["link 2-3"] and verdicts.exit_code(report) == 1
    links[(2, 3)] = {"link_gbps": 9.5}
    assert verdicts.exit_code(_report(_m(_nodes(4), links))) == 0  # a cpu-bound link alone is no finding


def test_a_figure_that_moved_between_its_two_measurements_is_judged_with_that_much_room():
    # measured beside other work: a healthy node at 242 then 417 images/s, its peers 548-616
    nodes = _nodes(4)
    for i, rate in ((0, 417.0), (1, 548.0), (2, 616.0), (3, 570.0)):
        nodes[i]["train_images_per_s"] = rate
    alone = [dataclasses.replace(r, corroborated_by="") for r in RULES]  # this figure's own rule, alone

    def flagged(m):
        return _flagged(verdicts.report(m, alone, None, _hosts(4)))
    assert flagged(_m(nodes)) == ["node 0 compute"]  # measured once: 27% below its peers
    m = _m(nodes, remeasured={"node 0": {"train_images_per_s": [242.0, 417.0]}})
    assert flagged(m) == []  # 242 then 417: a neighbour, not the node
    nodes[0]["train_images_per_s"] = 300.0
    m = _m(nodes, remeasured={"node 0": {"train_images_per_s": [300.0, 290.0]}})
    assert flagged(m) == ["node 0 compute"]  # low twice alike: sick


def test_a_slow_link_between_nodes_whose_other_links_are_fine_is_charged_to_neither():
    links = _links(4)
    links[(1, 2)] = {"link_gbps": 2.0}  # a cable, a port
    report = _report(_m(_nodes(4), links))
    assert _flagged(report) == ["link 1-2"]  # exit 1 for the link, no node named
    assert "neither end set apart" in report["links"][3]["note"] and verdicts.exit_code(report) == 1


def test_a_failed_pair_test_fails_the_link_and_names_a_node_only_when_its_other_links_fail_too():
    links = {p: {"link_gbps": 9.5} for p in itertools.combinations(range(3), 2)}
    links[(0, 2)] = {"link_gbps": 9.5, "error": "Paddle comm job: comm job failed: rank 1 exit code 1"}
    report = _report(_m(_nodes(3), links))
    assert [l["verdict"] for l in report["links"]] == ["healthy", "failed", "healthy"]
    assert [n["verdict"] for n in report["nodes"]] == ["healthy"] * 3 and verdicts.exit_code(report) == 1
    assert "test failed: Paddle comm job" in output.console(report)
    links[(1, 2)] = dict(links[(0, 2)])
    report = _report(_m(_nodes(3), links))
    assert [(n["verdict"], n["categories"]) for n in report["nodes"]][2] == ("defective", ["failed"])


def test_unreachable_and_failed_are_verdicts_and_the_others_still_judged():
    nodes = _nodes(3)
    nodes.pop(1)
    found = judge.judge_nodes(nodes, RULES, problems={1: ("unreachable", "node 1: gone"), 2: ("failed", "x")})
    assert [(v["index"], v["verdict"]) for v in found] == [(0, "healthy"), (1, "unreachable"), (2, "defective")]


# ------------------------------------------------------------------------------------------
# Re-measurement, resolution, the all-node job


def test_a_figure_that_breaks_a_rule_is_re_measured_and_the_better_one_counts():
    m = _m(_nodes(4), _links(4))
    _cpu(m["nodes"][2], 20.0)
    m["links"][(1, 3)] = {"link_gbps": 4.0}
    assert session.breaking(m, RULES, [None]) == ({2}, {(1, 3)})
    assert session._merged({"matmul_gflops": 20.0, "triad_gbps": 20.0}, {"matmul_gflops": 39.0, "triad_gbps": 19.0}) \
        == {"matmul_gflops": 39.0, "triad_gbps": 20.0}
    assert session.better("gpu_temperature_c", 90.0, 70.0) == 70.0  # lower is better there
    m["remeasured"] = {"node 2": {"matmul_gflops": [20.0, 21.0]}}
    m["nodes"][2]["matmul_gflops"] = 21.0
    report = _report(m)
    violation = report["nodes"][2]["violations"][0]
    assert violation["remeasured"] == [20.0, 21.0] and "re-measured: 20 then 21" in output.console(report)


def test_re_measurement_runs_each_broken_test_once_more_and_only_those(monkeypatch):
    calls = []
    monkeypatch.setattr(session, "node_probe", lambda host, s, t: calls.append(("node", host.index)) or
                        {"matmul_gflops": 21.0, "triad_gbps": 20.0, "train_images_per_s": 500.0})
    monkeypatch.setattr(session, "link_probe", lambda a, b, s, t: calls.append(("link", a.index, b.index)) or
                        {"link_gbps": 9.4})
    m = _m(_nodes(4), _links(4))
    m["links"][(1, 2)] = {"link_gbps": 2.0}  # a link alone: no node to re-probe
    session.remeasure(m, _hosts(4), session.Options(passes=2), RULES, [None])
    assert calls == [("link", 1, 2)] and m["links"][(1, 2)]["link_gbps"] == 9.4
    m = _m(_nodes(4), _links(4))
    _cpu(m["nodes"][3], 20.0)
    calls.clear()
    session.remeasure(m, _hosts(4), session.Options(passes=2), RULES, [None])
    assert calls == [("node", 3), ("node", 3)]  # its passes again, once
    assert m["remeasured"]["node 3"]["matmul_gflops"] == [20.0, 21.0] and m["nodes"][3]["matmul_gflops"] == 21.0


def test_the_resolution_says_what_a_link_fault_above_the_probes_reach_would_look_like():
    # issue 35: the probe reaches 3.8 Gbit/s on a 10 Gbit/s link; a 5 Gbit/s cap cannot show
    report = _report(_m(_nodes(4), _links(4, rate=3.8)))
    (entry,) = [r for r in report["resolution"] if r["metric"] == "link_gbps"]
    assert entry["ceiling"] == 3.8 and entry["flagged_below"] == pytest.approx(2.66)
    text = resolution.text(entry)
    assert "reaches 3.8 Gbit/s" in text and "one above 3.8 cannot be seen" in text
    assert "resolution: link_gbps" in output.console(report)


def test_the_all_node_job_is_judged_against_a_baseline_and_a_failure_is_its_verdict():
    base = {"cluster": {"all": {"cluster_allreduce_busbw_GBps": {"median": 0.4, "spread": 0.01, "n": 5}}}, "cv": {}}
    assert judge.judge_cluster({"cluster_allreduce_busbw_GBps": 0.38}, RULES, base)["verdict"] == "healthy"
    assert judge.judge_cluster({"cluster_allreduce_busbw_GBps": 0.1}, RULES, base)["verdict"] == "slow"
    assert judge.judge_cluster({"cluster_allreduce_busbw_GBps": 0.1}, RULES, None)["verdict"] == "healthy"  # no peers
    failed = judge.judge_cluster({"nodes": [0, 1, 2], "error": "comm job timeout"}, RULES, None)
    assert failed["verdict"] == "failed" and failed["categories"] == ["failed"]
    report = dict(_report(_m(_nodes(3), _links(3))), cluster=failed)
    assert verdicts.exit_code(report) == 1 and "all nodes 0,1,2" in output.console(report)


# ------------------------------------------------------------------------------------------
# Figures measured while others used the machine: re-measured, and never judged while disturbed


def test_a_node_low_only_while_others_took_the_machine_is_disturbed_not_defective():
    # issue 35's clean A/A: a healthy node 0 at 52 and again 54 GFLOP/s against its peers' 76
    nodes = _nodes(3, gflops=76.0)
    _cpu(nodes[0], 54.0)
    for pct, state, code in ((35.0, "disturbed", 3), (10.1, "disturbed", 3), (10.0, "defective", 1),
                             (2.0, "defective", 1), (None, "defective", 1)):
        nodes[0]["others_cpu_pct"] = {"matmul_gflops": pct, "train_images_per_s": pct, "triad_gbps": 0.5}
        report = _report(_m(nodes))
        assert report["nodes"][0]["verdict"] == state, pct
        assert verdicts.exit_code(report) == code, pct
        assert _flagged(report) == ([] if state == "disturbed" else ["node 0 compute"])
    nodes[0]["others_cpu_pct"] = {"matmul_gflops": 35.0, "train_images_per_s": 35.0}
    report = _report(_m(nodes))
    assert report["nodes"][0]["disturbed"][0]["others_cpu_pct"] == 35.0 and verdicts.not_judged(report) == ["node 0"]
    text = output.console(report)
    assert "not judged: matmul_gflops 54 vs 76 (peer median) while others used 35% of the machine" in text
    assert "not judged: node 0: a figure broke a rule in every measurement" in text
    # a quiet figure that breaks another rule makes the node defective whatever else was disturbed
    nodes[0]["triad_gbps"] = 5.0
    report = _report(_m(nodes))
    assert report["nodes"][0]["verdict"] == "defective" and verdicts.exit_code(report) == 1
    assert [v["metric"] for v in report["nodes"][0]["violations"]] == ["triad_gbps"]
    # a quiet drop corroborated only by a disturbed one is not judged either way
    nodes[0]["triad_gbps"], nodes[0]["others_cpu_pct"]["train_images_per_s"] = 20.0, 1.0
    report = _report(_m(nodes))
    assert report["nodes"][0]["verdict"] == "disturbed" and verdicts.exit_code(report) == 3


def test_a_disturbed_healthy_node_does_not_hide_a_sick_one_in_the_same_run():
    nodes = _nodes(4, gflops=76.0)
    _cpu(nodes[1], 50.0)
    _cpu(nodes[3], 30.0)
    nodes[1]["others_cpu_pct"] = {"matmul_gflops": 40.0, "train_images_per_s": 40.0}
    nodes[3]["others_cpu_pct"] = {"matmul_gflops": 1.5, "train_images_per_s": 1.5}
    report = _report(_m(nodes))
    assert [n["verdict"] for n in report["nodes"]] == ["healthy", "disturbed", "healthy", "defective"]
    assert _flagged(report) == ["node 3 compute"] and verdicts.exit_code(report) == 1


def test_a_link_slow_only_while_others_took_the_machine_is_disturbed_and_blames_no_one():
    links = _links(4)
    links[(1, 2)] = {"link_gbps": 2.0, "others_cpu_pct": {"link_gbps": 48.0}}
    report = _report(_m(_nodes(4), links))
    row = next(l for l in report["links"] if (l["a"], l["b"]) == (1, 2))
    assert row["verdict"] == "disturbed" and row["violations"] == [] and row["disturbed"][0]["others_cpu_pct"] == 48.0
    assert _flagged(report) == [] and verdicts.exit_code(report) == 3 and verdicts.not_judged(report) == ["link 1-2"]
    assert [n["verdict"] for n in report["nodes"]] == ["healthy"] * 4
    assert "link 1-2" in output.console(report) and "while others used 48%" in output.console(report)
    links[(1, 2)]["others_cpu_pct"] = {"link_gbps": 4.0}  # quiet: a slow link
    assert _flagged(_report(_m(_nodes(4), links))) == ["link 1-2"]


def test_every_link_of_a_node_slow_and_disturbed_charges_the_node_nothing():
    links = _links(4, slow_node=2, slow_rate=2.0)
    for pair in links:
        if 2 in pair:
            links[pair]["others_cpu_pct"] = {"link_gbps": 30.0}
    report = _report(_m(_nodes(4), links))
    assert _flagged(report) == [] and sorted(verdicts.not_judged(report)) == ["link 0-2", "link 1-2", "link 2-3"]


def test_a_disturbed_figure_is_re_measured_and_the_quietest_measurement_decides(monkeypatch):
    nodes = _nodes(3, gflops=76.0)
    _cpu(nodes[0], 50.0)
    nodes[0]["others_cpu_pct"] = {"matmul_gflops": 40.0, "train_images_per_s": 40.0}
    m = _m(nodes, _links(3))
    assert session.breaking(m, RULES, [None]) == ({0}, set())  # disturbed breaks count: measured again
    again = {"matmul_gflops": 52.0, "triad_gbps": 20.0, "train_images_per_s": 340.0,
             "others_cpu_pct": {"matmul_gflops": 3.0, "train_images_per_s": 3.0, "triad_gbps": 1.0}}
    monkeypatch.setattr(session, "node_probe", lambda host, s, t: dict(again))
    session.remeasure(m, _hosts(3), session.Options(passes=1), RULES, [None])
    assert m["nodes"][0]["others_cpu_pct"]["matmul_gflops"] == 3.0  # one quiet measurement: judged
    assert _report(m)["nodes"][0]["verdict"] == "defective"
    # passes: each metric's quietest pass
    runs = [{"matmul_gflops": 70.0, "others_cpu_pct": {"matmul_gflops": 40.0}},
            {"matmul_gflops": 60.0, "others_cpu_pct": {"matmul_gflops": 5.0}},
            {"matmul_gflops": 65.0, "others_cpu_pct": {"matmul_gflops": None}}]
    assert session.best_of(runs) == {"matmul_gflops": 70.0, "others_cpu_pct": {"matmul_gflops": 5.0}}


def test_a_baseline_leaves_out_figures_measured_while_disturbed_when_quiet_ones_are_there():
    def run(gflops, pct):
        return {"nodes": {0: {"matmul_gflops": gflops, "others_cpu_pct": {"matmul_gflops": pct}}},
                "links": {(0, 1): {"link_gbps": 9.0, "others_cpu_pct": {"link_gbps": 50.0}}}}

    made = baselines.make_baseline([run(76.0, 1.0), run(48.0, 30.0), run(74.0, 2.0)], MACHINE, ["a", "b"])
    stats = made["nodes"]["0"]["matmul_gflops"]
    assert stats["values"] == [76.0, 74.0] and stats["disturbed_left_out"] == 1 and stats["median"] == 75.0
    links = made["links"]["0-1"]["link_gbps"]  # every run disturbed: all kept, nothing better known
    assert links["n"] == 3 and links["disturbed_left_out"] == 0


def test_the_not_judged_line_names_the_threshold_the_diagnosis_used():
    nodes = _nodes(3, gflops=76.0)
    _cpu(nodes[0], 54.0)
    nodes[0]["others_cpu_pct"] = {"matmul_gflops": 35.0, "train_images_per_s": 35.0}
    m = dict(_m(nodes), disturbed_pct=20.0)  # --disturbed 20
    report = _report(m)
    assert report["disturbed_pct"] == 20.0 and report["nodes"][0]["verdict"] == "disturbed"
    assert "used more than 20% of the machine" in output.console(report)
    m["disturbed_pct"] = 40.0  # 35% is under it: judged, and found
    assert _flagged(_report(m)) == ["node 0 compute"]


# ------------------------------------------------------------------------------------------
# One CPU figure alone (corroborated_by)

# Issue 35's matrix, 4 nodes, node 3 at 0.6 CPU: healthy node 0's matmul alone at 48.0 (45.9 first)
# against its baseline's 75.8, its training step at its own; node 3's both low.
RUN = {0: (48.0, 31.4, 2620.8), 1: (77.1, 31.5, 2645.5), 2: (67.4, 28.0, 2680.9), 3: (43.5, 30.3, 1609.8)}
BASE_MATMUL = [79.6, 79.7, 72.6, 73.4, 75.8]  # node 0's five clean runs
BASE_TRAIN = [2568.6, 2558.1, 2656.9, 2525.5, 2451.1]


def _figures(run):
    return {i: {"matmul_gflops": g, "triad_gbps": t, "train_images_per_s": r} for i, (g, t, r) in run.items()}


def _baseline():
    runs = [{"nodes": {i: {"matmul_gflops": g, "triad_gbps": 31.0, "train_images_per_s": r} for i in range(4)},
             "links": {}} for g, r in zip(BASE_MATMUL, BASE_TRAIN)]
    return baselines.make_baseline(runs, MACHINE, [f"h{i}" for i in range(4)])


@pytest.mark.parametrize("mode", ["peers", "baseline"])
def test_one_cpu_figure_alone_below_is_reported_beside_the_verdict_not_counted(mode):
    base = _baseline() if mode == "baseline" else None
    m = _m(_figures(RUN), remeasured={"node 0": {"matmul_gflops": [45.9, 48.0]}})
    report = _report(m, base)
    assert _flagged(report) == ["node 3 compute"] and verdicts.exit_code(report) == 1
    node0 = report["nodes"][0]
    if mode == "baseline":  # against the peers, 48 is not 25% below their median of 67.4
        assert node0["verdict"] == "healthy" and node0["violations"] == []
        (alone,) = node0["uncorroborated"]
        assert (alone["metric"], alone["not_corroborated_by"], alone["value"]) == ("matmul_gflops", "train_images_per_s", 48.0)
        text = output.console(report)
        assert "not counted: matmul_gflops 48 vs 75.8 (baseline) alone (train_images_per_s did not break its rule)" in text
        assert "not counted: node 0: one CPU figure below its reference while the other stayed at its own" in text
    # against the peers node 3's matmul (43.5 vs their 67.4) is inside 3 of their spreads, which
    # node 0's dip widened, yet 35% below them: its training step's drop is corroborated
    assert "train_images_per_s" in {v["metric"] for v in report["nodes"][3]["violations"]}
    assert "uncorroborated" not in report["nodes"][3]
    # the same node short of CPU: both figures fall, and it is found
    m["nodes"][0] = {"matmul_gflops": 35.9, "triad_gbps": 27.5, "train_images_per_s": 1179.8}
    assert _flagged(_report(m, base)) == ["node 0 compute", "node 3 compute"]


def test_without_corroborated_by_one_figure_alone_flags_its_node():
    own = [r if r.metric != "matmul_gflops" else rules.Rule("matmul_gflops", r.criterion, r.threshold, r.category)
           for r in RULES]
    report = verdicts.report(_m(_figures(RUN)), own, _baseline(), _hosts(4))
    assert _flagged(report) == ["node 0 compute", "node 3 compute"]  # the rules file's choice
    assert "train_images_per_s" not in {v["metric"] for v in report["nodes"][0]["violations"]}


def test_the_resolution_says_a_cpu_figure_counts_only_with_its_partner():
    report = _report(_m(_figures(RUN)), _baseline())
    matmul = next(r for r in report["resolution"] if r["metric"] == "matmul_gflops")
    assert matmul["corroborated_by"] == "train_images_per_s"
    assert "is flagged when train_images_per_s is below its own too" in resolution.text(matmul)
