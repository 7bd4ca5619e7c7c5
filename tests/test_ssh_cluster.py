"""The emulated cluster run through the real engines: every node runs its own sshd (Debian's
openssh-server, keys generated for the test), and jobs reach the nodes over SSH exactly as on a
real cluster; failures are reported with host, rank and cause, and leave nothing on any node.
Needs root, iproute2 and openssh-server (the tests skip with the reason otherwise)."""
import json
import os
import re
import subprocess
import time

import pytest
import yaml

from fleetbench.cluster import netem, sshd
from util import PYTHON, REPO, env, records

PROBLEM = sshd.requirements_problem()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")
PREFIX = f"fbs{os.getpid() % 10000}"
SUBNET = f"10.91.{os.getpid() % 200}.0/24"


def job_processes(job_id):
    """Pids of processes on any node (one machine here) carrying the job's id or a node's share of it."""
    pattern = f"FLEETBENCH_JOB_ID={job_id}".encode()
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if any(v == pattern or v.startswith(pattern + b"-node") for v in f.read().split(b"\0")):
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("state")
    old = os.environ.get("FLEETBENCH_CLUSTER_STATE_DIR")
    os.environ["FLEETBENCH_CLUSTER_STATE_DIR"] = str(state)
    try:
        netem.up(2, netem.shaping_from("1gbe"), prefix=PREFIX, subnet=SUBNET)
        yield dict(sshd.up(PREFIX), state=str(state))
    finally:
        sshd.down(PREFIX)
        netem.down(PREFIX)
        if old is None:
            os.environ.pop("FLEETBENCH_CLUSTER_STATE_DIR", None)
        else:
            os.environ["FLEETBENCH_CLUSTER_STATE_DIR"] = old


def fleetbench(cluster, *args, timeout=600, **extra):
    return subprocess.run([PYTHON, "-m", "fleetbench", *map(str, args)], cwd=REPO, capture_output=True, text=True,
                          env=env(FLEETBENCH_CLUSTER_STATE_DIR=cluster["state"], **extra), timeout=timeout)


def test_the_nodes_serve_ssh_with_the_generated_key_only(cluster):
    out = subprocess.run(["ssh", "-F", cluster["ssh_config"], cluster["hosts"][1], "ip -o -4 addr show"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and cluster["hosts"][1] in out.stdout
    no_key = subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={cluster['state']}/none",
                             "-o", "StrictHostKeyChecking=no", "-o", "IdentitiesOnly=yes", "-i", "/dev/null",
                             cluster["hosts"][1], "true"], capture_output=True, text=True, timeout=30)
    assert no_key.returncode == 255 and "Permission denied" in no_key.stderr


def test_a_two_node_sweep_runs_entirely_through_ssh(cluster, tmp_path):
    spec = tmp_path / "net.yaml"
    spec.write_text(yaml.safe_dump({"repeats": 1, "timeout": 300, "stall": 120, "cells": [
        {"benchmark": "resnet50", "preset": "tiny", "nodes": 2, "network": "1gbe"},
        {"benchmark": "ctr", "preset": "tiny", "method": "async", "servers_workers": "2/2", "nodes": 2,
         "network": "1gbe"}]}))
    store = tmp_path / "runs.jsonl"
    p = fleetbench(cluster, "sweep", spec, "--results", store, "--log-dir", tmp_path / "log",
                   "--cluster-name", PREFIX, "--cluster-subnet", SUBNET, "--executor", "ssh")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    recs = records(store)
    assert [(r["benchmark"], r["error"]) for r in recs] == [("resnet50", None), ("ctr", None)]
    for r in recs:
        assert r["launch"] == {"executor": "ssh", "hosts": cluster["hosts"]}
        assert r["network"]["profile"] == "1gbe" and r["nodes"] == 2
    # the nodes' logs came back over ssh: every rank's, from both nodes
    logs = sorted(str(p.relative_to(tmp_path / "log")).split("/", 1)[1] for p in (tmp_path / "log").glob("*/node*/*log.*")
                  if re.fullmatch(r"(worker|server)log\.\d+", p.name))
    assert logs == ["node0/serverlog.0", "node0/workerlog.0", "node0/workerlog.0",
                    "node1/serverlog.0", "node1/workerlog.0", "node1/workerlog.0"]


def launch_fault(cluster, tmp_path, *hosts_args, timeout=180, **fault):
    store = tmp_path / "runs.jsonl"
    t0 = time.monotonic()
    p = fleetbench(cluster, "launch", *hosts_args, "--forward-env", "FAULT_RANK,FAULT_KIND,FAULT_STEP,STEPS",
                   "--nnodes", 2, "--timeout", 120, "--stall", 60, "--log_dir", tmp_path / "log",
                   "tests/scripts/fault_rank.py", "--results", store, timeout=timeout, **fault)
    return p, time.monotonic() - t0, records(store)


def test_a_rank_killed_on_the_second_node_is_named_and_the_job_is_gone_everywhere(cluster, tmp_path):
    p, took, recs = launch_fault(cluster, tmp_path, "--hostfile", cluster["hostfile"], "--ssh-config",
                                 cluster["ssh_config"], FAULT_RANK=1, FAULT_KIND="kill", STEPS=40)
    assert p.returncode == 1, p.stderr[-3000:]
    host = cluster["hosts"][1]
    assert f"FAILED after" in p.stderr and f"worker rank 1 on {host} was killed by SIGKILL" in p.stderr
    assert took < 60
    job = re.search(r"logs in \S+; job (\w+)", p.stderr)
    assert job and job_processes(job.group(1)) == [], "a process of the job outlived it on a node"
    assert len(recs) == 1 and "worker rank 1 on " + host in recs[0]["error"]
    assert recs[0]["launch"] == {"executor": "ssh", "hosts": cluster["hosts"]}


def test_a_host_that_refuses_ssh_is_named_with_the_cause(cluster, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(open(cluster["ssh_config"]).read() +
                      f"Host refuser\n  HostName {cluster['hosts'][1]}\n  Port 2222\n  User root\n")
    p, took, recs = launch_fault(cluster, tmp_path, "--hosts", f"{cluster['hosts'][0]},refuser",
                                 "--ssh-config", config)
    assert p.returncode == 1, p.stderr[-3000:]
    assert "the launcher on refuser exited with code 255" in p.stderr
    assert "port 2222: Connection refused" in p.stderr
    assert took < 30
    job = re.search(r"logs in \S+; job (\w+)", p.stderr)
    assert job and job_processes(job.group(1)) == []
    assert len(recs) == 1 and "refuser" in recs[0]["error"]


def test_a_host_name_that_does_not_resolve_is_refused_before_anything_starts(cluster, tmp_path):
    p, took, recs = launch_fault(cluster, tmp_path, "--hosts", f"{cluster['hosts'][0]},nosuch-node.invalid",
                                 "--ssh-config", cluster["ssh_config"])
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1] == (
        "fleetbench launch: error: node 1: host nosuch-node.invalid does not resolve (Name or service not known)")
    assert took < 30 and recs == [] and not (tmp_path / "log").exists()


def test_uneven_nodes_two_processes_on_one_host_and_one_on_the_other(cluster, tmp_path):
    h0, h1 = cluster["hosts"]
    p = fleetbench(cluster, "launch", "--hosts", f"{h0}:2,{h1}:1", "--ssh-config", cluster["ssh_config"],
                   "--timeout", 120, "--stall", 60, "--log_dir", tmp_path / "log", "tests/scripts/fault_rank.py",
                   "--results", tmp_path / "runs.jsonl", timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    ranks = {}
    for events in (tmp_path / "log").glob("node*/.fbrank-*"):
        start = json.loads(events.read_text().splitlines()[0])
        ranks[start["rank"]] = events.parent.name
    assert ranks == {0: "node0", 1: "node0", 2: "node1"}  # node 1's first rank follows node 0's two
