"""fleetbench: benchmarks for PaddlePaddle Fleet distributed training.

Importing this package before paddle sets the OpenMP thread count on purpose: when
OMP_NUM_THREADS is unset, paddle's bootstrap forces it to 1 (measured here: ResNet50 at 32 px
trains at ~37 instead of ~48 images/s on 2 cores). We give each local process an equal share of
the cores instead, and record what was used.
"""
import os

from fleetbench.measure import contract  # the launcher's variables; imports nothing heavy

__version__ = "0.1.0"


def _user_threads():
    """The thread count the user asked for, or None.

    Paddle's launcher imports paddle, whose bootstrap writes OMP_NUM_THREADS=1 into the launcher's
    own environment when it is unset, and every rank inherits that. So under the launcher a value of
    1 is Paddle's default, not a choice; FLEETBENCH_OMP_THREADS (which `fleetbench launch` fills
    from the user's shell) states a choice explicitly.
    """
    explicit = os.environ.get(contract.THREADS)
    if explicit:
        return explicit
    inherited = os.environ.get("OMP_NUM_THREADS")
    under_launcher = "PADDLE_TRAINER_ID" in os.environ or "PADDLE_LOCAL_SIZE" in os.environ
    if inherited and not (under_launcher and inherited == "1"):
        return inherited
    return None


_USER_THREADS = _user_threads()
# Who chose the count: "fleetbench" (this module), "user", or a tool that chose on the user's
# behalf and says so in FLEETBENCH_OMP_THREADS_BY (the sweep sharing cores among emulated nodes).
_THREADS_SOURCE = (os.environ.get(contract.THREADS_BY) or "user") if _USER_THREADS else "fleetbench"


def local_process_count() -> int:
    """Processes this launcher started on this node (collective: PADDLE_LOCAL_SIZE). Parameter-
    server processes re-set their threads once their role is known (fleetbench.train.ps.roles.set_threads)."""
    for name in (contract.LOCAL_PROCS, "PADDLE_LOCAL_SIZE"):
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


os.environ["OMP_NUM_THREADS"] = _USER_THREADS or str(max(1, usable_cores() // local_process_count()))


def threads_info() -> dict:
    return {"omp_num_threads": int(os.environ["OMP_NUM_THREADS"]), "source": _THREADS_SOURCE}
