"""fleetbench diagnose among 4 emulated 10gbe nodes, node 0 starved (a tenth of the machine's CPUs,
probes on one thread each: a quota it cannot escape however busy the machine is), beside whatever
else the machine runs: node 0 is never called healthy (flagged, or "cannot tell at this noise" with
its figures), no healthy peer is flagged, and the report states this machine's repeat noise (the
spread of every node's passes) and how many rounds of passes resolving took.

Why not the issue's own 0.6: its quota is 1.2 of 2 cores, and on this shared machine a probe's
threads got about that much anyway (a 4-node run beside other work, by hand: node 0 at 0.6 read 71
GFLOP/s and 1493 images/s against peers' 63-85 and 961-1497; the passes spread +-36%): the quota
did not bind, and no test can see a loss the node does not have then. That case is a measurement
for a quiet machine (docs/diagnose.md), not a test."""
import json
import subprocess

from util import PYTHON, REPO, cluster_name, env

from fleetbench.measure.repeats.stability import DISTURBED_PCT


def fleetbench(*args, timeout=400, **extra_env):
    return subprocess.run([PYTHON, "-m", "fleetbench", *map(str, args)], cwd=REPO, env={**env(), **extra_env},
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_a_starved_node_of_four_is_never_called_healthy_on_a_busy_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETBENCH_CLUSTER_STATE_DIR", str(tmp_path / "state"))
    name = cluster_name("fbn")
    assert fleetbench("cluster", "up", "--nodes", 4, "--profile", "10gbe", "--name", name).returncode == 0
    try:
        assert fleetbench("cluster", "degrade", 0, "--cpu", "0.1", "--name", name).returncode == 0
        # --disturbed 100: every figure judged, however busy (test_diagnose.py says why, and why one thread)
        p = fleetbench("diagnose", "--cluster", name, "--json", "--passes", 2, "--seconds", 0.4,
                       "--disturbed", 100, OMP_NUM_THREADS="1")
    finally:
        assert fleetbench("cluster", "down", "--name", name).returncode == 0
    assert p.returncode in (1, 3) and p.stdout.startswith("{"), p.stdout[-3000:] + p.stderr[-3000:]
    report = json.loads(p.stdout)
    node0, *peers = report["nodes"]
    assert node0["verdict"] in ("defective", "unresolved"), node0
    if node0["verdict"] == "unresolved":  # said with its figures
        assert all(v["value"] < v["reference"] and v["flagged_below"] < v["value"] for v in node0["unresolved"])
    # A peer is never flagged for node 0's starvation (compute), nor on a figure measured while the
    # machine was quiet. --disturbed 100 judges figures others' work lowered too: a peer's lone triad
    # once read 7.7 GB/s against the peers' 11.0 while 3.x sessions ran beside this one, and that is
    # what was asked for; by default (10%) such a figure is not judged.
    for peer in peers:
        assert peer["verdict"] in ("healthy", "unresolved") or "compute" not in peer["categories"], peer
        for v in peer["violations"] if peer["verdict"] == "defective" else ():
            assert peer["figures"]["others_cpu_pct"][v["metric"]] > DISTURBED_PCT, peer
    repeat = {r["metric"]: r.get("repeat_spread_pct") for r in report["resolution"]}
    assert repeat["matmul_gflops"] is not None and repeat["train_images_per_s"] is not None, report["resolution"]
    assert 0 <= report["resolve_rounds"] <= 2 and ("resolve_s" in report["phases"]) == (report["resolve_rounds"] > 0)
