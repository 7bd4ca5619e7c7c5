"""The range a prediction carries: every uncertain input at the end that makes the step shorter
(FAST), as it is (POINT), or at the end that makes it longer (SLOW); the predicted step at FAST
and SLOW bound the point (docs/explain.md, "Ranges"). The inputs: the spread of the measured or
published runs the prediction starts from (one std), a latency nobody measured (0 to twice the
default), backward's share of the step (overlap.BACKWARD_SHARE), the bytes an ambiguous precision
sends (precision.grad_bytes), node sharing (between its value and none), a topology link's share
of its data rate, and the bucket merge (a method's buckets, or the best merge)."""
from __future__ import annotations

POINT, FAST, SLOW = "point", "fast", "slow"
BOUNDS = (FAST, POINT, SLOW)
LATENCY_SCALE = {FAST: 0.0, POINT: 1.0, SLOW: 2.0}  # on latencies no comm record measured


def pick(bound: str, fast, point, slow):
    """The value of an input at `bound`, given its values at each end (FAST: the step shortest)."""
    return {FAST: fast, POINT: point, SLOW: slow}[bound]


def ordered(triple: tuple, fast_high: bool) -> tuple:
    """(fast, point, slow) from (point, low, high): the high end is FAST when more of the input
    makes the step shorter (`fast_high`)."""
    point, low, high = triple
    return (high, point, low) if fast_high else (low, point, high)
