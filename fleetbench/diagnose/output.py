"""The verdict as text: a console table and a markdown table (pure)."""
from __future__ import annotations

from fleetbench.diagnose.judging import resolution, verdicts
from fleetbench.diagnose.judging.metrics import OTHERS
from fleetbench.measure.repeats.stability import DISTURBED_PCT


def _one(v: dict) -> str:
    if v["value"] is None:  # a test that failed: its message
        return f"{v['metric']} failed: {v['rule']}"
    again = v.get("remeasured")
    measured = f"; re-measured: {again[0]:.4g} then {again[1]:.4g}" if again and None not in again else ""
    return f"{v['metric']} {v['value']:g} vs {v['reference']:g} ({v['reference_kind']}{measured})"


def unresolved_text(v: dict) -> str:
    """A deficit inside the noise, with its figures: how far below, and where it would flag."""
    took = v.get(OTHERS)
    busy = f", others used {took:g}% of the machine" if took else ""
    return (f"{_one(v)} is {v['below_pct']:g}% below, inside its spread +-{v['spread']:g} "
            f"(flagged below {v['flagged_below']:g}{busy})")


def _broken(node: dict) -> str:
    text = "; ".join(_one(v) for v in node["violations"]) or node.get("message", "")
    if node.get("disturbed"):
        text += ("; " if text else "") + "not judged: " + "; ".join(
            f"{_one(v)} while others used {v[OTHERS]:g}% of the machine" for v in node["disturbed"])
    if node.get("unresolved"):
        hidden = "; ".join(map(unresolved_text, node["unresolved"]))
        text += ("; " if text else "") + f"cannot tell at this noise: {hidden}"
    if node.get("uncorroborated"):
        text += ("; " if text else "") + "not counted: " + "; ".join(
            f"{_one(v)} alone ({v['not_corroborated_by']} did not break its rule)" for v in node["uncorroborated"])
    if node.get("explains"):
        text += ("; " if text else "") + f"explains slow link(s) {', '.join(node['explains'])}"
    return text


def _cause(link: dict) -> str:
    if link.get("explained_by"):
        return f" -> explained by node(s) {','.join(map(str, link['explained_by']))} (compute or CPU-saturated)"
    if link.get("blamed_on"):
        return f" -> blamed on node(s) {','.join(map(str, link['blamed_on']))}"
    return f" -> {link['note']}" if link.get("note") else ""


def _figures(link: dict) -> str:
    """A link's (or the all-node job's) figures, when nothing broke a rule."""
    shown = [f"{link[k]:.2f} {unit}" for k, unit in (("link_gbps", "Gbit/s TCP"),) if link.get(k) is not None]
    shown += [f"{k.removeprefix('cluster_').split('_busbw')[0]} {v:.3f} GB/s busbw" for k, v in link.items()
              if k.endswith("busbw_GBps") and v is not None]
    return ", ".join(shown) or link.get("error", "")


def _rows(report: dict) -> list[tuple[str, str, str, str]]:
    rows = [(f"node {n['index']} {n['host']}", n["verdict"], ",".join(n["categories"]) or "-", _broken(n))
            for n in report["nodes"]]
    rows += [(f"link {l['a']}-{l['b']}", l["verdict"], ",".join(l["categories"]) or "-",
              (_broken(l) + _cause(l)) if l["violations"] or l.get("disturbed") else _figures(l))
             for l in report["links"]]
    if "cluster" in report:
        c = report["cluster"]
        rows.append((f"all nodes {','.join(map(str, c['nodes']))}", c["verdict"], ",".join(c["categories"]) or "-",
                     _broken(c) or _figures(c)))
    return rows


def _notes(report: dict) -> list[str]:
    lines = [f"resolution: {resolution.text(r)}" for r in report.get("resolution", [])]
    producers: dict[str, list[str]] = {}
    for m in report.get("not_measured", []):
        producers.setdefault(m["producer"], []).append(m["metric"])
    if producers:
        lines.append("not measured (no test produced them; never passed): " + "; ".join(
            f"{', '.join(names)} (by the {producer})" for producer, names in producers.items()))
    unsure = [f"node {n['index']}" for n in report["nodes"] if n["verdict"] == "unresolved"]
    if unsure:
        again = report.get("resolve_rounds", 0)
        lines.append(f"cannot tell at this noise: {', '.join(unsure)}: a figure more than its rule's percentage "
                     f"below its reference, inside the reference's spread after {again} more round(s) of every "
                     f"node's passes; never called healthy (exit 3 when nothing else is found)")
    shaken = [name for name in verdicts.not_judged(report) if name not in unsure]
    if shaken:
        lines.append(f"not judged: {', '.join(shaken)}: a figure broke a rule in every measurement while other "
                     f"processes used more than {report.get('disturbed_pct', DISTURBED_PCT):g}% of the machine "
                     f"(steal included); run again "
                     f"when it is quiet (exit 3 when nothing else is found)")
    alone = [f"node {n['index']}" for n in report["nodes"] if n.get("uncorroborated")]
    if alone:
        lines.append(f"not counted: {', '.join(alone)}: one CPU figure below its reference while the other "
                     f"stayed at its own (a CPU short of capacity slows both; rules.yaml corroborated_by)")
    if report.get("remeasured"):
        lines.append(f"re-measured once before counting (the better figure counts): {', '.join(report['remeasured'])}")
    saved = report.get("baseline_saved")
    if saved:
        lines.append(f"baseline of {saved['runs']} runs written to {saved['file']}" + (
            f"; WARNING: runs flagged {saved['flagged']}: check the cluster is healthy" if saved["flagged"] else ""))
    return lines


def console(report: dict) -> str:
    rows = [("what", "verdict", "category", "figures that broke a rule (value vs reference)")] + _rows(report)
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c:<{widths[2]}}  {d}" for a, b, c, d in rows]
    lines += _notes(report)
    phases = ", ".join(f"{k} {v:g}" for k, v in report["phases"].items())
    lines.append(f"judged against: {report['reference']}; {report['elapsed_s']:g} s ({phases})")
    return "\n".join(lines)


def markdown(report: dict) -> str:
    lines = ["| what | verdict | category | figures that broke a rule |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in _rows(report)]
    lines += [""] + [f"- {n}" for n in _notes(report)]
    lines.append(f"\nJudged against: {report['reference']}; {report['elapsed_s']:g} s.")
    return "\n".join(lines)
