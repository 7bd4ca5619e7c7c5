"""`fleetbench launch --hosts` and `--executor slurm` from a head with no GPU (a login node: a
CUDA build of Paddle, no driver, no nvidia-smi) to two emulated nodes with 8 simulated GPUs each:
16 ranks, one GPU each, and the device checks run on the nodes (issue 33, findings 2 and 3: the
head refused for want of GPUs, and one rank a node took all eight devices).

The emulated cluster's nodes are network namespaces with a real sshd, or a real slurmd, each; the
node's Python is the simulated host's (`--remote-python`, simhost.SimHost.python), as a real
cluster's nodes have their own. Ranks are tests/gpu_sim/placement.py (no Paddle, no record)."""
import subprocess

import pytest
import simhost
import yaml
from simhost import PLACEMENT, placements
from util import PYTHON, REPO, cluster_name, emulated_nodes, env, records, slurm_nodes, worker_log_tails

from fleetbench.emulate import slurmd, sshd

pytestmark = pytest.mark.root
SSH_PROBLEM, SLURM_PROBLEM = sshd.requirements_problem(), slurmd.requirements_problem()


@pytest.fixture(scope="module")
def sims(tmp_path_factory):
    root = tmp_path_factory.mktemp("sims")
    return simhost.install(root / "head", "no-gpu", "2.6.2-cu118"), simhost.install(root / "node", "dgx-a100", "2.6.2-cu118")


def head_launch(head, log_dir, *argv, extra=None, wrap=()):
    """`fleetbench launch` on the head (no GPU), wrapped (salloc ...) if asked."""
    cmd = [*wrap, PYTHON, "-m", "fleetbench", "launch", "--quiet", "--log_dir", str(log_dir), *argv]
    return subprocess.run(cmd, cwd=REPO, env=env(**head.env(), **(extra or {})), capture_output=True, text=True,
                          timeout=600)


def head_sweep(head, tmp_path, cell: dict, *argv, extra=None, wrap=()):
    """`fleetbench sweep` of one cell (one run) on the head (no GPU), wrapped (salloc ...) if asked."""
    spec = tmp_path / "sweep.yaml"
    spec.write_text(yaml.safe_dump({"repeats": 1, "timeout": 300, "cells": [cell]}))
    cmd = [*wrap, PYTHON, "-m", "fleetbench", "sweep", str(spec), "--results", str(tmp_path / "runs.jsonl"),
           "--log-dir", str(tmp_path / "log"), *argv]
    return subprocess.run(cmd, cwd=REPO, env=env(**head.env(), **(extra or {})), capture_output=True, text=True,
                          timeout=600)


# The tiniest cell that the head alone would refuse twice over: amp (the head's CUDA build sees no
# GPU) and the GPU readiness check (no driver there). One run, one rank a node.
AMP_CELL = {"benchmark": "resnet50", "preset": "tiny", "nodes": 2, "devices_per_node": 1,
            "set": {"amp": "fp16", "steps": 6}}


def assert_sixteen_ranks(log_dir, nodes: list[str]):
    ranks = placements(log_dir)
    assert sorted(ranks) == list(range(16)), sorted(ranks)
    for r in range(16):
        got = ranks[r]
        assert got["log"] == f"node{r // 8}/workerlog.{r % 8}"  # node i's launcher started ranks 8i..8i+7
        assert got["env"]["FLAGS_selected_gpus"] == str(r % 8) and got["env"]["PADDLE_TRAINERS_NUM"] == "16"
        assert got["host"] == "dgx-a100" and got["netns"].endswith(f"-node{r // 8}")  # on its node, not the head
        assert got["env"]["PADDLE_CURRENT_ENDPOINT"].split(":")[0] == nodes[r // 8]
        assert got["env"]["NCCL_IB_HCA"] == "mlx5"  # NCCL_* reach the nodes


@pytest.fixture(scope="module")
def ssh_cluster(tmp_path_factory):
    with emulated_nodes(sshd, cluster_name("fbg"), tmp_path_factory.mktemp("state")) as nodes:
        yield nodes


@pytest.mark.skipif(SSH_PROBLEM is not None, reason=SSH_PROBLEM or "")
def test_hosts_over_ssh_from_a_head_without_gpus(ssh_cluster, sims, tmp_path):
    head, node = sims
    hosts = ["--hosts", ",".join(ssh_cluster["hosts"]), "--ssh-config", ssh_cluster["ssh_config"],
             "--remote-python", str(node.python)]
    extra = {"FLEETBENCH_CLUSTER_STATE_DIR": ssh_cluster["state"], "NCCL_IB_HCA": "mlx5"}
    p = head_launch(head, tmp_path / "log", *hosts, "--gpus", "0-7", PLACEMENT, extra=extra)
    assert p.returncode == 0, p.stderr[-3000:] + worker_log_tails(tmp_path / "log", pattern="*/workerlog.*")
    assert_sixteen_ranks(tmp_path / "log", ssh_cluster["hosts"])
    # a device the nodes do not have is refused in one line naming the node, before anything starts
    bad = head_launch(head, tmp_path / "bad", *hosts, "--gpus", "0-9", PLACEMENT, extra=extra)
    last = bad.stderr.strip().splitlines()[-1]
    assert bad.returncode == 2 and last.startswith(f"fleetbench launch: error: node 0 ({ssh_cluster['hosts'][0]}): "
                                                   "--gpus 0,1,2,3,4,5,6,7,8,9: device(s) 8,9 not visible here"), last
    assert not (tmp_path / "bad").exists()


@pytest.fixture(scope="module")
def slurm_cluster():
    with slurm_nodes("fbh") as nodes:
        yield nodes


@pytest.mark.skipif(SLURM_PROBLEM is not None, reason=SLURM_PROBLEM or "")
def test_slurm_allocation_from_a_head_without_gpus(slurm_cluster, sims, tmp_path):
    head, node = sims
    extra = {"SLURM_CONF": slurm_cluster["slurm_conf"], "FLEETBENCH_CLUSTER_STATE_DIR": slurm_cluster["state"],
             "NCCL_IB_HCA": "mlx5"}
    salloc = ["salloc", "--nodes=2", "--ntasks-per-node=1", "--exclusive"]
    # no device list: each node's launcher takes every GPU it sees, so each node runs 8 ranks
    p = head_launch(head, tmp_path / "log", "--executor", "slurm", "--remote-python", str(node.python), PLACEMENT,
                    extra=extra, wrap=salloc)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:] + worker_log_tails(tmp_path / "log",
                                                                                      pattern="*/workerlog.*")
    addresses = [placements(tmp_path / "log")[r]["env"]["POD_IP"] for r in (0, 8)]
    assert_sixteen_ranks(tmp_path / "log", addresses)


@pytest.mark.skipif(SSH_PROBLEM is not None, reason=SSH_PROBLEM or "")
def test_a_sweep_over_hosts_checks_its_cells_on_the_nodes_not_on_a_head_without_gpus(ssh_cluster, sims, tmp_path):
    head, node = sims
    # the cell's own --check on the head is refused: what the sweep ran there before (issue 33, finding 2
    # for `fleetbench launch`; the sweep's hosts path still checked every cell on the head)
    on_head = subprocess.run([PYTHON, "collective/resnet50.py", "--preset", "tiny", "--set", "amp=fp16", "--check"],
                             cwd=REPO, env=env(**head.env()), capture_output=True, text=True, timeout=300)
    assert on_head.returncode == 2, on_head.stderr[-2000:]
    hosts = ["--hosts", ",".join(ssh_cluster["hosts"]), "--ssh-config", ssh_cluster["ssh_config"],
             "--remote-python", str(node.python)]
    p = head_sweep(head, tmp_path, AMP_CELL, *hosts, extra={"FLEETBENCH_CLUSTER_STATE_DIR": ssh_cluster["state"]})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:] + worker_log_tails(tmp_path / "log",
                                                                                      pattern="*/*/workerlog.*")
    (rec,) = records(tmp_path / "runs.jsonl")
    assert rec["error"] is None and rec["config"]["amp"] == "fp16" and rec["world_size"] == 2
    assert rec["launch"]["executor"] == "ssh" and rec["launch"]["hosts"] == ssh_cluster["hosts"]
    # made on a node's simulated GPU, and says so
    assert rec["config"]["runtime"]["device"] == "gpu:0" and rec["env"]["simulated_gpu"]["host"] == "dgx-a100"


@pytest.mark.skipif(SLURM_PROBLEM is not None, reason=SLURM_PROBLEM or "")
def test_a_sweep_under_slurm_is_refused_by_the_node_that_lacks_the_devices_before_anything_runs(
        slurm_cluster, sims, tmp_path):
    head, node = sims
    extra = {"SLURM_CONF": slurm_cluster["slurm_conf"], "FLEETBENCH_CLUSTER_STATE_DIR": slurm_cluster["state"]}
    salloc = ["salloc", "--nodes=2", "--ntasks-per-node=1", "--exclusive"]
    p = head_sweep(head, tmp_path, dict(AMP_CELL, devices_per_node=9), "--executor", "slurm", "--remote-python",
                   str(node.python), "--dry-run", extra=extra, wrap=salloc)
    ours = [line for line in p.stderr.splitlines() if line.startswith("fleetbench sweep:")]
    # the nodes' GPUs are counted there (8 each), not the head's none
    assert p.returncode == 2 and len(ours) == 1 and ours[0].startswith("fleetbench sweep: error: cell 1 (resnet50 tiny "), \
        p.stdout[-2000:] + p.stderr[-2000:]
    assert "): node 0 (" in ours[0] and ours[0].endswith(
        "--nproc_per_node 9: 8 GPU(s) are visible here (0,1,2,3,4,5,6,7) and Paddle's launcher gives each rank one; "
        "run at most 8 ranks a node"), ours[0]
    assert not (tmp_path / "runs.jsonl").exists() and not (tmp_path / "log").exists()
