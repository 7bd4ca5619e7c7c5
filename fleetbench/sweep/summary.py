"""What a sweep prints of its cells once it is done: the summary table (mean ± std, cv, efficiency
per cell; fleetbench.measure.aggregate's groups) and the stability lines under it."""
from __future__ import annotations

from fleetbench.measure import aggregate, stability
from fleetbench.sweep.sweepfile import Cell


def cell_extra(cell: Cell) -> str:
    return " ".join(cell.extra_sets())


def summary_table(cells: list[dict]) -> str:
    """Text table of aggregated cells (aggregate.aggregate/add_efficiency output)."""
    head = ("benchmark", "preset", "mode", "method", "network", "nodes", "dev/node", "world", "n",
            "throughput mean ± std", "unit", "cv", "eff", "failed", "set")
    rows = [head]
    for c in cells:
        mean = "-" if c["mean"] is None else (stability.format_pm(c["mean"], c["std"] if c["n"] != 1 else None)
                                              + aggregate.figure_note(c))
        cv = "-" if c.get("cv") is None else f"{c['cv']:.1%}" + (" UNSTABLE" if c.get("unstable") else "")
        eff = "-" if c.get("efficiency") is None else f"{c['efficiency']:.2f}"
        rows.append((c["benchmark"], c["preset"] or "-", c["mode"], c["method"], c["network"] or "-",
                     str(c["nodes"]), str(c["devices_per_node"]), str(c["world_size"]), str(c["n"] or 0),
                     mean, c["unit"] or "-", cv, eff, str(c["failed"]), c.get("sweep_extra") or ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows)


def stability_lines(cells: list[dict]) -> list[str]:
    """Every run of an unstable cell or a cell with an outlier or a disturbed run (excluded outliers
    and disturbed runs marked, shown)."""
    lines = []
    for c in cells:
        if c.get("unstable") or c.get("outliers") or c.get("disturbed"):
            runs = ", ".join(stability.format_pm(r["throughput"], None)
                             + stability.run_mark(r["id"], c["excluded"], c["outliers"], c.get("disturbed"))
                             for r in c["runs"])
            label = "UNSTABLE" if c["unstable"] else "outlier" if c.get("outliers") else "disturbed"
            lines.append(f"{label}: {c['benchmark']} {c['method']} world "
                         f"{c['world_size']}{' net ' + c['network'] if c['network'] else ''}: runs {runs} {c['unit']}"
                         + (f"; mean of all {len(c['runs'])} runs {stability.format_pm(c['mean_all'], None)}"
                            if c["excluded"] or aggregate.disturbed_out(c) else "")
                         + (f"; {aggregate.agreement(c)}" if c.get("disturbed") else ""))
    return lines
