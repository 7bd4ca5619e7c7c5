"""The Paddle facade of the simulated GPU host (simhost.py): a CPU wheel that answers the device
queries as the named CUDA build of the same version would.

Who is answered as a CUDA build: code above Paddle (fleetbench, a benchmark script) and the two
parts of Paddle whose view of the devices fleetbench's decisions rest on: its launcher's device
detection (paddle.distributed.launch.context.device: how many ranks, which FLAGS_selected_gpus)
and ParallelEnv.device_id (the device a rank takes). Paddle's own internals keep seeing the CPU
build they run on, so tensors stay on the CPU and collectives on gloo (init_parallel_env runs
with PADDLE_DISTRI_BACKEND=gloo, as the CPU build needs; DataParallel, convolutions and random
seeds take their CPU paths). The caller is told apart by
the calling frame's module.

What is answered, each as the build's source says (tests/gpu_sim/test_sim_facade.py pins them):
- is_compiled_with_cuda(): True; device counts: the description's GPUs under CUDA_VISIBLE_DEVICES
  (paddle/phi/backends/gpu/cuda/cuda_info.cc GetGPUDeviceCountImpl: an empty value is 0; the CUDA
  runtime stops at the first id that is not a device); 0 without a driver;
- paddle.version: the overlay's module (simhost.write_version_overlay), found first on
  paddle.__path__, so `import paddle.version` and a read of its file both see the build;
- core.cudnn_version(): cudnnGetVersion() in cuDNN's encoding (simhost.cudnn_code), -1 and Paddle's
  loader warning on stderr when the library is missing (dynload/cudnn.cc HasCUDNN; the load does not
  throw); core.nccl_version(): ncclGetVersion() (simhost.nccl_code), or Paddle's PreconditionNotMet
  (a RuntimeError, pybind/exception.cc) with the loader's text when libnccl is missing;
- set_device('gpu:N'): N checked against the count with Paddle's own message (SetDeviceId), the
  choice remembered (get_device() says it, nvidia-smi shows the device under load), the tensors
  placed on the CPU; get_device() before any choice: 'gpu:<FLAGS_selected_gpus[0]>' (Paddle's
  default place on a CUDA build with GPUs, framework._current_expected_place);
- core.get_cublas_switch()/set_cublas_switch(): Paddle's TF32 switch for cuBLAS, on by default;
- synchronize(): nothing to wait for (CPU kernels are synchronous); max_memory_allocated(): 0 (device
  memory is not simulated); device name, capability and bfloat16 support from the description.
"""
from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import json
import os
import sys

SIM_VARIABLE = "SIMULATED_GPU_HOST"
# Paddle modules that see the CUDA build (see the module docstring).
SEES_CUDA = ("paddle.distributed.launch.context.device",)
LOADER_TEXT = ("The third-party dynamic library ({name}) that Paddle depends on is not configured correctly. (error "
               "code is {error})\n  Suggestions:\n  1. Check if the third-party dynamic library (e.g. CUDA, CUDNN) is "
               "installed correctly and its version is matched with paddlepaddle you installed.\n  2. Configure "
               "third-party dynamic library environment variables as follows:\n  - Linux: set LD_LIBRARY_PATH by "
               "`export LD_LIBRARY_PATH=...`\n  - Windows: set PATH by `set PATH=XXX;%PATH%`\n  - Mac: set  "
               "DYLD_LIBRARY_PATH by `export DYLD_LIBRARY_PATH=...` [Note: After Mac OS 10.11, using the "
               "DYLD_LIBRARY_PATH is impossible unless System Integrity Protection (SIP) is disabled.]")
NCCL_WARNING = ("You may need to install 'nccl2' from NVIDIA official website: https://developer.nvidia.com/nccl/"
                "nccl-download before install PaddlePaddle.")

_DESC: dict = {}
# this process's chosen device: None (Paddle's default), 'cpu' or a visible index; cuBLAS's TF32
# switch (on by default: paddle/fluid/platform AllowTF32Cublas; pybind.cc binds it on CUDA builds only)
_STATE = {"device": None, "tf32": True}


def _set_tf32(on: bool) -> None:
    _STATE["tf32"] = bool(on)


def description() -> dict:
    if not _DESC:
        with open(os.environ[SIM_VARIABLE]) as f:
            _DESC.update(json.load(f))
    return _DESC


# ---------------------------------------------------------------- the device answers (pure)

def visible() -> list[int]:
    """Physical indices of the devices this process sees, in CUDA's order."""
    desc = description()
    n = len(desc["gpus"]) if desc.get("driver") else 0
    text = os.environ.get("CUDA_VISIBLE_DEVICES")
    if text is None:
        return list(range(n))
    out: list[int] = []
    for part in text.strip().strip("'\"").split(","):
        part = part.strip()
        if not part.isdigit() or int(part) >= n or int(part) in out:
            break  # the CUDA runtime enumerates up to the first id that is not a device
        out.append(int(part))
    return out


def device_count() -> int:
    return len(visible())


def _version_tuple(text: str) -> tuple:
    return tuple(int(x) for x in text.split("."))


def _missing(kind: str) -> str:
    build = description()["build"]
    first = build["libraries"][kind].split(";")[-1]
    return LOADER_TEXT.format(name=build["libraries"][kind], error=f"{first}: cannot open shared object file: "
                                                                  f"No such file or directory")


def _warn(text: str) -> None:
    print(f"W0101 00:00:00.000000 {os.getpid()} dynamic_loader.cc:0] {text}", file=sys.stderr, flush=True)


def cudnn_version() -> int:
    from simhost import cudnn_code

    loaded = description()["build"]["loads"].get("cudnn")
    if not loaded:
        _warn(_missing("cudnn"))
        return -1
    return cudnn_code(*_version_tuple(loaded))


def nccl_version() -> int:
    from simhost import nccl_code

    loaded = description()["build"]["loads"].get("nccl")
    if not loaded:
        _warn(NCCL_WARNING)
        raise RuntimeError(f"\n\n----------------------\nError Message Summary:\n----------------------\n"
                           f"PreconditionNotMetError: {_missing('nccl')} (at /paddle/paddle/phi/backends/dynload/"
                           f"dynamic_loader.cc)\n")
    return nccl_code(*_version_tuple(loaded))


def selected_gpu() -> int:
    """ParallelEnv.device_id on a CUDA build: the first of FLAGS_selected_gpus (default 0)."""
    return int(os.getenv("FLAGS_selected_gpus", "0").split(",")[0])


def _gpu(index) -> dict:
    index = selected_gpu() if index is None else index
    if isinstance(index, str):
        index = int(index.split(":")[-1]) if ":" in index else selected_gpu()
    elif not isinstance(index, int):
        index = index.get_device_id()
    return description()["gpus"][visible()[index]]


# ---------------------------------------------------------------- device choice

def _busy_path() -> str:
    return os.path.join(description()["state_dir"], f"busy-{os.getpid()}")


def _mark(index: int | None) -> None:
    """Tell nvidia-smi which physical device this process loads (None: none)."""
    path = _busy_path()
    if index is None:
        if os.path.exists(path):
            os.unlink(path)
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"device": visible()[index]}, f)
    os.replace(tmp, path)


def set_device(real, device):
    text = str(device).lower()
    if text.startswith("gpu"):
        index = int(text.split(":", 1)[1]) if ":" in text else selected_gpu()
        count = device_count()
        if index >= count:  # phi::backends::gpu::SetDeviceId's check, an InvalidArgument (ValueError)
            raise ValueError(f"(InvalidArgument) Device id must be less than GPU count, but received id is: "
                             f"{index}. GPU count is: {count}.")
        place = real("cpu")
        _STATE["device"] = index
        _mark(index)
        return place
    _STATE["device"] = "cpu" if text == "cpu" else None
    _mark(None)
    return real(device)


def get_device(real):
    chosen = _STATE["device"]
    if chosen is None:
        return f"gpu:{selected_gpu()}" if device_count() else real()
    return "cpu" if chosen == "cpu" else f"gpu:{chosen}"


def device_properties(device=None):
    import types

    gpu = _gpu(device)
    return types.SimpleNamespace(name=gpu["name"], major=gpu["capability"][0], minor=gpu["capability"][1],
                                 total_memory=gpu["memory_mib"] << 20, multi_processor_count=108)


# ---------------------------------------------------------------- patching

def _outside() -> bool:
    """Whether the caller of a patched function (two frames up) is above Paddle or sees CUDA."""
    name = sys._getframe(2).f_globals.get("__name__", "")
    return not (name == "paddle" or name.startswith("paddle.")) or name in SEES_CUDA


def _wrap(owner, name: str, answer) -> None:
    """owner.name answers `answer(real, ...)` to callers outside Paddle, and as before inside."""
    real = getattr(owner, name, None)

    def patched(*args, **kwargs):
        if _outside():
            return answer(real, *args, **kwargs)
        if real is None:
            raise AttributeError(f"module has no attribute {name!r}")
        return real(*args, **kwargs)

    patched.__name__ = patched.__qualname__ = name
    patched.__doc__ = getattr(real, "__doc__", None)
    setattr(owner, name, patched)


def _value(fn):
    return lambda real, *args, **kwargs: fn(*args, **kwargs)


def patch_paddle(paddle) -> None:
    core = paddle.base.core if hasattr(paddle, "base") else paddle.fluid.core
    for owner in (paddle, paddle.device):
        _wrap(owner, "is_compiled_with_cuda", _value(lambda: True))
        _wrap(owner, "set_device", set_device)
        _wrap(owner, "get_device", get_device)
    cuda = paddle.device.cuda
    for owner, name, answer in (
            (core, "is_compiled_with_cuda", lambda: True), (core, "get_cuda_device_count", device_count),
            (core, "cudnn_version", cudnn_version), (core, "nccl_version", nccl_version),
            (cuda, "device_count", device_count), (cuda, "synchronize", lambda device=None: None),
            (paddle.device, "synchronize", lambda device=None: None),
            (cuda, "max_memory_allocated", lambda device=None: 0), (cuda, "max_memory_reserved", lambda device=None: 0),
            (cuda, "memory_allocated", lambda device=None: 0),
            (cuda, "get_device_name", lambda device=None: _gpu(device)["name"]),
            (cuda, "get_device_capability", lambda device=None: tuple(_gpu(device)["capability"])),
            (cuda, "get_device_properties", device_properties),
            (paddle.amp, "is_bfloat16_supported", lambda device=None: _gpu(None)["capability"][0] >= 8),
            (core, "get_cublas_switch", lambda: _STATE["tf32"]), (core, "set_cublas_switch", _set_tf32)):
        _wrap(owner, name, _value(answer))
    for owner in (paddle.distributed, paddle.distributed.parallel):
        owner.init_parallel_env = _on_gloo(owner.init_parallel_env)
    parallel_env = paddle.distributed.ParallelEnv
    real_id = parallel_env.__dict__.get("device_id")

    def device_id(self):
        return selected_gpu() if _outside() else real_id.fget(self)

    parallel_env.device_id = property(device_id)


def _on_gloo(real):
    """init_parallel_env with Paddle's CPU-rank switch set while it runs: a CUDA build's rank would
    take NCCL; the CPU build under the facade takes gloo only when PADDLE_DISTRI_BACKEND says so
    (parallel.py, the one place Paddle reads it), and fleetbench, which reads it as the user's
    choice of CPU ranks, must not see it (the ranks are GPU ranks to it)."""
    def init_parallel_env(*args, **kwargs):
        asked = os.environ.get("PADDLE_DISTRI_BACKEND")
        os.environ["PADDLE_DISTRI_BACKEND"] = asked or "gloo"
        try:
            return real(*args, **kwargs)
        finally:
            if asked is None:
                del os.environ["PADDLE_DISTRI_BACKEND"]

    return init_parallel_env


class _CudaCore:
    """Paddle's core as its launcher's device detection sees it on the CUDA build."""

    def __init__(self, real) -> None:
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    @staticmethod
    def is_compiled_with_cuda() -> bool:
        return True

    @staticmethod
    def get_cuda_device_count() -> int:
        return device_count()


def patch_launch_device(module) -> None:
    module.core = _CudaCore(module.core)


PATCHES = {"paddle": patch_paddle, "paddle.distributed.launch.context.device": patch_launch_device}


class _Loader(importlib.abc.Loader):
    def __init__(self, real, patch) -> None:
        self.real, self.patch = real, patch

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module) -> None:
        self.real.exec_module(module)
        self.patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Patches the modules in PATCHES once they have run; puts the overlay first on paddle's path."""

    def find_spec(self, name, path, target=None):
        if name not in PATCHES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        if name == "paddle" and description().get("overlay"):
            spec.submodule_search_locations.insert(0, description()["overlay"])
        spec.loader = _Loader(spec.loader, PATCHES[name])
        return spec


def install() -> None:
    """Called by site/sitecustomize.py when SIMULATED_GPU_HOST names a host description."""
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # simhost, last: it shadows nothing
    if description().get("build") is None:
        return  # a host without a CUDA build of Paddle: its Paddle is what is installed
    sys.meta_path.insert(0, _Finder())
    atexit.register(_mark, None)
