"""The bytes a training step really sends, and the calls that send them, from its record.

A record's `comm_bytes_per_step` and `comm_buckets_per_step` (train/methods.comm_plan) count every
gradient as dense and all-reduced. That holds for dense models. It does not for a sparse embedding
gradient (CTR's `sparse_grad=true`): Paddle's DataParallel reducer puts a sparse parameter in a
group of its own and, instead of all-reducing the table, runs EagerReducer::AllReduceSparse
(paddle/fluid/distributed/collective/reducer.cc): an all-reduce of the ranks' row counts (n int64),
then, when every rank has as many rows (a fixed batch of lookups, rows not merged: always here),
an all-gather of the row ids (8 bytes each) and one of the row values. The record states the
table's real share as `embedding_grad_bytes_per_step` (rows x (8 + 4 x dim)) and the table's size
as `table_bytes`; with `sparse_grad=false` the table's gradient is dense and all-reduced whole.

An all-gather of x bytes per rank over a ring of n ranks sends n-1 messages of x bytes from each
rank: (n-1) per-message latencies and (n-1)·x bytes at the bus bandwidth, which is an all-reduce
of n·x/2 bytes at half a call (an all-reduce: 2(n-1) messages, 2(n-1)/n of its bytes). The comm
records here agree: all_gather's fitted latency per call is 0.55 of all_reduce's at 3 and at 4
ranks over 10gbe (667 vs 1217 us, 2105 vs 3846 us), at a bus bandwidth within 20% of it
(results/kvm-2vcpu-paddle2.6.2-comm-ops.jsonl).
"""
from __future__ import annotations

import dataclasses

from fleetbench import cmdline

ROW_COUNT_BYTES = 8  # one int64 row count per rank, all-reduced before the gathers


@dataclasses.dataclass(frozen=True)
class Traffic:
    """What one rank sends per step: all-reduced bytes and calls, all-gathered bytes (its own
    share) and calls, and where the figures came from when not as recorded."""
    allreduce_bytes: float
    allreduce_calls: float
    gather_bytes: float = 0.0
    gather_calls: float = 0.0
    note: str = ""

    @property
    def sent_bytes(self) -> float:
        """Gradient bytes the rank hands to the collectives (what its host packs and unpacks)."""
        return self.allreduce_bytes + self.gather_bytes


def of_record(config: dict, metrics: dict, comm_bytes: float | None, comm_calls: float | None,
              world_size: int) -> Traffic | None:
    """The traffic of a run whose record says `comm_bytes` and `comm_calls` per step (means over
    its repeats); None when it recorded no gradient bytes."""
    if comm_bytes is None:
        return None
    calls = comm_calls or 1
    table, rows = metrics.get("table_bytes"), metrics.get("embedding_grad_bytes_per_step")
    if not (config.get("sparse_grad") and table and rows is not None and comm_bytes > 0):
        return Traffic(comm_bytes, calls)
    if metrics.get("grad_bytes") and comm_bytes != metrics["grad_bytes"]:
        # grad_merge accumulates the rows of k micro-steps before one sync: not modelled
        return Traffic(comm_bytes, calls, note=(
            "sparse embedding gradient synchronised once per several steps: rows not modelled, the "
            "table counted dense as recorded (an upper bound of the bytes)"))
    dense = comm_bytes - table
    # the table's group becomes the row-count all-reduce; the other groups are dense buckets
    note = (f"sparse embedding gradient: {rows / 1e3:.1f} kB of rows all-gathered (2 calls) and a "
            f"row-count all-reduce, not the {table / 1e6:.2f} MB table the record counts as dense; "
            f"{dense / 1e3:.1f} kB of dense gradients all-reduced")
    return Traffic(dense + ROW_COUNT_BYTES * world_size, calls, gather_bytes=float(rows),
                   gather_calls=2.0, note=note)


def comm_ms(link, traffic: Traffic, ranks: int) -> float:
    """Milliseconds the step's collectives take on `link` (an alphabeta model) among `ranks`."""
    total = link.allreduce_ms(traffic.allreduce_bytes, traffic.allreduce_calls)
    if traffic.gather_calls:
        # an all-gather of x per rank = an all-reduce of n·x/2 bytes at half a call (docstring)
        total += link.allreduce_ms(ranks * traffic.gather_bytes / 2, traffic.gather_calls / 2)
    return total


# Beyond this share of per-call latency a prediction is only as good as the latency: the comm rows
# below 256 kB vary several-fold between runs here (10gbe, 2 nodes: 0.3 to 2.2 ms a call;
# results/*-explain.jsonl), and such a cell's measured overlap and host cost are differences
# against that latency, so calibration learns neither from it (predict.calibrate).
LATENCY_BOUND = 0.8


def latency_share(link, traffic: Traffic, ranks: int) -> float:
    """The share of the step's predicted communication that is per-call cost, not bytes on the wire."""
    total = comm_ms(link, traffic, ranks)
    wire = link.allreduce_ms(traffic.allreduce_bytes, 0) + link.allreduce_ms(ranks * traffic.gather_bytes / 2, 0)
    return 1 - wire / total if total > 0 else 0.0


def latency_note(link, traffic: Traffic, ranks: int) -> str:
    """Why a latency-bound step's communication is uncertain ("" when not bound)."""
    share = latency_share(link, traffic, ranks)
    if share < LATENCY_BOUND:
        return ""
    calls = traffic.allreduce_calls + traffic.gather_calls
    measured = getattr(link, "small", ())
    how = ("priced by the comm rows measured at its sizes (their median a size; they vary several-fold "
           "between runs)" if measured else
           "which the comm fit determines poorly for small messages (comm rows at its sizes would price it)")
    return (f"latency-bound: {share:.0%} of the predicted communication is per-call cost ({calls:g} calls a "
            f"step), {how}; this prediction is as uncertain as that latency")


# ---------------------------------------------------------------- precision (was perfmodel/gradbytes.py)
# The precision a record trained in, and the bytes its gradients are all-reduced in.
# 
# `config.precision` names how the model computed (docs/guide/explain.md, "Writing a published table"):
# 
#     fp32     float32 throughout
#     tf32     float32 tensors, TF32 tensor-core math (Ampere and later): float32 gradients
#     amp      automatic mixed precision, level O1 (PyTorch autocast, TF's AMP graph rewrite, Paddle
#              amp O1): float16 compute on float32 parameters, so the gradients that are
#              all-reduced are float32; `fp16` and `mixed` name the same
#     amp_o2   mixed precision with float16 parameters and float32 master copies in the optimizer
#              (Apex O2, Paddle O2 / pure fp16, MXNet's float16 with multi_precision): float16
#              gradients are all-reduced
#     bf16     bfloat16 parameters (pure bf16): bfloat16 gradients
# 
# A record may say what its gradients travel in (`config.grad_dtype`: float32, float16 or bfloat16,
# e.g. Horovod's fp16 compression on an amp run, or a framework that all-reduces float16 grads of
# an O1 model) and that wins. Without it an `amp` record whose framework is not named is ambiguous:
# its point uses float32 gradients and its range spans float16 too (predict: a range).
PRECISIONS = ("fp32", "tf32", "amp", "amp_o2", "bf16")
ALIASES = {"fp16": "amp", "mixed": "amp", "amp_o1": "amp", "o1": "amp", "o2": "amp_o2", "pure_fp16": "amp_o2",
           "float32": "fp32", "bfloat16": "bf16"}
GRAD_BYTES = {"fp32": 4, "tf32": 4, "amp": 4, "amp_o2": 2, "bf16": 2}
DTYPES = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2}


class PrecisionError(cmdline.UserError):
    """An unknown precision or gradient dtype; the message is one line."""


def precision_name(value, where: str) -> str:
    """The canonical precision of `value` (None: fp32, what a record that does not say ran)."""
    if value is None:
        return "fp32"
    text = str(value).strip().lower().replace("-", "_")
    text = ALIASES.get(text, text)
    if text not in PRECISIONS:
        raise PrecisionError(f"{where}: config.precision {value!r}: unknown (known: "
                             f"{', '.join(PRECISIONS)}; aliases {', '.join(sorted(ALIASES))})")
    return text


def precision_bytes(config: dict, where: str) -> tuple[float, float, float, str]:
    """(bytes a gradient element travels in: point, fewest, most; why) for a record's config."""
    precision = precision_name(config.get("precision"), where)
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
