"""The README's readiness commands on the simulated GPU host, each build as Paddle's own wheel of
that version answers (simhost.BUILDS): `fleetbench env --check` and a benchmark's `--check` (which
`fleetbench launch` and `sweep` run before anything starts).

Issue 33 finding 1: every Paddle 3.x CUDA 12 build was refused, its cuDNN 9.5.1 read as "90.5"
(cudnn_version() // 1000), and the hint sent builds whose NVIDIA libraries are pip wheels to
LD_LIBRARY_PATH. The 3.x cases below failed before the fix (exit 2, "loads cuDNN 90.5 where it was
built for 9.5.1"). The other refusals are one line, exit 2, and name what to do for that build."""
import json
import subprocess

import pytest
import simhost
from util import PYTHON, REPO, env, paddle3_python

RESNET_CHECK = ["collective/resnet50.py", "--preset", "tiny", "--check"]
ENV_CHECK = ["-m", "fleetbench", "env", "--check"]


def run(sim, python, argv):
    return subprocess.run([python, *argv], cwd=REPO, env=env(**sim.env()), capture_output=True, text=True, timeout=180)


def python_of(build: str) -> str:
    return paddle3_python() if build.startswith("3.") else PYTHON


@pytest.mark.parametrize("build, ready", [
    ("2.6.2-cu118", "loads cuDNN 8.6.0 and NCCL 2.16.2 and sees 8 GPU(s)"),
    ("3.3.1-cu126", "loads cuDNN 9.5.1 and NCCL 2.21.5 and sees 8 GPU(s)"),
])
def test_a_ready_node_is_ready_and_a_benchmark_checks_there(tmp_path, build, ready):
    sim = simhost.install(tmp_path, "dgx-a100", build, python=python_of(build))
    p = run(sim, python_of(build), ENV_CHECK)
    assert p.returncode == 0 and ready in p.stdout, p.stdout + p.stderr
    if build.startswith("2."):
        return  # its `resnet50 --check` runs in test_sim_demo.py, as `fleetbench sweep` runs it
    check = run(sim, python_of(build), RESNET_CHECK)
    assert check.returncode == 0, check.stderr[-2000:]
    assert json.loads(check.stdout.strip().splitlines()[-1])["batch_size"] > 0


@pytest.mark.parametrize("build, loads, phrase, hint", [
    # a cuDNN 8 runtime under a cuDNN 9 build: 8907 read by the cuDNN 8 rule
    ("3.3.1-cu126", {"cudnn": "8.9.7"}, "loads cuDNN 8.9.7 where it was built for 9.5.1",
     "pip install --force-reinstall paddlepaddle-gpu==3.3.1 -i https://www.paddlepaddle.org.cn/packages/stable/cu126/"),
    # the 2.6.2 wheel dlopens the unversioned names, which runtime-only packages lack (finding 11)
    ("2.6.2-cu118", {"cudnn": None, "nccl": None}, "cannot load libcudnn.so, libnccl.so",
     "put their lib folders on LD_LIBRARY_PATH"),
])
def test_a_mismatched_or_missing_library_is_one_line_exit_2(tmp_path, build, loads, phrase, hint):
    sim = simhost.install(tmp_path, "dgx-a100", build, python=python_of(build), loads=loads)
    p = run(sim, python_of(build), ENV_CHECK)
    assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
    (line,) = [x for x in p.stderr.splitlines() if x.startswith("fleetbench env --check:")]
    assert phrase in line and hint in line, line
    if build.startswith("3."):
        assert "LD_LIBRARY_PATH on" not in line  # the pip wheels' build is not sent to the system's libraries


def test_the_environment_report_says_the_host_is_simulated(tmp_path):
    sim = simhost.install(tmp_path, "dgx-a100", "2.6.2-cu118")
    report = json.loads(run(sim, PYTHON, ["-m", "fleetbench", "env", "--json"]).stdout)
    assert report["simulated_gpu"]["host"] == "dgx-a100" and "no figure" in report["simulated_gpu"]["what"]
    assert report["paddle"]["compiled_with_cuda"] and report["paddle"]["simulated"] is True
    assert report["paddle"]["cuda"] == "11.8" and report["paddle"]["nccl"] is None  # NCCL: read by ranks only
    assert report["gpu_count"] == 8 and report["nvidia_driver"] == "535.104.05"
    topo = run(sim, PYTHON, ["-m", "fleetbench", "topo", "--gpus", "0-7"])
    assert topo.returncode == 0 and "NVLink-connected GPU sets: GPU0 GPU1" in topo.stdout, topo.stdout + topo.stderr
