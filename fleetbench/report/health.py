"""The report's cluster-health section (pure): the verdicts `fleetbench diagnose --results` stored
in the same files as the results (docs/guide/diagnose.md), and the stragglers named from training runs'
per-rank step times (fleetbench.perfmodel.stragglers, as `fleetbench explain`).

A result measured on a cluster with a sick node is a figure of that node; this section puts the
diagnosis in the same report as the results it qualifies, so a reader sees both.
"""
from __future__ import annotations

from fleetbench.perfmodel import stragglers


def _broken(entry: dict) -> str:
    parts = []
    for v in entry.get("violations") or []:
        if v.get("value") is None:
            parts.append(f"{v['metric']} failed: {v['rule']}")
        else:
            parts.append(f"{v['metric']} {v['value']:g} vs {v['reference']:g} ({v['reference_kind']})")
    return "; ".join(parts).replace("|", "/") or "-"


# Link verdicts that are no finding, as `fleetbench diagnose` judges them (its exit code is 0 on
# them: diagnose/judging/verdicts.NOT_FINDINGS, which this room may not import; a test holds the two
# equal). A cpu-bound link's test measured the machine's CPUs, not the link: listed under the
# table as such, never as a link that is not healthy; a disturbed one was not judged (others took
# the machine while it was measured): listed under the table.
NOT_FINDINGS = ("healthy", "cpu-bound", "disturbed")


def _findings(verdict: dict) -> list[dict]:
    return [l for l in verdict.get("links") or [] if l.get("verdict") not in NOT_FINDINGS]


def _rows(verdict: dict) -> list[str]:
    rows = [f"| node {n['index']} | {n['host']} | {n['verdict']} | {', '.join(n['categories']) or '-'} | {_broken(n)} |"
            for n in verdict.get("nodes") or []]
    rows += [f"| link {l['a']}-{l['b']} | | {l['verdict']} | {', '.join(l['categories']) or '-'} | {_broken(l)} |"
             for l in _findings(verdict)]
    cluster = verdict.get("cluster")
    if cluster and cluster.get("verdict") != "healthy":
        rows.append(f"| all nodes | | {cluster['verdict']} | {', '.join(cluster['categories']) or '-'} | "
                    f"{_broken(cluster)} |")
    return rows


def diagnoses(records: list[dict]) -> list[str]:
    """Markdown: one table per stored diagnosis (every node; links only when not healthy)."""
    lines = []
    for record in sorted((r for r in records if r.get("benchmark") == "diagnose-verdict"), key=lambda r: r["time"]):
        verdict = record["metrics"]
        where = (record.get("config") or {}).get("cluster") or "this machine"
        defective = [n for n in verdict.get("nodes") or [] if n["verdict"] not in ("healthy", "disturbed")]
        links = _findings(verdict)
        slow = f", {len(links)} link(s) slow or failed" if links else ""
        lines += ["", f"Diagnosis of {where} at {record['time'][:19]} (judged against {verdict.get('reference')}): "
                  f"{len(defective)} of {len(verdict.get('nodes') or [])} nodes not healthy{slow}.", "",
                  "| what | host | verdict | category | figures that broke a rule (value vs reference) |",
                  "|---|---|---|---|---|", *_rows(verdict), *_cpu_bound(verdict), *_not_judged(verdict)]
    return lines


def _not_judged(verdict: dict) -> list[str]:
    """Lines under the table naming what was measured while others took the machine (no verdict),
    and the nodes whose deficit was inside the noise (unresolved: never healthy)."""
    shaken = [f"node {n['index']}" for n in verdict.get("nodes") or [] if n["verdict"] == "disturbed"]
    shaken += [f"link {l['a']}-{l['b']}" for l in verdict.get("links") or [] if l.get("verdict") == "disturbed"]
    unsure = [f"node {n['index']} ({'; '.join(_unsure(v) for v in n.get('unresolved') or [])})"
              for n in verdict.get("nodes") or [] if n["verdict"] == "unresolved"]
    lines = ["", f"Not judged (others used the machine while they were measured): {', '.join(shaken)}."]
    return (lines if shaken else []) + (["", f"Cannot tell at this noise: {', '.join(unsure)}."] if unsure else [])


def _unsure(v: dict) -> str:
    return (f"{v['metric']} {v['value']:g} vs {v['reference']:g} ({v['reference_kind']}), {v['below_pct']:g}% below "
            f"inside its spread +-{v['spread']:g}").replace("|", "/")


def _cpu_bound(verdict: dict) -> list[str]:
    """Lines under the table for the cpu-bound links: no finding, and why their figure says nothing."""
    found = [l for l in verdict.get("links") or [] if l.get("verdict") == "cpu-bound"]
    if not found:
        return []
    why = (lambda l: (l.get("note") or "").removeprefix("cpu-bound: ") or "both ends waited for a CPU")
    return ["", *(f"Link {l['a']}-{l['b']} is cpu-bound, no finding: {why(l)} ({_broken(l)})." for l in found)]


def _diagnosed(records: list[dict]) -> dict[str, str]:
    """address -> what the latest stored diagnosis said of the node at that address."""
    out = {}
    for record in sorted((r for r in records if r.get("benchmark") == "diagnose-verdict"), key=lambda r: r["time"]):
        where = (record.get("config") or {}).get("cluster") or "this machine"
        for n in record["metrics"].get("nodes") or []:
            if n.get("address"):
                out[n["address"]] = (f"diagnosed node {n['index']} of {where}: {n['verdict']}"
                                     + (f" ({', '.join(n['categories'])})" if n["categories"] else ""))
    return out


def straggler_lines(records: list[dict]) -> list[str]:
    """Every straggler of the records, with what a stored diagnosis said of its host."""
    diagnosed = _diagnosed(records)
    return [stragglers.line(r, s) + (f"; {diagnosed[s['host']]}" if s["host"] in diagnosed else "")
            for r in records for s in stragglers.stragglers(r)]


def section(records: list[dict], images_dir: str, link) -> tuple[str, list[str]]:
    """For `fleetbench report`: (markdown, no files); empty when there is no diagnosis and no
    run that can show a straggler."""
    del images_dir, link  # no charts: verdicts and names
    found = diagnoses(records)
    showable = any(stragglers.can_show(r) for r in records if r.get("error") is None)
    if not found and not showable:
        return "", []
    lines = ["### Cluster health", *found]
    if showable:
        lines += ["", "Stragglers (ranks slower than their peers' median, from runs whose ranks run free):", ""]
        lines += [f"- {line}" for line in straggler_lines(records)] or ["- none named"]
    return "\n".join(lines) + "\n", []
