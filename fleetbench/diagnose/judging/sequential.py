"""A node against its peers pass by pass, decided by a sequential test of stated error rates (pure).

Every node's probe runs in interleaved passes; pass k of every node shares the machine's state of
that moment, so a node's figure over the median of the other nodes' figures *of the same pass*
is a ratio a drift common to the pass cancels from. Its logarithm, pass after pass, is what is
tested: its spread over passes (pairwise differences of passes, pooled over every node: what one
pass repeated differs by on this machine) is the diagnosis's resolution, measured where it runs.

Wald's sequential probability ratio test then decides, per node and rule, between
- H0: no loss (the log ratio's mean is 0), and
- H1: the rule's loss (its mean is log(1 - pct/100): 25% under the peers for the shipped rules),
with each pass's log ratio normal about that mean at the measured spread. The log-likelihood ratio
of H1 to H0 over the passes is compared with Wald's bounds for a false flag rate ALPHA (a healthy
node called lossy) and a miss rate BETA (a node with the rule's loss called healthy): above
log((1-BETA)/ALPHA) the loss is decided, below log(BETA/(1-ALPHA)) no loss is, and between them
the test has not decided: more passes are measured (diagnose/session.py `resolve`), and a test
still undecided when they run out is "cannot tell at this noise", never healthy. The bounds hold
whenever the test looks (that is what a sequential test is for), with the spread taken as measured.

Each pass's log ratio is clipped to within CLIP spreads of the node's median first: one pass a
neighbour disturbed cannot decide the test alone.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import statistics

from fleetbench.diagnose.judging.rules import Rule, robust_spread

ALPHA = 0.01  # a healthy node flagged, per rule
BETA = 0.01   # a node with the rule's loss called healthy, per rule
LOSS_BOUND = math.log((1 - BETA) / ALPHA)
NO_LOSS_BOUND = math.log(BETA / (1 - ALPHA))
CLIP = 3.0
MIN_SPREAD = 0.01  # a log ratio's spread is never taken below 1%: identical passes are no proof of zero noise
MIN_NODES = 3      # a node and at least two peers: with one peer a ratio cannot tell which of the two is slow
MIN_PASSES = 2     # a spread needs a repeat


@dataclasses.dataclass(frozen=True)
class PassTest:
    """One node's sequential test on one rule's metric: the figures it stands on and its decision."""
    metric: str
    passes: int
    ratio: float        # exp of the mean clipped log ratio: the node's figure over its peers', pass by pass
    spread_pct: float   # the pooled pass-to-pass spread of the log ratio (x100): this machine's resolution
    llr: float          # log-likelihood ratio of the rule's loss to no loss over the passes
    decision: str       # "loss" | "no loss" | "undecided"
    flag_below: float   # with these passes and this spread, a mean ratio below this decides "loss"
    clear_above: float  # ... and one above this "no loss"
    value: float        # the node's median figure over its passes
    reference: float    # value over the median pass ratio: the peers' figure the node is held to


def log_ratios(passes: dict[int, list[dict]], metric: str) -> dict[int, list[float]]:
    """Per node, log(its figure / the other nodes' median) for each pass every node measured; {}
    when fewer than MIN_NODES nodes or MIN_PASSES passes are there to compare."""
    runs = {n: [r.get(metric) for r in rs] for n, rs in passes.items()}
    count = max((len(v) for v in runs.values()), default=0)
    runs = {n: v for n, v in runs.items() if len(v) == count}  # a node that failed a pass is left to the best-of rule
    if len(runs) < MIN_NODES or count < MIN_PASSES:
        return {}
    out: dict[int, list[float]] = {n: [] for n in runs}
    for k in range(count):
        if any(v[k] is None or v[k] <= 0 for v in runs.values()):
            continue
        for n in runs:
            out[n].append(math.log(runs[n][k] / statistics.median(v[k] for m, v in runs.items() if m != n)))
    return out if min(map(len, out.values())) >= MIN_PASSES else {}


def pooled_spread(ratios: dict[int, list[float]]) -> float:
    """One pass's spread: the scaled MAD of every node's pass-to-pass differences over sqrt(2)
    (a difference of two passes spreads sqrt(2) times one), pooled over the nodes."""
    diffs = [(a - b) / math.sqrt(2) for xs in ratios.values() for a, b in itertools.combinations(xs, 2)]
    return max(MIN_SPREAD, robust_spread(diffs + [-d for d in diffs]))


def decide(xs: list[float], spread: float, pct: float) -> tuple[float, float, str]:
    """The mean clipped log ratio, the log-likelihood ratio of H1 (the rule's loss) to H0, and the
    decision (module docstring)."""
    loss, middle = math.log(1 - pct / 100), statistics.median(xs)
    clipped = [min(max(x, middle - CLIP * spread), middle + CLIP * spread) for x in xs]
    llr = sum(loss / spread ** 2 * (x - loss / 2) for x in clipped)  # normal, means `loss` and 0, one spread
    decision = "loss" if llr >= LOSS_BOUND else "no loss" if llr <= NO_LOSS_BOUND else "undecided"
    return statistics.fmean(clipped), llr, decision


def bounds(passes: int, spread: float, pct: float) -> tuple[float, float]:
    """The mean ratios below which the test decides a loss and above which it decides none, after
    `passes` passes at `spread` (the LLR is linear in the mean log ratio)."""
    loss = math.log(1 - pct / 100)
    at = (lambda bound: math.exp(loss / 2 + bound * spread ** 2 / (loss * passes)))
    return at(LOSS_BOUND), at(NO_LOSS_BOUND)


def tests(passes: dict[int, list[dict]], rules: list[Rule]) -> dict[int, dict[str, PassTest]]:
    """node -> metric -> its test, for every below_reference_pct node rule the passes can test."""
    out: dict[int, dict[str, PassTest]] = {}
    for rule in (r for r in rules if r.scope == "node" and r.criterion == "below_reference_pct"):
        ratios = log_ratios(passes, rule.metric)
        if not ratios:
            continue
        spread = pooled_spread(ratios)
        for node, xs in ratios.items():
            mean, llr, decision = decide(xs, spread, rule.threshold)
            below, above = bounds(len(xs), spread, rule.threshold)
            own = statistics.median(r[rule.metric] for r in passes[node])
            out.setdefault(node, {})[rule.metric] = PassTest(
                rule.metric, len(xs), round(math.exp(mean), 3), round(100 * spread, 1), round(llr, 2), decision,
                round(below, 3), round(above, 3), round(own, 3), round(own / math.exp(statistics.median(xs)), 3))
    return out
