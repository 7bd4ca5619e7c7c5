"""`fleetbench launch` on one simulated 8-GPU host: how many ranks, each rank's device, what the
ranks inherit, and bad input refused before anything starts (issue 33, acceptance 4).

Placement is proved with tests/gpu_sim/placement.py, a rank that imports no Paddle and stores no
record (Paddle's own launcher still decides everything: it is the real one, seeing the simulated
devices through its own Device.parse_device). A real training job on the simulated GPUs, its
record marked, is test_sim_demo.py's."""
import subprocess

import pytest
import simhost
from simhost import PLACEMENT, placements
from util import PYTHON, REPO, env, worker_log_tails


@pytest.fixture(scope="module")
def dgx(tmp_path_factory):
    return simhost.install(tmp_path_factory.mktemp("dgx"), "dgx-a100", "2.6.2-cu118")


def launch(sim, tmp_path, *argv, **extra):
    return subprocess.run([PYTHON, "-m", "fleetbench", "launch", "--quiet", "--log_dir", str(tmp_path / "log"), *argv],
                          cwd=REPO, env=env(**sim.env(), **extra), capture_output=True, text=True, timeout=300)


def test_one_rank_per_listed_gpu_each_on_its_own_device(dgx, tmp_path):
    p = launch(dgx, tmp_path, "--gpus", "0-7", PLACEMENT, PADDLE_DISTRI_BACKEND="gloo")
    assert p.returncode == 0, p.stderr[-3000:] + worker_log_tails(tmp_path / "log")
    ranks = placements(tmp_path / "log")
    assert sorted(ranks) == list(range(8))
    assert [ranks[r]["env"]["FLAGS_selected_gpus"] for r in range(8)] == [str(r) for r in range(8)]
    assert {ranks[r]["env"]["PADDLE_TRAINERS_NUM"] for r in range(8)} == {"8"}
    endpoints = {ranks[r]["env"]["PADDLE_CURRENT_ENDPOINT"] for r in range(8)}
    assert len(endpoints) == 8 and ranks[0]["env"]["PADDLE_TRAINER_ENDPOINTS"].split(",") == sorted(
        endpoints, key=ranks[0]["env"]["PADDLE_TRAINER_ENDPOINTS"].split(",").index)
    # the user's own switch to CPU ranks reaches the ranks (finding 5: it was stripped with the
    # inherited rank variables), and every rank ran on the simulated host
    assert {ranks[r]["env"]["PADDLE_DISTRI_BACKEND"] for r in range(8)} == {"gloo"}
    assert {ranks[r]["host"] for r in range(8)} == {"dgx-a100"}


def test_visible_devices_renumber_and_no_list_takes_every_visible_gpu(dgx, tmp_path):
    # CUDA_VISIBLE_DEVICES=4,5,6,7 with --gpus 4-7: Paddle's selection is relative to the visible list
    p = launch(dgx, tmp_path / "a", "--gpus", "4-7", PLACEMENT, CUDA_VISIBLE_DEVICES="4,5,6,7")
    assert p.returncode == 0, p.stderr[-3000:]
    ranks = placements(tmp_path / "a" / "log")
    assert [(ranks[r]["env"]["FLAGS_selected_gpus"], ranks[r]["env"]["CUDA_VISIBLE_DEVICES"]) for r in range(4)] == \
        [(str(r), "4,5,6,7") for r in range(4)]
    # nothing names the count: Paddle's launcher starts one rank per GPU it sees (here 3)
    p = launch(dgx, tmp_path / "b", PLACEMENT, CUDA_VISIBLE_DEVICES="1,2,5")
    assert p.returncode == 0, p.stderr[-3000:]
    assert [r["env"]["FLAGS_selected_gpus"] for _, r in sorted(placements(tmp_path / "b" / "log").items())] == \
        ["0", "1", "2"]


@pytest.mark.parametrize("argv, extra, message", [
    (["--gpus", "0-9", PLACEMENT], {},
     "--gpus 0,1,2,3,4,5,6,7,8,9: device(s) 8,9 not visible here (visible gpu devices: 0,1,2,3,4,5,6,7)"),
    (["--gpus", "4-7", PLACEMENT], {"CUDA_VISIBLE_DEVICES": "0,1"},
     "--gpus 4,5,6,7: device(s) 4,5,6,7 not visible here (visible gpu devices: 0,1)"),
    (["--nproc_per_node", "4", "--gpus", "0-7", PLACEMENT], {},
     "--nproc_per_node 4 with --gpus 0,1,2,3,4,5,6,7 (8 devices): Paddle's launcher gives rank i the i-th listed "
     "device, so devices 4,5,6,7 would stay idle"),
    (["--nproc_per_node", "16", PLACEMENT], {},
     "--nproc_per_node 16: 8 GPU(s) are visible here (0,1,2,3,4,5,6,7) and Paddle's launcher gives each rank one"),
    (["--gpus", "0,1", "collective/resnet50.py", "--preset", "tiny", "--set", "amp=fp16"],
     {"PADDLE_DISTRI_BACKEND": "gloo"},
     "resnet50: error: config key 'amp' is 'fp16' but this Paddle build runs CPU ranks (PADDLE_DISTRI_BACKEND=gloo)"),
])
def test_bad_input_on_a_gpu_host_is_one_line_before_anything_starts(dgx, tmp_path, argv, extra, message):
    store = tmp_path / "runs.jsonl"
    store.write_text("")  # a store that exists: nothing may be added to it
    script_args = ["--results", str(store)] if "collective/resnet50.py" in argv else []
    p = launch(dgx, tmp_path, *argv, *script_args, **extra)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and lines[-1].startswith(f"fleetbench launch: error: {message}"), p.stderr[-2000:]
    assert [x for x in lines if x.startswith("fleetbench launch:")] == [lines[-1]]
    assert not (tmp_path / "log").exists() and store.read_text() == ""  # nothing started, nothing stored
