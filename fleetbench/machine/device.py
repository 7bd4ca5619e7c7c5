"""Which device this process computes on, and its sync: the training loop and the comm benchmark
both ask here (machine/ sits below train/ and comm/, so neither imports the other for it).

Paddle is imported on first use, quietly: a refusal built on these answers must stay one line.
"""
import contextlib
import io
import os
import time
from typing import Callable
from types import ModuleType


def quiet_import_paddle() -> ModuleType:
    """paddle, imported without the notes it prints on stderr at import (about the
    OMP_NUM_THREADS fleetbench chose, a missing ccache): a refusal must stay one line."""
    with contextlib.redirect_stderr(io.StringIO()):
        import paddle
    return paddle


def cpu_ranks_asked() -> bool:
    """Paddle's own switch for CPU ranks on a CUDA build: with PADDLE_DISTRI_BACKEND=gloo,
    init_parallel_env takes CPUPlace and gloo whatever the build (`_is_cpuonly` in
    paddle/distributed/parallel.py, 2.6.2 and 3.3.1). The test suite uses it on GPU hosts."""
    return os.environ.get("PADDLE_DISTRI_BACKEND") == "gloo"


def gpu_ranks() -> bool:
    """Whether this process trains on a GPU: a CUDA build that sees one, unless CPU ranks were asked."""
    paddle = quiet_import_paddle()
    return not cpu_ranks_asked() and paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0


def device_name() -> str:
    """GPU when Paddle was built with CUDA and sees a device (and no CPU ranks were asked); the
    launcher picks which one."""
    if gpu_ranks():
        import paddle.distributed as dist
        return f"gpu:{dist.ParallelEnv().device_id}"
    return "cpu"


def sync_device() -> None:
    """Wait for the device's queued work: every timed window ends here (a GPU runs asynchronously)."""
    if gpu_ranks():
        quiet_import_paddle().device.cuda.synchronize()


# fp32 512x512x512: 0.27 GFLOP a product, in cache-friendly blocks on any CPU
MATMUL_N = 512
TRIALS = 3


def best_rate(work: float, run: Callable[[], object], seconds: float) -> float:
    """Work per second of the fastest of TRIALS trials, each repeating `run` for ~seconds/TRIALS."""
    best = 0.0
    for _ in range(TRIALS):
        count, start = 0, time.perf_counter()
        while True:
            run()
            count += 1
            took = time.perf_counter() - start
            if took >= seconds / TRIALS:
                break
        best = max(best, work * count / took)
    return best


def gemm_gflops(seconds: float) -> float:
    """GFLOP/s of an fp32 matmul on Paddle's current device and this process's threads: the CPU
    roofline of the diagnose probe (diagnose/probe.py) and of a CPU rank's MFU (train/trace.py)."""
    paddle = quiet_import_paddle()
    a = paddle.rand([MATMUL_N, MATMUL_N], dtype="float32")
    b = paddle.rand([MATMUL_N, MATMUL_N], dtype="float32")
    paddle.matmul(a, b).numpy()  # first call pays for kernel selection and allocation
    return best_rate(2 * MATMUL_N ** 3 / 1e9, lambda: paddle.matmul(a, b).numpy(), seconds)
