"""The epoch schedule of the collective loop: N passes over the training split, each followed by
an evaluation on the held-out split (fleetbench.train.evaluate), until the last epoch or, with
stop_at_target, the first epoch at the target accuracy (MLPerf's rule).

It reuses the loop's parts: methods.prepare builds the step, WindowTimer times logging windows
and the measured window, metrics.RankFigures/reduce/standard give the record's standard figures.
What it adds (docs/guide/convergence.md):
- the measured window is the union of the epochs' training phases: evaluation is never inside
  it, and the first `warmup_steps` steps of epoch 1 are excluded as usual;
- per epoch, for all ranks: epoch_time_s (slowest rank's training wall time, warm-up included),
  test_time_s, throughput (global units / epoch_time_s), train_loss, the evaluation's figures,
  elapsed_s (wall time since training started, evaluations included) and run_elapsed_s (the same
  since MLPerf's run_start, before the data was touched: the clock of time to target);
- the run's init_s (script start -> run_start: Fleet's rendezvous) and setup_s (run_start ->
  training: data read, model built and wrapped), MLPerf's initialisation and the part of the run
  before its first step;
- MLPerf-style :::MLLOG lines on rank 0 (fleetbench.train.mllog);
- log lines in the layout of the hand-made MNIST logs beside fleetbench's own:
  `Step40: 118.29 data/sec` (running global rate since training started, evaluations excluded:
  this rank's rate x world size) and `Epoch 1 in 33.80 sec, test time 1.62 sec, test accuracy: 0.9120`.
  Epochs count from 1 (the hand-made logs count from 0): `Epoch k` is the k-th epoch done.
"""
import dataclasses
import os
import sys
import time
from typing import Any, Callable, Iterable, Iterator, Optional

import paddle
import paddle.distributed as dist

from fleetbench.machine import device
from fleetbench.measure import config, metrics, registry
from fleetbench.measure.timing import WindowTimer, log_line
from fleetbench.train import evaluate, loop, methods, mllog, run


@dataclasses.dataclass
class EpochConfig(config.CollectiveConfig):
    """How long an epoch-based run is and what it aims at."""

    epochs: int = 1
    target_accuracy: Optional[float] = None  # test accuracy for time_to_target_s / epochs_to_target
    stop_at_target: bool = False  # stop after the first epoch that reaches the target (MLPerf)
    eval_batch_size: int = 256  # per rank

    def validate(self) -> None:
        super().validate()
        config.require(self.epochs >= 1, "epochs", "must be >= 1", self.epochs)
        config.require(self.target_accuracy is None or 0 < self.target_accuracy <= 1, "target_accuracy",
                       "must be in (0, 1] or null", self.target_accuracy)
        config.require(not self.stop_at_target or self.target_accuracy is not None, "stop_at_target",
                       "needs target_accuracy", self.stop_at_target)
        config.require(self.eval_batch_size > 0, "eval_batch_size", "must be > 0", self.eval_batch_size)


def world_size() -> int:
    """The job's size as the launcher states it (readable before and after fleet.init)."""
    return int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))


def check_warmup(cfg: EpochConfig, steps_per_epoch: int, where: str) -> None:
    """Warm-up must end inside the first epoch (it is excluded from epoch 1's figures only)."""
    config.require(steps_per_epoch > cfg.warmup_steps, "warmup_steps",
                   f"must be < the {steps_per_epoch} steps of an epoch ({where}, {world_size()} process(es))",
                   cfg.warmup_steps)


@dataclasses.dataclass(kw_only=True)
class EpochWorkload(loop.Workload):
    """A loop.Workload whose `batches` are one epoch per pass (with __len__), plus a held-out split:
    `held_out` is re-iterable, each pass this rank's shard in (inputs, labels) batches."""

    held_out: Iterable
    num_classes: int
    lr: Optional[float] = None  # the learning rate the optimizer was built with, for the record

    def schedule(self, cfg: EpochConfig, ctx: loop.Context, unit: str, comm: metrics.Communicator) -> tuple:
        return train(cfg, self, ctx, unit, comm)  # epochs, each followed by an evaluation


@dataclasses.dataclass
class Tally:
    """This rank's running figures across epochs."""

    total_steps: int
    step: int = 0  # optimizer steps done (all epochs)
    train_s: float = 0.0  # training wall time of the epochs done, evaluations excluded
    samples_now: float = 0.0  # samples trained so far (the StepN lines' running rate)
    # each epoch's measured window: (seconds, samples, units, reader seconds); warm-up excluded
    measured: list = dataclasses.field(default_factory=list)
    loss_first: Optional[float] = None  # mean loss of the first logging window
    loss_last: Optional[float] = None
    # the machine's CPU counters at the first measured window's start and the last one's end
    # (measure/interference.py): what else ran while the epochs were timed, evaluations between them
    cpu_start: Optional[object] = None
    cpu_end: Optional[object] = None


def _timed(batches: Iterable) -> Iterator[tuple[float, Any]]:
    """(seconds spent waiting for the batch, batch) for each batch of one pass."""
    source = iter(batches)
    while True:
        tick = time.perf_counter()
        try:
            batch = next(source)
        except StopIteration:
            return
        yield time.perf_counter() - tick, batch


def _log_window(timer: WindowTimer, window: list, tally: Tally, epoch_start: float, ctx: loop.Context,
                unit: str) -> None:
    """Close a logging window: fleetbench's line, then the hand-made logs' running global rate."""
    tally.loss_last = float(paddle.add_n(window)) / len(window)
    tally.loss_first = tally.loss_last if tally.loss_first is None else tally.loss_first
    figures = timer.close_window()
    train_s = tally.train_s + timer.window_start - epoch_start  # the window just closed ends here
    print(log_line(tally.step, tally.total_steps, tally.loss_last, figures["ips"], unit,
                   figures["batch_cost_s"], figures["reader_cost_s"]), flush=True)
    print(f"Step{tally.step}: {tally.samples_now * ctx.world_size / train_s:.2f} data/sec", flush=True)


def _train_epoch(cfg: EpochConfig, epoch: int, step_fn: Callable[[Any], paddle.Tensor], work: EpochWorkload,
                 tally: Tally, ctx: loop.Context, unit: str) -> dict:
    """One pass over this rank's training batches; returns this rank's figures of the epoch."""
    warmup = cfg.warmup_steps if epoch == 1 else 0
    timer = WindowTimer(warmup, sync=device.sync_device)
    epoch_start, losses, window, units = timer.window_start, [], [], 0.0
    sampler = getattr(work.batches, "batch_sampler", None)
    if hasattr(sampler, "set_epoch"):  # a DataLoader's DistributedBatchSampler: a new order each epoch
        sampler.set_epoch(cfg.seed + epoch)
    for step, (reader_s, batch) in enumerate(_timed(work.batches), 1):
        loss = step_fn(batch).detach()
        losses.append(loss)
        window.append(loss)
        batch_samples, batch_units = work.counts(batch)
        units += batch_units
        tally.samples_now += batch_samples
        timer.step_done(step, batch_samples, batch_units, reader_s)
        tally.step += 1
        if tally.step % cfg.log_every == 0 or step == len(work.batches):
            _log_window(timer, window, tally, epoch_start, ctx, unit)
            window = []
        if step == warmup:
            timer.end_warmup(barrier=dist.barrier if ctx.world_size > 1 else lambda: None)
    measured_s = timer.finish()
    tally.cpu_start, tally.cpu_end = tally.cpu_start or timer.cpu_start, timer.cpu_end
    time_s = timer.measure_start + measured_s - epoch_start
    tally.train_s += time_s
    tally.measured.append((measured_s, timer.measured_samples, timer.measured_units, timer.measured_reader_s))
    return {"time_s": time_s, "units": units, "loss_sum": float(paddle.add_n(losses)), "steps": len(losses)}


def _epoch_figures(epoch: int, mine: dict, evaluation: dict, train_start: float, clock: loop.RunClock,
                   comm: metrics.Communicator) -> dict:
    """The epoch's figures for all ranks (every rank calls this together)."""
    (epoch_time,) = comm.max([mine["time_s"]])
    units, loss_sum, steps = comm.sum([mine["units"], mine["loss_sum"], mine["steps"]])
    elapsed, run_elapsed = comm.max([time.perf_counter() - train_start, clock.since_run_start()])
    return {"epoch": epoch, "epoch_time_s": epoch_time, "test_time_s": evaluation.pop("test_time_s"),
            **evaluation, "throughput": units / epoch_time, "train_loss": loss_sum / steps,
            "elapsed_s": elapsed, "run_elapsed_s": run_elapsed}


def epoch_lines(figures: dict) -> str:
    """The hand-made logs' epoch line, then fleetbench's line with the other figures."""
    top5 = "" if figures["test_top5"] is None else f" test_top5 {figures['test_top5']:.4f}"
    return (f"Epoch {figures['epoch']} in {figures['epoch_time_s']:.2f} sec, test time "
            f"{figures['test_time_s']:.2f} sec, test accuracy: {figures['test_accuracy']:.4f}\n"
            f"epoch {figures['epoch']} test_loss {figures['test_loss']:.4f}{top5} train_loss "
            f"{figures['train_loss']:.4f} ips {figures['throughput']:.1f} elapsed_s {figures['elapsed_s']:.2f}")


def train(cfg: EpochConfig, work: EpochWorkload, ctx: loop.Context, unit: str,
          comm: metrics.Communicator) -> tuple:
    """Train epoch by epoch, evaluating after each; returns (this rank's metrics.RankFigures over
    the measured window, the run's convergence metrics)."""
    model, step_fn = methods.prepare(cfg, work, ctx)
    model.train()
    tally = Tally(total_steps=cfg.epochs * len(work.batches))
    if ctx.world_size > 1:
        dist.barrier()  # every rank's clock starts together: elapsed_s is the job's wall time
    train_start, epochs = time.perf_counter(), []
    init_s, setup_s = comm.max([ctx.clock.init_s, train_start - ctx.clock.run_start])
    log = mllog.RunLog(ctx.rank == 0, run_name())
    log.opening(ctx.clock.init_start_ms, ctx.clock.run_start_ms, {
        "seed": cfg.seed, "global_batch_size": cfg.batch_size * ctx.world_size,
        "opt_base_learning_rate": work.lr, "train_samples": len(work.batches) * cfg.batch_size * ctx.world_size,
        "eval_samples": getattr(work.held_out, "size", None), "epoch_count": cfg.epochs})
    for epoch in range(1, cfg.epochs + 1):
        log.start("epoch_start", epoch_num=epoch)
        mine = _train_epoch(cfg, epoch, step_fn, work, tally, ctx, unit)
        log.end("epoch_stop", epoch_num=epoch)
        log.start("eval_start", epoch_num=epoch)
        evaluation = evaluate.evaluate(work.model, work.held_out, work.num_classes, comm, ctx.world_size,
                                       sync=device.sync_device, forward=ctx.precision.forward)
        epochs.append(_epoch_figures(epoch, mine, evaluation, train_start, ctx.clock, comm))
        log.end("eval_stop", epoch_num=epoch)
        log.event("eval_accuracy", epochs[-1]["test_accuracy"], epoch_num=epoch)
        print(epoch_lines(epochs[-1]), flush=True)
        if cfg.stop_at_target and epochs[-1]["test_accuracy"] >= cfg.target_accuracy:
            break
    reached = cfg.target_accuracy is not None and any(e["test_accuracy"] >= cfg.target_accuracy for e in epochs)
    log.stop(reached)
    measured = [sum(column) for column in zip(*tally.measured)]
    figures = metrics.RankFigures(
        elapsed_s=measured[0], steps=tally.step - cfg.warmup_steps, samples=measured[1], units=measured[2],
        reader_s=measured[3], peak_mem_mib=run.peak_memory_mib(ctx.device), loss_first=tally.loss_first,
        loss_last=tally.loss_last, interference=run.interference(tally.cpu_start, tally.cpu_end, ctx.device))
    print(metrics.rank_line(ctx.rank, figures), flush=True)
    return figures, dict(convergence_metrics(cfg, work, epochs), init_s=init_s, setup_s=setup_s)


def run_name() -> str:
    """The benchmark's name (the registry's, from the script the job runs), for the :::MLLOG lines."""
    return registry.name_for_script(os.path.abspath(sys.argv[0]))


def convergence_metrics(cfg: EpochConfig, work: EpochWorkload, epochs: list) -> dict:
    time_to_target, epochs_to_target = evaluate.to_target(epochs, cfg.target_accuracy)
    return {"epochs": epochs, "final_test_accuracy": epochs[-1]["test_accuracy"],
            "final_test_top5": epochs[-1]["test_top5"], "target_accuracy": cfg.target_accuracy,
            "time_to_target_s": time_to_target, "epochs_to_target": epochs_to_target,
            "lr_effective": work.lr, "steps_per_epoch": len(work.batches), "seed": cfg.seed}
