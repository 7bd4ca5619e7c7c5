"""What a collective run writes about its steps beyond its throughput: the record's step
breakdown (train/phases.py), MFU (the model's forward MACs, counted here on its first forward,
and the devices' peak; measure/flops.py's arithmetic) and, with `--trace DIR`, a Chrome trace per rank.

The file is Chrome's Trace Event Format, JSON object form (`{"traceEvents": [...]}`), which
Perfetto and chrome://tracing open: complete events (`"ph": "X"`) for every step and every part of
it (train/phases.py), the rank as process id, one track per thread that ran a part. Time stamps
are microseconds since the barrier every rank passes before training (loop.main, RunClock's
run_start): each rank's zero is its own clock read just after that barrier returned, so the ranks'
tracks line up to within the barrier's release skew (one message between the ranks).
"""
from __future__ import annotations

import datetime
import json
import math
import os
from typing import TYPE_CHECKING

import paddle

from fleetbench.machine import device, speed
from fleetbench.measure import flops
from fleetbench.train import phases as step_phases

if TYPE_CHECKING:
    from fleetbench.measure import metrics
    from fleetbench.train.context import Context
    from fleetbench.train.run import Run

DISPLAY_UNIT = "ms"
CONV = (paddle.nn.Conv1D, paddle.nn.Conv2D, paddle.nn.Conv3D)
CONV_T = (paddle.nn.Conv1DTranspose, paddle.nn.Conv2DTranspose, paddle.nn.Conv3DTranspose)


class MacCounter:
    """The model's forward MACs in its first forward (the loop's first step), by forward
    post-hooks on its layers, removed once that forward ends: nothing is run for the count."""

    def __init__(self, model: paddle.nn.Layer) -> None:
        self.macs, self.batch, self.forward_macs = 0.0, None, None
        self.handles = [layer.register_forward_post_hook(self._count) for layer in model.sublayers(include_self=True)
                        if isinstance(layer, (*CONV, *CONV_T, paddle.nn.Linear, paddle.nn.MultiHeadAttention))]
        self.handles.append(model.register_forward_post_hook(self._done))

    def _count(self, layer: paddle.nn.Layer, inputs: tuple, output: object) -> None:
        out = output[0] if isinstance(output, (tuple, list)) else output
        if isinstance(layer, CONV):
            self.macs += flops.conv_macs(math.prod(out.shape), layer.weight.shape)
        elif isinstance(layer, CONV_T):  # each input element meets out_channels/groups x kernel weights
            self.macs += flops.conv_macs(math.prod(inputs[0].shape), layer.weight.shape)
        elif isinstance(layer, paddle.nn.Linear):
            self.macs += flops.linear_macs(math.prod(out.shape), layer.weight.shape)
        else:  # MultiHeadAttention(query, key=None, value=None, ...): batch-first [B, L, E]
            query = inputs[0]
            key = inputs[1] if len(inputs) > 1 and inputs[1] is not None else query
            self.macs += flops.attention_macs(query.shape[0], query.shape[1], key.shape[1], layer.embed_dim)
        self.batch = self.batch or int(out.shape[0])

    def _done(self, *_args: object) -> None:
        self.forward_macs = self.macs
        for handle in self.handles:
            handle.remove()


def count_forward_macs(model: paddle.nn.Layer) -> MacCounter:
    return MacCounter(model)


def _complete(name: str, cat: str, start: float, end: float, pid: int, tid: int, args: dict) -> dict:
    return {"name": name, "cat": cat, "ph": "X", "ts": round(start * 1e6, 3),
            "dur": round(max(0.0, end - start) * 1e6, 3), "pid": pid, "tid": tid, "args": args}


def events(steps: list, spans: list, rank: int, zero: float, main_thread: int, warmup_steps: int) -> list[dict]:
    """Trace events of one rank: metadata, then its steps and their parts in time order.
    `steps`: (step, start, end); `spans`: (name, start, end, step, thread), perf_counter seconds."""
    tids = {main_thread: 0}
    for span in spans:
        tids.setdefault(span[4], len(tids))
    meta = [{"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}},
            {"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}}]
    meta += [{"name": "thread_name", "ph": "M", "pid": rank, "tid": tid,
              "args": {"name": "steps" if tid == 0 else f"thread {tid}"}} for tid in tids.values()]
    timed = [_complete(f"step {step}", "warmup" if step <= warmup_steps else "step", start - zero, end - zero,
                       rank, 0, {"step": step}) for step, start, end in steps]
    timed += [_complete(name, "phase", start - zero, end - zero, rank, tids[thread], {"step": step})
              for name, start, end, step, thread in spans]
    timed.sort(key=lambda e: (e["ts"], -e["dur"]))  # a step before the parts it holds
    return meta + timed


def document(trace_events: list[dict], about: dict) -> dict:
    return {"traceEvents": trace_events, "displayTimeUnit": DISPLAY_UNIT, "otherData": about}


def file_name(benchmark: str, zero_wall_ms: float, rank: int) -> str:
    """One name per rank of one run: the benchmark and rank 0's wall clock at the barrier (UTC)."""
    stamp = datetime.datetime.fromtimestamp(zero_wall_ms / 1000, datetime.timezone.utc)
    return f"{benchmark}-{stamp.strftime('%Y%m%dT%H%M%S')}-{int(zero_wall_ms) % 1000:03d}-rank{rank}.trace.json"


def write(path: str, doc: dict) -> None:
    """Written whole to a temporary name, then renamed: a reader never sees half a trace."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    os.replace(tmp, path)


def finish(bench: Run, ctx: Context, comm: metrics.Communicator, samples_per_s: float) -> dict:
    """The record's MFU figures, `step_breakdown` and, with --trace, every rank's trace file
    (`trace_files`). Every rank calls it together (its gathers are collectives)."""
    ph = ctx.phases
    out = model_flops(bench, ctx, comm, samples_per_s)
    if not ph.measured()[0]:  # a schedule that does not feed the phases (the epoch loop)
        return out
    out["step_breakdown"] = step_phases.breakdown(ph, comm, ctx.rank)
    if not bench.trace:
        return out
    zero_wall_ms = comm.gather([ctx.clock.run_start_ms])[0][0]  # rank 0's: one name for the run
    names = [os.path.abspath(os.path.join(bench.trace, file_name(bench.name, zero_wall_ms, r)))
             for r in range(ctx.world_size)]
    about = {"benchmark": bench.name, "method": getattr(bench.cfg, "method", None), "rank": ctx.rank,
             "world_size": ctx.world_size, "zero_wall_ms": ctx.clock.run_start_ms,
             "clock": "microseconds since this rank passed the barrier before training",
             "breakdown": out["step_breakdown"]["ranks"][ctx.rank]}
    write(names[ctx.rank], document(events(ph.steps, ph.spans, ctx.rank, ctx.clock.run_start, ph.thread,
                                           ph.warmup_steps), about))
    out["trace_files"] = names
    return out


def model_flops(bench: Run, ctx: Context, comm: metrics.Communicator, samples_per_s: float) -> dict:
    """model_flops_per_sample, peak_flops and mfu (measure/flops.py's convention). A GPU's peak is
    the accelerator table's at the run's precision; a CPU rank's is its GEMM rate, measured here on
    every rank at once after training. Every rank calls it together."""
    counter = ctx.macs
    per_sample = None
    if counter is not None and counter.forward_macs and counter.batch:
        per_sample = flops.training_flops(counter.forward_macs / counter.batch)
    if device.gpu_ranks():
        name = paddle.device.cuda.get_device_name()
        precision = flops.gpu_precision(getattr(bench.cfg, "amp", "off"), name)
        peak, source = flops.gpu_peak_flops(name, precision, ctx.world_size), f"devices.py: {name}, {precision}"
    else:
        rates = [r[0] for r in comm.gather([speed.paddle_gemm_gflops(bench.cfg.measure.peak_s)])]
        peak, source = flops.cpu_peak_flops(rates), "fp32 GEMM measured on each rank's threads after training"
    return {"model_flops_per_sample": per_sample, "peak_flops": peak, "peak_flops_source": source,
            "mfu": flops.mfu(per_sample, samples_per_s, peak)}
