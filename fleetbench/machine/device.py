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
