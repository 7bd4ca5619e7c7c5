"""What this diagnosis could see (pure): per test, its ceiling on this cluster and the figure
below which it flags, so that a fault the tests cannot resolve is said to be so, never reported
as healthy in silence.

- ceiling: the best figure a healthy node or link reached in this run (against a baseline: the
  best of the baseline's figures). A link capped above it looks like every other link: on a
  machine whose raw TCP probe tops out at 3.8 Gbit/s a 5 Gbit/s cap cannot be seen at all.
- flagged below: the typical reference less what the rule and the reference's spread allow
  (rules.flagged_below); a fault between it and the ceiling is not resolved: a node that far below
  its reference yet above this is `unresolved` (judge.unresolved), never healthy;
- repeat spread: the probes' own noise on this machine, each node's passes against their own
  median, pooled over the nodes (a scaled MAD, %): what the passes a figure is the best of differ by.
"""
from __future__ import annotations

import statistics

from fleetbench.diagnose.judging import judge, metrics, rules as rulebook
from fleetbench.diagnose.judging.rules import Rule, robust_spread


def _figures(rule: Rule, m: dict) -> dict:
    part = m["nodes"] if rule.scope == "node" else m["links"]
    return {key: f[rule.metric] for key, f in part.items() if f.get(rule.metric) is not None}


def _references(rule: Rule, values: dict, m: dict, baseline: dict | None) -> dict:
    if rule.scope == "node":
        return {n: judge.node_reference(n, rule.metric, m["nodes"], baseline) for n in values}
    return judge.link_references(values, rule, baseline)


def of_rule(rule: Rule, m: dict, baseline: dict | None) -> dict | None:
    """One reference-based rule's resolution in this diagnosis (None: its metric was not measured)."""
    values = _figures(rule, m)
    if not values:
        return None
    refs = _references(rule, values, m, baseline)
    used = [r for r in refs.values() if r.value is not None]
    spec = metrics.METRICS[rule.metric]
    if not used:
        kinds = sorted({r.kind for r in refs.values()})
        return {"metric": rule.metric, "unit": spec.unit, "judged": False, "why": "; ".join(kinds)}
    healthy = [v for k, v in values.items() if not rule.broken_by(v, refs[k])] or list(values.values())
    if baseline:
        healthy += [r.value for r in used]
    reference = statistics.median(r.value for r in used)
    below = statistics.median(rulebook.flagged_below(rule.threshold, r) for r in used)
    return {"metric": rule.metric, "unit": spec.unit, "judged": True, "ceiling": round(max(healthy), 3),
            "reference": round(reference, 3), "flagged_below": round(below, 3),
            "loss_pct": round(100 * (1 - below / reference), 1) if reference > 0 else None,
            "spread": round(statistics.median(r.spread for r in used), 3), "judged_by": used[0].kind,
            "rule_pct": rule.threshold,
            **({"corroborated_by": rule.corroborated_by} if rule.corroborated_by else {})}


def repeat_spread_pct(passes: dict, metric: str) -> float | None:
    """The spread of a node metric's repeated passes on this machine (module docstring); None with
    fewer than 3 passes measured in all."""
    deviations = []
    for runs in passes.values():
        values = [r[metric] for r in runs if r.get(metric)]
        if len(values) >= 2:
            middle = statistics.median(values)
            deviations += [v / middle - 1 for v in values]
    return round(100 * robust_spread(deviations), 1) if len(deviations) >= 3 else None


def resolution(m: dict, rules: list[Rule], baseline: dict | None) -> list[dict]:
    """Every measured node or link rule's resolution (module docstring)."""
    out = []
    for rule in (r for r in rules if r.needs_reference and r.scope in ("node", "link")):
        found = of_rule(rule, m, baseline)
        repeat = repeat_spread_pct(m.get("passes") or {}, rule.metric) if rule.scope == "node" else None
        if found:
            out.append({**found, **({"repeat_spread_pct": repeat} if repeat is not None else {})})
    return out


def text(entry: dict) -> str:
    """One line of the console's resolution block."""
    if not entry["judged"]:
        return f"{entry['metric']}: not judged ({entry['why']}; a baseline judges it)"
    unit, below, top = entry["unit"], entry["flagged_below"], entry["ceiling"]
    if below <= 0:
        return (f"{entry['metric']}: no loss can be resolved: the reference spreads +-{entry['spread']:g} {unit} "
                f"around {entry['reference']:g} (best healthy {top:g})")
    if metrics.METRICS[entry["metric"]].scope == "link":
        return (f"{entry['metric']}: the best healthy link reaches {top:g} {unit}; a link below {below:g} "
                f"({entry['loss_pct']:g}% under its reference) is flagged; a fault between {below:g} and "
                f"{top:g} {unit} is not resolved, and one above {top:g} cannot be seen")
    partner = f" when {entry['corroborated_by']} is below its own too" if entry.get("corroborated_by") else ""
    repeat = entry.get("repeat_spread_pct")
    noise = f"; one node's passes spread +-{repeat:g}% here" if repeat is not None else ""
    pct = entry.get("rule_pct")
    hidden = (f"; one between {pct:g}% under and that: cannot tell at this noise (never healthy)"
              if pct is not None and entry["loss_pct"] is not None and entry["loss_pct"] > pct else "")
    return (f"{entry['metric']}: a node below {below:g} {unit} ({entry['loss_pct']:g}% under its reference, "
            f"best healthy {top:g}) is flagged{partner}{hidden}; a smaller loss is not seen{noise}")
