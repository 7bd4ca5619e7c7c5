"""The measured training loop shared by every collective (data-parallel) benchmark script.

A script declares its config dataclass and a `build(cfg) -> Workload`; `main()` does the rest:
config and runtime checks, device and Fleet set-up, warm-up, the measured window, the reduction
across ranks (slowest rank decides), the log lines, and the result record on rank 0.
"""
import dataclasses
import json
import os
import resource
import sys
import time
from typing import Any, Callable, Iterable, Optional

import paddle
import paddle.distributed as dist
from paddle.distributed import fleet

import fleetbench
from fleetbench.measure import config, results
from fleetbench.train import methods
from fleetbench.measure.timing import WindowTimer, log_line


@dataclasses.dataclass
class Workload:
    model: paddle.nn.Layer
    optimizer: paddle.optimizer.Optimizer
    batches: Iterable  # re-iterable: one pass is an epoch; the loop starts a new one when it ends
    loss_fn: Callable[[paddle.nn.Layer, Any], paddle.Tensor]
    unit: str = "images/s"
    # (samples, units) in one batch; units are what `unit` counts (images, tokens, ...)
    count: Callable[[Any], tuple] = None

    def counts(self, batch) -> tuple:
        if self.count is not None:
            return self.count(batch)
        samples = int(batch[0].shape[0])
        return samples, samples


@dataclasses.dataclass
class Context:
    rank: int
    world_size: int
    local_size: int
    device: str


# ---------------------------------------------------------------- set-up
def device_name() -> str:
    """GPU when Paddle was built with CUDA and sees a device; the launcher picks which one."""
    if paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0:
        return f"gpu:{dist.ParallelEnv().device_id}"
    return "cpu"


def check_runtime(cfg) -> None:
    """Checks that need Paddle but no process group; they run under --check too."""
    if cfg.amp != "off" and not paddle.is_compiled_with_cuda():
        raise config.ConfigError(
            f"config key 'amp' is {cfg.amp!r} but this Paddle build has no CUDA: Paddle 2.6.2's "
            "auto_cast does nothing on CPU, so an AMP figure here would be an fp32 figure; use amp=off")
    methods.check(cfg)


def setup(cfg) -> Context:
    paddle.set_device(device_name())
    paddle.seed(cfg.seed)
    world_size = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
    if world_size > 1:
        fleet.init(is_collective=True, strategy=methods.strategy(cfg), log_level="WARNING")
    return Context(rank=dist.get_rank() if world_size > 1 else 0, world_size=world_size,
                   local_size=fleetbench.local_process_count(), device=paddle.get_device())


def sync_device() -> None:
    if paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0:
        paddle.device.cuda.synchronize()


def peak_memory_mib() -> float:
    if paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0:
        return paddle.device.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def endless(batches: Iterable):
    while True:
        empty = True
        for batch in batches:
            empty = False
            yield batch
        if empty:
            raise ValueError("the data source yielded no batch")


# ---------------------------------------------------------------- the measured run
def train(cfg, work: Workload, ctx: Context) -> dict:
    """Run warm-up + measured steps; return this rank's raw figures.

    Losses stay on the device and are read once per logging window (a read is a device sync);
    loss_first and loss_last are the mean losses of the first and last logging windows.
    """
    model, step_fn = methods.prepare(cfg, work, ctx)
    model.train()
    timer = WindowTimer(cfg.warmup_steps, sync=sync_device)
    batches = endless(work.batches)
    units = samples = 0.0
    window_losses, loss_first, loss_last = [], None, None
    delay_s = cfg.debug.delay_ms / 1000 if cfg.debug.delay_rank == ctx.rank else 0.0
    for step in range(1, cfg.steps + 1):
        tick = time.perf_counter()
        batch = next(batches)
        reader_s = time.perf_counter() - tick
        window_losses.append(step_fn(batch).detach())
        if delay_s:
            time.sleep(delay_s)  # test-only: makes this rank the slow one
        batch_samples, batch_units = work.counts(batch)
        timer.step_done(step, batch_units, reader_s)
        if step > cfg.warmup_steps:
            samples += batch_samples
            units += batch_units
        if step % cfg.log_every == 0 or step == cfg.steps:
            loss_last = float(paddle.add_n(window_losses)) / len(window_losses)
            loss_first = loss_last if loss_first is None else loss_first
            window_losses = []
            window = timer.close_window()
            print(log_line(step, cfg.steps, loss_last, window["ips"], work.unit,
                           window["batch_cost_s"], window["reader_cost_s"]), flush=True)
        if step == cfg.warmup_steps:
            timer.end_warmup(barrier=dist.barrier if ctx.world_size > 1 else lambda: None)
    elapsed = timer.finish()
    measured = cfg.steps - cfg.warmup_steps
    print(f"rank {ctx.rank} measured_steps {measured} elapsed_s {elapsed:.6f} "
          f"samples {samples:.0f} units {units:.0f}", flush=True)
    return {"elapsed_s": elapsed, "samples": samples, "units": units, "reader_s": timer.measured_reader_s,
            "loss_first": loss_first, "loss_last": loss_last, "peak_mem_mib": peak_memory_mib()}


def reduce_across_ranks(raw: dict, ctx: Context) -> dict:
    """Slowest rank's time (MAX), summed work (SUM), mean loss; plus every rank's time."""
    if ctx.world_size == 1:
        return dict(raw, rank_elapsed_s=[raw["elapsed_s"]])
    maxes = paddle.to_tensor([raw["elapsed_s"], raw["reader_s"], raw["peak_mem_mib"]], dtype="float64")
    sums = paddle.to_tensor([raw["samples"], raw["units"], raw["loss_first"], raw["loss_last"]],
                            dtype="float64")
    dist.all_reduce(maxes, op=dist.ReduceOp.MAX)
    dist.all_reduce(sums, op=dist.ReduceOp.SUM)
    per_rank = []
    dist.all_gather(per_rank, paddle.to_tensor([raw["elapsed_s"]], dtype="float64"))
    elapsed, reader_s, peak = maxes.numpy().tolist()
    samples, units, loss_first, loss_last = sums.numpy().tolist()
    return {"elapsed_s": elapsed, "reader_s": reader_s, "peak_mem_mib": peak, "samples": samples,
            "units": units, "loss_first": loss_first / ctx.world_size,
            "loss_last": loss_last / ctx.world_size,
            "rank_elapsed_s": [float(t.numpy()[0]) for t in per_rank]}


def metrics(cfg, unit: str, totals: dict, ctx: Context) -> dict:
    measured = cfg.steps - cfg.warmup_steps
    elapsed = totals["elapsed_s"]
    throughput = totals["units"] / elapsed
    return {
        "throughput": throughput, "unit": unit,
        "throughput_per_device": throughput / ctx.world_size,
        "samples_per_s": totals["samples"] / elapsed,
        "step_time_ms": 1000 * elapsed / measured,
        "reader_time_ms": 1000 * totals["reader_s"] / measured,
        "peak_mem_mib": totals["peak_mem_mib"],
        "loss_first": totals["loss_first"], "loss_last": totals["loss_last"],
        "elapsed_s": elapsed, "rank_elapsed_s": totals["rank_elapsed_s"],
        "measured_steps": measured, "warmup_steps": cfg.warmup_steps,
        "omp_num_threads": fleetbench.threads_info()["omp_num_threads"],
    }


def record_for(benchmark, preset, cfg, ctx: Context, metrics_: Optional[dict], error: Optional[str]):
    resolved = config.to_dict(cfg)
    resolved["runtime"] = {"device": ctx.device, "threads": fleetbench.threads_info(),
                           "paddle": paddle.__version__}
    nodes = max(1, ctx.world_size // max(1, ctx.local_size))
    return results.make_record(benchmark=benchmark, mode="collective", method=cfg.method, preset=preset,
                               config=resolved, nodes=nodes, devices_per_node=ctx.world_size // nodes,
                               world_size=ctx.world_size, metrics=metrics_, error=error)


def main(benchmark: str, cls, build: Callable[[Any], Workload], argv=None) -> None:
    cfg, args = config.parse_args(benchmark, cls, argv)
    try:
        check_runtime(cfg)
    except config.ConfigError as err:
        config.exit_config_error(benchmark, err)
    if args.check:
        print(json.dumps(config.to_dict(cfg), sort_keys=True))
        return
    ctx = setup(cfg)
    try:
        work = build(cfg)
        totals = reduce_across_ranks(train(cfg, work, ctx), ctx)
    except Exception as err:  # a failed run is a result too: store it, then fail loudly
        # Under `fleetbench launch` the supervisor stores the failure, naming the rank that failed
        # first (which need not be this one); a second record would count one run twice.
        if ctx.rank == 0 and "FLEETBENCH_JOB_ID" not in os.environ:
            results.emit(args.results, record_for(benchmark, args.preset, cfg, ctx, None,
                                                   f"{type(err).__name__}: {err}"))
        raise
    if ctx.rank == 0:
        results.emit(args.results, record_for(benchmark, args.preset, cfg, ctx,
                                              metrics(cfg, work.unit, totals, ctx), None))
    sys.stdout.flush()
