"""PaddleJob manifests for Kubeflow's training operator; `fleetbench results import` of pod logs."""
import json
import subprocess

import pytest
import yaml
from util import PYTHON, REPO, env

from fleetbench.engines import k8s
from fleetbench.store import results

# k8s.problems is fleetbench's rendition of the training operator's webhook rules
# (pkg/webhooks/paddlepaddle/ since 1.8); the CRD's own schema (v1.9.0) is applied to every sweep
# preset's documents in test_k8s_crd.py, and the pods run through an emulated operator in
# tests/job/test_k8s_operator.py and tests/root/test_k8s_collective.py.


def fleetbench(*args, cwd=REPO):
    return subprocess.run([PYTHON, "-m", "fleetbench", *map(str, args)], cwd=cwd, env=env(),
                          capture_output=True, text=True, timeout=120)


def write_manifests(tmp_path, *args):
    out = tmp_path / "jobs.yaml"
    p = fleetbench("k8s", *args, "--image", "registry.example/fleetbench:cpu", "--out", out)
    assert p.returncode == 0, p.stderr
    return list(yaml.safe_load_all(out.read_text()))


def container(doc, rtype):
    return doc["spec"]["paddleReplicaSpecs"][rtype]["template"]["spec"]["containers"][0]


def env_of(cont):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in cont["env"]}


def assert_fleetbench_checker_passes(doc):
    assert k8s.problems(doc) == []


def test_collective_job_is_workers_running_paddles_launcher(tmp_path):
    [doc] = write_manifests(tmp_path, "resnet50", "--preset", "tiny", "--nodes", 2, "--devices-per-node", 4,
                            "--gpus", "--cpu", 16, "--memory", "64Gi", "--set", "batch_size=8")
    assert_fleetbench_checker_passes(doc)
    assert doc["metadata"]["name"] == "fb-resnet50-tiny-2x4"
    assert list(doc["spec"]["paddleReplicaSpecs"]) == ["Worker"]
    worker = doc["spec"]["paddleReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2 and worker["restartPolicy"] == "Never"
    cont = container(doc, "Worker")
    assert cont["command"] + cont["args"] == [
        "python", "-m", "paddle.distributed.launch", "--log_dir", k8s.POD_LOGS, "--nproc_per_node", "4",
        "collective/resnet50.py", "--preset", "tiny", "--set", "batch_size=8", "--results", k8s.POD_RESULTS]
    assert cont["resources"]["limits"] == {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"}
    assert cont["ports"] == [{"containerPort": k8s.PORT, "name": "master"}]
    e = env_of(cont)
    assert json.loads(e["FLEETBENCH_LAUNCH"]) == {"executor": "kubernetes",
                                                  "hosts": ["fb-resnet50-tiny-2x4-worker-0", "fb-resnet50-tiny-2x4-worker-1"]}
    assert e["PADDLE_RANK"] == {"fieldRef": {"fieldPath": f"metadata.labels['{k8s.INDEX_LABEL}']"}}
    assert e["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert e["FLEETBENCH_NODES"] == "2" and e["FLEETBENCH_OMP_THREADS"] == "4"  # 16 cores / 4 processes


def test_an_infiniband_job_carries_ncclss_variables_the_rdma_device_and_ipc_lock(tmp_path):
    # issue 33 finding 11: a PaddleJob could carry neither NCCL_* nor the RDMA device plugin's
    # resource nor IPC_LOCK, so NCCL fell back to sockets on an InfiniBand cluster without a word
    from test_k8s_crd import SCHEMA, errors

    [doc] = write_manifests(tmp_path, "resnet50", "--nodes", 2, "--devices-per-node", 8, "--gpus",
                            "--env", "NCCL_IB_HCA=mlx5", "--env", "NCCL_SOCKET_IFNAME=eth0", "--env", "NCCL_DEBUG=INFO",
                            "--rdma", "rdma/hca_shared_devices_a=1")
    assert_fleetbench_checker_passes(doc)
    assert errors(SCHEMA["openAPIV3Schema"], doc) == []  # the operator's own CRD schema, strictly
    cont = container(doc, "Worker")
    assert {k: env_of(cont)[k] for k in ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "NCCL_DEBUG")} == {
        "NCCL_IB_HCA": "mlx5", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "INFO"}
    assert cont["resources"]["limits"] == {"nvidia.com/gpu": "8", "rdma/hca_shared_devices_a": "1"}
    assert cont["resources"]["requests"] == cont["resources"]["limits"]
    assert cont["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert "securityContext" not in container(write_manifests(tmp_path, "resnet50")[0], "Worker")


@pytest.mark.parametrize("args, message", [
    (["--env", "NCCL_IB_HCA"], "--env 'NCCL_IB_HCA': expected NAME=VALUE"),
    (["--env", "PADDLE_RANK=3"], "--env PADDLE_RANK: set by fleetbench k8s or the operator"),
    (["--env", "FLEETBENCH_NODES=3"], "--env FLEETBENCH_NODES: set by fleetbench k8s or the operator"),
    (["--env", "A=1", "--env", "A=2"], "--env A: given twice"),
    (["--rdma", "hca"], "--rdma 'hca': expected the device plugin's resource like rdma/hca_shared_devices_a[=1]"),
    (["--rdma", "rdma/hca=0"], "--rdma 'rdma/hca=0': expected the device plugin's resource"),
])
def test_bad_env_and_rdma_are_one_line(tmp_path, args, message):
    out = tmp_path / "jobs.yaml"
    p = fleetbench("k8s", "resnet50", *args, "--image", "img", "--out", out)
    (line,) = p.stderr.strip().splitlines()
    assert p.returncode == 2 and line.startswith(f"fleetbench k8s: error: {message}") and not out.exists(), line


def test_a_cpu_job_of_several_ranks_a_pod_across_pods_is_told_to_use_a_paddle3_image(tmp_path):
    out = tmp_path / "jobs.yaml"
    p = fleetbench("k8s", "resnet50", "--preset", "tiny", "--nodes", 2, "--devices-per-node", 2,
                   "--image", "img", "--out", out)
    assert p.returncode == 0 and "fb-resnet50-tiny-2x2: 2 CPU ranks a pod: use a Paddle 3.x image" in p.stderr, p.stderr
    [doc] = yaml.safe_load_all(out.read_text())
    assert k8s.gloo_race_note(doc) is not None
    # not where the race cannot strike: GPU ranks (NCCL), one rank a pod, one pod, parameter server
    container(doc, "Worker")["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
    assert k8s.gloo_race_note(doc) is None
    for args in (["--nodes", 2, "--devices-per-node", 1], ["--nodes", 1, "--devices-per-node", 2]):
        [doc] = write_manifests(tmp_path, "resnet50", "--preset", "tiny", *args)
        assert k8s.gloo_race_note(doc) is None, args
    [doc] = write_manifests(tmp_path, "ctr", "--preset", "tiny", "--servers-workers", "2/4")
    assert k8s.gloo_race_note(doc) is None


def test_parameter_server_job_is_master_servers_and_workers(tmp_path):
    [doc] = write_manifests(tmp_path, "ctr", "--preset", "tiny", "--servers-workers", "2/3")
    assert_fleetbench_checker_passes(doc)
    specs = doc["spec"]["paddleReplicaSpecs"]
    assert {t: s["replicas"] for t, s in specs.items()} == {"Master": 2, "Worker": 3}
    cont = container(doc, "Master")
    assert "--nproc_per_node" not in cont["args"] and "parameter_server/ctr.py" in cont["args"]
    e = env_of(cont)
    assert "PADDLE_RANK" not in e and e["FLEETBENCH_NODES"] == "5"
    assert json.loads(e["FLEETBENCH_LAUNCH"])["hosts"] == [  # trainers by rank (trainer 0 first), then servers
        "fb-ctr-tiny-2-3-worker-0", "fb-ctr-tiny-2-3-worker-1", "fb-ctr-tiny-2-3-worker-2",
        "fb-ctr-tiny-2-3-master-0", "fb-ctr-tiny-2-3-master-1"]


def test_a_sweep_becomes_one_job_per_cell_and_repeat(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"repeats": 2, "timeout": 123, "cells": [
        {"benchmark": "resnet50", "preset": "tiny", "devices_per_node": [1, 2]},
        {"benchmark": "ctr", "preset": "tiny", "method": "async", "servers_workers": "2/2"}]}))
    docs = write_manifests(tmp_path, spec)
    assert len(docs) == 6 and len({d["metadata"]["name"] for d in docs}) == 6
    for doc in docs:
        assert_fleetbench_checker_passes(doc)
    assert container(docs[-1], "Worker")["args"][-5:-2] == ["tiny", "--set", "mode=async"]
    # one job at a time: all created suspended, released in `fleetbench/order` (docs/guide/clusters.md);
    # each ends by the cell's timeout and asks a gang scheduler for all its pods at once
    assert [d["metadata"]["labels"]["fleetbench/order"] for d in docs] == [f"{i:04d}" for i in range(1, 7)]
    for doc in docs:
        run = doc["spec"]["runPolicy"]
        assert run["suspend"] is True and run["activeDeadlineSeconds"] == 123
        assert run["schedulingPolicy"]["minAvailable"] == sum(s["replicas"] for s in doc["spec"]["paddleReplicaSpecs"].values())


@pytest.mark.parametrize("args, message", [
    (["nosuch"], "'nosuch': unknown benchmark"),
    (["resnet50", "--nodes", "2", "--devices-per-node", "3+2"], "every pod runs the same number of processes"),
    (["resnet50", "--name", "Bad_Name"], "--name 'Bad_Name': expected a DNS-1035 label"),
    (["ctr", "--servers-workers", "2"], "--servers-workers '2': expected SERVERS/WORKERS like 2/2"),
    # Kubernetes quantities as the API server reads them; the rest of the matrix: tests/unit/test_bad_input.py
    (["resnet50", "--memory", "lots"], "--memory 'lots': expected a Kubernetes memory quantity"),
    (["resnet50", "--cpu", "500x"], "--cpu '500x': expected a Kubernetes CPU quantity"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, message):
    out = tmp_path / "jobs.yaml"
    p = fleetbench("k8s", *args, "--image", "img", "--out", out)
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not out.exists()


@pytest.mark.parametrize("text, value", [("32Gi", 32 * 2**30), ("512M", 512 * 10**6), ("500m", 0.5), ("1e3", 1000),
                                         ("8", 8), (".5", 0.5), ("1.5Ki", 1536)])
def test_kubernetes_quantities_are_read_as_the_api_server_reads_them(text, value):
    assert k8s.quantity(text) == pytest.approx(value)


def test_a_fractional_cpu_limit_shares_at_least_one_thread():
    doc = k8s.manifest("ok", k8s.registry.get("resnet50"), [], {"mode": "collective", "nodes": 1, "per_node": 2},
                       {"image": "img", "workdir": "/w", "cpu": "500m"})
    env = {e["name"]: e.get("value") for e in container(doc, "Worker")["env"]}
    assert env["FLEETBENCH_OMP_THREADS"] == "1" and container(doc, "Worker")["resources"]["limits"]["cpu"] == "500m"


def a_valid_job():
    return k8s.manifest("ok", k8s.registry.get("resnet50"), [], {"mode": "collective", "nodes": 1, "per_node": 1},
                        {"image": "img", "workdir": "/w"})


def test_fleetbench_checker_reports_every_rule_broken_at_once():
    doc = a_valid_job()
    assert k8s.problems(doc) == []
    doc["spec"]["paddleReplicaSpecs"]["PServer"] = doc["spec"]["paddleReplicaSpecs"]["Worker"]
    container(doc, "Worker")["name"] = "main"
    assert k8s.problems(doc) == [
        "spec.paddleReplicaSpecs.Worker: expected a container named 'paddle', every container with an image",
        "spec.paddleReplicaSpecs.PServer: replica type must be one of Master, Worker",
        "spec.paddleReplicaSpecs.PServer: expected a container named 'paddle', every container with an image"]


def _set(path, value):
    """A change to a valid job at `path` (keys and list indices)."""
    def change(doc):
        *parents, last = path
        for key in parents:
            doc = doc[key]
        doc[last] = value
    return change


WORKER = ("spec", "paddleReplicaSpecs", "Worker")
PADDLE = (*WORKER, "template", "spec", "containers", 0)


@pytest.mark.parametrize("change, problem", [
    (_set(("apiVersion",), "kubeflow.org/v2"), "apiVersion/kind: expected kubeflow.org/v1 PaddleJob"),
    (_set(("kind",), "PyTorchJob"), "apiVersion/kind: expected kubeflow.org/v1 PaddleJob"),
    (_set(("metadata", "name"), "1st-job"), "metadata.name '1st-job': expected a DNS-1035 label"),
    (_set(("metadata", "name"), "a" * 64), f"metadata.name '{'a' * 64}': expected a DNS-1035 label"),
    (_set(("spec", "paddleReplicaSpecs"), {}), "spec.paddleReplicaSpecs: missing"),
    (_set((*WORKER, "replicas"), 0), "spec.paddleReplicaSpecs.Worker.replicas: expected an integer >= 1"),
    (_set((*WORKER, "restartPolicy"), "Sometimes"),
     "spec.paddleReplicaSpecs.Worker.restartPolicy: expected one of Always, OnFailure, Never, ExitCode"),
    (_set((*PADDLE, "image"), ""),
     "spec.paddleReplicaSpecs.Worker: expected a container named 'paddle', every container with an image"),
    (_set((*PADDLE, "ports"), [{"containerPort": k8s.PORT, "name": "rendezvous"}]),
     "spec.paddleReplicaSpecs.Worker: the paddle container needs a port named 'master'"),
])
def test_fleetbench_checker_finds_each_broken_rule(change, problem):
    doc = a_valid_job()
    change(doc)
    assert k8s.problems(doc) == [problem]


def pod_log(tmp_path, record, name="worker-0.log"):
    """What `kubectl logs` of worker 0 shows: the launcher's lines with rank 0's log copied in."""
    log = tmp_path / name
    log.write_text("LAUNCH INFO 2026-11-22 Run Pod: ...\nstep 10/12 loss 2.3 ips 40.8 images/s ...\n"
                   f"{results.RESULT_PREFIX}{results.dumps(record)}\nLAUNCH INFO Pod completed\n")
    return log


def a_record():
    return {"schema": 1, "id": "4f1c0ffee", "time": "2026-11-22T10:00:00.000+00:00", "benchmark": "resnet50",
            "mode": "collective", "method": "allreduce", "preset": "tiny", "config": {"batch_size": 8},
            "nodes": 2, "devices_per_node": 1, "world_size": 2, "network": None,
            "launch": {"executor": "kubernetes", "hosts": ["j-worker-0", "j-worker-1"]},
            "metrics": {"throughput": 12.5, "unit": "images/s"}, "env": {}, "topology": None, "git": None,
            "error": None}


def test_results_import_stores_a_pod_logs_record_once(tmp_path):
    log, store = pod_log(tmp_path, a_record()), tmp_path / "runs.jsonl"
    p = fleetbench("results", "import", log, "--results", store)
    assert p.returncode == 0 and "stored 1 record(s)" in p.stdout, p.stderr
    assert [r["id"] for r in results.load(store)] == ["4f1c0ffee"]
    again = fleetbench("results", "import", log, log, "--results", store)
    assert again.returncode == 1
    assert f"refused {log}:3: record 4f1c0ffee is already in {store}" in again.stderr
    assert [r["id"] for r in results.load(store)] == ["4f1c0ffee"]


def test_results_import_of_a_bad_line_stores_nothing(tmp_path):
    good = pod_log(tmp_path, dict(a_record(), id="aaa"), "a.log")
    bad = pod_log(tmp_path, dict(a_record(), id="bbb", nodes=0), "b.log")
    store = tmp_path / "runs.jsonl"
    p = fleetbench("results", "import", good, bad, "--results", store)
    assert p.returncode == 2 and f"{bad}:3: nodes: expected an integer >= 1, got 0" in p.stderr, p.stderr
    assert not store.exists()
