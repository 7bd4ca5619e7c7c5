"""`fleetbench report`: charts, their CSVs and markdown tables, regenerated from result records only.

    fleetbench report RESULTS.jsonl... [--images DIR] [--readme README.md [--full DOC.md]] [--title TEXT] [--json]
                      [--cv-threshold PCT] [--html DIR]
    fleetbench report BASE... -- NEW... --html DIR     the page holds their comparison and history too

Every chart `DIR/<name>.png` is written beside `DIR/<name>.csv` holding exactly the numbers drawn.
With --readme the markdown replaces only the text between the two marker lines; without it, the
markdown goes to stdout. With --full too, DOC's marked section gets the whole markdown and the
README's its digest (`digest`: the first table with its first chart, the first explain row, a
link to DOC). With --json nothing is drawn: one JSON object per aggregation group goes
to stdout. Output is byte-identical for the same input (see `charts`; inputs are ordered
deterministically). Which tables and rows the groups make is `tables`, the drawing is `charts`.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import sys

from fleetbench import cmdline
from fleetbench.measure.repeats import aggregate, stability
from fleetbench.store import results, select
from fleetbench.report import (
    DEFAULT_DIR,
    allreduce_vs_ps,
    bandwidth,
    charts,
    convergence,
    explain,
    health,
    tables,
)
from fleetbench.report.output import save_chart, write_if_changed

BEGIN = "<!-- fleetbench:results:begin -->"
END = "<!-- fleetbench:results:end -->"


# ---- README section -----------------------------------------------------------------------------

def replace_section(text: str, section: str, path: str) -> str:
    """`text` with the lines between the marker lines replaced by `section`. Raises ValueError
    (one line) when the markers are missing, repeated or out of order."""
    lines = text.splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if line.strip() == BEGIN]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if len(begins) != 1 or len(ends) != 1 or begins[0] > ends[0]:
        raise ValueError(f"{path}: expected one line '{BEGIN}' followed by one line '{END}' "
                         f"(found {len(begins)} begin, {len(ends)} end); file left untouched")
    newline = "\r\n" if lines[begins[0]].endswith("\r\n") else "\n"
    body = section.replace("\n", newline)
    return "".join(lines[:begins[0] + 1]) + newline + body + newline + "".join(lines[ends[0]:])


def digest(section: str, full_link: str, rebase) -> str:
    """The README's share of a full section: its heading and source line, the first table with its
    caption and first chart, the header and first row of the first "Why not better" table (its
    caption is the full section's), and a link to the full section (`full_link`); `rebase(path)` re-points an image link."""
    lines = section.rstrip("\n").split("\n")
    heads = [i for i, line in enumerate(lines) if line.startswith("### ")] + [len(lines)]
    out = lines[:heads[0]]
    first = lines[heads[0]:heads[1]]
    image = next((i for i, line in enumerate(first) if line.startswith("![")), len(first) - 1)
    out += first[:image + 1] + [""]
    why = next((i for i in heads[:-1] if lines[i] == "### Why not better"), None)
    if why is not None:
        group = next(i for i in range(why, len(lines)) if lines[i].startswith("#### "))
        out += [lines[why], ""] + lines[group:group + 2] + lines[group + 2:group + 5] + [""]
    out.append(f"Every table, chart and explain row of these records: [{full_link}]({full_link}) "
               "(generated with this section).")
    return re.sub(r"(!\[[^\]]*\])\(([^)]+)\)", lambda m: f"{m.group(1)}({rebase(m.group(2))})",
                  "\n".join(out)) + "\n"


def _read_marked(path: str) -> str:
    """A markdown file's text, its markers checked before any output (ValueError, one line)."""
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            text = handle.read()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror})")
    replace_section(text, "", path)
    return text


# ---- command line -------------------------------------------------------------------------------

def _readme(text: str) -> str:
    """A markdown file this report can read and rewrite (its markers are checked when read)."""
    problem = cmdline.input_file_problem(text) or cmdline.output_file_problem(text)
    if problem:
        raise cmdline.Refused(f"{text or repr(text)}: {cmdline.with_expected(problem, README.expected)}")
    return text


README = cmdline.Kind("a markdown file it can rewrite", _readme, ("", cmdline.MISSING, cmdline.DIRECTORY))
PERCENT = cmdline.number(0.0, 999.0)


def parser(nargs: str = "+") -> cmdline.Parser:
    p = cmdline.Parser(prog="fleetbench report",
                       description="Charts, CSVs and tables regenerated from result records.")
    p.add_argument("results", nargs=nargs, type=cmdline.INPUT_FILE, help="JSONL result files (schema 1); "
                   "BASE... -- NEW... adds their comparison")
    p.add_argument("--images", type=cmdline.OUTPUT_DIR,
                   help=f"directory for <name>.png/.csv (default: {DEFAULT_DIR}; make demo gives images)")
    p.add_argument("--readme", type=README, help="markdown file whose marked results section is replaced "
                   "(default: print the section on stdout)")
    p.add_argument("--full", type=README, metavar="DOC", help="with --readme: DOC's marked section gets the "
                   "whole generated section, the README's its first table, chart and explain row and a link to DOC")
    p.add_argument("--title", default="Results", type=cmdline.TEXT, help="heading of the generated section")
    p.add_argument("--cv-threshold", type=PERCENT, default=100 * stability.CV_THRESHOLD, metavar="PCT",
                   help="a cell whose runs' std exceeds PCT %% of their mean is marked unstable "
                   f"(default {100 * stability.CV_THRESHOLD:g})")
    p.add_argument("--json", action="store_true", help="print the aggregated groups (one JSON "
                   "object per line) instead of drawing charts and tables")
    p.add_argument("--html", metavar="DIR", type=cmdline.OUTPUT_DIR, help="also write the report as one "
                   "self-contained page, DIR/index.html (charts inlined, their PNG/CSV in DIR/images); with "
                   "BASE... -- NEW... it holds the comparison too")
    select.add_db(p)
    return p


def run(paths, images_dir, readme=None, title="Results", cv_threshold=stability.CV_THRESHOLD,
        full=None) -> list[str]:
    """Generate everything; returns the files written or confirmed. Raises ValueError
    (RecordError included) with a one-line message before writing anything."""
    cmdline.check_output_dir(images_dir, "--images")
    readme_text = _read_marked(readme) if readme is not None else None
    full_text = _read_marked(full) if full is not None else None
    home = os.path.dirname(os.path.abspath(full or readme)) if readme else os.getcwd()
    section, written = build(paths, images_dir, home, title, cv_threshold)
    if readme is None:
        sys.stdout.write(section)
        return written
    if full is not None:
        write_if_changed(full, replace_section(full_text, section, full).encode("utf-8"))
        readme_dir = os.path.dirname(os.path.abspath(readme))

        def rebase(png: str) -> str:
            return os.path.relpath(os.path.join(home, png), readme_dir).replace(os.sep, "/")
        section = digest(section, rebase(os.path.abspath(full)), rebase)
        written.append(full)
    write_if_changed(readme, replace_section(readme_text, section, readme).encode("utf-8"))
    return written + [readme]


def build(paths, images_dir: str, base: str, title: str = "Results", cv_threshold: float = stability.CV_THRESHOLD,
          records: list[dict] | None = None) -> tuple[str, list[str]]:
    """(the markdown section, the chart files written): tables, charts, run lists and the sections
    of their own, images linked relative to `base`. Raises ValueError (one line) before writing."""
    records = _load(paths) if records is None else records
    # comm records (bus bandwidth by message size) have their own charts and tables: report.comm;
    # diagnose records (cluster health, docs/guide/diagnose.md) have no throughput to tabulate
    planned = [dataclasses.replace(table, charts=tuple(charts.plan(table)))
               for table in tables.plan([r for r in records if r["mode"] not in ("comm", "diagnose")], cv_threshold)]
    os.makedirs(images_dir, exist_ok=True)

    def link(png: str) -> str:
        return os.path.relpath(os.path.abspath(png), base).replace(os.sep, "/")
    written, links = [], {}
    for chart in (c for table in planned for c in table.charts):
        png = save_chart(images_dir, chart["name"], charts.chart_rows(chart), charts.draw(chart))
        written += [png, png[:-4] + ".csv"]
        links[chart["name"]] = link(png)
    section = tables.report_markdown(title, planned, links, select.side(paths).names(), len(records))
    # sections of their own: comm records, models trained both ways (AllReduce vs PS), accuracy
    # against time, why multi-device cells are not N times faster, and the cluster's health
    # (stored diagnoses, stragglers) the results were measured on
    for module in (bandwidth, allreduce_vs_ps, convergence, explain, health):
        more, files = module.section(records, images_dir, link)
        section += f"\n{more}" if more else ""
        written += files
    return section, written


def _load(paths) -> list[dict]:
    """The records of files or of a select.Side (--db URL --where ...)."""
    source = select.side(paths)
    records = source.records()
    if not records:  # failed runs alone still make a table: failures are results
        raise ValueError(f"{', '.join(source.names())}: no records to report")
    return records


def groups_json(paths, cv_threshold=stability.CV_THRESHOLD) -> str:
    """One JSON object per aggregation group, one per line: the fields that define the experiment
    (see fleetbench.measure.repeats.experiment), then n, mean, std, median, min, max, unit, failed runs,
    and speedup/efficiency against the baseline the report uses, with their errors; cv, unstable,
    outliers (record ids), runs and ci95_pct (aggregate.stability_fields)."""
    return "".join(json.dumps(group.as_dict(), sort_keys=True, ensure_ascii=False) + "\n"
                   for group in aggregate.summarize_records(_load(paths), cv_threshold))


def extra_sections(base: list[str], new: list[str] | None, images_dir: str, link) -> tuple[str, list[str]]:
    """The comparison of BASE and NEW (`fleetbench compare`'s markdown) and the cells' history
    with change points (`fleetbench history`'s), for a page given two sides."""
    if not new:
        return "", []
    from fleetbench.report.regression import comparison, history_view
    report = comparison.run(base, new)
    trail = history_view.run(base + new)
    links, written = history_view.write_charts(trail, images_dir, link)
    return (f"\n## Comparison\n\n{comparison.markdown(report)}\n## History\n\n"
            f"{history_view.text(trail, links, markdown=True)}"), written


def check_dir(path: str, flag: str) -> None:
    """cmdline.PathProblem (a ValueError, one line) unless `path` is, or can be made, a directory
    we can write in, and its index.html a file we can write; found before any chart is drawn,
    without making anything."""
    cmdline.check_output_dir(path, flag)
    cmdline.check_output_file(os.path.join(path, "index.html"), flag)


def write_html(args, base: list[str], new: list[str] | None) -> list[str]:
    """DIR/index.html: the report of both sides' records, then their comparison and history; returns
    the files written, the page last."""
    from fleetbench.report import html
    images = os.path.join(args.html, "images")

    def link(png: str) -> str:
        return os.path.relpath(os.path.abspath(png), os.path.abspath(args.html)).replace(os.sep, "/")
    section, written = build(base + new if new else base, images, os.path.abspath(args.html), args.title,
                             args.cv_threshold / 100)
    more, files = extra_sections(base, new, images, link)
    more += html.traces_section(_load(base + (new or [])), link)
    return written + files + [html.write(args.html, args.title, section + more)]


def cli(argv: list[str]) -> int:
    from fleetbench.report.regression import comparison
    args, paths = comparison.parse_sides(argv, lambda nargs: parser("*"))
    if args.full and not args.readme:
        parser().error("--full: the README whose section links to it is missing (expected --readme FILE too)")
    if args.json and args.images:
        parser().error("--images: not read with --json (expected one of them)")
    if bool(args.db) == bool(paths) or (args.where and not args.db):
        parser().error("expected results files or --db URL (with --where KEY=VALUE), one of them")
    if args.db:
        paths = args.results = select.Side(db=args.db, where=tuple(args.where))
    args.images = args.images or DEFAULT_DIR
    try:
        base, new = comparison.split_sides(paths) if not args.db and "--" in paths else (paths, None)
        if args.html:
            check_dir(args.html, "--html")
        if args.json:
            if new:
                raise ValueError("--json prints the groups of one set of files: drop the -- (or use fleetbench compare --json)")
            sys.stdout.write(groups_json(args.results, args.cv_threshold / 100))
            return 0
        written = run(base + new if new else base, args.images, args.readme, args.title, args.cv_threshold / 100,
                      args.full) if args.readme or not args.html else []
        if args.html:
            written += write_html(args, base, new)
        elif new:
            sys.stdout.write(extra_sections(base, new, args.images, lambda png: png)[0])
    except ValueError as exc:  # RecordError, KeyNameError, comparison.InputError, html.PageError are ValueErrors
        print(f"fleetbench report: {exc}", file=sys.stderr)
        return 2
    charts = sum(path.endswith(".png") for path in written)
    print(f"fleetbench report: {charts} chart(s) (PNG + CSV) in {args.images if not args.html else os.path.join(args.html, 'images')}"
          + (f"; results section of {args.readme} regenerated" if args.readme else "")
          + (f" (in full: {args.full})" if args.full else "")
          + (f"; page {os.path.join(args.html, 'index.html')}" if args.html else ""),
          file=sys.stderr)
    return 0



if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
