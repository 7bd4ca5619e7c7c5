"""The measured training loop shared by every collective (data-parallel) benchmark script.

A script declares its config dataclass and a `build(cfg) -> Workload`, and calls
`main(__file__, ConfigClass, build)`; the run layer (fleetbench.train.run) parses and checks
the command line and stores the record, this module does the rest: device and Fleet set-up,
warm-up, the measured window, the reduction across ranks (slowest rank decides), the log lines.
"""
import dataclasses
import os
import sys
import time
from typing import Any, Callable, Iterable, Iterator, Optional

import paddle
import paddle.distributed as dist
from paddle.distributed import fleet

import fleetbench
from fleetbench.machine import device, speed
from fleetbench.measure import config, metrics, timing
from fleetbench.measure.timing import WindowTimer, log_line
from fleetbench.train import capability, methods, phases, run, trace
from fleetbench.train.context import Context, RunClock


@dataclasses.dataclass(kw_only=True)
class Workload(run.Workload):
    model: paddle.nn.Layer
    batches: Iterable  # re-iterable: one pass is an epoch; the loop starts a new one when it ends
    loss_fn: Callable[[paddle.nn.Layer, Any], paddle.Tensor]
    # (samples, units) in one batch; units are what the benchmark's unit counts (images, tokens,
    # ...); None: the batch's first tensor's rows, both
    count: Callable[[Any], tuple] = None
    # the run's length when the data decides it (whole passes over each rank's share); None: cfg.steps
    steps: Optional[int] = None
    # more metrics for the record, computed by every rank together after training (e.g. CTR's AUC)
    finish: Optional[Callable[[metrics.Communicator], dict]] = None
    # a model that brings its own Fleet wrapping and step (GPT's hybrid parallelism: train/hybrid.py):
    # (cfg, workload, ctx) -> (model, step_fn), in place of the gradient method's
    parallel: Optional[Callable] = None
    # more metrics from the standard ones (GPT: FLOPs a token and MFU from throughput_per_device)
    utilization: Optional[Callable[[dict], dict]] = None

    def counts(self, batch: Any) -> tuple:
        if self.count is not None:
            return self.count(batch)
        samples = int(batch[0].shape[0])
        return samples, samples

    def schedule(self, cfg: config.CollectiveConfig, ctx: Context, unit: str,
                 comm: metrics.Communicator) -> tuple:
        """Train and return (this rank's figures, convergence metrics). The workload's type decides
        the schedule: a fixed number of steps here; epochs.EpochWorkload trains by epochs."""
        return train(cfg, self, ctx, unit), {}


# ---------------------------------------------------------------- set-up
def check_runtime(cfg: config.CollectiveConfig) -> None:
    """Checks that need Paddle but no process group; they run under --check too."""
    methods.check(cfg)
    capability.check("collective", cfg)  # AMP and the method against the installed Paddle


def setup(cfg: config.CollectiveConfig) -> Context:
    paddle.set_device(device.device_name())
    paddle.seed(cfg.seed)
    world_size = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
    if world_size > 1:
        fleet.init(is_collective=True, strategy=methods.strategy(cfg), log_level="WARNING")
    return Context(rank=dist.get_rank() if world_size > 1 else 0, world_size=world_size,
                   local_size=fleetbench.local_process_count(), device=paddle.get_device())


def endless(batches: Iterable) -> Iterator:
    while True:
        empty = True
        for batch in batches:
            empty = False
            yield batch
        if empty:
            raise ValueError("the data source yielded no batch")


# ---------------------------------------------------------------- the measured run
def train(cfg: config.CollectiveConfig, work: Workload, ctx: Context, unit: str) -> metrics.RankFigures:
    """Run warm-up + measured steps; return this rank's figures. Warm-up's end and the window's
    length: timing.Steady (`steady_for`, `end_of_warmup`). Losses stay on the device and are read
    once per logging window (a read is a device sync); loss_first and loss_last are the mean losses
    of the first and last logging windows.
    """
    model, step_fn = methods.prepare(cfg, work, ctx)
    model.train()
    barrier = dist.barrier if ctx.world_size > 1 else lambda: None
    comm = PaddleCommunicator() if ctx.world_size > 1 else metrics.Alone()
    timer = WindowTimer(cfg.warmup_steps, sync=device.sync_device, probe=probe_for(cfg, ctx, comm, barrier))
    steps = work.steps or cfg.steps
    steady = steady_for(cfg, work, steps)
    batches = endless(work.batches)
    window_losses, loss_first, loss_last = [], None, None
    delay_s = cfg.debug.delay_ms / 1000 if cfg.debug.delay_rank == ctx.rank else 0.0
    step, warming = 0, cfg.warmup_steps > 0
    while warming or step < steps:
        step += 1
        tick = time.perf_counter()
        ctx.phases.begin(step, tick)
        batch = next(batches)
        reader_s = time.perf_counter() - tick
        ctx.phases.add("reader", tick, tick + reader_s)
        window_losses.append(step_fn(batch).detach())
        ctx.phases.end()
        if delay_s:
            time.sleep(delay_s)  # test-only: makes this rank the slow one
        timer.step_done(step, *work.counts(batch), reader_s)
        if step % cfg.log_every == 0 or step == steps:
            loss_last = float(paddle.add_n(window_losses)) / len(window_losses)
            loss_first = loss_last if loss_first is None else loss_first
            window_losses = []
            window = timer.close_window()
            print(log_line(step, steps, loss_last, window["ips"], unit,
                           window["batch_cost_s"], window["reader_cost_s"]), flush=True)
        measured = end_of_warmup(steady, timer.step_s, comm) if warming else None
        if measured is not None:
            warming, steps = False, step + measured
            timer.end_warmup(barrier=barrier, step=step)
    elapsed_s = timer.finish(barrier=barrier)
    mine = rank_figures(timer, elapsed_s, ctx, (loss_first, loss_last), steady.was_settled)
    print(metrics.rank_line(ctx.rank, mine), flush=True)
    return mine


def rank_figures(timer: WindowTimer, elapsed_s: float, ctx: Context, losses: tuple,
                 settled: Optional[bool]) -> metrics.RankFigures:
    """This rank's measured window from its timer (losses: first and last logging windows')."""
    return metrics.RankFigures(
        elapsed_s=elapsed_s, steps=len(timer.measured_step_s), samples=timer.measured_samples,
        units=timer.measured_units, reader_s=timer.measured_reader_s,
        peak_mem_mib=run.peak_memory_mib(ctx.device), loss_first=losses[0], loss_last=losses[1],
        interference=run.interference(timer.cpu_start, timer.cpu_end, ctx.device),
        probe=timer.probe_figures, step_s=timer.measured_step_s, warmup_steps=timer.warmup_steps,
        warmup_settled=settled)


def steady_for(cfg: config.CollectiveConfig, work: Workload, steps: int) -> timing.Steady:
    """Warm-up until settled and a window calibrated in seconds (`measure.settle_steps`,
    `measure.window_s`), unless the data decides the run's length (`work.steps`): fixed counts."""
    if work.steps:
        return timing.Steady(cfg.warmup_steps, 0, 0.0, steps - cfg.warmup_steps)
    return timing.Steady(cfg.warmup_steps, cfg.measure.settle_steps, cfg.measure.window_s, steps - cfg.warmup_steps)


def probe_for(cfg: config.CollectiveConfig, ctx: Context, comm: metrics.Communicator,
              barrier: Callable[[], None]) -> Optional[Callable[[], list]]:
    """The machine-speed probe of this rank's device (machine/speed.py), the ranks of a machine in
    turn, or None with measure.probe off."""
    return speed.in_turn(ctx.device, comm.gather, ctx.rank, barrier) if cfg.measure.probe else None


def end_of_warmup(steady: timing.Steady, step_s: list, comm: metrics.Communicator) -> Optional[int]:
    """The measured window's steps once every rank's warm-up is over, else None. Each rank judges
    its own step times, so where warm-up is not fixed they must agree (one all-reduce a warm-up
    step), and all run the most steps any calibrated: a collective never waits for a rank gone."""
    over = steady.warmup_over(step_s)
    if steady.max_warmup > steady.min_warmup:
        over = comm.max([0.0 if over else 1.0])[0] == 0.0
    if not over:
        return None
    return int(comm.max([float(steady.measured_steps(step_s))])[0])


class PaddleCommunicator:
    """metrics.Communicator over paddle.distributed (float64, so sums of counts stay exact)."""

    @staticmethod
    def _reduced(values: list, op: int) -> list:  # op: a dist.ReduceOp constant
        tensor = paddle.to_tensor(values, dtype="float64")
        dist.all_reduce(tensor, op=op)
        return tensor.numpy().tolist()

    def sum(self, values: list) -> list:
        return self._reduced(values, dist.ReduceOp.SUM)

    def max(self, values: list) -> list:
        return self._reduced(values, dist.ReduceOp.MAX)

    def gather(self, values: list) -> list[list]:
        gathered = []
        dist.all_gather(gathered, paddle.to_tensor(values, dtype="float64"))
        return [t.numpy().tolist() for t in gathered]


def main(script: str, cls: type, build: Callable[[Any], Workload], argv: list[str] | None = None,
         checks: tuple = (), before_setup: Optional[Callable[[Any], bool]] = None) -> None:
    """`script` is the calling script's path (`__file__`): its registry entry names the run.
    `checks`: the script's own checks of its config (run under --check too); `before_setup(cfg)`
    runs before fleet.init, and the run ends there when it returns True (GPT's dry topology)."""
    init_start_ms, init_start = time.time() * 1000, time.perf_counter()
    bench = run.start(script, cls, "collective", argv, checks=[check_runtime, *checks])
    if bench.check_only or (before_setup and before_setup(bench.cfg)):
        return
    ctx = setup(bench.cfg)
    if ctx.world_size > 1:
        dist.barrier()  # one run_start for the job: every rank's clock starts together
    ctx.clock = RunClock.started(init_start_ms, init_start)
    ctx.phases = phases.Phases(bench.cfg.warmup_steps, sync=device.sync_device if bench.trace else lambda: None)
    try:
        work = build(bench.cfg)
        ctx.macs = trace.count_forward_macs(work.model)  # on the first forward: MFU's FLOPs
        unit = bench.unit_for(work)
        comm = PaddleCommunicator() if ctx.world_size > 1 else metrics.Alone()
        mine, convergence = work.schedule(bench.cfg, ctx, unit, comm)
        totals = metrics.reduce(mine, comm)
        extra = work.finish(comm) if work.finish else {}
        # MFU, the step's parts by rank; --trace: one file per rank
        extra.update(trace.finish(bench, ctx, comm, totals.samples / totals.elapsed_s))
    except Exception as err:  # a failed run is a result too: store it, then fail loudly
        bench.store_failure(ctx.placement, err)
        raise
    figures = dict(metrics.standard(totals, unit, ctx.world_size, bench.cfg.warmup_steps,
                                    threads=fleetbench.threads_info(),
                                    probe=speed.DEFINITION if bench.cfg.measure.probe else None), **ctx.comm,
                   **convergence, **extra)
    if work.utilization:
        figures.update(work.utilization(figures))
    code = bench.store_result(ctx.placement, figures)
    sys.stdout.flush()
    if code:
        sys.exit(code)
