"""The splits of a GPU count that fit, ranked: what `fleetbench plan` answers without --tp/--pp.

Every choice the user left open is enumerated: TP over the divisors of a node's GPUs that divide
the heads (TP stays inside a node: its collectives run a layer at a time), context parallelism
(1, 2, 4, 8) for sequences of 16k tokens on (below that it does not pay), PP over the divisors of
the layers and the powers of two up to 64 that do not divide them (stages made uneven as Megatron's
users make them: the remainder on the middle stages, the first and last, which hold the embedding
and the loss, lighter), DP the rest; expert parallelism over the powers of two from experts / 64 to
64 that divide the experts and dp x cp; micro-batch 1-8, recomputation none/selective/full,
sharding stage 0-3 (1-3 only with DP > 1), sequence parallelism with TP > 1, the interleaved
schedule (2 chunks) with PP > 1. The overlap flags, the distributed optimizer, sep and FSDP's
shard group are taken as given. A split check() refuses or whose memory exceeds the GPU's is left
out (memory is priced first, the step only for those that fit); the rest are ranked by tokens/s
(ties: less memory).
"""
from __future__ import annotations

import dataclasses
import itertools

from fleetbench.perfmodel import hybrid

MICRO_BATCHES = (1, 2, 4, 8)
INTERLEAVES = (1, 2)
CONTEXT_SPLITS = (1, 2, 4, 8)
LONG_SEQ = 16384      # CP is searched from this sequence length on
UNEVEN_PP = (2, 4, 8, 16, 32, 64)
EXPERT_SPLITS = (1, 2, 4, 8, 16, 32, 64)


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
    cp: int | None = None
    ep: int | None = None
    sep: int | None = None
    stage_layers: tuple | None = None
    overlap: frozenset = frozenset()
    distributed_optimizer: bool = False
    shard_group: int | None = None
    etp: int | None = None


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _options(fixed, options) -> tuple:
    return (fixed,) if fixed is not None else tuple(options)


def balanced_stages(layers: int, pp: int) -> tuple | None:
    """`layers` over `pp` stages as evenly as they go, the remainder on the middle stages (None: even)."""
    base, extra = divmod(layers, pp)
    if not extra:
        return None
    middle = list(range(1, pp - 1)) if extra <= pp - 2 else list(range(pp))
    return tuple(base + (i in middle[:extra]) for i in range(pp))


def _pipelines(shape: hybrid.Shape, room: int, choices: Choices) -> list[tuple]:
    """(pp, stage layers) the GPUs left after TP x CP (`room`) allow."""
    if choices.stage_layers is not None:
        return [(len(choices.stage_layers), choices.stage_layers)]
    if choices.pp is not None:
        return [(choices.pp, None if shape.layers % choices.pp == 0 else balanced_stages(shape.layers, choices.pp))]
    found = [(p, None) for p in _divisors(shape.layers) if room % p == 0]
    return found + [(p, balanced_stages(shape.layers, p)) for p in UNEVEN_PP
                    if shape.layers % p and p < shape.layers and room % p == 0]


def _experts(shape: hybrid.Shape, dp_cp: int, choices: Choices) -> tuple:
    if shape.moe is None:
        return (1,)
    low = max(1, shape.moe.experts // 64)
    return _options(choices.ep, [e for e in EXPERT_SPLITS if low <= e and shape.moe.experts % e == 0 and dp_cp % e == 0])


def _contexts(shape: hybrid.Shape, choices: Choices) -> tuple:
    return _options(choices.cp, CONTEXT_SPLITS if shape.seq >= LONG_SEQ else (1,))


def candidates(shape: hybrid.Shape, gpus: int, global_batch: int, cluster: hybrid.Cluster,
               choices: Choices) -> list[hybrid.Split]:
    tps = _options(choices.tp, [t for t in _divisors(cluster.gpus_per_node) if shape.heads % t == 0])
    sep = choices.sep or 1
    found = []
    for tp, cp in itertools.product(tps, _contexts(shape, choices)):
        if gpus % (tp * cp * sep):
            continue
        for pp, stages in _pipelines(shape, gpus // (tp * cp * sep), choices):
            if gpus % (tp * pp * cp * sep):
                continue
            dp = gpus // (tp * pp * cp * sep)
            combos = itertools.product(
                _options(choices.micro_batch, MICRO_BATCHES), _options(choices.recompute, ("none", "selective", "full")),
                _options(choices.sharding_stage, (0, 1, 2, 3) if dp > 1 else (0,)),
                _options(choices.sequence_parallel, (False, True) if tp > 1 else (False,)),
                _options(choices.interleave, [v for v in INTERLEAVES if pp > 1 and min(stages or (v,)) >= v] or (1,)),
                _experts(shape, dp * cp if choices.etp is None else tp * dp * cp // choices.etp, choices))
            found += [hybrid.Split(tp, pp, dp, mb, global_batch, rc, st, sp, v, cp=cp, sep=sep, ep=ep,
                                   stage_layers=stages, overlap=choices.overlap,
                                   distributed_optimizer=choices.distributed_optimizer and not st,
                                   shard_group=choices.shard_group if st >= 2 else None, etp=choices.etp)
                      for mb, rc, st, sp, v, ep in combos]
    return found


def ranked(shape: hybrid.Shape, gpus: int, global_batch: int, cluster: hybrid.Cluster,
           choices: Choices) -> tuple[list[hybrid.Prediction], int]:
    """(the splits that fit, fastest first; how many splits were priced)."""
    checked = [s for s in candidates(shape, gpus, global_batch, cluster, choices) if hybrid.check(shape, s, cluster) is None]
    limit = cluster.memory * hybrid.GIB
    fitting = [hybrid.predict(shape, s, cluster) for s in checked
               if sum(hybrid.memory_bytes(shape, s, cluster).values()) <= limit]
    fitting = [p for p in fitting if p.fits]
    fitting.sort(key=lambda p: (-p.tokens_per_s, p.memory_gib))
    return fitting, len(checked)
