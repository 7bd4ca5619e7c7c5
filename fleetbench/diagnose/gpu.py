"""The GPU half of a node's probe. Per device: matmul TFLOPS in fp32, TF32 (where the GPU has it)
and fp16, and the device memory's copy bandwidth, each timed between paddle.device.synchronize()
calls (a kernel launch returns before the kernel ends); and nvidia-smi's clocks, temperature and ECC
counters, sampled while the device is under load (read after the load, the
clocks had dropped to idle and the temperature with them, so throttling could not show).

- fp32 is fp32: Paddle lets cuBLAS use TF32 tensor cores for float32 matmuls on Ampere and newer by
  default (its cuBLAS switch, core.get_cublas_switch()), so an "fp32" figure there was a TF32 one.
  fp32 is timed with the switch off; TF32 is its own figure on GPUs of compute
  capability 8.0 and newer (unless NVIDIA_TF32_OVERRIDE=0 turns TF32 off for the process).
- Which nvidia-smi row is the device's: nvidia-smi numbers GPUs in PCI bus order and CUDA (unless
  CUDA_DEVICE_ORDER=PCI_BUS_ID) fastest first, and CUDA_VISIBLE_DEVICES renumbers them, so an index
  does not say. The samples are taken while one device alone is loaded; its row is the busiest
  (utilization.gpu) of them.
- Sizes: the smallest matmul from 1024 up to 8192 (a 1.1 TFLOP product) whose one call takes at
  least 20 ms, and a copy of 256 MiB up to 1 GiB likewise: every datacenter GPU reaches the top sizes,
  so what is timed is the device, not launch overhead; a slower device (or the test suite's
  simulated host, whose tensors are on the CPU) is not kept for minutes.

A node's figure is its worst device's (lowest TFLOPS, GB/s and clock ratio; highest temperature;
ECC errors summed): one bad GPU makes the node defective, as one bad GPU slows every synchronous job.
Tested on the simulated GPU host (tests/gpu_sim): the device choice, the sampling and the worst;
the figures themselves only on a real GPU.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time

from fleetbench.diagnose.judging import metrics
from fleetbench.machine import nvsmi

MATMUL_N = (1024, 2048, 4096, 8192)
COPY_BYTES = (1 << 28, 1 << 29, 1 << 30)  # 256 MiB to 1 GiB each way: far beyond any device cache
CALL_S = 0.02  # one call at least this long, or the largest size
SAMPLE_FIELDS = nvsmi.FIELDS + ("utilization.gpu",)


def on_gpu() -> bool:
    import paddle

    return paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0


class Sampler:
    """nvidia-smi queried in a thread, again and again, while `with` lasts; `taken` is set once a
    sample was taken entirely inside the load."""

    def __init__(self, interval_s: float = 0.2) -> None:
        self.interval_s, self.rows, self.taken = interval_s, [], threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                smi = subprocess.run(nvsmi.command(SAMPLE_FIELDS), capture_output=True, text=True, timeout=30)
                rows = nvsmi.parse(smi.stdout, SAMPLE_FIELDS) if smi.returncode == 0 else []
            except (OSError, subprocess.TimeoutExpired, ValueError):
                rows = []
            if not self._stop.is_set() and rows:
                self.rows.append(max(rows, key=lambda r: r.get("utilization.gpu") or 0))
                self.taken.set()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=35)

    def worst(self) -> dict:
        """The loaded device's figures over its samples, each as fleetbench.diagnose.judging.metrics
        combines a node's devices: lowest clock ratio, highest temperature (error counts only
        grow: their largest is the last)."""
        figures = [nvsmi.figures(r) for r in self.rows]
        return {k: v for k, v in metrics.node_of_devices(figures).items() if not k.startswith("gpu_ecc")} | \
            {k: max(f[k] for f in figures) for k in ("gpu_ecc_corrected_errors", "gpu_ecc_uncorrected_errors")
             if figures and all(f[k] is not None for f in figures)}


def _rate(work: float, run, seconds: float, until=None) -> float:
    """Work per second over repeated `run` calls for ~seconds (and until `until()` is true),
    synchronized at both ends."""
    import paddle

    run()
    paddle.device.synchronize()  # the first call pays for the kernel's selection and allocation
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or (until is not None and not until()):
        run()
        count += 1
        if count % 8 == 0:
            paddle.device.synchronize()  # keep the queue short: the load is what runs now
    paddle.device.synchronize()
    return work * count / (time.perf_counter() - start)


def _sized(sizes: tuple, call) -> int:
    """The first size whose one synchronized call takes CALL_S, else the largest."""
    import paddle

    for size in sizes:
        start = time.perf_counter()
        call(size)
        paddle.device.synchronize()
        if time.perf_counter() - start >= CALL_S:
            return size
    return sizes[-1]


@contextlib.contextmanager
def tf32(allowed: bool):
    """cuBLAS may (or may not) use TF32 tensor cores for float32 products inside: Paddle's switch,
    core.set_cublas_switch (CUDA builds only; on by default, paddle/fluid/pybind/pybind.cc)."""
    from paddle.base import core

    before = core.get_cublas_switch()
    core.set_cublas_switch(allowed)
    try:
        yield
    finally:
        core.set_cublas_switch(before)


def _matmul(dtype: str, n: int):
    import paddle

    a = paddle.rand([n, n], dtype="float32").astype(dtype)
    b = paddle.rand([n, n], dtype="float32").astype(dtype)
    return lambda: paddle.matmul(a, b)


def _copy(nbytes: int):
    import paddle

    src = paddle.ones([nbytes // 4], dtype="float32")
    dst = paddle.empty_like(src)
    return lambda: paddle.assign(src, output=dst)


def device_figures(device: int, seconds: float) -> dict:
    """matmul fp32/tf32/fp16 TFLOPS and copy GB/s of GPU `device`, and its nvidia-smi figures
    sampled while those loads run (the first runs until one sample is in); the metric names of
    fleetbench.diagnose.judging.metrics."""
    import paddle

    paddle.set_device(f"gpu:{device}")
    n = _sized(MATMUL_N, lambda size: _matmul("float32", size)())
    flop = 2 * n ** 3 / 1e12
    out = {}
    with Sampler() as sampler:
        with tf32(False):
            out["gpu_matmul_fp32_tflops"] = _rate(flop, _matmul("float32", n), seconds, until=sampler.taken.is_set)
        if paddle.device.cuda.get_device_capability(device)[0] >= 8 and os.environ.get("NVIDIA_TF32_OVERRIDE") != "0":
            with tf32(True):
                out["gpu_matmul_tf32_tflops"] = _rate(flop, _matmul("float32", n), seconds)
        out["gpu_matmul_fp16_tflops"] = _if_built(f"gpu:{device} float16 matmul",
                                                  lambda: _rate(flop, _matmul("float16", n), seconds))
        size = _sized(COPY_BYTES, lambda b: _copy(b)())
        out["gpu_mem_copy_gbps"] = _rate(2 * size / 1e9, _copy(size), seconds)  # read + write
    return dict({k: v for k, v in out.items() if v is not None}, **sampler.worst())


def _if_built(what: str, measure):
    """measure(), or None when this Paddle build has no kernel for it on this device (Paddle's
    "kernel ... is not registered": a property of the build, not a fault of the node, said on
    stderr; on a CUDA build every op here has its GPU kernel, so this is the simulated host's case,
    whose tensors are on the CPU). Any other failure is the node's and propagates."""
    try:
        return measure()
    except RuntimeError as e:
        if "is not registered" not in str(e):
            raise
        print(f"diagnose: {what}: not measured, this Paddle build has no kernel for it here", file=sys.stderr)
        return None


def node_figures(seconds: float) -> dict:
    """The node's GPU figures (its worst device's), or {} without GPUs."""
    if not on_gpu():
        return {}
    import paddle

    return worst([device_figures(i, seconds) for i in range(paddle.device.cuda.device_count())])


def worst(per_device: list[dict]) -> dict:
    """The node's figures from its devices' (pure), combined as fleetbench.diagnose.judging.metrics says:
    lowest rates and clock ratio, highest temperature, ECC errors summed; a figure no device
    reported is left out."""
    return metrics.node_of_devices(per_device)
