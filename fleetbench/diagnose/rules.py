"""Rules and judgement (pure): figures in, verdicts out.

A rule names a metric (one of fleetbench.diagnose.metrics), a criterion and a category. A
criterion is one function registered by name (as SuperBench's RuleOp registers its rule
functions); a rules file names it as a key with its threshold:

    - {metric: matmul_gflops, below_reference_pct: 25, category: compute}
    - {metric: gpu_temperature_c, max_value: 85, category: compute}

A figure is judged against a reference: the baseline's mean for that metric when a baseline is
given, else the median of its peers in this run (the other nodes, or the other links). Medians,
not means: one sick node must not drag the reference down with it.
"""
from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable

import yaml

from fleetbench.diagnose import metrics

CATEGORIES = ("compute", "memory", "network", "unreachable", "failed")
SCOPES = ("node", "link", "cluster")  # cluster: the all-node job's figures, judged against a baseline only


class DiagnoseError(ValueError):
    """Bad input (rules, baseline, hosts): one line, exit 2."""


@dataclasses.dataclass(frozen=True)
class Criterion:
    """A way a figure breaks a rule: broken(value, threshold, reference) -> bool."""
    name: str              # its key in a rules file
    needs_reference: bool  # judged against a reference (peers, baseline) or on the value alone
    broken: Callable[[float, float, float | None], bool]
    text: Callable[[float], str]  # the rule in words, for the output
    valid: Callable[[float], bool]  # a threshold it accepts
    expected: str  # ... and how the error says so


CRITERIA: dict[str, Criterion] = {}


def criterion(name: str, *, needs_reference: bool, text: Callable[[float], str], valid: Callable[[float], bool],
              expected: str) -> Callable:
    """Register the decorated function as the criterion `name`."""
    def register(fn: Callable[[float, float, float | None], bool]) -> Callable:
        CRITERIA[name] = Criterion(name, needs_reference, fn, text, valid, expected)
        return fn
    return register


@criterion("below_reference_pct", needs_reference=True, text=lambda pct: f"more than {pct:g}% below reference",
           valid=lambda pct: 0 < pct < 100, expected="a number in (0, 100)")
def below_reference(value: float, pct: float, reference: float | None) -> bool:
    return reference is not None and reference > 0 and value < reference * (1 - pct / 100)


@criterion("max_value", needs_reference=False, text=lambda limit: f"above {limit:g}", valid=lambda limit: True,
           expected="a number")
def above_limit(value: float, limit: float, reference: float | None) -> bool:
    """A limit whatever the peers: ECC errors, °C."""
    return value > limit


@dataclasses.dataclass(frozen=True)
class Rule:
    metric: str
    criterion: str   # a name of CRITERIA
    threshold: float
    category: str
    scope: str = "node"

    def broken_by(self, value: float, reference: float | None) -> bool:
        return CRITERIA[self.criterion].broken(value, self.threshold, reference)

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
        raise DiagnoseError(f"{where}: not YAML: {str(e).splitlines()[0]}") from None
    items = doc.get("rules") if isinstance(doc, dict) else None
    if not isinstance(items, list) or not items:
        raise DiagnoseError(f"{where}: expected a mapping with a non-empty list `rules`")
    return [_rule(item, f"{where}: rule {i + 1}") for i, item in enumerate(items)]


def _rule(item, where: str) -> Rule:
    if not isinstance(item, dict):
        raise DiagnoseError(f"{where}: expected a mapping, got {type(item).__name__}")
    unknown = sorted(set(item) - {"metric", "category", "scope"} - set(CRITERIA), key=str)
    if unknown:
        raise DiagnoseError(f"{where}: unknown key(s) {', '.join(map(str, unknown))} (expected metric, category, "
                            f"scope and one criterion: {', '.join(CRITERIA)})")
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
    return Rule(metric, named[0], float(threshold), item["category"], scope)


def reference(metric: str, values: dict, baseline: dict | None) -> float | None:
    """The baseline's mean for `metric`, else the median of this run's values (None when fewer
    than 2 figures: one figure has no peers to be compared with)."""
    if baseline and metric in baseline.get("metrics", {}):
        return float(baseline["metrics"][metric]["mean"])
    figures = [v for v in values.values() if v is not None]
    return statistics.median(figures) if len(figures) >= 2 else None


def judge_nodes(figures: dict[int, dict], rules: list[Rule], baseline: dict | None = None,
                problems: dict[int, tuple[str, str]] | None = None) -> list[dict]:
    """One verdict per node. `figures`: node -> {metric: value}; `problems`: node -> (category,
    message) for a node that could not be reached or whose probe failed (a verdict, not a crash)."""
    problems = problems or {}
    verdicts = []
    for node in sorted(set(figures) | set(problems)):
        if node in problems:
            category, message = problems[node]
            verdicts.append({"index": node, "verdict": "unreachable" if category == "unreachable" else "defective",
                             "categories": [category], "violations": [], "message": message})
            continue
        violations = []
        for rule in (r for r in rules if r.scope == "node"):
            value = figures[node].get(rule.metric)
            peers = {n: f.get(rule.metric) for n, f in figures.items()}
            ref = reference(rule.metric, peers, baseline)
            if value is None and any(v is not None for v in peers.values()):
                violations.append(_failure(f"{rule.metric} not measured on this node (its peers measured it)"))
            elif value is not None and rule.broken_by(value, ref):
                violations.append(_violation(rule, value, ref, baseline))
        verdicts.append(_verdict(node, violations))
    return verdicts


def not_measured(rules: list[Rule], *figure_sets: dict) -> list[dict]:
    """The rules whose metric no test produced (on no node, link or all-node job), each with the
    test that would have: reported, never passed."""
    produced = {metric for figures in figure_sets for f in figures.values() if isinstance(f, dict)
                for metric, value in f.items() if value is not None}
    return [{"metric": r.metric, "rule": r.text, "producer": metrics.METRICS[r.metric].producer}
            for r in rules if r.metric not in produced]


def _violation(rule: Rule, value: float, ref: float | None, baseline: dict | None) -> dict:
    if not rule.needs_reference:
        ref, kind = rule.threshold, "limit"
    else:
        kind = "baseline" if baseline and rule.metric in baseline.get("metrics", {}) else "peer median"
    return {"metric": rule.metric, "value": round(value, 3), "reference": round(ref, 3), "reference_kind": kind,
            "rule": rule.text, "category": rule.category}


def _failure(message: str) -> dict:
    """A test that failed, as a violation (category `failed`): no value, no reference."""
    return {"metric": "test", "value": None, "reference": None, "reference_kind": "", "rule": message,
            "category": "failed"}


def _verdict(node: int, violations: list[dict]) -> dict:
    categories = sorted({v["category"] for v in violations})
    return {"index": node, "verdict": "defective" if violations else "healthy", "categories": categories,
            "violations": violations}


def judge_links(links: dict[tuple[int, int], dict], rules: list[Rule],
                baseline: dict | None = None) -> tuple[list[dict], dict[int, list[dict]]]:
    """Verdicts per link, and the link violations blamed on nodes. A slow link is blamed on the node
    common to every slow link when all of that node's links are slow and some other link is not;
    otherwise on both its ends (with two nodes there is one link and no telling which end)."""
    out, slow = [], []
    for rule in (r for r in rules if r.scope == "link"):
        values = {pair: f.get(rule.metric) for pair, f in links.items()}
        ref = reference(rule.metric, values, baseline)
        for pair, value in sorted(values.items()):
            if value is not None and rule.broken_by(value, ref):
                slow.append((pair, _violation(rule, value, ref, baseline)))
    slow += [(pair, _failure(f["error"])) for pair, f in sorted(links.items()) if f.get("error")]
    for pair in sorted(links):
        found = [v for p, v in slow if p == pair]
        verdict = "failed" if links[pair].get("error") else "slow" if found else "healthy"
        out.append({"a": pair[0], "b": pair[1], "verdict": verdict,
                    "categories": sorted({v["category"] for v in found}), "violations": found, **links[pair]})
    return out, _blame(slow, {pair for pair, _ in slow}, set(links))


def judge_cluster(figures: dict, rules: list[Rule], baseline: dict | None) -> dict:
    """The all-node job's verdict: `failed` when it failed, `slow` when a figure breaks a cluster
    rule against the baseline (it has no peers in one run), else healthy."""
    if figures.get("error"):
        found = [_failure(figures["error"])]
    else:
        found = [_violation(r, figures[r.metric], reference(r.metric, {}, baseline), baseline)
                 for r in rules if r.scope == "cluster" and figures.get(r.metric) is not None
                 and r.broken_by(figures[r.metric], reference(r.metric, {}, baseline))]
    verdict = "failed" if figures.get("error") else "slow" if found else "healthy"
    return {**figures, "verdict": verdict, "categories": sorted({v["category"] for v in found}), "violations": found}


def _blame(slow: list, slow_pairs: set, all_pairs: set) -> dict[int, list[dict]]:
    blamed: dict[int, list[dict]] = {}
    for pair, violation in slow:
        # every link slow (or two nodes, one link): nothing sets one end apart, so both are named
        culprits = [n for n in pair if _all_slow(n, slow_pairs, all_pairs)] if slow_pairs != all_pairs else []
        for node in culprits or list(pair):
            blamed.setdefault(node, []).append({**violation, "metric": f"{violation['metric']} ({pair[0]}-{pair[1]})"})
    return blamed


def _all_slow(node: int, slow_pairs: set, all_pairs: set) -> bool:
    return all(p in slow_pairs for p in all_pairs if node in p)


def merge(nodes: list[dict], blamed: dict[int, list[dict]]) -> list[dict]:
    """Node verdicts with the link violations blamed on them added."""
    out = []
    for node in nodes:
        extra = blamed.get(node["index"], [])
        if extra and node["verdict"] != "unreachable":
            node = _verdict(node["index"], node["violations"] + extra) | {k: v for k, v in node.items()
                                                                            if k == "message"}
        out.append(node)
    return out


def make_baseline(node_figures: dict[int, dict], link_figures: dict, machine: dict) -> dict:
    """Per metric: mean and std over nodes (links) after dropping robust outliers, so a baseline
    made on a cluster with one sick node still describes the healthy ones; `machine` (host class,
    Paddle build) is checked when the baseline is used."""
    from fleetbench.measure import stability

    columns: dict[str, list[float]] = {}
    for figures in list(node_figures.values()) + list(link_figures.values()):
        for metric, value in figures.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                columns.setdefault(metric, []).append(float(value))
    metrics = {}
    for metric, values in sorted(columns.items()):
        flagged = set(stability.outliers(values))
        kept = [v for i, v in enumerate(values) if i not in flagged]
        metrics[metric] = {"mean": statistics.fmean(kept), "std": statistics.stdev(kept) if len(kept) > 1 else 0.0,
                           "n": len(kept), "dropped": len(flagged)}
    return {"kind": "fleetbench-diagnose-baseline", "machine": machine, "metrics": metrics}


def check_baseline(baseline, machine: dict, where: str) -> dict:
    """The baseline, or one line saying why it cannot judge this run."""
    if not isinstance(baseline, dict) or baseline.get("kind") != "fleetbench-diagnose-baseline":
        raise DiagnoseError(f"{where}: not a diagnose baseline (expected one written by --save-baseline)")
    if not isinstance(baseline.get("metrics"), dict):
        raise DiagnoseError(f"{where}: metrics: expected a mapping of metric -> {{mean, std}}")
    for key, value in machine.items():
        if baseline.get("machine", {}).get(key) != value:
            raise DiagnoseError(f"{where}: made on {key} {baseline.get('machine', {}).get(key)!r}, "
                                f"this run is on {value!r}; make a baseline here with --save-baseline")
    return baseline
