"""What each benchmark family, gradient method and precision needs from the installed Paddle.

Everything here is probed from the Paddle that is installed — its C++ bindings, its operator
registry, its flags and its Python modules — without starting a process group or a device
kernel, so a benchmark's `--check` (which `fleetbench launch` and sweeps run before launching
anything) refuses a job its Paddle cannot run. A missing capability is a ConfigError whose one
line names the installed Paddle and what to install or set.

Facts behind the table (observed with the CPU wheels; see the README's "Which Paddle"):
- Parameter server: 2.6.2 has it. 3.0.0 runs it only on the legacy static graph
  (FLAGS_enable_pir_api=0). 3.1.0 lacks the distributed_lookup_table and send_barrier operators
  its trainer programs call; 3.1.1 to 3.3.1 lack core.DistFleetWrapper altogether.
- AMP: auto_cast does nothing on a CPU build, so an AMP figure there would be an fp32 figure.
- Methods: each needs the Paddle functions it is built from (METHOD_NEEDS).
"""
import importlib
from typing import Any, List, Optional

from fleetbench.machine.device import cpu_ranks_asked, gpu_ranks, quiet_import_paddle
from fleetbench.measure.config import BenchConfig, ConfigError

# The operators Fleet's parameter-server trainer programs are rewritten to call (sparse pulls
# and the end-of-pass barrier): a build without them cannot run a single PS step.
PS_OPERATORS = ("distributed_lookup_table", "send_barrier")
PS_INSTALL = ("run parameter-server benchmarks on paddlepaddle==2.6.2, the last CPU build with "
              "parameter-server support, e.g. in a virtualenv of their own: pip install -e '.[ps]'")
CUDA_INSTALL = ("use amp=off, or install a CUDA build of Paddle (README: Which Paddle) and run "
                "where a GPU is visible")

# "module:attribute.path" each method is built from (fleetbench.train.methods resolves the
# functions through here, so a Paddle that lacks one is refused by --check instead of failing at
# import inside every rank). The last three are Paddle internals, the likeliest to move.
DATA_PARALLEL = "paddle:DataParallel"
NO_SYNC = "paddle:DataParallel.no_sync"
FUSED_ALLREDUCE = "paddle.distributed.fleet.utils.hybrid_parallel_util:fused_allreduce_gradients"
BUILD_BUCKETS = "paddle.distributed.parallel:build_groups"
SPLIT_BUCKETS = "paddle.distributed.parallel:_split_tensors"
GATHER_INTO = "paddle.distributed:stream.all_gather"  # into one tensor (fp16_allreduce's gather path)
METHOD_NEEDS = {
    "bsp": (NO_SYNC, FUSED_ALLREDUCE),
    "wfbp": (DATA_PARALLEL,),
    "mgwfbp": (DATA_PARALLEL,),
    "grad_merge": (NO_SYNC,),
    "fp16_allreduce": (NO_SYNC, BUILD_BUCKETS, SPLIT_BUCKETS, GATHER_INTO),
    "none": (NO_SYNC,),  # the control: forward+backward under no_sync, nothing sent
}


def paddle_build() -> str:
    """'Paddle 3.3.1 (CPU build)': the installed Paddle as an error message names it."""
    paddle = quiet_import_paddle()
    kind = "CUDA" if paddle.is_compiled_with_cuda() else "CPU"
    return f"Paddle {paddle.__version__} ({kind} build)"


def resolve(name: str) -> Any:
    """The object a 'module:attribute.path' name refers to; ImportError/AttributeError if absent."""
    module, _, path = name.partition(":")
    found = importlib.import_module(module)
    for attribute in path.split("."):
        found = getattr(found, attribute)
    return found


def _present(name: str) -> bool:
    try:
        resolve(name)
    except (ImportError, AttributeError):
        return False
    return True


def ps_missing() -> Optional[str]:
    """Why this Paddle cannot run the parameter-server family, or None if it can."""
    paddle = quiet_import_paddle()
    from paddle.base import core, framework

    lacks: List[str] = []
    if not hasattr(core, "DistFleetWrapper"):
        lacks.append("no core.DistFleetWrapper")
    registry = framework.OpProtoHolder.instance()
    absent = [op for op in PS_OPERATORS if not registry.has_op_proto(op)]
    if absent:
        lacks.append(f"no {', '.join(absent)} operator{'s' if len(absent) > 1 else ''}")
    if lacks:
        return f"{paddle_build()} has no parameter-server support ({'; '.join(lacks)}): {PS_INSTALL}"
    if paddle.get_flags(["FLAGS_enable_pir_api"])["FLAGS_enable_pir_api"]:
        return (f"{paddle_build()} builds programs in PIR, which its parameter server cannot run: set "
                f"FLAGS_enable_pir_api=0 in the environment, or {PS_INSTALL}")
    return None


def amp_missing(amp: str) -> Optional[str]:
    """Why this Paddle and machine cannot run precision `amp` as it claims, or None."""
    if amp == "off":
        return None
    paddle = quiet_import_paddle()
    if not gpu_ranks():
        lack = "has no CUDA" if not paddle.is_compiled_with_cuda() else (
            "runs CPU ranks (PADDLE_DISTRI_BACKEND=gloo)" if cpu_ranks_asked() else "sees no GPU")
        return (f"config key 'amp' is {amp!r} but this Paddle build {lack} (Paddle {paddle.__version__}): auto_cast "
                f"does nothing on CPU, so an AMP figure here would be an fp32 figure; {CUDA_INSTALL}")
    if amp == "bf16" and not paddle.amp.is_bfloat16_supported():  # untested here (no GPU)
        return (f"config key 'amp' is 'bf16' but this GPU has no bfloat16 arithmetic under "
                f"{paddle_build()} (it needs compute capability 8.0 or newer); use amp=fp16 or amp=off")
    return None


def method_missing(method: str) -> Optional[str]:
    """Why this Paddle lacks what gradient method `method` is built from, or None."""
    absent = [name for name in METHOD_NEEDS.get(method, ()) if not _present(name)]
    if not absent:
        return None
    return (f"config key 'method' is {method!r} but {paddle_build()} lacks {', '.join(absent)}, "
            f"which it is built from; use another method, or paddlepaddle 2.6.2 to 3.3.1")


def check(family: str, cfg: BenchConfig) -> None:
    """Raise ConfigError (one line) if the installed Paddle lacks what `cfg` of `family` needs."""
    if family == "ps":
        reasons = [ps_missing()]
    else:
        reasons = [amp_missing(cfg.amp), method_missing(cfg.method)]
    reason = next((r for r in reasons if r), None)
    if reason:
        raise ConfigError(reason)
