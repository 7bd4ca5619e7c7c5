"""The splits of a GPU count that fit, ranked: what `fleetbench plan` answers without --tp/--pp.

Every choice the user left open is enumerated: TP over the divisors of a node's GPUs that divide
the heads (TP stays inside a node: its collectives run a layer at a time), PP over the divisors of
the layers whose product with TP divides the GPUs (DP takes the rest), micro-batch 1-8,
recomputation none/selective/full, sharding stage 0-3 (1-3 only with DP > 1), sequence
parallelism with TP > 1, the interleaved schedule (2 chunks) with PP > 1. A split check() refuses
or whose memory exceeds the GPU's is left out; the rest are ranked by tokens/s (ties: less memory).
Pure and cheap: a few thousand predictions for 1024 GPUs take well under a second.
"""
from __future__ import annotations

import dataclasses
import itertools

from fleetbench.perfmodel import hybrid

MICRO_BATCHES = (1, 2, 4, 8)
INTERLEAVES = (1, 2)


@dataclasses.dataclass(frozen=True)
class Choices:
    """What the user fixed (a value) or left open (None)."""
    tp: int | None = None
    pp: int | None = None
    micro_batch: int | None = None
    recompute: str | None = None
    sharding_stage: int | None = None
    sequence_parallel: bool | None = None
    interleave: int | None = None


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _options(fixed, options) -> tuple:
    return (fixed,) if fixed is not None else tuple(options)


def candidates(shape: hybrid.Shape, gpus: int, global_batch: int, cluster: hybrid.Cluster,
               choices: Choices) -> list[hybrid.Split]:
    tps = _options(choices.tp, [t for t in _divisors(cluster.gpus_per_node) if shape.heads % t == 0])
    found = []
    for tp in tps:
        pps = _options(choices.pp, [p for p in _divisors(shape.layers) if gpus % (tp * p) == 0])
        for pp in pps:
            if gpus % (tp * pp):
                continue
            dp = gpus // (tp * pp)
            combos = itertools.product(
                _options(choices.micro_batch, MICRO_BATCHES), _options(choices.recompute, ("none", "selective", "full")),
                _options(choices.sharding_stage, (0, 1, 2, 3) if dp > 1 else (0,)),
                _options(choices.sequence_parallel, (False, True) if tp > 1 else (False,)),
                _options(choices.interleave, INTERLEAVES if pp > 1 else (1,)))
            found += [hybrid.Split(tp, pp, dp, mb, global_batch, rc, st, sp, v) for mb, rc, st, sp, v in combos]
    return found


def ranked(shape: hybrid.Shape, gpus: int, global_batch: int, cluster: hybrid.Cluster,
           choices: Choices) -> tuple[list[hybrid.Prediction], int]:
    """(the splits that fit, fastest first; how many splits were priced)."""
    priced = [hybrid.predict(shape, s, cluster) for s in candidates(shape, gpus, global_batch, cluster, choices)
              if hybrid.check(shape, s, cluster) is None]
    fitting = [p for p in priced if p.fits]
    fitting.sort(key=lambda p: (-p.tokens_per_s, p.memory_gib))
    return fitting, len(priced)
