"""Judgement (pure): one diagnosis's figures and the rules in, verdicts out, against the peers
or against a baseline (fleetbench.diagnose.judging.baseline).

References, each with its spread (rules.Reference):
- a node's figure: the median of the *other* nodes' (a healthy node is never judged against a
  reference it pulled down itself), spread their scaled MAD; or its own baseline figure;
- a link's figure: per rule, each node's best link first; a node whose best link breaks the rule
  against the others' best links is a suspect (every link of a bad node is slow, while every
  healthy node has a healthy link to another healthy one); links are then judged against the
  median of the links with no suspect end. Robust to one bad node in any cluster of 3 or more
  (to fewer than half the nodes), where the median of all links is not: with 3 nodes one bad node
  makes 2 of 3 links slow. When every link touches a suspect, the peers cannot judge, and say so.
  With a baseline: the link's own baseline figure.

A figure that breaks a rule while others used more than DISTURBED_PCT of the machine in every one
of its measurements (metrics.OTHERS; it was re-measured first) is not judged: its node or link is
`disturbed`, said with the share, never `defective` and never `healthy`: a busy machine alone
puts a healthy node's figure below its peers'.

A node rule with `corroborated_by` counts only when its partner figure breaks its rule too
(`corroborated`; rules.py says why); one that breaks alone is the node's `uncorroborated` list.

A node figure more than its rule's percentage below its reference but inside the reference's
spread is a deficit this noise hides: the node is `unresolved` ("cannot tell at this noise", with
the figures), never `healthy`; the measurement re-measures such nodes first, with their peers
(diagnose/session.py `resolve`), until the deficit is resolved either way or its rounds run out.

Blame follows cause (blame.py).
"""
from __future__ import annotations

import dataclasses
import math
import statistics

from fleetbench.diagnose.judging import baseline as baselines
from fleetbench.diagnose.judging import rules as rulebook
from fleetbench.diagnose.judging.metrics import OTHERS
from fleetbench.diagnose.judging.rules import Reference, Rule, robust_spread
from fleetbench.measure.repeats.stability import DISTURBED_PCT

NO_PEERS = Reference(None, kind="no peers")


def peer_reference(values: list[float]) -> Reference:
    figures = [v for v in values if v is not None]
    if not figures:
        return NO_PEERS
    return Reference(statistics.median(figures), robust_spread(figures), "peer median", len(figures), min(figures))


def node_reference(node: int, metric: str, figures: dict[int, dict], baseline: dict | None) -> Reference:
    if baseline:
        return baselines.reference(baseline, "nodes", str(node), metric)
    return peer_reference([f.get(metric) for n, f in figures.items() if n != node])


def _violation(rule: Rule, value: float, ref: Reference | None) -> dict:
    shown = ref.value if ref is not None and rule.needs_reference else rule.threshold
    kind = ref.kind if ref is not None and rule.needs_reference else "limit"
    out = {"metric": rule.metric, "value": round(value, 3), "reference": None if shown is None else round(shown, 3),
           "reference_kind": kind, "rule": rule.text, "category": rule.category}
    if ref is not None and rule.needs_reference:
        out["spread"] = round(ref.spread, 3)
    return out


def failure(message: str) -> dict:
    """A test that failed, as a violation (category `failed`): no value, no reference."""
    return {"metric": "test", "value": None, "reference": None, "reference_kind": "", "rule": message,
            "category": "failed"}


def verdict(node: int, violations: list[dict], disturbed: list[dict] | None = None,
            unresolved: list[dict] | None = None) -> dict:
    """defective (a figure broke a rule measured quiet), disturbed (only figures measured while
    others took the machine did: not judged), unresolved (a deficit inside the noise: cannot tell)
    or healthy."""
    categories = sorted({v["category"] for v in violations})
    state = "defective" if violations else "disturbed" if disturbed else "unresolved" if unresolved else "healthy"
    return {"index": node, "verdict": state, "categories": categories, "violations": violations,
            **({"disturbed": disturbed} if disturbed else {}), **({"unresolved": unresolved} if unresolved else {})}


def others_took(figures: dict, metric: str, limit: float = DISTURBED_PCT) -> float | None:
    """The share of the machine others used in the quietest measurement of `metric`, when more
    than `limit` % (the figure is not judged); else None."""
    pct = (figures.get(OTHERS) or {}).get(metric)
    return pct if pct is not None and pct > limit else None


def _broken(rule: Rule, value: float, ref: Reference | None, figures: dict, limit: float) -> dict:
    """A broken rule's violation, carrying the share others took (OTHERS) when every measurement
    of its figure was disturbed: nodes and links alike are then not judged on it (`shaken`)."""
    took = others_took(figures, rule.metric, limit)
    return {**_violation(rule, value, ref), **({OTHERS: took} if took is not None else {})}


def shaken(violation: dict) -> bool:
    """Whether a violation was measured while others took the machine (not judged)."""
    return OTHERS in violation


def with_own_noise(ref: Reference | None, twice: list | None) -> Reference | None:
    """The reference's spread widened by the figure's own when it was measured twice (a figure
    that moved a lot between its two measurements is that noisy: the spread of a difference adds
    both). A sick node measures low twice alike; a healthy one disturbed by a neighbour does not."""
    if ref is None or not twice or None in twice:
        return ref
    return dataclasses.replace(ref, spread=math.hypot(ref.spread, abs(twice[0] - twice[1]) / math.sqrt(2)))


def judge_nodes(figures: dict[int, dict], rules: list[Rule], baseline: dict | None = None,
                problems: dict[int, tuple[str, str]] | None = None, remeasured: dict | None = None,
                disturbed_pct: float = DISTURBED_PCT) -> list[dict]:
    """One verdict per node. `figures`: node -> {metric: value}; `problems`: node -> (category,
    message) for a node that could not be reached or whose probe failed (a verdict, not a crash);
    `remeasured`: "node i" -> {metric: [first, second]}; `disturbed_pct`: above it, a figure's
    others_cpu_pct makes it not judged (module docstring)."""
    problems, remeasured = problems or {}, remeasured or {}
    verdicts = []
    for node in sorted(set(figures) | set(problems)):
        if node in problems:
            category, message = problems[node]
            verdicts.append({"index": node, "verdict": "unreachable" if category == "unreachable" else "defective",
                             "categories": [category], "violations": [], "message": message})
            continue
        found, low = _node_violations(node, figures, rules, baseline, remeasured, disturbed_pct)
        found, alone = corroborated(found, low, figures[node])
        hidden = unresolved(node, figures, rules, baseline, remeasured, low)
        verdicts.append({**verdict(node, [v for v in found if not shaken(v)], [v for v in found if shaken(v)], hidden),
                         **({"uncorroborated": alone} if alone else {})})
    return verdicts


def _node_violations(node: int, figures: dict[int, dict], rules: list[Rule], baseline: dict | None,
                     remeasured: dict, disturbed_pct: float) -> tuple[list[tuple[Rule, dict]], dict]:
    """Every node rule `node`'s figures break, with the rule; and the figures low enough to
    corroborate another's (Rule.confirmed_by), each with the share others took (None: quiet)."""
    found, low = [], {}
    for rule in (r for r in rules if r.scope == "node"):
        value = figures[node].get(rule.metric)
        if value is None:
            if any(f.get(rule.metric) is not None for f in figures.values()):
                found.append((rule, failure(f"{rule.metric} not measured on this node (its peers measured it)")))
            continue
        ref = node_reference(node, rule.metric, figures, baseline) if rule.needs_reference else None
        ref = with_own_noise(ref, remeasured.get(f"node {node}", {}).get(rule.metric))
        if rule.broken_by(value, ref):
            found.append((rule, _broken(rule, value, ref, figures[node], disturbed_pct)))
        if rule.confirmed_by(value, ref):
            low[rule.metric] = others_took(figures[node], rule.metric, disturbed_pct)
    return found, low


def unresolved(node: int, figures: dict[int, dict], rules: list[Rule], baseline: dict | None,
               remeasured: dict, low: dict) -> list[dict]:
    """The node's figures more than their rule's percentage below the reference yet inside its
    spread (not broken): each with its reference, spread, the figure below which it would flag, and
    the share others took of the machine (None: quiet). A rule whose partner figure (corroborated_by)
    did not fall by its percentage too is left out: the lone CPU dip rules.py tells of."""
    out = []
    for rule in (r for r in rules if r.scope == "node" and r.needs_reference):
        value = figures[node].get(rule.metric)
        ref = node_reference(node, rule.metric, figures, baseline) if value is not None else None
        ref = with_own_noise(ref, remeasured.get(f"node {node}", {}).get(rule.metric))
        if value is None or rule.broken_by(value, ref) or not rule.confirmed_by(value, ref):
            continue
        partner = rule.corroborated_by
        if partner and partner not in low and figures[node].get(partner) is not None:
            continue
        out.append({**_violation(rule, value, ref),
                    "flagged_below": round(rulebook.flagged_below(rule.threshold, ref), 3),
                    "below_pct": round(100 * (1 - value / ref.value), 1),
                    OTHERS: (figures[node].get(OTHERS) or {}).get(rule.metric)})
    return out


def corroborated(found: list[tuple[Rule, dict]], low: dict, figures: dict) -> tuple[list[dict], list[dict]]:
    """The violations that count, and those of a rule whose partner figure (corroborated_by) did
    not fall with it (`low`; rules.py: one CPU figure alone below is that figure's noise here, not
    the node's CPU; reported beside the verdict, each naming the figure that did not agree). A
    partner the node did not measure cannot disagree: the figure counts alone. A partner low only
    while others took the machine leaves the figure not judged either way."""
    count, alone = [], []
    for rule, v in found:
        partner = rule.corroborated_by
        if not partner or v["value"] is None or figures.get(partner) is None or (partner in low and low[partner] is None):
            count.append(v)
        elif partner in low:
            count.append({**v, OTHERS: v.get(OTHERS, low[partner])})
        else:
            alone.append({**v, "not_corroborated_by": partner})
    return count, alone


def peer_link_references(values: dict[tuple[int, int], float], rule: Rule) -> tuple[dict, set]:
    """Per link, the reference of its peers (module docstring), and the suspect nodes."""
    values = {pair: v for pair, v in values.items() if v is not None}
    if len(values) < 2:
        return {pair: NO_PEERS for pair in values}, set()
    nodes = sorted({n for pair in values for n in pair})
    best = {n: max(v for pair, v in values.items() if n in pair) for n in nodes}
    suspects = {n for n in nodes
                if rule.broken_by(best[n], peer_reference([best[m] for m in nodes if m != n]))}
    clean = [v for pair, v in values.items() if not suspects & set(pair)]
    if not clean:  # every link touches a suspect: nothing left to judge by
        return {pair: Reference(None, kind="no peers: every link touches a suspect node") for pair in values}, suspects
    ref = Reference(statistics.median(clean), robust_spread(clean), "peer links", len(clean), min(clean))
    return {pair: ref for pair in values}, suspects


def link_references(values: dict, rule: Rule, baseline: dict | None) -> dict:
    if baseline:
        return {pair: baselines.reference(baseline, "links", baselines.link_key(pair), rule.metric) for pair in values}
    return peer_link_references(values, rule)[0]


def slow_links(links: dict[tuple[int, int], dict], rules: list[Rule], baseline: dict | None,
               remeasured: dict | None = None, disturbed_pct: float = DISTURBED_PCT) -> dict:
    """pair -> the violations of its figures (and of its failed test); one measured while others
    took the machine carries their share (OTHERS; `disturbed` tells the two kinds of pair apart)."""
    slow: dict[tuple[int, int], list[dict]] = {}
    remeasured = remeasured or {}
    for rule in (r for r in rules if r.scope == "link"):
        values = {pair: f.get(rule.metric) for pair, f in links.items() if f.get(rule.metric) is not None}
        refs = link_references(values, rule, baseline) if rule.needs_reference else {}
        for pair, value in sorted(values.items()):
            ref = with_own_noise(refs.get(pair), remeasured.get(f"link {pair[0]}-{pair[1]}", {}).get(rule.metric))
            if rule.broken_by(value, ref):
                slow.setdefault(pair, []).append(_broken(rule, value, ref, links[pair], disturbed_pct))
    for pair, f in sorted(links.items()):
        if f.get("error"):
            slow.setdefault(pair, []).append(failure(f["error"]))
    return slow


def disturbed(slow: dict) -> tuple[dict, dict]:
    """slow_links' pairs split: those with a violation measured quiet (or a failed test), and
    those whose every violation was measured while others took the machine (not judged)."""
    quiet = {pair: found for pair, found in slow.items() if not all(map(shaken, found))}
    return quiet, {pair: found for pair, found in slow.items() if pair not in quiet}


def judge_cluster(figures: dict, rules: list[Rule], baseline: dict | None) -> dict:
    """The all-node job's verdict: `failed` when it failed, `slow` when a figure breaks a cluster
    rule against the baseline (it has no peers in one run), else healthy."""
    if figures.get("error"):
        found = [failure(figures["error"])]
    else:
        found = []
        for rule in (r for r in rules if r.scope == "cluster" and figures.get(r.metric) is not None):
            ref = baselines.reference(baseline, "cluster", "all", rule.metric) if baseline else NO_PEERS
            if rule.broken_by(figures[rule.metric], ref if rule.needs_reference else None):
                found.append(_violation(rule, figures[rule.metric], ref))
    state = "failed" if figures.get("error") else "slow" if found else "healthy"
    return {**figures, "verdict": state, "categories": sorted({v["category"] for v in found}), "violations": found}
