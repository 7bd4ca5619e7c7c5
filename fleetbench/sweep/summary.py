"""What a sweep prints: a progress line before each run (with its ETA), the run's summary line
after it (measure/resultline, as `fleetbench launch` prints it) and, once it is done, the
summary table (mean ± std, cv, efficiency per cell; fleetbench.measure.repeats.aggregate's groups) and the
stability lines under it."""
from __future__ import annotations

import dataclasses

from fleetbench.measure import resultline
from fleetbench.measure.repeats import aggregate, stability
from fleetbench.sweep.sweepfile import Cell


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def progress_line(i: int, n: int, cell: Cell, repeat: int, elapsed: float, eta: float | None,
                  most: int | None = None) -> str:
    """`most`: the cell's maximum of runs when it repeats until stable (sweep/adaptive.py)."""
    eta_text = duration(eta) if eta is not None else "?"
    upto = f" (up to {most} until stable)" if most and most > cell.repeats else ""
    return (f"cell {i}/{n} {cell.label()} repeat {repeat}/{cell.repeats}{upto} | "
            f"elapsed {duration(elapsed)} ETA {eta_text}")


def ok_line(seconds: float, record: dict, store: str) -> str:
    """`  -> ok in 9 s: fleetbench result: ...` after a run that stored `record` in `store`."""
    return f"  -> ok in {duration(seconds)}: {resultline.line(resultline.fields_of(record, store))}"


@dataclasses.dataclass
class Tally:
    """A sweep's runs so far, for its progress lines' ETA (the mean run time so far)."""

    started: float
    todo: int  # runs to do at least (a cell repeating until stable may make more)
    runs: int = 0
    seconds: float = 0.0

    def add(self, seconds: float) -> None:
        self.runs, self.seconds = self.runs + 1, self.seconds + seconds

    def eta(self) -> float | None:
        return self.seconds / self.runs * max(self.todo - self.runs, 1) if self.runs else None


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
                             + stability.run_mark(r["id"], c["excluded"], c["outliers"], c.get("disturbed"),
                                                  r.get("imbalance", ""))
                             for r in c["runs"])
            label = "UNSTABLE" if c["unstable"] else "outlier" if c.get("outliers") else "disturbed"
            lines.append(f"{label}: {c['benchmark']} {c['method']} world "
                         f"{c['world_size']}{' net ' + c['network'] if c['network'] else ''}: runs {runs} {c['unit']}"
                         + (f"; mean of all {len(c['runs'])} runs {stability.format_pm(c['mean_all'], None)}"
                            if c["excluded"] or aggregate.disturbed_out(c) else "")
                         + (f"; {aggregate.agreement(c)}" if c.get("disturbed") else ""))
    return lines
