"""Rules and judgement (pure): figures in, verdicts out.

A rule names a metric (one of fleetbench.diagnose.judging.metrics), a criterion and a category. A
criterion is one function registered by name (as SuperBench's RuleOp registers its rule
functions); a rules file names it as a key with its threshold:

    - {metric: matmul_gflops, below_reference_pct: 25, category: compute}
    - {metric: gpu_temperature_c, max_value: 85, category: compute}

A reference-based criterion judges a figure against its reference (fleetbench.diagnose.judging.judge
makes them: the peers' or the baseline's), which carries its own spread: `below_reference_pct`
breaks only when the figure is more than the percentage below the reference AND more than
SPREADS times the reference's spread below it, so a threshold tighter than the figures' own
run-to-run noise cannot flag a healthy node.

A node rule may name a second figure that must agree (`corroborated_by: METRIC`, which needs a
rule of its own): the rule then counts only when that figure breaks its rule too. Why: a CPU short
of capacity (a quota, fewer or slower cores) slows every CPU-bound test alike (in every CPU fault
of the matrix, matmul and the training step fell together, docs/guide/diagnose.md), while here a healthy
node's matmul alone fell to 0.6x for seconds with both its threads running the whole time and
nothing else on the machine (the vCPUs ran slower); such a lone drop would flag a healthy node.
An uncorroborated drop is reported beside the verdict, never dropped in silence.
"""
from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable

import yaml

from fleetbench import cmdline
from fleetbench.diagnose.judging import metrics
from fleetbench.measure.repeats.stability import MAD_SCALE

CATEGORIES = ("compute", "memory", "network", "unreachable", "failed")
SCOPES = ("node", "link", "cluster")  # cluster: the all-node job's figures, judged against a baseline only
# How many of the reference's spreads a figure must fall below it (beside the rule's percentage):
# 3, so that a healthy figure from the reference's own distribution breaks a rule about once in
# 700 judgements, and one that does is re-measured before it counts (cli.py).
SPREADS = 3.0


class DiagnoseError(cmdline.UserError):
    """Bad input (rules, baseline, hosts): one line, exit 2."""


@dataclasses.dataclass(frozen=True)
class Reference:
    """What a figure is judged against: a value, its spread (a standard deviation, in the
    figure's unit; 0 when unknown), where it came from, and over how many figures."""
    value: float | None
    spread: float = 0.0
    kind: str = "peer median"  # peer median | peer links | baseline | limit | no peers
    n: int = 0
    lowest: float | None = None  # peers: the lowest of the figures the reference is made of

    @property
    def usable(self) -> bool:
        """Whether there is a positive figure to judge against."""
        return self.value is not None and self.value > 0

    @property
    def band(self) -> float:
        """How far below the reference noise can carry a healthy figure."""
        return SPREADS * self.spread


def robust_spread(values: list[float]) -> float:
    """A spread one odd figure does not inflate: the scaled MAD (a standard deviation for normal
    figures; fleetbench.measure.repeats.stability's rule for repeats); 0 for one figure."""
    if len(values) < 2:
        return 0.0
    middle = statistics.median(values)
    return MAD_SCALE * statistics.median(abs(v - middle) for v in values)


@dataclasses.dataclass(frozen=True)
class Criterion:
    """A way a figure breaks a rule: broken(value, threshold, reference) -> bool."""
    name: str              # its key in a rules file
    needs_reference: bool  # judged against a reference (peers, baseline) or on the value alone
    broken: Callable[[float, float, Reference | None], bool]
    text: Callable[[float], str]  # the rule in words, for the output
    valid: Callable[[float], bool]  # a threshold it accepts
    expected: str  # ... and how the error says so
    # how far a figure must fall to corroborate another's broken rule (corroborated_by); None: broken
    confirms: Callable[[float, float, Reference | None], bool] | None = None


CRITERIA: dict[str, Criterion] = {}


def criterion(name: str, *, needs_reference: bool, text: Callable[[float], str], valid: Callable[[float], bool],
              expected: str, confirms: Callable | None = None) -> Callable:
    """Register the decorated function as the criterion `name`."""
    def register(fn: Callable[[float, float, Reference | None], bool]) -> Callable:
        CRITERIA[name] = Criterion(name, needs_reference, fn, text, valid, expected, confirms)
        return fn
    return register


def below_by_pct(value: float, pct: float, reference: Reference | None) -> bool:
    """More than pct% below the reference, whatever its spread: enough to corroborate a figure that
    broke its own rule (beyond its noise) already. Judged by peers, one peer's lone matmul dip
    widens the peers' spread: a node at 0.6 CPU had matmul 35% under their median yet inside 3
    spreads, and its training step, far below, stood alone."""
    return reference is not None and reference.usable and value < pct_under(reference.value, pct)


@criterion("below_reference_pct", needs_reference=True, text=lambda pct: f"more than {pct:g}% below reference",
           valid=lambda pct: 0 < pct < 100, expected="a number in (0, 100)", confirms=below_by_pct)
def below_reference(value: float, pct: float, reference: Reference | None) -> bool:
    """More than pct% below the reference, and further below it than its spread allows."""
    if reference is None or not reference.usable:
        return False
    return value < flagged_below(pct, reference)


def flagged_below(pct: float, reference: Reference) -> float:
    """The figure below which below_reference breaks (the test's resolution at this reference):
    pct% under the reference, and SPREADS spreads under it. Judged by peers, also enough when the
    figure is pct% under every peer: two or three peers' spread says little (two peers of a busy
    machine at 10 and 25 GFLOP/s leave no loss resolvable by 3 spreads, yet a node at 2 is below
    them both by far)."""
    outside = reference.value - reference.band
    if reference.lowest is not None:
        outside = max(outside, pct_under(reference.lowest, pct))
    return min(pct_under(reference.value, pct), outside)


def pct_under(figure: float, pct: float) -> float:
    """The figure pct% under `figure`."""
    return figure * (1 - pct / 100)


@criterion("max_value", needs_reference=False, text=lambda limit: f"above {limit:g}", valid=lambda limit: True,
           expected="a number")
def above_limit(value: float, limit: float, reference: Reference | None) -> bool:
    """A limit whatever the peers: ECC errors, °C."""
    return value > limit


@dataclasses.dataclass(frozen=True)
class Rule:
    metric: str
    criterion: str   # a name of CRITERIA
    threshold: float
    category: str
    scope: str = "node"
    corroborated_by: str = ""  # a node metric that must break its own rule too (module docstring)

    def broken_by(self, value: float, reference: Reference | None) -> bool:
        return CRITERIA[self.criterion].broken(value, self.threshold, reference)

    def confirmed_by(self, value: float, reference: Reference | None) -> bool:
        """Whether the figure falls far enough to corroborate another rule's (corroborated_by)."""
        check = CRITERIA[self.criterion]
        return (check.confirms or check.broken)(value, self.threshold, reference)

    @property
    def needs_reference(self) -> bool:
        return CRITERIA[self.criterion].needs_reference

    @property
    def text(self) -> str:
        return CRITERIA[self.criterion].text(self.threshold)


def parse_rules(text: str, where: str) -> list[Rule]:
    """Rules from YAML text: `rules: [{metric, CRITERION: threshold, category, scope}]`."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise DiagnoseError(f"{where}: not YAML: {str(e).splitlines()[0]}; expected rules YAML (a list `rules`)") from None
    items = doc.get("rules") if isinstance(doc, dict) else None
    if not isinstance(items, list) or not items:
        raise DiagnoseError(f"{where}: expected a mapping with a non-empty list `rules`")
    found = [_rule(item, f"{where}: rule {i + 1}") for i, item in enumerate(items)]
    ruled = {r.metric for r in found}
    for i, r in enumerate(found):
        if r.corroborated_by and r.corroborated_by not in ruled:
            raise DiagnoseError(f"{where}: rule {i + 1}: corroborated_by: {r.corroborated_by} has no rule of its own "
                                f"(expected one of the metrics these rules judge: {', '.join(sorted(ruled))})")
    return found


def _rule(item, where: str) -> Rule:
    if not isinstance(item, dict):
        raise DiagnoseError(f"{where}: expected a mapping, got {type(item).__name__}")
    unknown = sorted(set(item) - {"metric", "category", "scope", "corroborated_by"} - set(CRITERIA), key=str)
    if unknown:
        raise DiagnoseError(f"{where}: unknown key(s) {', '.join(map(str, unknown))} (expected metric, category, "
                            f"scope, corroborated_by and one criterion: {', '.join(CRITERIA)})")
    metric = item.get("metric")
    if metric not in metrics.METRICS:
        raise DiagnoseError(f"{where}: metric {metric!r}: unknown (known metrics: {metrics.known()})")
    named = [c for c in CRITERIA if c in item]
    if len(named) != 1:
        raise DiagnoseError(f"{where}: expected one criterion: {' or '.join(CRITERIA)}")
    threshold, check = item[named[0]], CRITERIA[named[0]]
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not check.valid(threshold):
        raise DiagnoseError(f"{where}: {named[0]}: expected {check.expected}, got {threshold!r}")
    if item.get("category") not in CATEGORIES:
        raise DiagnoseError(f"{where}: category: expected one of {', '.join(CATEGORIES)}, got {item.get('category')!r}")
    scope = metrics.METRICS[metric].scope
    if item.get("scope", scope) != scope:
        raise DiagnoseError(f"{where}: scope: {metric} is a {scope} figure, got {item.get('scope')!r}")
    return Rule(metric, named[0], float(threshold), item["category"], scope, _partner(item, metric, scope, check, where))


def _partner(item: dict, metric: str, scope: str, check: Criterion, where: str) -> str:
    """The rule's corroborated_by: another node metric, on a reference-based node rule."""
    partner = item.get("corroborated_by")
    if partner is None:
        return ""
    spec = metrics.METRICS.get(partner) if isinstance(partner, str) else None
    if spec is None or spec.scope != "node" or partner == metric:
        raise DiagnoseError(f"{where}: corroborated_by: expected another node metric ("
                            f"{', '.join(m.name for m in metrics.TABLE if m.scope == 'node' and m.name != metric)}), "
                            f"got {partner!r}")
    if scope != "node" or not check.needs_reference:
        raise DiagnoseError(f"{where}: corroborated_by: only a node rule judged against a reference "
                            f"(below_reference_pct) takes one")
    return partner
