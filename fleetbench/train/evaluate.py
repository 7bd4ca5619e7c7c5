"""Evaluation on a held-out split, and the convergence figures built from it.

Rules (docs/guide/convergence.md):
- Each rank evaluates its own shard of the held-out split: rank r takes examples r, r+W, r+2W, ...
  so the W shards cover the split exactly once (no padding, no drop); correct counts, loss sums and
  example counts are summed across ranks, so accuracy = correct / split size whatever W is.
- Paddle's DataParallel broadcasts buffers once, at wrapping; after that each rank's batch-norm
  running statistics follow its own batches. Before evaluating, the floating-point buffers are
  averaged across ranks, so every rank evaluates one and the same model.
- Evaluation is timed on its own (device synchronised at both ends) and never inside a training
  window: `test_time_s` is the slowest rank's evaluation wall time.
- top-5 is reported only where there are more than 5 classes.
"""
import contextlib
import time
from typing import Callable, ContextManager, Iterable, Iterator, Optional

import numpy as np
import paddle
import paddle.distributed as dist
import paddle.nn.functional as F

from fleetbench.measure.metrics import Communicator
TOP_K = 5


def shard(examples: int, rank: int, world_size: int) -> np.ndarray:
    """This rank's indices of a held-out split of `examples`: every world_size-th from `rank`."""
    return np.arange(rank, examples, world_size)


class HeldOut:
    """This rank's shard of a held-out split held in arrays, in batches (in order); re-iterable."""

    def __init__(self, arrays: dict, batch_size: int, rank: int, world_size: int,
                 convert: Callable = lambda batch: batch) -> None:
        self.arrays, self.batch_size, self.convert = arrays, batch_size, convert
        self.index = shard(len(next(iter(arrays.values()))), rank, world_size)

    def __iter__(self) -> Iterator:
        for start in range(0, len(self.index), self.batch_size):
            rows = self.index[start:start + self.batch_size]
            yield self.convert({name: array[rows] for name, array in self.arrays.items()})

    @property
    def size(self) -> int:
        """Examples in the whole split (all ranks' shards together)."""
        return len(next(iter(self.arrays.values())))


def average_buffers(model: paddle.nn.Layer, world_size: int) -> None:
    """Replace every floating-point buffer (batch-norm statistics) by its mean over ranks."""
    buffers = [b for b in model.buffers() if b.dtype in (paddle.float32, paddle.float64)]
    if world_size == 1 or not buffers:
        return
    with paddle.no_grad():
        flat = paddle.concat([b.astype("float64").flatten() for b in buffers])
        dist.all_reduce(flat)
        flat = flat / world_size
        offset = 0
        for b in buffers:
            size = int(np.prod(b.shape))
            paddle.assign(flat[offset:offset + size].reshape(b.shape).astype(b.dtype), b)
            offset += size


def _batch_counts(model: paddle.nn.Layer, images: paddle.Tensor, labels: paddle.Tensor, num_classes: int,
                  forward: Callable[[], ContextManager]) -> paddle.Tensor:
    """[correct top-1, correct top-5, summed loss, examples] of one batch, on the device."""
    with forward():  # at amp_level=O2 the weights are half precision: only auto_cast can run them
        logits = model(images).astype("float32")
    labels = labels.reshape([-1, 1])
    loss = F.cross_entropy(logits, labels, reduction="sum")
    top = paddle.topk(logits, k=min(TOP_K, num_classes), axis=1)[1]
    hits = (top == labels).astype("float64")
    return paddle.stack([hits[:, 0].sum(), hits.sum(), loss.astype("float64"),
                         paddle.to_tensor(float(labels.shape[0]), dtype="float64")])


def evaluate(model: paddle.nn.Layer, batches: Iterable, num_classes: int, comm: Communicator, world_size: int,
             sync: Callable[[], None] = lambda: None,
             forward: Callable[[], ContextManager] = contextlib.nullcontext) -> dict:
    """Evaluate `model` over this rank's `batches` of (images, labels); figures for all ranks.

    `comm` reduces lists of floats across ranks (fleetbench.measure.metrics.Communicator).
    """
    sync()
    start = time.perf_counter()
    average_buffers(model, world_size)
    model.eval()
    totals = paddle.zeros([4], dtype="float64")
    with paddle.no_grad():
        for images, labels in batches:
            totals += _batch_counts(model, images, labels, num_classes, forward)
    model.train()
    mine = totals.numpy().tolist()  # a read: the device is synchronised here
    sync()
    elapsed = time.perf_counter() - start
    correct, correct_top5, loss_sum, examples = comm.sum(mine)
    (test_time,) = comm.max([elapsed])
    if examples == 0:
        raise ValueError("the held-out split gave no example to evaluate")
    return {"test_accuracy": correct / examples,
            "test_top5": correct_top5 / examples if num_classes > TOP_K else None,
            "test_loss": loss_sum / examples, "test_examples": int(examples), "test_time_s": test_time}


def to_target(epochs: list, target: Optional[float]) -> tuple:
    """(time_to_target_s, epochs_to_target): the first epoch whose test accuracy is >= target,
    and the wall time from MLPerf's run_start (before the data was touched) to the end of that
    epoch's evaluation; (None, None) when no target is set or none reached it. Records made before
    run_start was kept (their epochs lack run_elapsed_s) counted from the start of training."""
    if target is None:
        return None, None
    for figures in epochs:
        if figures["test_accuracy"] >= target:
            return figures.get("run_elapsed_s", figures["elapsed_s"]), figures["epoch"]
    return None, None
