"""The range a prediction carries: every uncertain input at the end that makes the step shorter
(FAST), as it is (POINT), or at the end that makes it longer (SLOW); the predicted step at FAST
and SLOW bound the point (docs/guide/explain.md, "Ranges"). The inputs: the spread of the measured or
published runs the prediction starts from (one std), a latency nobody measured (0 to twice the
default), backward's share of the step (overlap.BACKWARD_SHARE), the bytes an ambiguous precision
sends (precision.grad_bytes), node sharing (between its value and none), a topology link's share
of its data rate, and the bucket merge (a method's buckets, or the best merge).

The inputs' range bounds what the model's inputs allow, not what the model leaves out; a GPU
prediction's 80% range adds the model's own error, calibrated out of sample (perfmodel/calibration:
leave-one-source-out over the calibration tables, scaled by what the prediction extrapolates)."""
from __future__ import annotations

from fleetbench.perfmodel import calibration

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


COVER = (0.1, 0.9)  # the range's probability: 80%
MODEL_ERROR = calibration.error(calibration.ONE_NODE)  # (low, high) from one node, over every framework


def widened(point: float, low: float, high: float, nodes: int, spread: tuple[float, float] = (1.0, 1.0),
            **term) -> tuple[float, float]:
    """The 80% range of a predicted step: the inputs' range joined with the model's error at
    `nodes`, that error's ends scaled by `spread` (an assumed input's fast and slow ends over its
    point: the node-sharing prior's, which the calibration's cells do not all contain). `term`:
    kind (calibration.ONE_NODE or ANCHORED), framework, anchor_nodes. Its fast end may pass 100%
    efficiency: published tables are super-linear at times (TF1 BERT FP32 on DGX-2H: 4.45 x at 4
    nodes), and the range says how far the model errs."""
    kind = term.get("kind", calibration.ONE_NODE)
    error = calibration.error(kind, term.get("framework"))
    scale = calibration.scale(kind, nodes, term.get("anchor_nodes", 1))
    return (min(low, point * (1 + error[0] * scale) * spread[0]),
            max(high, point * (1 + error[1] * scale) * spread[1]))
