"""The precision a record trained in, and the bytes its gradients are all-reduced in.

`config.precision` names how the model computed (docs/explain.md, "Writing a published table"):

    fp32     float32 throughout
    tf32     float32 tensors, TF32 tensor-core math (Ampere and later): float32 gradients
    amp      automatic mixed precision, level O1 (PyTorch autocast, TF's AMP graph rewrite, Paddle
             amp O1): float16 compute on float32 parameters, so the gradients that are
             all-reduced are float32; `fp16` and `mixed` name the same
    amp_o2   mixed precision with float16 parameters and float32 master copies in the optimizer
             (Apex O2, Paddle O2 / pure fp16, MXNet's float16 with multi_precision): float16
             gradients are all-reduced
    bf16     bfloat16 parameters (pure bf16): bfloat16 gradients

A record may say what its gradients travel in (`config.grad_dtype`: float32, float16 or bfloat16,
e.g. Horovod's fp16 compression on an amp run, or a framework that all-reduces float16 grads of
an O1 model) and that wins. Without it an `amp` record whose framework is not named is ambiguous:
its point uses float32 gradients and its range spans float16 too (predict: a range).
"""
from __future__ import annotations

PRECISIONS = ("fp32", "tf32", "amp", "amp_o2", "bf16")
ALIASES = {"fp16": "amp", "mixed": "amp", "amp_o1": "amp", "o1": "amp", "o2": "amp_o2", "pure_fp16": "amp_o2",
           "float32": "fp32", "bfloat16": "bf16"}
GRAD_BYTES = {"fp32": 4, "tf32": 4, "amp": 4, "amp_o2": 2, "bf16": 2}
DTYPES = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2}


class PrecisionError(ValueError):
    """An unknown precision or gradient dtype; the message is one line."""


def name(value, where: str) -> str:
    """The canonical precision of `value` (None: fp32, what a record that does not say ran)."""
    if value is None:
        return "fp32"
    text = str(value).strip().lower().replace("-", "_")
    text = ALIASES.get(text, text)
    if text not in PRECISIONS:
        raise PrecisionError(f"{where}: config.precision {value!r}: unknown (known: "
                             f"{', '.join(PRECISIONS)}; aliases {', '.join(sorted(ALIASES))})")
    return text


def grad_bytes(config: dict, where: str) -> tuple[float, float, float, str]:
    """(bytes a gradient element travels in: point, fewest, most; why) for a record's config."""
    precision = name(config.get("precision"), where)
    dtype = config.get("grad_dtype")
    if dtype is not None:
        size = DTYPES.get(str(dtype).lower())
        if size is None:
            raise PrecisionError(f"{where}: config.grad_dtype {dtype!r}: unknown (known: {', '.join(DTYPES)})")
        return size, size, size, f"gradients all-reduced in {dtype} as the record says"
    size = GRAD_BYTES[precision]
    if precision == "amp" and not config.get("framework"):
        return size, 2, 4, ("amp (O1) keeps float32 gradients; the record names no framework, and some "
                            "all-reduce them in float16: range over both")
    return size, size, size, f"{precision}: {size}-byte gradients"
