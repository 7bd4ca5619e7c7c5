"""Mixed precision for the collective benchmarks (GPU only).

One object answers the questions a training step asks: how the model and optimizer are prepared
(O2 only), in which precision to run the forward pass, how to call backward (fp16 needs dynamic
loss scaling so small gradients survive), and how to apply the optimizer (the scaler skips steps
whose gradients overflowed). fp32 and bf16 need no scaling.

Two levels, both Paddle's own (`paddle/amp/auto_cast.py`, 2.6.2 and 3.3.1):
- O1: weights stay fp32; `auto_cast` runs the ops of Paddle's white list in half precision.
- O2 ("pure" fp16/bf16): `paddle.amp.decorate(level="O2", master_weight=True)` casts the weights
  to half precision (BatchNorm, LayerNorm and InstanceNorm stay fp32) and gives the optimizer
  fp32 master copies; `auto_cast(level="O2")` then runs every op but the black list in half
  precision, and gradients are half precision, so half the bytes go over the wire. GradScaler
  unscales float16, bfloat16 and float32 gradients apart (`grad_scaler.py`'s `_unscale`), so the
  same scaler serves both levels.
On CPU both `auto_cast` and `decorate` do nothing at either level (they return the model as it
was, with a warning: run on 2.6.2 and 3.3.1), so the run layer refuses amp there
(`capability.amp_missing`) before this is reached.
"""
import contextlib
from typing import ContextManager

import paddle

DTYPE = {"fp16": "float16", "bf16": "bfloat16"}


class Precision:
    def __init__(self, amp: str, level: str = "O1") -> None:
        self.amp, self.level = amp, level
        self.scaler = None
        if amp == "fp16":
            self.scaler = paddle.amp.GradScaler(init_loss_scaling=2.0**15)

    def decorate(self, model: paddle.nn.Layer, optimizer: paddle.optimizer.Optimizer) -> tuple:
        """(model, optimizer) ready for this level: O2 casts the weights and keeps fp32 master
        weights in the optimizer. Called before DataParallel and fleet.distributed_optimizer wrap
        them, as Paddle's examples do, so the reducer's buckets hold the half-precision gradients."""
        if self.amp == "off" or self.level == "O1":
            return model, optimizer
        return paddle.amp.decorate(models=model, optimizers=optimizer, level="O2", dtype=DTYPE[self.amp],
                                   master_weight=True)

    def forward(self) -> ContextManager:
        """Context for the forward pass and the loss (and, at O2, evaluation: the weights are half)."""
        if self.amp == "off":
            return contextlib.nullcontext()
        return paddle.amp.auto_cast(level=self.level, dtype=DTYPE[self.amp])

    def backward(self, loss: paddle.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(self, optimizer: paddle.optimizer.Optimizer) -> None:
        if self.scaler:
            self.scaler.step(optimizer)  # unscales, skips the update on inf/nan
            self.scaler.update()
        else:
            optimizer.step()
