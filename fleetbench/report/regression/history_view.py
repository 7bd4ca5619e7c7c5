"""`fleetbench history`: each cell's figures through time, the change points in them, a chart each.

    fleetbench history RESULTS... [--by time|paddle|commit] [--images DIR]
        [--ignore KEY]... [--match KEY]... [--threshold PCT] [--alpha A] [--disturbed PCT]
        [--markdown | --json]

Cells are keyed as `fleetbench compare` keys them (measure/repeats/experiment.cell_key); a cell's runs are
put in order (time, Paddle version or commit), grouped into points (a sweep's repeats on one
build, host, commit and day), and the change points between them found and judged by
history/changepoints.py. Every cell with more than one point gets a chart, `DIR/history-<cell>.png`
beside the CSV of exactly the runs it draws. Exit 0, or 2 on bad input (one line).
"""
from __future__ import annotations

import json
import sys

from fleetbench import cmdline
from fleetbench.history import changepoints, compare
from fleetbench.measure.repeats import experiment, stability
from fleetbench.store.schema import RecordError
from fleetbench.report import DEFAULT_DIR
from fleetbench.report.regression import comparison
from fleetbench.report.style import slug
from fleetbench.store import results, select


def run(paths, by: str = "time", *, ignore=(), match=(), alpha: float = compare.ALPHA,
        threshold_pct: float = compare.THRESHOLD_PCT, disturbed_pct: float = stability.DISTURBED_PCT) -> dict:
    """Every cell's series with its points, segments and changes, what changed in the
    circumstances at each, the changes at one time together, and the regressions (the --json
    output). `paths`: results files or a select.Side (a database with filters)."""
    source = select.side(paths)
    paths = source.names()
    records = compare.comparable_records(source.records())
    if not [r for r in records if r.get("error") is None and not r.get("source")]:
        raise comparison.InputError(f"{', '.join(paths)}: no successful measured throughput run")
    for flag, names in (("--ignore", ignore), ("--match", match)):
        if names:  # reads every record's keys: only when there are names to check
            experiment.check_key_names(list(names), records, flag)
    cells = changepoints.changes(changepoints.series(records, by, compare.widen(ignore), match, disturbed_pct),
                                 alpha, threshold_pct)
    for cell, name in zip(cells, comparison.labels([c["key"] for c in cells])):
        cell["label"] = name
        cell["name"] = chart_name(name)
        for item in cell["runs"]:
            item.pop("record")
    changepoints.together(cells)
    return {"files": list(paths), "by": by, "alpha": alpha, "threshold_pct": threshold_pct,
            "disturbed_pct": disturbed_pct, "cells": cells, "regressions": changepoints.regressions(cells)}


# ---- text ----------------------------------------------------------------------------------------

def _figure(item: dict) -> str:
    if not item["n"]:
        return "— (every run disturbed)"
    return f"{stability.format_pm(item['mean'], item['std'] if item['n'] > 1 else None)} (n={item['n']})"


def change_line(cell: dict, change: dict) -> str:
    before = _figure(changepoints_summary(change["before"]))
    after = _figure(changepoints_summary(change["after"]))
    fake = {"verdict": change["verdict"], "note": change["note"], "p_adjusted": change["p_adjusted"],
            "change_pct": change["change_pct"], "ci95_pct": change["ci95_pct"],
            "base": {"n": len(change["before"])}, "new": {"n": len(change["after"])}}
    together = (f"; changed together with {len(change['together'])} other cell(s): {'; '.join(change['together'])}"
                if change.get("together") else "")
    return (f"change at run {change['at'] + 1} ({change['point']}): {before} -> {after}  "
            f"{comparison.change_text(fake)}  {comparison.MARK[change['verdict']]}; what changed: "
            f"{change['text']}{together}")


def regression_lines(report: dict) -> list[str]:
    """The regressions listing: every cell whose latest change is a slowdown, newest first."""
    found = report["regressions"]
    lines = [f"{len(found)} regression(s) in {', '.join(report['files'])} (cells whose latest change point is "
             f"a slowdown, newest first; {len(report['cells'])} cell(s) looked at)"]
    for item in found:
        c = item["change"]
        lines.append(f"  {item['label']}: {c['change_pct']:+.1f}% at run {c['at'] + 1} ({(c['to'] or '?')[:19]}, "
                     f"{c['point']}), p={c['p_adjusted']:.3g}; what changed: {c['text']}"
                     + (f"; together with {'; '.join(c['together'])}" if c.get("together") else ""))
    return lines


def changepoints_summary(values: list[float]) -> dict:
    from fleetbench.measure.timing import summarize
    return summarize(values)


def cell_lines(cell: dict, link: str | None) -> list[str]:
    disturbed = sum(r["disturbed"] for r in cell["runs"])
    lines = [f"{cell['label']} ({cell['unit']}): {len(cell['runs'])} runs, {len(cell['points'])} point(s)"
             + (f", {disturbed} disturbed (not in figures)" if disturbed else "")]
    lines += [f"  {p['label']}: {_figure(p)}" for p in cell["points"]]
    if len(cell["runs"]) >= changepoints.MIN_SERIES:
        lines += [f"  {change_line(cell, c)}" for c in cell["changes"]] or ["  no change point (PELT found no shift of the mean beyond the runs' noise)"]
    else:
        lines.append(f"  too few runs to look for a change point (it needs {changepoints.MIN_SERIES}: {changepoints.MIN_SEGMENT} a side)")
    if link:
        lines.append(f"  chart: {link}")
    return lines


def text(report: dict, links: dict, markdown: bool = False) -> str:
    head = (f"History of {len(report['cells'])} cell(s) in {', '.join(report['files'])}, by {report['by']}. "
            f"Change points: PELT on shifts of the mean (ruptures; penalty {changepoints.PENALTY:g} log(n) x the "
            f"runs' noise squared), each one tested by a permutation test of the best split (Holm over the "
            f"cell's changes) and called only when at least {report['threshold_pct']:g}% or the runs' cv, as "
            f"`fleetbench compare` calls a change.")
    out = [head, ""]
    single = [c for c in report["cells"] if len(c["points"]) < 2]
    if markdown and single:  # a page shows histories; a cell measured once has none
        out += [f"{len(single)} cell(s) measured at one point only (no history): "
                + "; ".join(c["label"] for c in single) + ".", ""]
    for cell in report["cells"]:
        if markdown and cell in single:
            continue
        lines = cell_lines(cell, links.get(cell["name"]))
        if markdown:
            lines = [f"#### {lines[0]}", ""] + [f"- {line.strip()}" for line in lines[1:]]
            if cell["name"] in links:
                lines[-1] = f"\n![{cell['name']}]({links[cell['name']]})"
        out += lines + [""]
    return "\n".join(out).rstrip("\n") + "\n"


# ---- chart ---------------------------------------------------------------------------------------

def chart_name(label: str) -> str:
    """`history-<the cell's name>`, cut with a hash of the whole when it would not fit a file name."""
    import hashlib
    name = "history-" + slug(label)
    return name if len(name) <= 120 else f"{name[:110]}-{hashlib.sha256(label.encode()).hexdigest()[:8]}"


def chart_rows(cell: dict) -> list[dict]:
    segment_of = {}
    for k, seg in enumerate(cell.get("segments") or []):
        for i in range(seg["start"], seg["end"] + 1):
            segment_of[i] = (k, seg["mean"])
    return [{"run": i + 1, "id": r["id"], "time": r["time"], "point": r["point"], "throughput": r["throughput"],
             "disturbed": r["disturbed"], "interference_cpu_pct": r["interference_cpu_pct"],
             "segment": segment_of.get(i, (None, None))[0] if not r["disturbed"] else None,
             "segment_mean": segment_of.get(i, (None, None))[1] if not r["disturbed"] else None}
            for i, r in enumerate(cell["runs"])]


def draw(cell: dict) -> bytes:
    """Runs in order, coloured by point (disturbed ones hollow), segment means as lines, change
    points as dashed verticals labelled with their change and verdict."""
    # matplotlib only for the commands that draw (style.py): --json and --regressions draw nothing
    from fleetbench.report.style import COLORS, DPI, FIGSIZE, MARGINS, STYLE, Figure, finish, matplotlib
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=FIGSIZE, dpi=DPI)
        fig.subplots_adjust(**MARGINS)
        ax = fig.add_subplot()
        for k, point in enumerate(cell["points"]):
            idx = range(point["first"], point["first"] + len(point["ids"]))
            color = COLORS[k % len(COLORS)]
            quiet = [i for i in idx if not cell["runs"][i]["disturbed"]]
            shaken = [i for i in idx if cell["runs"][i]["disturbed"]]
            ax.plot([i + 1 for i in quiet], [cell["runs"][i]["throughput"] for i in quiet], "o", color=color,
                    label=point["label"], markersize=5)
            if shaken:
                ax.plot([i + 1 for i in shaken], [cell["runs"][i]["throughput"] for i in shaken], "o",
                        markerfacecolor="none", color=color, markersize=6, label=f"{point['label']} (disturbed)")
        for seg in cell.get("segments") or []:
            ax.hlines(seg["mean"], seg["start"] + 0.6, seg["end"] + 1.4, colors="black", linewidth=1.2)
        for change in cell.get("changes") or []:
            ax.axvline(change["at"] + 0.5, color="black", linestyle="--", linewidth=0.9)
            pct = f"{change['change_pct']:+.1f}%" if change["change_pct"] is not None else ""
            ax.annotate(f"{pct} {change['verdict']}", (change["at"] + 0.6, 1.0), xycoords=("data", "axes fraction"),
                        fontsize=7, va="top")
        top = max(r["throughput"] for r in cell["runs"])
        ax.set_ylim(0, top * 1.15)
        ax.set_xlabel(f"run, in order of {cell.get('by', 'time')}")
        ax.set_ylabel(cell["unit"])
        png = finish(fig, ax, cell["label"], "dots: runs (hollow: disturbed, not in figures); lines: segment means; "
                     "dashed: change points (PELT), each tested by a permutation test (docs/guide/compare.md)")
    return png


CHARTS_A_WORKER = 8  # charts a worker process draws at once; fewer charts than two workers' are drawn here


def _chart(images_dir: str, cell: dict) -> str:
    from fleetbench.report.output import save_chart
    return save_chart(images_dir, cell["name"], chart_rows(cell), draw(cell))


def write_charts(report: dict, images_dir: str, link, jobs: int | None = None) -> tuple[dict, list[str]]:
    """Charts of the cells with more than one point: ({name: link}, files written). A chart costs
    matplotlib about 0.15 s whatever is in it (its text: ticks, legend, labels): many are drawn by
    `jobs` worker processes (default: the CPUs, at most 4), each the same PNG as drawn here."""
    import concurrent.futures
    import functools
    import os
    charted = [cell for cell in report["cells"] if len(cell["points"]) >= 2]
    for cell in charted:
        cell["by"] = report["by"]
    jobs = min(4, os.cpu_count() or 1) if jobs is None else jobs
    draw_one = functools.partial(_chart, images_dir)
    if jobs > 1 and len(charted) >= 2 * CHARTS_A_WORKER:
        with concurrent.futures.ProcessPoolExecutor(jobs) as pool:
            pngs = list(pool.map(draw_one, charted, chunksize=CHARTS_A_WORKER))
    else:
        pngs = [draw_one(cell) for cell in charted]
    links, written = {}, []
    for cell, png in zip(charted, pngs):
        links[cell["name"]] = link(png)
        written += [png, png[:-4] + ".csv"]
    return links, written


# ---- command line --------------------------------------------------------------------------------

def parser() -> cmdline.Parser:
    p = cmdline.Parser(prog="fleetbench history", description="Each cell's figures through time, with change points.")
    p.add_argument("results", nargs="*", type=cmdline.INPUT_FILE, help="results files (JSONL), or --db URL")
    p.add_argument("--by", choices=changepoints.ORDERS, default="time", help="order of the runs (default time)")
    p.add_argument("--images", default=DEFAULT_DIR, type=cmdline.OUTPUT_DIR,
                   help=f"directory for the charts (default {DEFAULT_DIR})")
    p.add_argument("--regressions", action="store_true",
                   help="list only the cells whose latest change point is a slowdown, newest first")
    comparison.add_common(p)
    select.add_db(p)
    return p


def source(args) -> select.Side:
    """The records to read: the files, or --db with --where; InputError for neither or both."""
    if args.db and args.results:
        raise_text = f"--db {args.db}: expected no results files beside it, got {len(args.results)}"
    elif not args.db and not args.results:
        raise_text = "expected results files (JSONL) or --db URL"
    elif args.where and not args.db:
        raise_text = "--where KEY=VALUE: expected with --db URL"
    else:
        return select.Side(files=tuple(args.results), db=args.db, where=tuple(args.where))
    raise comparison.InputError(raise_text)


@cmdline.refusing("fleetbench history")
def cli(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    report = run(source(args), args.by, ignore=args.ignore, match=args.match, alpha=args.alpha,
                 threshold_pct=args.threshold, disturbed_pct=args.disturbed)
    if args.regressions and not args.json:
        sys.stdout.write("\n".join(regression_lines(report)) + "\n")
        return 0
    if args.json:
        for cell in report["cells"]:
            for change in cell["changes"]:
                change.pop("before"), change.pop("after")
        sys.stdout.write(json.dumps(report, sort_keys=True, ensure_ascii=False) + "\n")
        return 0
    links, _ = write_charts(report, args.images, lambda png: png)
    sys.stdout.write(text(report, links, markdown=args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
