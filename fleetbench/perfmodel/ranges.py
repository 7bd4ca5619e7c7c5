"""The range a prediction carries: every uncertain input at the end that makes the step shorter
(FAST), as it is (POINT), or at the end that makes it longer (SLOW); the predicted step at FAST
and SLOW bound the point (docs/guide/explain.md, "Ranges"). The inputs: the spread of the measured or
published runs the prediction starts from (one std), a latency nobody measured (0 to twice the
default), backward's share of the step (overlap.BACKWARD_SHARE), the bytes an ambiguous precision
sends (precision.grad_bytes), node sharing (between its value and none), a topology link's share
of its data rate, and the bucket merge (a method's buckets, or the best merge).

The inputs' range bounds what the model's inputs allow, not what the model leaves out; a GPU
prediction's 80% range adds the model's own error (MODEL_ERROR): the 10th and 90th percentiles of
measured / predicted step - 1 over the fitted tables' cells (validate.FITTED_TABLES), each divided
by log2(2 x nodes), since what a 1-node run cannot show grows with the steps across nodes (a
tree's depth). `model_error` recomputes them from validation rows (tests hold the two together)."""
from __future__ import annotations

import math

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


# (10th, 90th) percentile of (measured / predicted step - 1) / log2(2 x nodes) on the fitted
# tables' predicted cells (228 cells, `fleetbench explain results/reference/*.jsonl --published
# --validate nodes=1`), as model_error computes them.
MODEL_ERROR = (-0.0453, 0.0275)
COVER = (0.1, 0.9)  # the range's probability: 80%


def _scale(nodes: int) -> float:
    return math.log2(2 * max(1, nodes))


def model_error(rows: list[dict]) -> tuple[float, float]:
    """(low, high) percentiles COVER of the scaled step error over predicted validation rows."""
    import statistics

    errors = sorted((r["measured_step_ms"] / r["predicted_step_ms"] - 1) / _scale(r["nodes"])
                    for r in rows if r.get("predicted_step_ms") and r.get("measured_step_ms"))
    cuts = statistics.quantiles(errors, n=10, method="inclusive")
    return cuts[0], cuts[-1]


def widened(point: float, low: float, high: float, nodes: int,
            spread: tuple[float, float] = (1.0, 1.0)) -> tuple[float, float]:
    """The 80% range of a predicted step: the inputs' range joined with the model's error at
    `nodes`, that error's ends scaled by `spread` (an assumed input's fast and slow ends over its
    point: the node-sharing prior's, which the fitted tables' MODEL_ERROR does not contain). Its
    fast end may pass 100% efficiency: published tables are super-linear at times (TF1 BERT FP32
    on DGX-2H: 4.45 x at 4 nodes), and the range says how far the model errs."""
    scale = _scale(nodes)
    return (min(low, point * (1 + MODEL_ERROR[0] * scale) * spread[0]),
            max(high, point * (1 + MODEL_ERROR[1] * scale) * spread[1]))
