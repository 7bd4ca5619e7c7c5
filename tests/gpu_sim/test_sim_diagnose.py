"""`fleetbench diagnose` on a simulated GPU node (issue 33, findings 7-9): the GPU probes pick each
device, sample nvidia-smi while the device is loaded (a GPU that throttles only under load is found;
read after the load, as before, its clocks and temperature were the idle ones), time fp32 with
cuBLAS's TF32 switch off and TF32 on its own, and the CPU probes time the CPU (a CUDA build's
default place is GPU 0). The figures themselves are CPU tensors' and say nothing of a GPU; the
record is marked simulated. Float16 matmul has no CPU kernel in either wheel: on the simulated host
that figure is not measured, and the probe says so (on a CUDA build the kernel is there)."""
import json
import subprocess

import pytest
import simhost
from util import PYTHON, REPO, env, paddle3_python, records

# probe.py's CPU probes and gpu.py's device figures, each paddle.matmul call noted with the device
# it was asked on and the TF32 switch at that moment
WATCH = r"""
import json, paddle
from paddle.base import core
from fleetbench.diagnose import gpu, probe
seen, real = [], paddle.matmul
def matmul(a, b, *args, **kwargs):
    seen.append([paddle.get_device(), str(a.dtype).split(".")[-1], core.get_cublas_switch()])
    return real(a, b, *args, **kwargs)
paddle.matmul = matmul
probe.matmul_gflops(0.05)
cpu = list(seen)
seen.clear()
figures = gpu.device_figures(1, 0.05)
print("WATCHED " + json.dumps({"cpu": cpu, "gpu": seen, "figures": figures}))
"""


def test_the_cpu_probes_time_the_cpu_and_fp32_is_timed_without_tf32(tmp_path):
    sim = simhost.install(tmp_path, "a100x2", "2.6.2-cu118")
    p = subprocess.run([PYTHON, "-c", WATCH], cwd=REPO, env=env(**sim.env()), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(next(line for line in p.stdout.splitlines() if line.startswith("WATCHED "))[8:])
    assert got["cpu"] and {device for device, _, _ in got["cpu"]} == {"cpu"}  # finding 9: it was gpu:0
    on_gpu = {(device, dtype, tf32) for device, dtype, tf32 in got["gpu"]}
    assert ("gpu:1", "float32", False) in on_gpu and ("gpu:1", "float32", True) in on_gpu  # finding 8
    figures = got["figures"]
    assert {"gpu_matmul_fp32_tflops", "gpu_matmul_tf32_tflops", "gpu_mem_copy_gbps", "gpu_sm_clock_ratio"} <= set(figures)
    assert "gpu_matmul_fp16_tflops" not in figures  # no float16 matmul kernel on the CPU: not measured, and said
    assert "gpu:1 float16 matmul: not measured, this Paddle build has no kernel for it here" in p.stderr


def test_diagnose_finds_a_gpu_that_throttles_under_load(tmp_path):
    # GPU 1 runs at 1005 of 1410 MHz and 88 C under load, idle at 210 MHz and 31 C like GPU 0
    sim = simhost.install(tmp_path / "host", "a100x2", "3.3.1-cu126", python=paddle3_python(),
                          gpu_overrides={1: {"load_sm": 1005, "load_temp": 88}})
    store = tmp_path / "diag.jsonl"
    p = subprocess.run([paddle3_python(), "-m", "fleetbench", "diagnose", "--passes", "1", "--seconds", "0.1",
                        "--json", "--results", str(store)], cwd=REPO, env=env(**sim.env()), capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]  # a defective node
    (node,) = json.loads(p.stdout)["nodes"]
    figures = node["figures"]
    assert figures["gpu_sm_clock_ratio"] == pytest.approx(1005 / 1410) and figures["gpu_temperature_c"] == 88
    assert node["verdict"] == "defective" and [v["metric"] for v in node["violations"]] == ["gpu_temperature_c"]
    assert figures["gpu_matmul_tf32_tflops"] > 0 and figures["gpu_mem_copy_gbps"] > 0
    assert all(r["env"]["simulated_gpu"]["host"] == "a100x2" for r in records(store))
