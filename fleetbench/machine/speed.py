"""How fast this machine is right now: a short fixed reference workload timed just before and just
after every run's timed window, on every rank.

Why: the hypervisor of a cloud guest can slow its vCPUs for seconds with nothing in /proc/stat
(steal included): a matmul ran at 47-56 GFLOP/s where it ran at 76, both threads on-CPU the whole
time, and a run timed then looked clean to measure/interference.py. The same fixed work timed at
the window's edges tells a slow machine from a slow job; measure/repeats/stability.probe_reason judges it
against the run's own other edge and the cell's usual figure.

The workload (`DEFINITION`, stored in every record beside the figures):
- gemm: C = A @ B, float32, GEMM_N x GEMM_N x GEMM_N, repeated for a trial, in numpy on ONE
  thread (its BLAS limited by threadpoolctl from the probe's construction on: `Probe`); on a GPU
  rank paddle.matmul of GPU_GEMM_N on the rank's device, synchronised (not tested here: CPU);
- triad: STREAM's a = b + s*c on TRIAD_ELEMENTS float32 (3 arrays of 8 MiB), repeated for a trial,
  counted as diagnose's triad counts it (4 arrays' bytes: multiply then add).
Each figure is the faster of TRIALS trials of at least TRIAL_S (why: at TRIAL_S), after one untimed product. The arrays are made once per process (`Probe`), so a probe
adds 25 MiB once (arrays and matrices) to the rank's resident set, not per edge.

Why one thread, and the ranks of one machine in turn (`Turns`): the probe must see the machine,
not the job around it. Run on the rank's threads it shared the cores with the job's own: Paddle's
OpenMP workers spin after each parallel region (Intel OpenMP's KMP_BLOCKTIME, 200 ms by default)
and numpy's BLAS pool is a second pool beside them, so one quiet 1-rank ResNet50 run read 171-183
GFLOP/s at its before edge and 101-108 at its after edge, every run; and two ranks
probing at once shared the memory bus, their triads 12-54 GB/s. One probing thread at a time on a
machine, beside at most (threads - 1) spinning workers per rank, is never more busy threads than
cores, whatever the job's thread count.

`best_rate` is also the diagnose node probe's timing rule (fleetbench/diagnose/probe.py).
"""
from __future__ import annotations

import time
from typing import Callable

from fleetbench.measure import metrics, timing

GEMM_N = 384  # 113 MFLOP a product: ~1.1 ms on one core at 100 GFLOP/s
GPU_GEMM_N = 4096  # 137 GFLOP a product: ~10 ms on a datacentre GPU
TRIAD_ELEMENTS = 1 << 21  # float32: 8 MiB an array, beyond most per-core caches
# Each figure is the faster of TRIALS trials of at least TRIAL_S: a trial outlasts the half of a
# CFS period (100 ms) that a CPU quota of a third leaves, so a quota slows every trial (a 10 ms
# trial fits inside a tenth's 20 ms slice and does not see the quota).
TRIAL_S = 0.05
TRIALS = 2
# The triad's trials are shorter: the GEMM already sees a quota, and the triad's noise (cv 10-15 %
# here, stability.TRIAD_PCT) was the same with trials of 10 ms and of 50 ms.
TRIAD_TRIAL_S = 0.02
# scalar: the interpreter's integer arithmetic, one thread. Why a third figure: a guest's scalar
# speed drifts apart from its GEMM's, and pure-Python parts of a step slow with it unseen by the GEMM.
SCALAR_N = 20_000  # iterations a call: ~1 ms on this guest
SCALAR_TRIAL_S = 0.03
DEFINITION = {
    "gemm": f"float32 {GEMM_N}x{GEMM_N}x{GEMM_N} matmul (numpy, one thread; the ranks of a machine in turn); "
            f"GPU: {GPU_GEMM_N}^3 paddle.matmul on the rank's device; the faster of {TRIALS} trials of at "
            f"least {TRIAL_S} s, GFLOP/s",
    "triad": f"a = b + 3c, float32, {TRIAD_ELEMENTS} elements (numpy, one thread; the ranks of a machine in "
             f"turn), 4 arrays' bytes a pass; the faster of {TRIALS} trials of at least {TRIAD_TRIAL_S} s, GB/s",
    "scalar": f"for i in range({SCALAR_N}): total += i * i % 7 (CPython, one thread; the ranks of a machine in turn); "
              f"the faster of {TRIALS} trials of at least {SCALAR_TRIAL_S} s, million iterations/s",
}
NAMES = metrics.PROBE_NAMES  # a record has each with _before and _after


def best_rate(work: float, run: Callable[[], None], seconds: float = TRIALS * TRIAL_S,
              trials: int = TRIALS) -> float:
    """Work per second of the fastest of `trials` trials; each repeats `run` (`work` a call) until
    seconds/trials passed (0: once, a fixed amount of work)."""
    best = 0.0
    for _ in range(trials):
        count, start = 0, time.perf_counter()
        while True:
            run()
            count += 1
            took = time.perf_counter() - start
            if took >= seconds / trials:
                break
        best = max(best, work * count / max(took, 1e-9))
    return best


def triad_kernel(elements: int, dtype: str = "float32") -> tuple[Callable[[], None], float]:
    """STREAM's triad over fresh arrays and the bytes one call moves (two passes over a, one each
    over b and c)."""
    import numpy as np

    b, c, a = np.ones(elements, dtype), np.ones(elements, dtype), np.empty(elements, dtype)

    def triad() -> None:
        np.multiply(c, 3.0, out=a)
        np.add(a, b, out=a)

    return triad, 4.0 * a.itemsize * elements


class Probe:
    """The reference workload of one rank; `measure()` times it once (both figures)."""

    def __init__(self, device: str = "cpu") -> None:
        import numpy as np
        from threadpoolctl import threadpool_limits

        # numpy's BLAS on one thread from here on, set once and not at each edge: setting it starts
        # OpenBLAS's thread pool again when a fork has shut it down (its atfork handler; a PS
        # worker's data pipes fork), and a new pool thread spins for ~0.1 s. Set at the edge, that
        # thread takes a core from the probe. Build the probe seconds before its first edge.
        # Nothing a benchmark times runs on numpy's BLAS (Paddle's kernels have their own).
        threadpool_limits(limits=1, user_api="blas")  # applied now; only its __exit__ would undo it
        self.device = device
        rng = np.random.default_rng(0)
        self.a = rng.random((GEMM_N, GEMM_N), dtype=np.float32)
        self.b = rng.random((GEMM_N, GEMM_N), dtype=np.float32)
        self.out = np.empty_like(self.a)
        self.triad, self.triad_bytes = triad_kernel(TRIAD_ELEMENTS)
        self._gemm_once()  # untimed: the pages touched and the BLAS loaded before the first edge
        self.triad()

    def _gemm_once(self) -> None:
        import numpy as np

        np.matmul(self.a, self.b, out=self.out)

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("gpu")

    def gemm_gflops(self) -> float:
        if self.on_gpu:
            return gpu_gemm_gflops()
        return best_rate(2 * GEMM_N ** 3 / 1e9, self._gemm_once)

    def triad_gbps(self) -> float:
        return best_rate(self.triad_bytes / 1e9, self.triad, TRIALS * TRIAD_TRIAL_S)

    def scalar_mops(self) -> float:
        return best_rate(SCALAR_N / 1e6, scalar_loop, TRIALS * SCALAR_TRIAL_S)

    def measure(self) -> list[float]:
        """[GFLOP/s, GB/s, M iterations/s] now (the order of NAMES), numpy's BLAS on one thread."""
        return [self.gemm_gflops(), self.triad_gbps(), self.scalar_mops()]


def scalar_loop() -> int:
    """The scalar figure's fixed work: SCALAR_N iterations of integer arithmetic in the interpreter."""
    total = 0
    for i in range(SCALAR_N):
        total += i * i % 7
    return total


class Turns:
    """The ranks that share a machine (its kernel's boot id: emulated nodes in network namespaces
    share it) probe one after the other, machines at once: `rounds` barriers an edge, this rank
    probing in round `turn`. Built from every rank's `machine_key()`, gathered."""

    def __init__(self, keys: list[float], rank: int, barrier: Callable[[], None]) -> None:
        self.turn = keys[:rank].count(keys[rank])
        self.rounds = max(keys.count(k) for k in keys)
        self.barrier = barrier

    def __call__(self, measure: Callable[[], list[float]]) -> list[float]:
        figures: list[float] = []
        for round_ in range(self.rounds):
            if round_ == self.turn:
                figures = measure()
            self.barrier()
        return figures


def machine_key() -> float:
    """This machine as a number a float64 all-gather carries exactly: its boot id's first 48 bits
    (0 where the boot id is unreadable: every such rank then counts as one machine, the safe side)."""
    from fleetbench.machine import env

    try:
        return float(int(env.boot_id().replace("-", "")[:12], 16))
    except ValueError:
        return 0.0


def in_turn(device: str, gather: Callable[[list], list], rank: int,
            barrier: Callable[[], None]) -> Callable[[], list[float]]:
    """A rank's probe on `device`, the ranks of its machine in turn (`Turns`). Every rank calls it
    together: it gathers every rank's `machine_key()` (`gather`: a metrics.Communicator's).
    GPU ranks probe at once: each GEMM runs on the rank's own device, nothing shared to take turns
    over, and a round's barrier would make every rank wait out the slowest device's probe (on the
    simulated GPU host, whose "devices" compute on the CPU, a 4096^3 GEMM under load outlasted
    gloo's 30 s barrier time-out: tests/gpu_sim)."""
    probe = Probe(device)
    if probe.on_gpu:
        return probe.measure
    turns = Turns([k[0] for k in gather([machine_key()])], rank, barrier)
    return lambda: turns(probe.measure)


def gpu_gemm_gflops() -> float:
    """The GPU's fixed GEMM, on the device the rank computes on (synchronised around each product).
    Not exercised by the CPU test suite."""
    from fleetbench.machine import device

    paddle = device.quiet_import_paddle()
    a = paddle.rand([GPU_GEMM_N, GPU_GEMM_N], dtype="float32")
    b = paddle.rand([GPU_GEMM_N, GPU_GEMM_N], dtype="float32")
    paddle.matmul(a, b)
    device.sync_device()

    def product() -> None:
        paddle.matmul(a, b)
        device.sync_device()

    return best_rate(2 * GPU_GEMM_N ** 3 / 1e9, product)


def settle(probe: Probe, tolerance_pct: float, max_tries: int) -> tuple[list[list[float]], bool]:
    """Repeat the probe until both its figures settled by the step-time rule (measure/timing.settled:
    the median of the last 3 within `tolerance_pct` % of the median of the 3 before), at most
    `max_tries` times: a sweep's warm-up, so that the machine's clocks, caches and the hypervisor's
    mood settle before any stored run. Returns every probe's figures, in order, and whether they settled."""
    seen: list[list[float]] = []
    while len(seen) < max_tries:
        seen.append(probe.measure())
        if all(timing.settled([1.0 / row[i] for row in seen], tolerance_pct=tolerance_pct)
               for i in range(len(NAMES))):
            return seen, True
    return seen, False


def settle_text(seen: list[list[float]], settled: bool) -> str:
    """The sweep's line about its warm-up: how many probes, first and last figures."""
    first, last = seen[0], seen[-1]
    how = "settled" if settled else "NOT settled, stopped"
    return (f"sweep: machine warm-up {how} after {len(seen)} probes (machine/speed.py): gemm "
            f"{first[0]:.1f} -> {last[0]:.1f} GFLOP/s, triad {first[1]:.1f} -> {last[1]:.1f} GB/s, "
            f"scalar {first[2]:.2f} -> {last[2]:.2f} M iterations/s")


PADDLE_GEMM_N = 512  # fp32 512x512x512: 0.27 GFLOP a product, in cache-friendly blocks on any CPU
PADDLE_GEMM_TRIALS = 3


def paddle_gemm_gflops(seconds: float) -> float:
    """GFLOP/s of an fp32 paddle.matmul on Paddle's current device and this process's threads, the
    fastest of 3 trials of ~seconds/3: the kernel a model's layers run, so the CPU roofline of a
    rank's MFU (train/trace.py) and the diagnose node probe's matmul (diagnose/probe.py)."""
    from fleetbench.machine import device

    paddle = device.quiet_import_paddle()
    a = paddle.rand([PADDLE_GEMM_N, PADDLE_GEMM_N], dtype="float32")
    b = paddle.rand([PADDLE_GEMM_N, PADDLE_GEMM_N], dtype="float32")
    paddle.matmul(a, b).numpy()  # first call pays for kernel selection and allocation
    return best_rate(2 * PADDLE_GEMM_N ** 3 / 1e9, lambda: paddle.matmul(a, b).numpy(), seconds,
                     PADDLE_GEMM_TRIALS)
