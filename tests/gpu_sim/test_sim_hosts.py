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
from simhost import PLACEMENT, placements
from util import PYTHON, REPO, cluster_name, emulated_nodes, env, slurm_nodes, worker_log_tails

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
