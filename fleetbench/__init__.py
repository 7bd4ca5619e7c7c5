"""fleetbench: benchmarks for PaddlePaddle Fleet distributed training.

Importing this package before paddle sets the OpenMP thread count on purpose: when
OMP_NUM_THREADS is unset, paddle's bootstrap forces it to 1 (measured here: ResNet50 at 32 px
trains at ~37 instead of ~48 images/s on 2 cores). We give each local process an equal share of
the cores instead, and record what was used.
"""
import importlib.util
import os
import sys
import warnings

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


# Paddle's bootstrap (paddle/base/__init__.py) prints a two-line warning to stderr whenever
# OMP_NUM_THREADS is above 1. Where the count was chosen for the user (above), the warning speaks
# of a choice they did not make, and it comes before everything a script prints: a bad config's
# one-line error first of all. The first `import paddle` runs with those two lines (only) kept
# out of stderr; a count the user set keeps Paddle's warning. Paddle 3.x also warns at import that
# ccache, for compiling C++ extensions, is missing: no benchmark compiles one, so that one goes too.
_OMP_WARNING = ("WARNING: OMP_NUM_THREADS set to ", "PLEASE USE OMP_NUM_THREADS WISELY.")
_QUIET_OMP = _THREADS_SOURCE != "user"


class _WithoutOmpWarning:
    """sys.stderr minus Paddle's OMP_NUM_THREADS warning lines (whole lines are held until their end)."""

    def __init__(self, stream):
        self.stream, self.pending = stream, ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            if not line.startswith(_OMP_WARNING):
                self.stream.write(line + "\n")
        return len(text)

    def close_over(self):
        if self.pending:
            self.stream.write(self.pending)
        return self.stream

    def __getattr__(self, name):
        return getattr(self.stream, name)


class _QuietPaddleImport:
    """A meta-path finder for `paddle` alone: it finds it as the others would and runs its module
    with _WithoutOmpWarning as stderr; once it has run, the finder is gone."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "paddle":
            return None
        sys.meta_path.remove(cls)  # the others' spec (a bare find_spec, such as machine/env's, too)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, cls)
        loader = spec.loader if spec is not None else None
        if loader is None:
            return spec
        run = type(loader).exec_module

        def exec_module(module):
            if cls in sys.meta_path:
                sys.meta_path.remove(cls)
            quiet = _WithoutOmpWarning(sys.stderr) if _QUIET_OMP else None
            sys.stderr = quiet or sys.stderr
            try:
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning)
                    run(loader, module)
            finally:
                sys.stderr = quiet.close_over() if quiet else sys.stderr
                del loader.exec_module  # back to the class's own
        loader.exec_module = exec_module
        return spec


if "paddle" not in sys.modules:
    sys.meta_path.insert(0, _QuietPaddleImport)
