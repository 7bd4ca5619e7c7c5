"""The GPT benchmark's hybrid split as a 2 x 8 job on the simulated 8-GPU host: two nodes, each its
own `fleetbench launch` with the flags fleetbench's multi-node executors give node i
(hosts/executors.node_flags: `--master ADDR:PORT --nnodes 2 --rank i --host ADDR_i`), rendezvousing
at node 0's master; node i's address is ADDRESSES[i], so its ranks' endpoints say which node they
are on. With `dry_topology=true` each of the 16 ranks prints the groups Paddle's CommunicateTopology
gives it for the strategy the run would pass to fleet.init, its device and endpoint, then stops
before fleet.init: the orchestration (ranks, devices, nodes, hybrid groups) is tested, no kernel
runs (tensor/pipeline/sequence parallelism and sharding stage 2 are untested in kernels here: docs/guide/gpt.md).
Both nodes share the machine and its simulated GPUs 0-7 (no namespaces: no root needed)."""
import json
import random
import socket
import subprocess

import pytest
import simhost
from util import PYTHON, REPO, env, paddle3_python, worker_log_tails

from fleetbench.train import hybrid

# the master's port: above the range Paddle's launchers take their own ports from
# (job/paddle_launch.LAUNCHER_PORT_RANGE, 20000:32000), below Linux's ephemeral ports (32768-)
MASTER_PORTS = range(32001, 32700)
# loopback addresses of the two nodes; not 127.0.0.1, which every Paddle launcher takes for its own
# (launch/controllers/master.py: a launcher whose --master is 127.0.0.1 or its own address tries to
# serve it), so that only node 0 serves the master, as on a real cluster
ADDRESSES = ("127.0.0.2", "127.0.0.3")
ORDER = ["dp", "pp", "sharding", "sep", "mp"]  # Paddle 2.6.2's hybrid_parallel_order, mp fastest
ORDER3 = ["dp", "pp", "sharding", "sep", "cp", "mp"]  # 3.3.1's: context parallelism beside sep


@pytest.fixture(scope="module")
def dgx(tmp_path_factory):
    return simhost.install(tmp_path_factory.mktemp("dgx"), "dgx-a100", "2.6.2-cu118")


def master_port() -> int:
    for port in random.sample(MASTER_PORTS, 50):
        with socket.socket() as probe:
            try:
                probe.bind(("", port))  # where Paddle's KVServer binds it
                return port
            except OSError:
                continue
    pytest.fail(f"no free port in {MASTER_PORTS} for the master")


def two_nodes(sim, tmp_path, *sets, python: str = PYTHON) -> dict:
    """{rank: its FLEETBENCH_TOPOLOGY line, with the log (node<i>/workerlog.<j>) it was in} of a
    2 x 8 dry-topology job of collective/gpt.py --preset tiny with `sets`."""
    flags = [x for s in ("dry_topology=true", *sets) for x in ("--set", s)]
    master = f"{ADDRESSES[0]}:{master_port()}"
    nodes = [subprocess.Popen(
        [python, "-m", "fleetbench", "launch", "--quiet", "--timeout", "300", "--log_dir", str(tmp_path / f"node{i}"),
         "--master", master, "--nnodes", "2", "--rank", str(i), "--host", ADDRESSES[i], "--gpus", "0-7",
         "collective/gpt.py", "--preset", "tiny", *flags], cwd=REPO, env=env(**sim.env()), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    try:
        said = [node.communicate(timeout=420) for node in nodes]
    finally:
        for node in nodes:  # a launcher left waiting for its peer (its own --timeout stops its ranks)
            if node.poll() is None:
                node.kill()
    for i, (node, (_, err)) in enumerate(zip(nodes, said)):
        assert node.returncode == 0, f"node {i}: " + err[-3000:] + worker_log_tails(tmp_path / f"node{i}")
    found = {}
    for log in tmp_path.glob("node*/workerlog.*"):
        for line in log.read_text().splitlines():
            if line.startswith("FLEETBENCH_TOPOLOGY "):
                got = json.loads(line.split(" ", 1)[1])
                found[got["rank"]] = dict(got, log=str(log.relative_to(tmp_path)))
    assert sorted(found) == list(range(16)), sorted(found)
    return found


def groups_by_arithmetic(rank: int, degrees: dict, order: list = ORDER) -> dict:
    """Each axis's group of `rank` when ranks are numbered over ORDER's axes with the last fastest
    (a mixed-radix number): worked out here, not by Paddle, to check what Paddle gave the ranks."""
    sizes = [degrees[axis] for axis in order]
    coord, rest = [], rank
    for size in reversed(sizes):
        rest, digit = divmod(rest, size)
        coord.insert(0, digit)

    def number(digits: list) -> int:
        out = 0
        for size, digit in zip(sizes, digits):
            out = out * size + digit
        return out
    return {hybrid.AXES[axis]: [number(coord[:i] + [k] + coord[i + 1:]) for k in range(size)]
            for i, (axis, size) in enumerate(zip(order, sizes))}


def assert_placed(ranks: dict, degrees: dict, stage: int) -> None:
    """Every rank on its node and device, with the degrees and Paddle's groups for them."""
    for r, got in ranks.items():
        node = r // 8  # node i's launcher (--rank i) started ranks 8i..8i+7
        assert got["log"] == f"node{node}/workerlog.{r % 8}" and got["endpoint"].split(":")[0] == ADDRESSES[node]
        assert got["device"] == str(r % 8) and got["local_rank"] == str(r % 8)
        assert got["world_size"] == 16 and got["nnodes"] == "2" and got["sharding_stage"] == stage
        assert got["order"] == ORDER and got["degrees"] == degrees, got
        assert got["groups"] == groups_by_arithmetic(r, degrees), (r, got["groups"])


def nodes_of(ranks: dict, members: list) -> set:
    return {ranks[m]["endpoint"].split(":")[0] for m in members}


def test_tp4_pp2_sequence_parallel_on_two_by_eight_keeps_tensor_and_pipeline_groups_in_a_node(dgx, tmp_path):
    # sequence parallelism runs over the TP (model) group and adds no axis ("sep" is Paddle's
    # segment parallelism, another thing): the groups are tp=4 pp=2's; each rank's activations
    # between the TP layers are tiny's 32 positions / 4, micro-batch 4, hidden 64
    ranks = two_nodes(dgx, tmp_path, "tp=4", "pp=2", "sequence_parallel=true")
    assert_placed(ranks, {"dp": 2, "pp": 2, "sharding": 1, "sep": 1, "mp": 4}, 0)
    for r, got in ranks.items():
        assert got["sequence_parallel"] is True and got["sequence_layout"] == [8, 4, 64]
        assert got["groups"]["model"] == list(range(r // 4 * 4, r // 4 * 4 + 4))
        assert got["groups"]["pipe"] == [r // 8 * 8 + r % 4, r // 8 * 8 + r % 4 + 4]
        assert got["groups"]["data"] == [r % 8, r % 8 + 8]  # the gradients' all-reduce crosses the nodes
        assert len(nodes_of(ranks, got["groups"]["model"])) == 1 and len(nodes_of(ranks, got["groups"]["data"])) == 2


def test_sharding_stage_2_on_two_by_eight_shards_over_all_sixteen(dgx, tmp_path):
    ranks = two_nodes(dgx, tmp_path, "sharding_stage=2")
    # stages 2-3 shard over the data-parallel group (group_sharded_parallel): Fleet's sharding degree 1
    assert_placed(ranks, {"dp": 16, "pp": 1, "sharding": 1, "sep": 1, "mp": 1}, 2)
    for r, got in ranks.items():
        assert got["groups"]["data"] == list(range(16)) and got["groups"]["model"] == [r]


def test_tp2_pp4_sharding_1_on_two_by_eight_runs_its_pipeline_across_the_nodes(dgx, tmp_path):
    ranks = two_nodes(dgx, tmp_path, "tp=2", "pp=4", "sharding_stage=1", "num_layers=4")  # tiny has 2 layers
    # stage 1 is Fleet's sharding_degree (DygraphShardingOptimizer), dp_degree 1
    assert_placed(ranks, {"dp": 1, "pp": 4, "sharding": 2, "sep": 1, "mp": 2}, 1)
    for r, got in ranks.items():
        assert got["groups"]["model"] == [r // 2 * 2, r // 2 * 2 + 1]
        assert got["groups"]["sharding"] == [r // 4 * 4 + r % 2, r // 4 * 4 + r % 2 + 2]
        assert got["groups"]["pipe"] == [r % 4 + 4 * k for k in range(4)] and got["coord"]["pipe"] == r // 4
        # stages 0-1 on node 0, 2-3 on node 1: the pipeline's sends cross the nodes, TP's never
        assert len(nodes_of(ranks, got["groups"]["pipe"])) == 2 and len(nodes_of(ranks, got["groups"]["model"])) == 1


def test_ep16_on_two_by_eight_splits_the_experts_over_all_sixteen(dgx, tmp_path):
    # expert parallelism: Paddle's MoELayer's moe_group is the data-parallel group, one expert a rank
    ranks = two_nodes(dgx, tmp_path, "num_experts=16", "ep=16")
    for r, got in ranks.items():
        assert got["ep"] == 16 and got["num_experts"] == 16
        assert got["groups"].pop("expert") == got["groups"]["data"] == list(range(16))
    assert_placed(ranks, {"dp": 16, "pp": 1, "sharding": 1, "sep": 1, "mp": 1}, 0)


@pytest.mark.parametrize("build", ["2.6.2-cu118", "3.3.1-cu126"])
def test_tp2_pp2_sep2_ep2_on_two_by_eight_puts_each_axis_where_paddle_does(tmp_path, build):
    python, order = (PYTHON, ORDER) if build.startswith("2.") else (paddle3_python(), ORDER3)
    sim = simhost.install(tmp_path / "host", "dgx-a100", build, python=python)
    ranks = two_nodes(sim, tmp_path, "tp=2", "pp=2", "sep=2", "num_experts=4", "ep=2", "num_kv_heads=2",
                      python=python)
    degrees = dict({"dp": 2, "pp": 2, "sharding": 1, "sep": 2, "mp": 2}, **({"cp": 1} if "cp" in order else {}))
    for r, got in ranks.items():
        expert = got["groups"].pop("expert")
        assert expert == got["groups"]["data"] == [r % 8, r % 8 + 8]  # the all-to-all crosses the nodes
        assert got["groups"]["sep"] == [r // 4 * 4 + r % 2, r // 4 * 4 + r % 2 + 2]  # inside a node
        assert got["num_kv_heads"] == 2 and len(nodes_of(ranks, got["groups"]["model"])) == 1
        assert got["order"] == order and got["degrees"] == degrees, got
        assert got["groups"] == groups_by_arithmetic(r, degrees, order), (r, got["groups"])
        assert got["world_size"] == 16 and got["device"] == str(r % 8)


def test_without_dry_topology_cpu_ranks_refuse_tp_in_one_line(dgx, tmp_path):
    p = subprocess.run([PYTHON, "-m", "fleetbench", "launch", "--quiet", "--log_dir", str(tmp_path / "log"), "--gpus",
                        "0-7", "collective/gpt.py", "--preset", "tiny", "--set", "tp=4"], cwd=REPO,
                       env=env(**dgx.env(), PADDLE_DISTRI_BACKEND="gloo"), capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "config key 'tp' is 4" in p.stderr and len(p.stderr.strip().splitlines()) == 1


class Cfg:  # the keys hybrid.topology reads
    tp, pp, sharding_stage, sequence_parallel, recompute, micro_batch, global_batch = 4, 2, 0, True, "selective", 1, 0
    seq_len, hidden_size = 2048, 2048
    ep, sep, num_experts, num_kv_heads, num_heads = 1, 1, 0, 0, 16


@pytest.mark.parametrize("tp,pp,stage", [(8, 1, 1), (8, 2, 2), (2, 2, 3)])
def test_a_two_by_eight_job_keeps_tensor_groups_inside_a_node(monkeypatch, tp, pp, stage):
    # the splits not launched above, as the pure function the ranks call (node = rank // 8)
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "16")
    cfg = Cfg()
    cfg.tp, cfg.pp, cfg.sharding_stage = tp, pp, stage
    everyone = [hybrid.topology(cfg, 16, r) for r in range(16)]
    width = 16 // (tp * pp)
    for r, got in enumerate(everyone):
        assert {m // 8 for m in got["groups"]["model"]} == {r // 8} and len(got["groups"]["model"]) == tp
        assert len(got["groups"]["pipe"]) == pp
        data = got["groups"]["sharding" if stage == 1 else "data"]
        assert len(data) == width and r in data
        assert got["groups"] == groups_by_arithmetic(r, got["degrees"])
