"""The straggler report names the slow rank and its host, from records that can show one."""
from fleetbench.perfmodel import stragglers
from fleetbench.report import explain


def _record(method="none", steps=(100.0, 102.0, 160.0, 99.0), devices=1, mode="collective"):
    return {"id": "abcdef0123", "benchmark": "resnet50", "mode": mode, "method": method, "nodes": 4 // devices,
            "devices_per_node": devices, "launch": {"executor": "netns", "hosts": ["10.0.0.1", "10.0.0.2",
                                                                                   "10.0.0.3", "10.0.0.4"]},
            "metrics": {"rank_step_ms": list(steps), "control": method == "none", "throughput": 40.0,
                        "unit": "images/s", "samples_per_s": 40.0}}


def test_the_slow_rank_of_a_control_is_named_with_its_host():
    (s,) = stragglers.stragglers(_record())
    assert (s["rank"], s["host"], s["median_ms"]) == (2, "10.0.0.3", 101.0)
    assert s["slower_pct"] == 58.4


def test_healthy_ranks_sharing_cores_are_not_named_but_a_throttled_one_is():
    # measured here: 4 emulated nodes on 2 cores, ResNet50 tiny method=none; node 2 at 0.5 and 0.1 CPU
    assert stragglers.stragglers(_record(steps=(469.5, 1000.4, 909.2, 890.3))) == []
    (s,) = stragglers.stragglers(_record(steps=(645.5, 907.3, 2900.5, 500.5)))
    assert (s["rank"], s["host"]) == (2, "10.0.0.3")


def test_ranks_fill_nodes_in_order():
    (s,) = stragglers.stragglers(_record(devices=2))
    assert s["host"] == "10.0.0.2"  # ranks 2 and 3 are the second node's


def test_a_synchronous_method_cannot_show_one_and_says_nothing():
    assert stragglers.can_show(_record(method="bsp")) is None
    assert stragglers.stragglers(_record(method="bsp")) == []


def test_the_threshold_decides():
    assert stragglers.stragglers(_record(steps=(100, 100, 108, 100))) == []
    assert len(stragglers.stragglers(_record(steps=(100, 100, 108, 100)), threshold_pct=5)) == 1


def test_explain_prints_the_straggler_line(tmp_path):
    import json

    from fleetbench.store import results

    path = tmp_path / "r.jsonl"
    record = dict(_record(), schema=results.SCHEMA, time="2026-11-24T00:00:00Z", preset="tiny", config={},
                  world_size=4, network=None, env={}, topology=None, git=None, error=None)
    path.write_text(json.dumps(record) + "\n")
    text = explain.run(explain.parser().parse_args([str(path)]))
    assert "rank 2 on 10.0.0.3 at 160 ms/step, 58.4% above the median 101 ms (method=none control" in text
