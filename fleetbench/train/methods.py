"""Gradient-communication methods for the collective benchmarks, each built from Paddle's own parts.

The loop calls three functions: `check(cfg)` before anything runs, `strategy(cfg)` for fleet.init,
and `prepare(cfg, work, ctx) -> (model, step_fn)`; `step_fn(batch)` runs one step and returns its
loss. docs/reference/methods.md maps every method to its Paddle knob and shows how each was verified.

Two facts of Paddle 2.6.2 shape this module (both observed, see docs/reference/methods.md):
- DataParallel decides in its *forward* whether the next backward is synchronised: forward calls
  `reducer.prepare_for_backward`, which arms the C++ reducer's gradient hooks. So `no_sync()` must
  enclose the forward as well as the backward; around `backward()` alone it changes nothing.
- `DistributedStrategy.fuse_grad_size_in_MB` is an int32 field whose setter ignores any float with
  a warning (25.0 silently stays 32), and it cannot express the sub-MB buckets a tiny model needs.
  In pure data-parallel mode `fleet.distributed_model` is just `paddle.DataParallel(model,
  comm_buffer_size=..., last_comm_buffer_size=..., group=<dp group>)`, so we build that directly.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Protocol, Sequence

import paddle
import paddle.distributed as dist
from paddle.distributed import fleet

from fleetbench.measure.config import CollectiveConfig
from fleetbench.measure.registry import (
    CONTROL,  # a measurement control, never a training result
)
from fleetbench.train import capability
from fleetbench.train.amp import Precision

from fleetbench.train.context import Context
from fleetbench.train.phases import Phases


class Workload(Protocol):
    """What prepare and the step use of a loop.Workload (the loop imports this module)."""

    model: paddle.nn.Layer
    optimizer: paddle.optimizer.Optimizer
    loss_fn: Callable[[paddle.nn.Layer, Any], paddle.Tensor]

METHODS = {
    "bsp": "backward completes, then all gradients are all-reduced in fused buckets (no overlap)",
    "wfbp": "one all-reduce per parameter tensor, issued during backward as each gradient is ready",
    "mgwfbp": "all-reduce of merged buckets of comm_buffer_mb, overlapped with backward (Paddle default)",
    "grad_merge": "grad_merge_steps micro-steps accumulate locally under no_sync; the last one all-reduces",
    "fp16_allreduce": "like bsp, but gradients travel as float16 (half the bytes) and are cast back",
    "none": "control: each rank trains on its own data, no gradient synchronisation (not valid "
            "training: measures compute under the same processes, threads and placement)",
}
# Buckets of the all-reduce that bsp/fp16_allreduce run after backward: the size Paddle's
# fused_allreduce_gradients uses, so a model of <= 128 MiB of gradients is one all-reduce.
# Paddle's bucket sizes (here, comm_buffer_size, comm_buffer_mb) say "MB" but count 2**20 bytes,
# so the log labels them MiB; gradient totals are MB (10**6 bytes), as comm_bytes_per_step and docs.
POST_BACKWARD_BUCKET_MB = 128
# Paddle's default last_comm_buffer_size: the bucket holding the gradients ready *last* is kept
# small because nothing is left to overlap it with.
LAST_BUCKET_MB = 1.0


def check(cfg: CollectiveConfig) -> None:
    from fleetbench.measure.config import ConfigError

    if cfg.method not in METHODS:
        raise ConfigError(f"config key 'method' must be one of {', '.join(METHODS)} (got {cfg.method!r})")
    if cfg.method == "grad_merge":
        k = cfg.grad_merge_steps
        # The loop times whole steps it is given; each call of step_fn is one micro-step, so the
        # warm-up/measured windows must hold whole accumulation cycles to be comparable.
        for key in ("warmup_steps", "steps"):
            if getattr(cfg, key) % k:
                raise ConfigError(f"config key '{key}' must be a multiple of grad_merge_steps ({k}) for "
                                  f"method=grad_merge (got {getattr(cfg, key)})")
    if cfg.method == "fp16_allreduce" and cfg.amp == "fp16":
        # fp16 AMP's loss scaling (2^15) makes gradients overflow float16 on the wire.
        raise ConfigError("config key 'amp' fp16 cannot be combined with method=fp16_allreduce "
                          "(loss-scaled gradients overflow float16); use amp=bf16 or another method")
    if cfg.method == "fp16_allreduce" and cfg.amp_level == "O2":
        raise ConfigError("config key 'amp_level' O2 cannot be combined with method=fp16_allreduce (O2's "
                          "gradients are already half precision on the wire); use amp_level=O1 or method=bsp")


def strategy(cfg: CollectiveConfig) -> fleet.DistributedStrategy:
    """The Fleet strategy: pure data parallelism; bucket sizes are set on DataParallel (see above).
    A config with its own (GPT's hybrid degrees: train/hybrid.py) gives it."""
    own = getattr(cfg, "fleet_strategy", None)
    return own() if own else fleet.DistributedStrategy()


def bucket_mb(cfg: CollectiveConfig) -> tuple[float, float] | None:
    """(comm_buffer_size, last_comm_buffer_size) in MiB (Paddle's "MB") for DataParallel's reducer, or None."""
    if cfg.method == "wfbp":
        return 0.0, 0.0  # every parameter tensor is its own group (observed: group_indices [[0], [1], ...])
    if cfg.method in ("mgwfbp", "grad_merge"):
        return cfg.comm_buffer_mb, min(LAST_BUCKET_MB, cfg.comm_buffer_mb)
    return None  # bsp, fp16_allreduce: the reducer never runs (every forward is inside no_sync)


def wrap(model: paddle.nn.Layer, cfg: CollectiveConfig, ctx: Context) -> paddle.nn.Layer:
    """DataParallel with the method's buckets (what fleet.distributed_model builds in DP mode)."""
    if ctx.world_size == 1:
        return model
    sizes = bucket_mb(cfg) or (POST_BACKWARD_BUCKET_MB, LAST_BUCKET_MB)
    group = fleet.get_hybrid_communicate_group().get_data_parallel_group()
    return paddle.DataParallel(model, comm_buffer_size=sizes[0], last_comm_buffer_size=sizes[1], group=group)


def no_sync(model: paddle.nn.Layer) -> ContextManager:
    """Skip the reducer for forward+backward inside; a no-op for a single process."""
    return model.no_sync() if isinstance(model, paddle.DataParallel) else contextlib.nullcontext()


# How float16 buckets are averaged across ranks (fp16_wire decides; the record says which).
FP16_WIRE = {
    "all_reduce": "float16 all-reduce (SUM) of gradients pre-scaled by 1/world_size",
    "all_gather": "float16 all-gather, summed in float32 (this backend sums float16 wrongly)",
}


def fp16_wire(world_size: int) -> str:
    """Which FP16_WIRE path this job's backend needs, from one probe of that backend.

    Gloo's float16 SUM returns inf on Paddle 3.x (measured on 3.0.0 and 3.3.1: [1, 2] summed
    over 2 ranks gives [inf, inf]; right on 2.6.2, and MAX, broadcast, all_gather and bfloat16
    SUM are right there). Every rank makes the same call and gets the same result, so all ranks
    choose the same path.
    """
    if world_size == 1:
        return "all_reduce"  # nothing is sent
    probe = paddle.to_tensor([1.0, 2.0], dtype="float16")
    dist.all_reduce(probe)
    summed_right = probe.astype("float32").numpy().tolist() == [float(world_size), 2.0 * world_size]
    return "all_reduce" if summed_right else "all_gather"


def _sum_on_the_wire(wire: paddle.Tensor, world_size: int) -> paddle.Tensor:
    wire.scale_(1.0 / world_size)  # scale before the sum keeps float16 partial sums in range
    dist.all_reduce(wire)
    return wire


def _gather_then_sum(wire: paddle.Tensor, world_size: int) -> paddle.Tensor:
    # Into one tensor, not a list (which Paddle fills by splitting): ~10% less time in a 2-rank
    # probe on 3.3.1 with ResNet50's 23.5M gradients, where float16 casts on CPU cost the most.
    gathered = paddle.empty([world_size * wire.shape[0]], dtype=wire.dtype)
    capability.resolve(capability.GATHER_INTO)(gathered, wire)  # still float16 on the wire
    return gathered.astype("float32").reshape([world_size, -1]).sum(axis=0) / world_size


def allreduce_fp16(parameters: Sequence[paddle.Tensor], world_size: int, wire: str = "all_reduce",
                   bucket_mb: float = POST_BACKWARD_BUCKET_MB) -> int:
    """Average gradients across ranks, sending them as float16 in fused buckets; returns the calls.

    The float16 twin of Paddle's fused_allreduce_gradients (same bucketing helpers), which has no
    cast: Fleet's `fp16_allreduce` strategy exists for static graphs only. On the all_gather path
    a bucket is 1/world_size as large, so the gathered copies take one bucket's memory.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if world_size == 1 or not grads:
        return 0
    average = _sum_on_the_wire if wire == "all_reduce" else _gather_then_sum
    bucket_bytes = int(bucket_mb * 2**20 / (1 if wire == "all_reduce" else world_size))
    with paddle.no_grad():
        buckets = capability.resolve(capability.BUILD_BUCKETS)(grads, bucket_bytes)
        for flat, _, _ in buckets:
            paddle.assign(average(flat.astype("float16"), world_size).astype(flat.dtype), flat)
        capability.resolve(capability.SPLIT_BUCKETS)(buckets)
    return len(buckets)


def prepare(cfg: CollectiveConfig, work: Workload,
            ctx: Context) -> tuple[paddle.nn.Layer, Callable[[Any], paddle.Tensor]]:
    """Wrap the workload's model for the method; return (model, step_fn).

    `work.loss_fn(model, batch)` must call `model(...)` exactly once: DataParallel arms or skips
    the all-reduce in that call. A workload with its own `parallel` (GPT) wraps and steps itself.
    """
    if getattr(work, "parallel", None):
        return work.parallel(cfg, work, ctx)
    amp = ctx.precision = Precision(cfg.amp, cfg.amp_level)  # GPU: auto_cast, fp16 loss scaling, O2 weights
    work.model, work.optimizer = amp.decorate(work.model, work.optimizer)
    params = [p for p in work.model.parameters() if not p.stop_gradient]
    reducer = ctx.world_size > 1 and bucket_mb(cfg) is not None  # DataParallel's reducer all-reduces
    if reducer:  # hooks on both sides of the reducer's own: the time inside it (train/phases.py)
        ctx.phases.watch_before(params)
    model = wrap(work.model, cfg, ctx)
    if reducer:
        ctx.phases.watch_after(params)
    optimizer = fleet.distributed_optimizer(work.optimizer) if ctx.world_size > 1 else work.optimizer
    steps = Steps(cfg, work, model, optimizer, amp, post_backward_sync(cfg, ctx, params))
    steps.phases = ctx.phases
    by_method = {"bsp": steps.after_backward, "wfbp": steps.overlapped, "mgwfbp": steps.overlapped,
                 "grad_merge": steps.grad_merge, "fp16_allreduce": steps.after_backward,
                 CONTROL: steps.after_backward}  # none: its post-backward sync is a no-op
    ctx.comm = comm_plan(cfg, model, params, ctx.runtime.get("fp16_wire"))
    if ctx.rank == 0:
        print(describe(cfg, model, params, ctx.runtime.get("fp16_wire")), flush=True)
    return model, by_method[cfg.method]


class Steps:
    """One training step per method over a wrapped model; each returns the batch's loss."""

    def __init__(self, cfg: CollectiveConfig, work: Workload, model: paddle.nn.Layer,
                 optimizer: paddle.optimizer.Optimizer, amp: Precision,
                 sync_after_backward: Callable[[], Any]) -> None:
        self.cfg, self.work, self.model, self.optimizer, self.amp = cfg, work, model, optimizer, amp
        self.sync_after_backward = sync_after_backward
        self.schedule = work.optimizer._learning_rate  # Paddle keeps an LRScheduler here; stepped by hand
        self.micro_steps = 0
        self.phases = Phases(cfg.warmup_steps)  # where the parts' time goes; prepare hands in the rank's

    def _forward_backward(self, batch: Any, merged: int | None = None) -> paddle.Tensor:
        with self.phases.span("forward"), self.amp.forward():
            loss = self.work.loss_fn(self.model, batch)
        with self.phases.span("backward"):
            self.amp.backward(loss if merged is None else loss / merged)  # k micro-batches average like one
        return loss

    def _apply(self) -> None:
        with self.phases.span("optimizer"):
            self.amp.step(self.optimizer)
            self.optimizer.clear_grad()
            if isinstance(self.schedule, paddle.optimizer.lr.LRScheduler):
                self.schedule.step()  # once per optimizer step (grad_merge: per k micro-steps)

    def overlapped(self, batch: Any) -> paddle.Tensor:  # wfbp, mgwfbp: the reducer all-reduces during backward
        loss = self._forward_backward(batch)
        self._apply()
        return loss

    def after_backward(self, batch: Any) -> paddle.Tensor:  # bsp, fp16_allreduce, none: the reducer never runs
        with no_sync(self.model):
            loss = self._forward_backward(batch)
        with self.phases.span("comm"):
            self.sync_after_backward()
        self._apply()
        return loss

    def grad_merge(self, batch: Any) -> paddle.Tensor:
        k = self.cfg.grad_merge_steps
        self.micro_steps += 1
        last = self.micro_steps % k == 0
        with (contextlib.nullcontext() if last else no_sync(self.model)):
            loss = self._forward_backward(batch, merged=k)
        if last:
            self._apply()
        return loss


def post_backward_sync(cfg: CollectiveConfig, ctx: Context, params: list[paddle.Tensor]) -> Callable[[], Any]:
    """The gradient average bsp and fp16_allreduce run after backward, as a function of no
    arguments (a no-op for other methods and for one process). fp16_allreduce probes its wire
    path here, on every rank at once, and notes it in ctx.runtime (the record's config.runtime)."""
    if ctx.world_size == 1 or cfg.method not in ("bsp", "fp16_allreduce"):
        return lambda: None
    if cfg.method == "fp16_allreduce":
        wire = ctx.runtime["fp16_wire"] = fp16_wire(ctx.world_size)
        return lambda: allreduce_fp16(params, ctx.world_size, wire)
    fused = capability.resolve(capability.FUSED_ALLREDUCE)  # Paddle's own: 128 MB buckets, scaled 1/n
    return lambda: fused(params, fleet.get_hybrid_communicate_group())


def bucket_count(sizes: Sequence[int], limit_bytes: float, dtypes: Sequence[str] | None = None) -> int:
    """Buckets Paddle's build_groups makes of tensors of these byte sizes (and dtypes), in order:
    a tensor joins the current bucket while that holds less than the limit and has its dtype
    (at amp_level=O2 the norm layers' fp32 gradients sit between float16 ones)."""
    count, held, kind = 0, None, None
    for size, dtype in zip(sizes, dtypes or [None] * len(sizes)):
        if held is None or held >= limit_bytes or dtype != kind:
            count, held, kind = count + 1, 0, dtype
        held += size
    return count


def comm_plan(cfg: CollectiveConfig, model: paddle.nn.Layer, params: list[paddle.Tensor],
              wire: str | None = None) -> dict:
    """What one rank all-reduces per loop step, for the record (fleetbench explain models it):
    gradient bytes and tensors, all-reduce bytes and calls per step, and the control flag."""
    sizes = [int(p.numel()) * p.element_size() for p in params]
    plan = {"grad_bytes": sum(sizes), "grad_tensors": len(sizes), "comm_bytes_per_step": 0.0,
            "comm_buckets_per_step": 0.0, "control": cfg.method == CONTROL}
    if not isinstance(model, paddle.DataParallel) or cfg.method == CONTROL:
        return plan  # one process, or the control: nothing is sent
    if bucket_mb(cfg) is not None:  # the reducer all-reduces each of its groups once per sync
        calls, sent = len(model.group_indices), sum(sizes)
    else:  # after backward, in POST_BACKWARD_BUCKET_MB buckets; fp16_allreduce sends half the bytes
        half = cfg.method == "fp16_allreduce"
        limit = POST_BACKWARD_BUCKET_MB * 2**20 / (dist.get_world_size() if wire == "all_gather" else 1)
        calls, sent = bucket_count(sizes, limit, [str(p.dtype) for p in params]), sum(sizes) / (2 if half else 1)
    per_sync = cfg.grad_merge_steps if cfg.method == "grad_merge" else 1  # loop steps per all-reduce
    plan.update(comm_bytes_per_step=sent / per_sync, comm_buckets_per_step=calls / per_sync)
    return plan


def describe(cfg: CollectiveConfig, model: paddle.nn.Layer, params: list[paddle.Tensor],
             wire: str | None = None) -> str:
    """One log line: the method and the all-reduce schedule it produces on this model."""
    mb = sum(int(p.numel()) * p.element_size() for p in params) / 1e6
    if isinstance(model, paddle.DataParallel) and bucket_mb(cfg) is not None:
        comm = f"{len(model.group_indices)} reducer buckets per sync (comm_buffer {bucket_mb(cfg)[0]:g} MiB)"
    elif isinstance(model, paddle.DataParallel):
        comm = f"all-reduce after backward in buckets of {POST_BACKWARD_BUCKET_MB} MiB"
        comm += f"; {FP16_WIRE[wire]}" if wire else ""
    else:
        comm = "single process: no all-reduce"
    return (f"method {cfg.method}: {METHODS[cfg.method]}; {len(params)} tensors, {mb:.1f} MB of gradients; "
            f"{comm}")
