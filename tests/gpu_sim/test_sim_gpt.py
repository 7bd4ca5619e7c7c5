"""The GPT benchmark's hybrid split on the simulated 8-GPU host: with `dry_topology=true` each rank
prints the groups Paddle's CommunicateTopology gives it for the strategy the run would pass to
fleet.init, and its device, then stops: the orchestration (ranks, devices, hybrid groups) is
tested, no kernel runs (tensor/pipeline parallelism and sharding stage 2 are untested in kernels
here: docs/gpt.md). A 2 x 8 job's groups are Paddle's topology for 16 ranks, node = rank // 8."""
import json
import os
import subprocess

import pytest
import simhost
from util import PYTHON, REPO, env, worker_log_tails

from fleetbench.train import hybrid


@pytest.fixture(scope="module")
def dgx(tmp_path_factory):
    return simhost.install(tmp_path_factory.mktemp("dgx"), "dgx-a100", "2.6.2-cu118")


def topologies(sim, tmp_path, *sets, **extra) -> dict:
    flags = [x for s in ("dry_topology=true", *sets) for x in ("--set", s)]
    p = subprocess.run([PYTHON, "-m", "fleetbench", "launch", "--quiet", "--log_dir", str(tmp_path / "log"), "--gpus",
                        "0-7", "collective/gpt.py", "--preset", "tiny", *flags], cwd=REPO, env=env(**sim.env(), **extra),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:] + worker_log_tails(tmp_path / "log")
    found = {}
    for log in (tmp_path / "log").glob("workerlog.*"):
        for line in log.read_text().splitlines():
            if line.startswith("FLEETBENCH_TOPOLOGY "):
                got = json.loads(line.split(" ", 1)[1])
                found[got["rank"]] = got
    return found


def test_tp4_pp2_on_eight_gpus_makes_two_tensor_groups_and_four_pipelines(dgx, tmp_path):
    ranks = topologies(dgx, tmp_path, "tp=4", "pp=2")
    assert sorted(ranks) == list(range(8))
    for r, got in ranks.items():
        assert got["device"] == str(r) and got["world_size"] == 8
        assert got["degrees"]["mp"] == 4 and got["degrees"]["pp"] == 2 and got["degrees"]["dp"] == 1
        assert got["groups"]["model"] == list(range(r // 4 * 4, r // 4 * 4 + 4))
        assert got["groups"]["pipe"] == [r % 4, r % 4 + 4] and got["coord"]["pipe"] == r // 4
        assert got["groups"]["data"] == [r]


def test_sharding_stage_2_shards_over_the_data_parallel_group_of_eight(dgx, tmp_path):
    ranks = topologies(dgx, tmp_path, "sharding_stage=2")
    assert sorted(ranks) == list(range(8))
    for r, got in ranks.items():
        assert got["groups"]["data"] == list(range(8)) and got["groups"]["model"] == [r]
        assert got["sharding_stage"] == 2 and got["degrees"]["sharding"] == 1 and got["device"] == str(r)


def test_without_dry_topology_cpu_ranks_refuse_tp_in_one_line(dgx, tmp_path):
    p = subprocess.run([PYTHON, "-m", "fleetbench", "launch", "--quiet", "--log_dir", str(tmp_path / "log"), "--gpus",
                        "0-7", "collective/gpt.py", "--preset", "tiny", "--set", "tp=4"], cwd=REPO,
                       env=env(**dgx.env(), PADDLE_DISTRI_BACKEND="gloo"), capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "config key 'tp' is 4" in p.stderr and len(p.stderr.strip().splitlines()) == 1


class Cfg:  # the keys hybrid.topology reads
    tp, pp, sharding_stage, sequence_parallel, recompute, micro_batch, global_batch = 4, 2, 0, True, "selective", 1, 0


@pytest.mark.parametrize("tp,pp,stage", [(4, 2, 0), (8, 1, 1), (2, 4, 0), (8, 2, 2)])
def test_a_two_by_eight_job_keeps_tensor_groups_inside_a_node(monkeypatch, tp, pp, stage):
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
    assert os.environ["PADDLE_TRAINERS_NUM"] == "16"
