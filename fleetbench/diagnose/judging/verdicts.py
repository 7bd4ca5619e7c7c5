"""One measurement judged (pure): the report `fleetbench diagnose` prints and stores, against the
peers or against a baseline. The same measurement can be judged both ways (bench/diagnose_matrix.py).
"""
from __future__ import annotations

from fleetbench.diagnose.judging import blame, judge, resolution
from fleetbench.diagnose.judging.rules import Rule
from fleetbench.hosts.hostlist import Host
from fleetbench.measure.repeats.stability import DISTURBED_PCT


def _remeasured(item: dict, key: str, m: dict) -> dict:
    """Each violation of a re-measured node or link with both figures (the better one counted)."""
    again = m["remeasured"].get(key, {})
    if not again:
        return item
    marked = [{**v, "remeasured": again[v["metric"].split(" (")[0]]} if v["metric"].split(" (")[0] in again else v
              for v in item["violations"]]
    return {**item, "violations": marked}


def not_measured(rules: list[Rule], m: dict) -> list[dict]:
    """The rules whose metric no test produced (on no node, link or all-node job), each with the
    test that would have: reported, never passed."""
    from fleetbench.diagnose.judging import metrics

    produced = {metric for part in (m["nodes"], m["links"], {"all": m.get("cluster") or {}})
                for f in part.values() for metric, value in f.items() if value is not None}
    return [{"metric": r.metric, "rule": r.text, "producer": metrics.METRICS[r.metric].producer}
            for r in rules if r.metric not in produced]


def report(m: dict, rules: list[Rule], baseline: dict | None, hosts: list[Host]) -> dict:
    """The verdicts of measurement `m` (fleetbench.diagnose.session.measure)."""
    limit = m.get("disturbed_pct", DISTURBED_PCT)
    nodes = judge.judge_nodes(m["nodes"], rules, baseline, m["problems"], m["remeasured"], limit)
    slow, shaken = judge.disturbed(judge.slow_links(m["links"], rules, baseline, m["remeasured"], limit))
    links, charged, explains = blame.blame(m["links"], slow, nodes)
    links = [{**l, "verdict": "disturbed", "violations": [], "disturbed": shaken[(l["a"], l["b"])]}
             if (l["a"], l["b"]) in shaken else l for l in links]
    by_index = {h.index: h for h in hosts}
    nodes = [_remeasured({**n, "host": by_index[n["index"]].name, "address": by_index[n["index"]].address,
                          "figures": m["nodes"].get(n["index"], {})}, f"node {n['index']}", m)
             for n in blame.merge(nodes, charged, explains)]
    links = [_remeasured(l, f"link {l['a']}-{l['b']}", m) for l in links]
    out = {"nodes": nodes, "links": links, "not_measured": not_measured(rules, m),
           "resolution": resolution.resolution(m, rules, baseline),
           "reference": "baseline" if baseline else "peers", "remeasured": sorted(m["remeasured"]),
           "resolve_rounds": m.get("resolve_rounds", 0),
           "elapsed_s": m["elapsed_s"], "phases": m["phases"], "disturbed_pct": limit}
    if m.get("cluster") is not None:
        out["cluster"] = judge.judge_cluster(m["cluster"], rules, baseline)
    return out


# Link verdicts that are no finding: a healthy link, a cpu-bound one (its test measured the CPUs,
# not the link: diagnose/judging/blame.py) and a disturbed one (not judged: others took the machine while
# it was measured, judge.py). The report's health section reads the same words (report/health.py
# NOT_FINDINGS, which may not import this room; a test holds them equal).
NOT_FINDINGS = ("healthy", "cpu-bound", "disturbed")
NOT_JUDGED = 3  # the exit code when nothing was found but something could not be judged


# Node verdicts that are no finding, nor healthy: not judged (others took the machine) and
# unresolved (a deficit inside this machine's noise: judge.unresolved). Exit 3 when nothing is found.
NOT_JUDGED_NODES = ("disturbed", "unresolved")


def not_judged(report: dict) -> list[str]:
    """What a report could not judge (measured while others took the machine, or a deficit inside
    the noise), as short names."""
    return ([f"node {n['index']}" for n in report["nodes"] if n["verdict"] in NOT_JUDGED_NODES]
            + [f"link {l['a']}-{l['b']}" for l in report["links"] if l["verdict"] == "disturbed"])


def exit_code(report: dict) -> int:
    """0 when every node, every link and the all-node job (when run) are healthy; 1 when anything
    is found; else 3 when something was not judged (disturbed: no finding, but not healthy either).
    A cpu-bound link is not a finding: its test measured the CPUs, not the link; its row says so."""
    if flagged(report):
        return 1
    return NOT_JUDGED if not_judged(report) else 0


def flagged(report: dict) -> list[str]:
    """What a report flags, as short names: `node 2 compute`, `link 0-3` (for summaries)."""
    out = [f"node {n['index']} {','.join(n['categories'])}" for n in report["nodes"]
           if n["verdict"] not in ("healthy", *NOT_JUDGED_NODES)]
    out += [f"link {l['a']}-{l['b']}" for l in report["links"] if l["verdict"] not in NOT_FINDINGS]
    if report.get("cluster", {}).get("verdict", "healthy") != "healthy":
        out.append("all nodes")
    return out
