"""The comm benchmark's measurement: Paddle's own collectives, one op at a time, timed per size.

    cfg = CommConfig(op="all_reduce,all_gather")      # the script's config (collective/comm.py)
    peers = connect()                                 # device and process group from the Paddle build
    rows = measure_all(cfg, peers)                    # every op x size: check, warm-up, timed loop

The backend comes from the Paddle build, as in the training loop: NCCL with device buffers and
a device sync at the end of each timed loop on a CUDA build with GPUs (untested here), gloo on
CPU. Paddle 2.6.2's gloo process group has no reduce_scatter and no all_to_all (both raise
Unimplemented), so those ops are refused on gloo before anything starts.

Per size: fill, run the op once and count wrong elements (nccl-tests' #wrong); zero the buffers
(repeated sums of real values would overflow half precision, and zeros stay zeros); warm up;
sync, barrier (all ranks line up); run `iters` ops; sync. A rank's time of the size is its mean
per op; the size's time is the slowest rank's (all-reduce MAX), the wrong counts are summed.
"""
import dataclasses
import os
import time
from typing import Callable, Optional

import numpy as np
import paddle
import paddle.distributed as dist

from fleetbench.comm import opmath
from fleetbench.machine import device, speed
from fleetbench.measure import config, interference, metrics

REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}
# Elements of a fill block: a multiple of the fill's period (opmath.PATTERN), a few MiB.
FILL_BLOCK = opmath.PATTERN * (1 << 17)


@dataclasses.dataclass
class CommDebugConfig:
    """Test-only knobs; a record made with them says so in its config."""

    corrupt_rank: int = -1  # this rank sends one wrong element at every check (proves the check)


@dataclasses.dataclass
class CommConfig:
    op: str = "all_reduce"  # one op or several, comma-separated (opmath.OPS); all run in one job
    min_bytes: int = 8
    max_bytes: int = 33554432  # 32 MiB: the whole default range takes seconds on 2 CPU cores
    factor: int = 2  # size step: min_bytes, min_bytes*factor, ... (nccl-tests' -f)
    dtype: str = "float32"  # float32 | float16 | bfloat16
    redop: str = "sum"  # sum | max, for the reducing ops
    warmup_iters: int = 5
    iters: int = 20
    headline_min_bytes: int = 67108864  # metrics.busbw_GBps averages sizes >= this (64 MiB)
    tcp_probe_s: float = 2.0  # raw TCP stream between two nodes before the ops; 0: off
    probe: bool = True  # machine/speed's fixed workload before and after the ops (limits' triad)
    debug: CommDebugConfig = dataclasses.field(default_factory=CommDebugConfig)

    def validate(self) -> None:
        try:
            opmath.parse_ops(self.op)
        except opmath.CommError as err:
            raise config.ConfigError(str(err)) from None
        checks = (
            (self.min_bytes >= 1, "min_bytes", "must be >= 1"),
            (self.max_bytes >= self.min_bytes, "max_bytes", f"must be >= min_bytes ({self.min_bytes})"),
            (self.factor >= 2, "factor", "must be >= 2"),
            (self.dtype in opmath.DTYPE_BYTES, "dtype", f"must be one of {', '.join(opmath.DTYPE_BYTES)}"),
            (self.redop in opmath.REDOPS, "redop", f"must be one of {', '.join(opmath.REDOPS)}"),
            (self.warmup_iters >= 0, "warmup_iters", "must be >= 0"),
            (self.iters >= 1, "iters", "must be >= 1"),
            (self.headline_min_bytes >= 1, "headline_min_bytes", "must be >= 1"),
            (self.tcp_probe_s >= 0, "tcp_probe_s", "must be >= 0 (0: no probe)"),
        )
        for ok, key, expectation in checks:
            if not ok:
                raise config.ConfigError(f"config key '{key}' {expectation} (got {getattr(self, key)!r})")

    @property
    def ops(self) -> list:
        return opmath.parse_ops(self.op)


def on_gpu() -> bool:
    return device.gpu_ranks()


def check_backend(cfg: CommConfig) -> None:
    """Refuse ops this build's backend lacks (runs under --check too: no process starts)."""
    if on_gpu():
        return
    for op in cfg.ops:
        missing = opmath.TABLE[op].gloo_missing
        if missing:
            raise config.ConfigError(f"config key 'op': {op} is not available on gloo, this CPU build's "
                                     f"backend ({missing} in Paddle {paddle.__version__}); "
                                     "it runs on NCCL (GPU builds)")


# ---------------------------------------------------------------- the job
@dataclasses.dataclass
class Peers:
    rank: int
    ranks: int
    device: str
    backend: str
    # gloo send/recv: one group per ring neighbour pair (see _sendrecv)
    ring: list = dataclasses.field(default_factory=list)

    def sync(self) -> None:
        device.sync_device()


def connect() -> Peers:
    """Device and the global process group from the build (NCCL on GPUs, gloo on CPU)."""
    paddle.set_device(device.device_name())
    dist.init_parallel_env()
    rank, ranks = dist.get_rank(), dist.get_world_size()
    backend = "nccl" if on_gpu() else "gloo"
    # Every rank creates every group, in the same order (group creation is collective).
    ring = [dist.new_group([r, (r + 1) % ranks]) for r in range(ranks)] if backend == "gloo" else []
    return Peers(rank, ranks, paddle.get_device(), backend, ring)


# ---------------------------------------------------------------- one op's buffers and call
class Collective:
    """The buffers of one op at one size, and the op itself (`self()` runs it once)."""

    def __init__(self, op: str, count: int, peers: Peers, cfg: CommConfig):
        self.op, self.count, self.peers, self.dtype = op, count, peers, cfg.dtype
        self.entry = opmath.TABLE[op]
        self.reduce_op = REDUCE_OPS[cfg.redop]
        self.send = self.recv = None

    def load(self, corrupt: bool = False) -> None:
        """The checked fill: this rank's values (opmath.send_fill), built on the device in the op's
        dtype from their 7-value period; a separate output starts at zero."""
        fill = opmath.send_fill(self.op, self.peers.rank, self.peers.ranks, self.count)
        if fill is None:
            return
        self.send = self._filled(*fill)
        if corrupt and self.send.shape[0]:  # opmath.corrupt: the last element, above every real value
            self.send[-1:] = paddle.full([1], opmath.CORRUPT_VALUE, dtype=self.dtype)
        output = self.entry.output_count
        self.recv = self.send if output is None else paddle.zeros(
            [output(self.count, self.peers.ranks)], dtype=self.dtype)

    def zero(self) -> None:
        """The timed phase's fill: zeros in every buffer, in place (new buffers before the old were
        freed doubled the device peak; zero_ exists in Paddle 2.6 and 3.x)."""
        if self.send is not None:
            self.send.zero_()
            if self.recv is not self.send:
                self.recv.zero_()

    def received(self) -> Optional[opmath.Blocks]:
        """The output, read a block at a time (a half-precision block cast to float32 on the device
        first: numpy has no bfloat16)."""
        if self.recv is None:
            return None

        def read(start: int, stop: int) -> np.ndarray:
            # a slice is a view, and a view's .numpy() copies its whole buffer (2.6.2 and 3.3.1):
            # a block-sized tensor first
            part = self.recv[start:stop]
            return (part.clone() if self.dtype == "float32" else part.astype("float32")).numpy()

        return opmath.Blocks(int(self.recv.shape[0]), read)

    def _filled(self, length: int, period: Optional[np.ndarray]):
        """`length` elements tiling `period` (None: zeros), made in the op's dtype on the device a
        block at a time: the block is tiled in float32 and cast (Paddle's CPU builds have no
        half-precision tile kernel), then copied into the buffer as often as it fits."""
        out = paddle.zeros([length], dtype=self.dtype)
        if period is None or length == 0:
            return out
        size = min(FILL_BLOCK, -(-length // len(period)) * len(period))
        block = paddle.tile(paddle.to_tensor(period, dtype="float32"), [size // len(period)]).astype(self.dtype)
        for start in range(0, length, size):
            stop = min(start + size, length)
            out[start:stop] = block if stop - start == size else block[:stop - start]
        return out

    def __call__(self) -> None:
        self.entry.call(dist, self)


# ---------------------------------------------------------------- the timed loop
def time_op(run_once: Callable[[], None], warmup: int, iters: int, peers: Peers) -> float:
    """Mean seconds per op on this rank: warm-up, sync, barrier (ranks line up), `iters` ops, sync."""
    for _ in range(warmup):
        run_once()
    peers.sync()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        run_once()
    peers.sync()
    return (time.perf_counter() - start) / iters


def measure_one(op: str, count: int, peers: Peers, cfg: CommConfig) -> tuple:
    """(this rank's mean seconds per op, wrong elements on this rank) for one op and size."""
    collective = Collective(op, count, peers, cfg)
    collective.load(corrupt=cfg.debug.corrupt_rank == peers.rank)
    collective()
    peers.sync()
    want = opmath.expected_periodic(op, peers.rank, peers.ranks, count, cfg.redop)
    wrong = opmath.count_wrong(collective.received(), want, cfg.dtype) if want is not None else 0
    collective.zero()
    return time_op(collective, cfg.warmup_iters, cfg.iters, peers), wrong


def measure_all(cfg: CommConfig, peers: Peers, communicator) -> list:
    """metrics rows of every op and size: slowest rank's time, wrong elements summed over ranks.
    `communicator` reduces across ranks (fleetbench.measure.metrics.Communicator)."""
    todo = opmath.plan(cfg.ops, opmath.sizes(cfg.min_bytes, cfg.max_bytes, cfg.factor), peers.ranks, cfg.dtype)
    mine = []
    for step, (op, nbytes, count) in enumerate(todo, start=1):
        mine.append(measure_one(op, count, peers, cfg))
        # A progress line per size in the launcher's `step N/M` form: supervisors watch for it.
        print(f"step {step}/{len(todo)} {op} {nbytes} B time_us {mine[-1][0] * 1e6:.2f} "
              f"wrong {mine[-1][1]}", flush=True)
    slowest = communicator.max([t for t, _ in mine])
    wrong = communicator.sum([float(w) for _, w in mine])
    return [opmath.row(op, nbytes, count, t, peers.ranks, int(w))
            for (op, nbytes, count), t, w in zip(todo, slowest, wrong)]


# ---------------------------------------------------------------- the machine around the ops
class MachineProbe:
    """The machine-speed probe (machine/speed.py) before and after the ops, the ranks of a machine
    in turn; the machine's CPU counters at the ops' edges (measure/interference.py); and how many
    ranks share this rank's machine (cores / that: limits.Figures.core_share)."""

    def __init__(self, cfg: CommConfig, peers: Peers, communicator) -> None:
        keys = [k[0] for k in communicator.gather([speed.machine_key()])]
        self.here = keys.count(keys[peers.rank])
        self.communicator = communicator
        self.run = speed.in_turn(peers.device, communicator.gather, peers.rank, dist.barrier) if cfg.probe else None
        self.edges: list = []
        self.cpu: list = []

    def edge(self) -> None:
        """Every rank calls it together, before the ops and after them."""
        self.edges.append(self.run() if self.run else None)

    def sample(self) -> None:
        """The CPU counters at the start of the ops, then at their end."""
        self.cpu.append(interference.sample())

    def core_share(self) -> float:
        return min(1.0, len(os.sched_getaffinity(0)) / self.here)

    def figures(self) -> dict:
        """The record's probe_* keys (the slowest rank's, as the training loop's), `probe`, and
        interference_cpu_pct, job_cpu_pct over the ops (the most disturbed rank's machine)."""
        row = metrics.probe_row(*(self.edges + [None, None])[:2])
        slowest = metrics.slowest_probe(self.communicator.gather(row))
        measured = any(v is not None for v in slowest.values())
        cpu = interference.combine(self.communicator.gather(metrics.interference_row(*(self.cpu + [None, None])[:2])))
        return dict(slowest, probe=speed.DEFINITION if measured else None,
                    interference_cpu_pct=cpu["interference_cpu_pct"], job_cpu_pct=cpu["job_cpu_pct"])
