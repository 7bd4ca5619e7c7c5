"""Mixed precision for the collective benchmarks (GPU only).

One object answers the three questions a training step asks: in which precision to run the
forward pass, how to call backward (fp16 needs dynamic loss scaling so small gradients survive),
and how to apply the optimizer (the scaler skips steps whose gradients overflowed). fp32 and bf16
need no scaling. On CPU the loop refuses amp before this is reached (auto_cast is a no-op there).
"""
import contextlib

import paddle


class Precision:
    def __init__(self, amp: str):
        self.amp = amp
        self.scaler = None
        if amp == "fp16":
            self.scaler = paddle.amp.GradScaler(init_loss_scaling=2.0**15)

    def forward(self):
        """Context for the forward pass and the loss."""
        if self.amp == "off":
            return contextlib.nullcontext()
        return paddle.amp.auto_cast(level="O1", dtype="float16" if self.amp == "fp16" else "bfloat16")

    def backward(self, loss) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(self, optimizer) -> None:
        if self.scaler:
            self.scaler.step(optimizer)  # unscales, skips the update on inf/nan
            self.scaler.update()
        else:
            optimizer.step()
