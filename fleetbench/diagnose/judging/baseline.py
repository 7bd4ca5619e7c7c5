"""A diagnosis baseline (pure): each node's, each link's and the all-node job's figures over several
healthy runs (`fleetbench diagnose --save-baseline FILE --runs N`), each figure with its mean and
its spread over the runs. Not pooled: every node and every link has its own.

A figure measured while others used more than DISTURBED_PCT of the machine (diagnose/probe.py)
is left out when a quiet run measured it too (their count kept as `disturbed_left_out`).

A figure's reference is its median over the runs and its spread their scaled MAD (one disturbed
run moves neither), but never less than the metric's typical relative spread (the median over its
figures of spread / median) times its median: with a few runs one figure's spread can be small by
chance, and a rule then would flag a healthy figure in ordinary run-to-run variation. With one run
nothing is known of the spread (0: the rule's percentage alone judges).

The file also holds what it was made on (host class, Paddle build) and the hosts in node order:
judging another machine, build or set of hosts against it is refused in one line.
"""
from __future__ import annotations

import statistics

from fleetbench.diagnose.judging import metrics
from fleetbench.diagnose.judging.rules import DiagnoseError, Reference, robust_spread
from fleetbench.measure.repeats.stability import DISTURBED_PCT

KIND = "fleetbench-diagnose-baseline"
VERSION = 2


def link_key(pair: tuple[int, int]) -> str:
    return f"{pair[0]}-{pair[1]}"


def _numbers(figures: dict) -> dict[str, float]:
    """The declared metrics among a test's figures (not its notes: cpu waits, errors)."""
    return {k: float(v) for k, v in (figures or {}).items()
            if k in metrics.METRICS and isinstance(v, (int, float)) and not isinstance(v, bool)}


def _stats(measured: list[tuple[float, bool]]) -> dict:
    """A figure over the runs (each value with whether it was disturbed): its median (the
    reference), its robust spread (what judges), and mean and std as the record of what was
    measured; the disturbed values left out when any quiet one is there."""
    values = [v for v, shaken in measured if not shaken] or [v for v, _ in measured]
    return {"median": statistics.median(values), "spread": robust_spread(values), "mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0, "n": len(values),
            "values": [round(v, 4) for v in values], "disturbed_left_out": len(measured) - len(values)}


def _group(runs: list[dict], part: str, key) -> dict[str, dict[str, dict]]:
    """{item: {metric: stats over the runs}} for one part (nodes, links, cluster) of the runs."""
    columns: dict[str, dict[str, list[tuple[float, bool]]]] = {}
    for run in runs:
        for item, figures in (run.get(part) or {}).items():
            others = (figures or {}).get(metrics.OTHERS) or {}
            for metric, value in _numbers(figures).items():
                shaken = (others.get(metric) or 0.0) > DISTURBED_PCT
                columns.setdefault(key(item), {}).setdefault(metric, []).append((value, shaken))
    return {item: {m: _stats(v) for m, v in sorted(cols.items())} for item, cols in sorted(columns.items())}


def make_baseline(runs: list[dict], machine: dict, hosts: list[str]) -> dict:
    """The baseline of several measurements (each {"nodes": {i: figures}, "links": {(a, b):
    figures}, "cluster": figures or None})."""
    made = {"kind": KIND, "version": VERSION, "machine": machine, "hosts": hosts, "runs": len(runs),
            "nodes": _group(runs, "nodes", str), "links": _group(runs, "links", link_key),
            "cluster": _group([{"cluster": {"all": r.get("cluster") or {}}} for r in runs], "cluster", str)}
    cvs: dict[str, list[float]] = {}
    for part in ("nodes", "links", "cluster"):
        for figures in made[part].values():
            for metric, s in figures.items():
                if s["n"] > 1 and s["median"] > 0:
                    cvs.setdefault(metric, []).append(s["spread"] / s["median"])
    made["cv"] = {metric: statistics.median(values) for metric, values in sorted(cvs.items())}
    return made


def reference(baseline: dict, part: str, item: str, metric: str) -> Reference:
    """The baseline's figure for one node ("nodes", "2"), link ("links", "0-3") or the all-node
    job ("cluster", "all"), with its spread (module docstring)."""
    stats = baseline.get(part, {}).get(item, {}).get(metric)
    if not stats:
        return Reference(None, kind=f"baseline has no {metric} for {part[:-1] if part != 'cluster' else 'all'} {item}")
    floor = baseline.get("cv", {}).get(metric, 0.0) * stats["median"]
    return Reference(stats["median"], max(stats["spread"], floor), "baseline", stats["n"])


def check_baseline(baseline, machine: dict, hosts: list[str], where: str) -> dict:
    """The baseline, or one line saying why it cannot judge this run (before any test runs)."""
    if not isinstance(baseline, dict) or baseline.get("kind") != KIND:
        raise DiagnoseError(f"{where}: not a diagnose baseline (expected one written by --save-baseline)")
    if baseline.get("version") != VERSION or not isinstance(baseline.get("nodes"), dict):
        raise DiagnoseError(f"{where}: an older baseline (one mean per metric, pooled over nodes); "
                            f"make one per node and link with --save-baseline FILE --runs N")
    for key, value in machine.items():
        if baseline.get("machine", {}).get(key) != value:
            raise DiagnoseError(f"{where}: made on {key} {baseline.get('machine', {}).get(key)!r}, "
                                f"this run is on {value!r}; make a baseline here with --save-baseline")
    if baseline.get("hosts") != hosts:
        raise DiagnoseError(f"{where}: made on hosts {','.join(baseline.get('hosts') or [])}, this run has "
                            f"{','.join(hosts)}; a baseline judges each node and link against its own figures")
    return baseline
