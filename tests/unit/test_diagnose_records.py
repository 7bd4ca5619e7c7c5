"""fleetbench diagnose's report as the issue's JSON shape and as stored records that the store and
`fleetbench report` accept (a diagnose record has figures with units in their names, no throughput)."""
import json

from fleetbench.diagnose import records
from fleetbench.diagnose.judging import rules, verdicts
from fleetbench.diagnose.cli import DEFAULT_RULES
from fleetbench.hosts.hostlist import Host
from fleetbench.report import generate
from fleetbench.store import results

RULES = rules.parse_rules(DEFAULT_RULES.read_text(), "shipped")


def _report() -> dict:
    figures = {0: {"matmul_gflops": 40.0, "triad_gbps": 20.0}, 2: {"matmul_gflops": 15.0, "triad_gbps": 20.0},
               3: {"matmul_gflops": 40.0, "triad_gbps": 21.0}}
    m = {"nodes": figures, "problems": {1: ("unreachable", "node 1 (fb-node1): gone")},
         "links": {(0, 2): {"link_gbps": 9.0}, (0, 3): {"link_gbps": 9.1}, (2, 3): {"link_gbps": 8.9}},
         "cluster": None, "remeasured": {}, "elapsed_s": 12.5, "phases": {"nodes_s": 10.0, "links_s": 2.5}}
    hosts = [Host(f"fb-node{i}", reach="netns", index=i, address=f"10.0.0.{i + 1}") for i in range(4)]
    return verdicts.report(m, RULES, None, hosts)


def test_json_has_the_issues_shape():
    report = json.loads(json.dumps(_report()))
    assert set(report) >= {"nodes", "links", "elapsed_s"}
    for node in report["nodes"]:
        assert set(node) >= {"index", "host", "verdict", "categories", "violations"}
        assert node["verdict"] in ("healthy", "defective", "unreachable")
        for v in node["violations"]:
            assert set(v) >= {"metric", "value", "reference", "rule"}
    assert [(n["index"], n["verdict"], n["categories"]) for n in report["nodes"]] == [
        (0, "healthy", []), (1, "unreachable", ["unreachable"]), (2, "defective", ["compute"]), (3, "healthy", [])]
    assert all(set(link) >= {"a", "b", "verdict"} for link in report["links"])


def test_figures_and_verdict_are_stored_as_valid_records_the_report_skips(tmp_path):
    store = str(tmp_path / "diag.jsonl")
    records.store(store, _report(), "fb")
    stored = results.load([store])  # load validates every record against the schema
    assert [r["benchmark"] for r in stored] == ["diagnose-node"] * 4 + ["diagnose-verdict"]
    assert all(r["mode"] == "diagnose" and r["config"] == {"cluster": "fb"} for r in stored)
    assert stored[2]["metrics"]["matmul_gflops"] == 15.0 and stored[1]["error"] == "node 1 (fb-node1): gone"
    verdict = stored[-1]["metrics"]
    assert [n["verdict"] for n in verdict["nodes"]] == ["healthy", "unreachable", "defective", "healthy"]
    generate.run([store], str(tmp_path / "images"))  # no throughput table of diagnose records, no crash


def test_report_shows_the_stored_diagnosis_and_names_stragglers(tmp_path, capsys):
    from fleetbench.report import health

    store = str(tmp_path / "diag.jsonl")
    records.store(store, _report(), "fb")
    generate.run([store], str(tmp_path / "images"))  # the README section goes to stdout
    text = capsys.readouterr().out
    assert "### Cluster health" in text and "Diagnosis of fb at " in text and "2 of 4 nodes not healthy" in text
    assert "| node 2 | fb-node2 | defective | compute | matmul_gflops 15 vs 40 (peer median) |" in text
    assert "| node 1 | fb-node1 | unreachable | unreachable | - |" in text
    control = {"id": "abcdef0123", "benchmark": "resnet50", "mode": "collective", "method": "none", "nodes": 4,
               "devices_per_node": 1, "error": None,
               "launch": {"hosts": ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]},
               "metrics": {"rank_step_ms": [645.5, 907.3, 2900.5, 500.5], "control": True}}
    section, files = health.section(results.load([store]) + [control], "", None)
    assert files == [] and "- resnet50 none 4x1 (run abcdef01): rank 2 on 10.0.0.3 at 2900.5 ms/step" in section
    # the straggler's host is a node the stored diagnosis judged: the line says what it found
    assert "(method=none control: ranks run free); diagnosed node 2 of fb: defective (compute)" in section
    assert health.section([dict(control, metrics={"rank_step_ms": [1.0, 1.0], "control": True})], "", None)[0].endswith(
        "- none named\n")
    assert health.section([], "", None) == ("", [])


def _report_with_a_cpu_bound_and_a_slow_link() -> dict:
    figures = {i: {"matmul_gflops": 40.0, "triad_gbps": 20.0} for i in range(4)}
    links = {(a, b): {"link_gbps": 9.0, "a_cpu_wait": 0.01, "b_cpu_wait": 0.02} for a in range(4) for b in range(a + 1, 4)}
    links[(0, 1)] = {"link_gbps": 2.0, "a_cpu_wait": 0.5, "b_cpu_wait": 0.6}   # both ends waited for a CPU
    links[(2, 3)] = {"link_gbps": 2.0, "a_cpu_wait": 0.01, "b_cpu_wait": 0.02}  # the link itself
    m = {"nodes": figures, "problems": {}, "links": links, "cluster": None, "remeasured": {}, "elapsed_s": 1.0,
         "phases": {}}
    hosts = [Host(f"fb-node{i}", reach="netns", index=i, address=f"10.0.0.{i + 1}") for i in range(4)]
    return verdicts.report(m, RULES, None, hosts)


def test_the_report_lists_a_cpu_bound_link_as_no_finding_and_a_slow_one_as_not_healthy(tmp_path):
    from fleetbench.report import health

    report = _report_with_a_cpu_bound_and_a_slow_link()
    assert [(l["a"], l["b"], l["verdict"]) for l in report["links"] if l["verdict"] != "healthy"] == [
        (0, 1, "cpu-bound"), (2, 3, "slow")]
    store = str(tmp_path / "diag.jsonl")
    records.store(store, report, "fb")
    text = "\n".join(health.diagnoses(results.load([store])))
    assert "0 of 4 nodes not healthy, 1 link(s) slow or failed." in text
    assert "| link 2-3 | | slow | network |" in text and "| link 0-1 |" not in text  # not among the findings
    assert ("Link 0-1 is cpu-bound, no finding: both ends waited for a CPU (50%, 60% of the test): the CPUs, not "
            "the link, set this figure (link_gbps 2 vs ") in text
    # the report's words are diagnose's: every link verdict is a finding for both or for neither
    assert health.NOT_FINDINGS == verdicts.NOT_FINDINGS
    for word, code in (("healthy", 0), ("cpu-bound", 0), ("disturbed", 3), ("slow", 1), ("failed", 1)):
        alone = dict(report, nodes=[dict(n, verdict="healthy") for n in report["nodes"]],
                     links=[dict(report["links"][0], verdict=word)])
        assert verdicts.exit_code(alone) == code, word
        assert (code != 1) == (word in health.NOT_FINDINGS), word  # a finding exits 1, and only a finding
