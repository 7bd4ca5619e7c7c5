"""The verdict as text: a console table and a markdown table (pure)."""
from __future__ import annotations


def _broken(node: dict) -> str:
    return "; ".join(f"{v['metric']} {v['value']:g} vs {v['reference']:g} ({v['reference_kind']})"
                     for v in node["violations"]) or node.get("message", "")


def _rows(report: dict) -> list[tuple[str, str, str, str]]:
    rows = [(f"node {n['index']} {n['host']}", n["verdict"], ",".join(n["categories"]) or "-", _broken(n))
            for n in report["nodes"]]
    rows += [(f"link {l['a']}-{l['b']}", l["verdict"], ",".join(l["categories"]) or "-",
              _broken(l) or (f"{l['link_gbps']:.2f} Gbit/s" if l.get("link_gbps") else l.get("error", "")))
             for l in report["links"]]
    return rows


def console(report: dict) -> str:
    rows = [("what", "verdict", "category", "figures that broke a rule (value vs reference)")] + _rows(report)
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c:<{widths[2]}}  {d}" for a, b, c, d in rows]
    phases = ", ".join(f"{k} {v:g}" for k, v in report["phases"].items())
    lines.append(f"judged against: {report['reference']}; {report['elapsed_s']:g} s ({phases})")
    return "\n".join(lines)


def markdown(report: dict) -> str:
    lines = ["| what | verdict | category | figures that broke a rule |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in _rows(report)]
    lines.append(f"\nJudged against: {report['reference']}; {report['elapsed_s']:g} s.")
    return "\n".join(lines)
