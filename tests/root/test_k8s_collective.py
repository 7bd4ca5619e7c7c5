"""A collective PaddleJob of two pods through the emulated training operator (tests/k8s_emulator.py),
each pod in a node of the emulated cluster (issue 24, acceptance 2). On one loopback the pods'
gloo rendezvous timed out: every pod advertised the same interface. In namespaces each pod has its
own address and interface, as on a cluster, and the operator's environment (PADDLE_MASTER =
worker-0 on the master port, PADDLE_NNODES, the replica index as PADDLE_RANK) is all that joins
them. One rank a pod: with two (2x2) fleet.init's gloo groups failed in 3 of 3 tries here (pairs
inside one pod timed out or were refused), which the netns and SSH executors' 2-rank nodes do not
show; not understood yet (docs/clusters.md)."""
import os

from k8s_emulator import generate, import_logs, run_job
from util import cluster_name


def test_a_collective_job_of_two_pods_runs_and_brings_one_record_back(tmp_path, monkeypatch):
    from fleetbench.emulate import netem

    monkeypatch.setenv("FLEETBENCH_CLUSTER_STATE_DIR", str(tmp_path / "state"))
    prefix = cluster_name("fbk")
    state = netem.up(2, netem.shaping_from("unshaped"), prefix=prefix)
    try:
        nodes = netem.Layout.from_dict(state["layout"]).nodes
        places = [(n.ip, ["ip", "netns", "exec", n.netns], n.ifname) for n in nodes]
        doc = generate(tmp_path, "resnet50", "--preset", "tiny", "--nodes", "2", "--devices-per-node", "1",
                       "--set", "steps=6", "--set", "warmup_steps=2")
        pods = run_job(doc, tmp_path, places)
    finally:
        netem.down(prefix)
    name = doc["metadata"]["name"]
    assert list(pods) == [f"{name}-worker-0", f"{name}-worker-1"]
    assert all(code == 0 for code, _, _ in pods.values()), {p: out[-2000:] for p, (_, out, _) in pods.items()}
    logs = {p: sorted(x.name for x in d.iterdir() if x.name.startswith("workerlog")) for p, (_, _, d) in pods.items()}
    assert logs == {p: ["workerlog.0"] for p in pods}  # one rank in each pod
    with_record = [p for p, (_, out, _) in pods.items() if "FLEETBENCH_RESULT" in out]
    assert with_record == [f"{name}-worker-0"]  # rank 0's record on worker-0's stdout, as kubectl logs shows it
    (record,) = import_logs([tmp_path / p / "stdout" for p in pods], tmp_path / "store.jsonl")
    assert (record["world_size"], record["nodes"], record["devices_per_node"]) == (2, 2, 1)
    assert record["error"] is None and record["launch"] == {"executor": "kubernetes", "hosts": list(pods)}
    assert not os.path.exists(f"/var/run/netns/{nodes[0].netns}")  # the cluster is gone
