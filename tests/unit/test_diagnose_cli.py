"""`fleetbench diagnose`'s command line over constructed measurements (the tests themselves are
the root tier's): --save-baseline --runs N measures N times and writes each node's and link's
figures with their spread; --baseline judges a later run against them; --json carries the
resolution and what was not measured; the exit code covers nodes and links."""
import itertools
import json

import pytest

from fleetbench.diagnose import cli, session
from fleetbench.hosts.hostlist import Host

HOSTS = [Host(f"fbx-node{i}", reach="netns", index=i, address=f"10.0.0.{i + 1}", netns=f"fbx-node{i}")
         for i in range(4)]


def _measurement(slow_node=None, gflops=(40.0, 41.0, 39.5, 40.5)):
    links = {p: {"link_gbps": (1.0 if slow_node in p else 9.5), "a_cpu_wait": 0.01, "b_cpu_wait": 0.01}
             for p in itertools.combinations(range(4), 2)}
    return {"nodes": {i: {"matmul_gflops": g, "triad_gbps": 20.0, "train_images_per_s": 500.0}
                      for i, g in enumerate(gflops)},
            "problems": {}, "links": links, "cluster": None, "remeasured": {}, "elapsed_s": 1.0, "phases": {}}


@pytest.fixture
def emulated(monkeypatch):
    made = []

    def fake_measure(hosts, opts, rules, references):
        made.append(references)
        return queue.pop(0)

    queue: list = []
    monkeypatch.setattr(cli, "emulated_hosts", lambda name: HOSTS)
    monkeypatch.setattr(cli, "machine", lambda: {"cpu": "X", "cpus": 2, "paddle": "2.6.2"})
    monkeypatch.setattr(session, "measure", fake_measure)
    return queue, made


def test_a_baseline_of_several_runs_then_a_run_judged_against_it(emulated, tmp_path, capsys):
    queue, made = emulated
    base = tmp_path / "sub" / "base.json"
    queue += [_measurement(gflops=(40.0 + r, 41.0, 39.5, 40.5 - r)) for r in range(3)]
    assert cli.cli(["--cluster", "fbx", "--save-baseline", str(base), "--runs", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["baseline_saved"] == {"file": str(base), "runs": 3, "flagged": {}}
    saved = json.loads(base.read_text())
    assert saved["runs"] == 3 and saved["nodes"]["0"]["matmul_gflops"]["values"] == [40.0, 41.0, 42.0]
    assert saved["hosts"] == [h.name for h in HOSTS] and set(saved["links"]) == {"0-1", "0-2", "0-3", "1-2", "1-3", "2-3"}
    queue.append(_measurement(slow_node=3))
    assert cli.cli(["--cluster", "fbx", "--baseline", str(base), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["reference"] == "baseline" and made[-1][0]["kind"] == "fleetbench-diagnose-baseline"
    assert [n["verdict"] for n in report["nodes"]] == ["healthy"] * 3 + ["defective"]
    assert [l["verdict"] for l in report["links"]] == ["healthy", "healthy", "slow", "healthy", "slow", "slow"]
    assert {r["metric"] for r in report["resolution"]} >= {"matmul_gflops", "link_gbps"}
    assert "gpu_temperature_c" in {m["metric"] for m in report["not_measured"]}


def test_the_console_states_resolution_not_measured_and_re_measurement(emulated, capsys):
    queue, _ = emulated
    m = _measurement()
    m["remeasured"] = {"link 0-1": {"link_gbps": [3.0, 9.5]}}
    queue.append(m)
    assert cli.cli(["--cluster", "fbx"]) == 0
    text = capsys.readouterr().out
    assert "resolution: link_gbps: the best healthy link reaches 9.5 Gbit/s" in text
    assert "not measured (no test produced them; never passed): " in text and "gpu_temperature_c" in text
    assert "re-measured once before counting (the better figure counts): link 0-1" in text
