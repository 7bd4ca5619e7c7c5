"""The GPU half of a node's probe (untested here: this machine has no GPU; written from Paddle's
API docs and nvidia-smi(1)). Per device: fp32 and fp16 matmul TFLOPS and the device memory's copy
bandwidth, each timed between paddle.device.synchronize() calls (a kernel launch returns before
the kernel ends); then nvidia-smi's clocks, temperature and ECC counters, read right after the
load so the clocks are the ones the device runs at under work.

A node's figure is its worst device's (lowest TFLOPS, GB/s and clock ratio; highest temperature;
ECC errors summed): one bad GPU makes the node defective, as one bad GPU slows every
synchronous job on it.
"""
from __future__ import annotations

import subprocess
import time

from fleetbench.diagnose import metrics
from fleetbench.machine import nvsmi

MATMUL_N = 8192  # 1.1 TFLOP a product: long enough per call to time a datacenter GPU's kernel
COPY_BYTES = 1 << 30  # 1 GiB each way: far beyond any device cache


def on_gpu() -> bool:
    import paddle

    return paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0


def _rate(work: float, run, seconds: float) -> float:
    """Work per second over repeated `run` calls for ~seconds, synchronized at both ends."""
    import paddle

    run()
    paddle.device.synchronize()  # the first call pays for the kernel's selection and allocation
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        run()
        count += 1
        if count % 8 == 0:
            paddle.device.synchronize()  # keep the queue short so the clock check is meaningful
    paddle.device.synchronize()
    return work * count / (time.perf_counter() - start)


def device_figures(device: int, seconds: float) -> dict:
    """matmul fp32/fp16 TFLOPS and copy GB/s of GPU `device` (the metric names of fleetbench.diagnose.metrics)."""
    import paddle

    paddle.set_device(f"gpu:{device}")
    out = {}
    for dtype in ("float32", "float16"):
        a = paddle.rand([MATMUL_N, MATMUL_N], dtype="float32").astype(dtype)
        b = paddle.rand([MATMUL_N, MATMUL_N], dtype="float32").astype(dtype)
        out[f"gpu_matmul_{'fp32' if dtype == 'float32' else 'fp16'}_tflops"] = _rate(
            2 * MATMUL_N ** 3 / 1e12, lambda: paddle.matmul(a, b), seconds)
    src = paddle.ones([COPY_BYTES // 4], dtype="float32")
    dst = paddle.empty_like(src)
    out["gpu_mem_copy_gbps"] = _rate(2 * COPY_BYTES / 1e9, lambda: paddle.assign(src, output=dst), seconds)  # read + write
    return out


def node_figures(seconds: float) -> dict:
    """The node's GPU figures (its worst device's), or {} without GPUs."""
    if not on_gpu():
        return {}
    import paddle

    per_device = [device_figures(i, seconds) for i in range(paddle.device.cuda.device_count())]
    smi = subprocess.run(nvsmi.command(), capture_output=True, text=True, timeout=30, check=False)
    rows = [nvsmi.figures(r) for r in nvsmi.parse(smi.stdout)] if smi.returncode == 0 else []
    return worst(per_device, rows)


def worst(per_device: list[dict], smi_rows: list[dict]) -> dict:
    """The node's figures from its devices' (pure), combined as fleetbench.diagnose.metrics says:
    lowest rates and clock ratio, highest temperature, ECC errors summed."""
    return metrics.node_of_devices(per_device + smi_rows)
