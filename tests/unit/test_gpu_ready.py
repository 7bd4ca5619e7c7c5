"""The GPU readiness check (fleetbench/machine/gpu_ready.py, `fleetbench env --check`; issue 26).

No GPU Paddle runs here, so the verdict is tested on probe answers built the way the probe builds
them, with Paddle's own loader error text (paddle/phi/backends/dynload/dynamic_loader.cc); the
probe itself runs for real on the installed CPU build."""
import subprocess

import pytest
from util import PYTHON, env

from fleetbench.machine import gpu_ready

# the text Paddle's dynamic loader raises when dlopen finds no library (its PreconditionNotMet)
LOAD_ERROR = ("(PreconditionNotMet) The third-party dynamic library ({}) that Paddle depends on is not "
              "configured correctly. (error code is {}: cannot open shared object file: No such file or directory)\n"
              "  Suggestions:\n  1. Check if the third-party dynamic library (e.g. CUDA, CUDNN) is installed correctly")


def gpu_build(**parts) -> dict:
    """A probe answer of paddlepaddle-gpu 2.6.2 (built for CUDA 11.8, cuDNN 8.6.0) on a ready node."""
    report = {"paddle": "2.6.2", "cuda_built": "11.8", "cudnn_built": "8.6.0", "compiled_with_cuda": True,
              "cudnn": {"value": 8600}, "nccl": {"value": 21602}, "devices": {"value": 8}}
    report.update(parts)
    return report


def test_a_node_without_cuda_libraries_is_named_in_one_line_and_refused():
    # as paddlepaddle-gpu 2.6.2 answered on this CPU machine: cuDNN's load does not throw (the
    # version is -1, the library named in Paddle's warning on stderr); NCCL's does
    report = gpu_build(cudnn={"value": -1}, not_loaded=["libcudnn.so", "libnccl.so"],
                       nccl={"error": LOAD_ERROR.format("libnccl.so", "libnccl.so")}, devices={"value": 0})
    status, line = gpu_ready.verdict(report, driver=None)
    assert status == 2 and "\n" not in line
    assert line.startswith("not ready: Paddle 2.6.2 (built for CUDA 11.8, cuDNN 8.6.0) cannot load libcudnn.so, "
                           "libnccl.so; sees no GPU: install CUDA 11.8, cuDNN 8.6.0 and NCCL 2"), line
    assert gpu_ready.GUIDE in line


def test_a_cudnn_paddle_could_not_load_without_naming_it_is_still_said():
    status, line = gpu_ready.verdict(gpu_build(cudnn={"value": -1}), "535.104.05")
    assert status == 2 and "cannot load cuDNN (cudnn_version() is -1)" in line and "loads cuDNN -" not in line


@pytest.mark.parametrize("parts, driver, phrase", [
    ({"cudnn": {"value": 7605}}, "535.104.05", "loads cuDNN 7.6.5 where it was built for 8.6.0"),
    ({"cudnn": {"value": 90501}}, "535.104.05", "loads cuDNN 9.5.1 where it was built for 8.6.0"),
    ({}, "418.67", "NVIDIA driver 418.67 is older than 450.80.02, the oldest CUDA 11.x runs on"),
    ({"devices": {"error": "CUDA driver version is insufficient"}}, None, "counting GPUs failed (CUDA driver version is insufficient)"),
])
def test_each_problem_is_said(parts, driver, phrase):
    status, line = gpu_ready.verdict(gpu_build(**parts), driver)
    assert status == 2 and phrase in line, line


def cuda12_build(**parts) -> dict:
    """paddlepaddle-gpu 3.3.1 from Paddle's cu126 index: cuDNN 9, NVIDIA's libraries as pip wheels."""
    return gpu_build(**dict({"paddle": "3.3.1", "cuda_built": "12.6", "cudnn_built": "9.5.1", "pip_libraries": True,
                             "cudnn": {"value": 90501}, "nccl": {"value": 22105}}, **parts))


def test_a_cudnn_9_build_is_ready_and_its_hint_is_pip():
    # issue 33 finding 1: cudnnGetVersion() is major*10000 + minor*100 + patch from cuDNN 9 on; read
    # as major*1000 every 3.x CUDA 12 build was refused ("loads cuDNN 90.5 where it was built for 9.5.1")
    status, line = gpu_ready.verdict(cuda12_build(), "550.54.15")
    assert status == 0 and "loads cuDNN 9.5.1 and NCCL 2.21.5 and sees 8 GPU(s)" in line, line
    status, line = gpu_ready.verdict(cuda12_build(cudnn={"value": 8907}), "550.54.15")
    assert status == 2 and "loads cuDNN 8.9.7 where it was built for 9.5.1" in line, line
    # its libraries come as nvidia-* wheels: reinstalling from Paddle's index, not LD_LIBRARY_PATH, puts them back
    assert "pip install --force-reinstall paddlepaddle-gpu==3.3.1 -i https://www.paddlepaddle.org.cn/packages/stable/cu126/" in line
    assert "put their lib folders on LD_LIBRARY_PATH" not in line
    status, line = gpu_ready.verdict(cuda12_build(), "470.57.02")
    assert status == 2 and "NVIDIA driver 470.57.02 is older than 525.60.13, the oldest CUDA 12.x runs on" in line


def test_a_ready_node_and_a_cpu_build_pass():
    status, line = gpu_ready.verdict(gpu_build(), driver="535.104.05")
    assert status == 0 and line.startswith("ready: Paddle 2.6.2") and "sees 8 GPU(s)" in line
    assert "cuBLAS is loaded with the first GPU op (not tried here)" in line  # said, not claimed
    cpu = {"paddle": "2.6.2", "cuda_built": "False", "cudnn_built": "False", "compiled_with_cuda": False}
    assert gpu_ready.verdict(cpu) == (0, "Paddle 2.6.2 is a CPU build: no GPU library to check")
    assert gpu_ready.verdict({"import": "ModuleNotFoundError: No module named 'paddle'"})[0] == 2


def test_the_probe_and_the_command_on_this_cpu_build():
    report = gpu_ready.probe()
    assert report["compiled_with_cuda"] is False and report["paddle"]  # this machine's CPU wheel
    p = subprocess.run([PYTHON, "-m", "fleetbench", "env", "--check"], env=env(), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == (f"fleetbench env --check: Paddle {report['paddle']} is a "
                                                      "CPU build: no GPU library to check"), p.stdout + p.stderr
