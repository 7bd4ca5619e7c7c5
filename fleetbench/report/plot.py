"""`fleetbench report`: charts, their CSVs and markdown tables, regenerated from result records only.

    fleetbench report RESULTS.jsonl... [--images DIR] [--readme README.md] [--title TEXT]

Every chart `DIR/<name>.png` is written beside `DIR/<name>.csv` holding exactly the numbers drawn.
With --readme the markdown replaces only the text between the two marker lines; without it, the
markdown goes to stdout. Output is byte-identical for the same input (Agg backend, one fixed
style, no timestamps in PNG metadata, inputs ordered deterministically).
"""
from __future__ import annotations

import argparse
import csv
import io
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")  # before anything imports pyplot: no display, deterministic raster output
from matplotlib.figure import Figure  # noqa: E402  (after use())
from matplotlib.patches import Patch  # noqa: E402

from fleetbench.measure import results  # noqa: E402

BEGIN = "<!-- fleetbench:results:begin -->"
END = "<!-- fleetbench:results:end -->"

# ---- the one plot style -------------------------------------------------------------------------
STYLE = {
    "font.family": "DejaVu Sans",  # shipped with matplotlib: same glyphs on every machine
    "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 8,
    "xtick.labelsize": 9, "ytick.labelsize": 8,
    "axes.grid": True, "axes.grid.axis": "y", "grid.linestyle": ":", "grid.alpha": 0.6,
    "axes.spines.top": False, "axes.spines.right": False, "axes.axisbelow": True,
    "hatch.linewidth": 0.6, "errorbar.capsize": 2, "svg.hashsalt": "fleetbench",
}
# Okabe-Ito palette: distinguishable with colour-vision deficiencies.
COLORS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
PS_HATCH = "///"  # parameter-server series are hatched, collective ones are plain
FIGSIZE = (9.0, 4.6)
# Fixed margins (not a layout engine): room for the legend on the right and the caption below,
# and one draw per figure instead of two.
MARGINS = {"left": 0.075, "right": 0.775, "top": 0.86, "bottom": 0.2}
DPI = 100
SAVE = {"dpi": DPI, "format": "png", "metadata": {"Software": None}}  # no version/time stamps
LABEL_ROTATE_OVER = 3  # more series than this: efficiency labels are written vertically
LABEL_BARS_HORIZONTAL = 12  # ... and so are they when a chart has more bars than this


# ---- formatting -----------------------------------------------------------------------------------

def fmt(value) -> str:
    """Numbers for tables and labels: up to 3 decimals, trailing zeros dropped (925.020 -> 925.02)."""
    if value is None:
        return "—"
    if value != 0 and abs(value) < 1:
        return f"{value:.4g}"
    return f"{value:.3f}".rstrip("0").rstrip(".")


def slug(*parts) -> str:
    text = "-".join(str(p) for p in parts if p not in (None, ""))
    return re.sub(r"[^A-Za-z0-9._]+", "-", text).strip("-").lower()


def eff_label(cell: dict) -> str:
    return f"{cell['speedup']:.2f}x {cell['efficiency']:.0%}"


# ---- planning: which tables and charts the cells make ---------------------------------------

def _first_seen(records: list[dict]) -> dict:
    """Order of first appearance of benchmarks, methods and networks in the input: the order
    of tables, rows and legends (a fixed input gives a fixed order)."""
    order = {"method": {}, "network": {}, "table": {}}
    for record in records:
        order["table"].setdefault((results.source_name(record) or "", record["benchmark"],
                                   record.get("preset") or ""), len(order["table"]))
        order["method"].setdefault((record["mode"], record["method"]), len(order["method"]))
        network = results.network_profile(record.get("network"))
        order["network"].setdefault(network, len(order["network"]))
    return order


def _columns(cells: list[dict]) -> list[tuple]:
    """(world_size, nodes, devices_per_node) columns, labelled by world size alone when that is
    unambiguous and as `W (N×D)` otherwise."""
    layouts = sorted({(c["world_size"], c["nodes"], c["devices_per_node"]) for c in cells})
    worlds = [w for w, _, _ in layouts]
    unique = len(worlds) == len(set(worlds))
    return [(layout, str(layout[0]) if unique else f"{layout[0]} ({layout[1]}×{layout[2]})")
            for layout in layouts]


def _layout(cell: dict) -> tuple:
    return (cell["world_size"], cell["nodes"], cell["devices_per_node"])


def plan(records: list[dict]) -> list[dict]:
    """One table per (source, benchmark, preset), each with its charts."""
    order = _first_seen(records)
    cells = results.summarize_records(records)
    tables: dict[tuple, list[dict]] = {}
    for cell in cells:
        tables.setdefault((cell["source"] or "", cell["benchmark"], cell["preset"] or ""), []).append(cell)

    def row_key(c):
        return (order["network"][c["network"]] if c["method"] != results.SINGLE else -1,
                order["method"][(c["mode"], c["method"])])

    plans = []
    for (source, benchmark, preset), group in sorted(tables.items(),
                                                     key=lambda item: order["table"][item[0]]):
        group.sort(key=lambda c: (row_key(c), _layout(c)))
        plans.append({"source": source or None, "benchmark": benchmark, "preset": preset or None,
                      "cells": group, "columns": _columns(group),
                      "charts": _charts(source, benchmark, preset, group, row_key)})
    return plans


def _series_label(cell: dict, modes_per_method: dict) -> str:
    if len(modes_per_method.get(cell["method"], ())) > 1:
        return f"{cell['mode']}/{cell['method']}"
    return cell["method"]


def _charts(source, benchmark, preset, group, row_key) -> list[dict]:
    """Scaling charts split by network (series = methods) or by method (series = networks),
    whichever gives more series per chart; plus one network comparison when both vary."""
    drawn = [c for c in group if c["method"] != results.SINGLE and c["mean"] is not None]
    if not drawn:
        return []
    modes = {}
    for c in drawn:
        modes.setdefault(c["method"], set()).add(c["mode"])
    methods = sorted({(c["mode"], c["method"]) for c in drawn},
                     key=lambda m: row_key({"mode": m[0], "method": m[1], "network": None}))
    networks = sorted({c["network"] for c in drawn}, key=lambda n: row_key(
        {"mode": drawn[0]["mode"], "method": drawn[0]["method"], "network": n}))
    prefix = (source, benchmark, preset)
    charts = []
    by_network = len(methods) >= len(networks)
    for split in (networks if by_network else methods):
        if by_network:
            members = [c for c in drawn if c["network"] == split]
            subtitle = f"network {split}" if split else "no network shaping"
            name = slug(*prefix, split or "local")
            label = lambda c: _series_label(c, modes)  # noqa: E731
        else:
            members = [c for c in drawn if (c["mode"], c["method"]) == split]
            subtitle = f"method {_series_label(members[0], modes)}"
            name = slug(*prefix, split[1])
            label = lambda c: c["network"] or "no shaping"  # noqa: E731
        charts.append(_scaling_chart(name, _title(benchmark, preset, subtitle, source),
                                     members, label, row_key))
    if len(networks) > 1:
        chart = _network_chart(prefix, benchmark, preset, source, drawn, methods, networks, modes)
        if chart:
            charts.append(chart)
    return charts


def _title(benchmark, preset, subtitle, source) -> str:
    head = f"{benchmark}" + (f" [{preset}]" if preset else "") + f" — {subtitle}"
    return head + (f"\npublished by {source} (not measured here)" if source else "")


def _series(members, label, row_key) -> list[dict]:
    series: dict[str, list[dict]] = {}
    for c in sorted(members, key=lambda c: (row_key(c), _layout(c))):
        series.setdefault(label(c), []).append(c)
    return [{"label": k, "mode": v[0]["mode"], "cells": v} for k, v in series.items()]


def _size_noun(cells: list[dict]) -> str:
    """Parameter-server jobs grow by workers (their world size); collective ones by devices."""
    return "worker" if all(c["mode"] == "ps" for c in cells) else "device"


def _scaling_chart(name, title, members, label, row_key) -> dict:
    columns = _columns(members)
    return {"name": name, "title": title, "kind": "scaling",
            "groups": [(layout, text) for layout, text in columns],
            "series": _series(members, label, row_key),
            "xlabel": f"{_size_noun(members)}s (world size)", "unit": members[0]["unit"]}


def _network_chart(prefix, benchmark, preset, source, drawn, methods, networks, modes):
    """Method × network comparison at the largest job size every method/network pair ran."""
    per_pair = {}
    for c in drawn:
        per_pair.setdefault((c["mode"], c["method"], c["network"]), {})[_layout(c)] = c
    common = set.intersection(*(set(v) for v in per_pair.values()))
    if not common or len(per_pair) != len(methods) * len(networks):
        return None
    layout = max(common)
    series = []
    for network in networks:
        cells = [per_pair[(mode, method, network)][layout] for mode, method in methods]
        series.append({"label": network or "no shaping", "mode": None, "cells": cells})
    groups = [((m[0], m[1]), _series_label({"mode": m[0], "method": m[1]}, modes)) for m in methods]
    subtitle = f"methods × networks at {layout[0]} devices"
    return {"name": slug(*prefix, "networks", layout[0]), "kind": "networks",
            "title": _title(benchmark, preset, subtitle, source), "groups": groups,
            "series": series, "xlabel": "method", "unit": drawn[0]["unit"]}


# ---- drawing ------------------------------------------------------------------------------------

def _group_of(chart: dict, cell: dict):
    return (cell["mode"], cell["method"]) if chart["kind"] == "networks" else _layout(cell)


def chart_rows(chart: dict) -> list[dict]:
    """The numbers a chart draws, one row per bar (also the CSV beside the PNG)."""
    rows = []
    for series in chart["series"]:
        for cell in series["cells"]:
            rows.append({"series": series["label"], "mode": cell["mode"], "method": cell["method"],
                         "network": cell["network"] or "", "world_size": cell["world_size"],
                         "nodes": cell["nodes"], "devices_per_node": cell["devices_per_node"],
                         "mean": cell["mean"], "std": cell["std"], "n": cell["n"],
                         "ideal": cell["ideal"], "speedup": cell["speedup"],
                         "efficiency": cell["efficiency"]})
    return rows


def write_csv(path: str, rows: list[dict]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:  # repr: the exact float that was plotted, not a rounded copy
        writer.writerow({k: "" if v is None else repr(v) if isinstance(v, float) else v
                         for k, v in row.items()})
    _write_if_changed(path, buffer.getvalue().encode())


def draw(chart: dict) -> bytes:
    """PNG bytes of a grouped bar chart with std error bars, ideal marks and efficiency labels."""
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=FIGSIZE, dpi=DPI)
        fig.subplots_adjust(**MARGINS)
        ax = fig.add_subplot()
        width = 0.8 / len(chart["series"])
        tops, notes = _draw_bars(ax, chart, width)
        vertical = _vertical_labels(chart)
        _label_bars(ax, chart, width, vertical)
        ax.set_ylim(0, max(tops) * (1.32 if vertical else 1.18) or 1)
        _decorate(fig, ax, chart, notes)
        buffer = io.BytesIO()
        fig.savefig(buffer, **SAVE)
    return buffer.getvalue()


def _bar_x(chart: dict, cell: dict, index: int, width: float) -> float:
    groups = [g for g, _ in chart["groups"]]
    return groups.index(_group_of(chart, cell)) - 0.4 + width * (index + 0.5)


def _draw_bars(ax, chart: dict, width: float) -> tuple[list[float], set[str]]:
    """Bars, error bars and ideal marks; returns the heights drawn and the baseline notes."""
    tops, notes, ideal_label = [0.0], set(), "ideal (N × baseline)"
    for i, series in enumerate(chart["series"]):
        cells = series["cells"]
        xs = [_bar_x(chart, c, i, width) for c in cells]
        stds = [c["std"] or 0.0 for c in cells]
        bars = ax.bar(xs, [c["mean"] for c in cells], width * 0.92, yerr=stds,
                      label=series["label"], color=COLORS[i % len(COLORS)], edgecolor="black",
                      linewidth=0.5, error_kw={"elinewidth": 0.8, "ecolor": "black"})
        for bar, x, cell, std in zip(bars, xs, cells, stds):
            bar.set_hatch(PS_HATCH if cell["mode"] == "ps" else None)
            tops.append(cell["mean"] + std)
            if cell["ideal"] is None:
                notes.add(cell["baseline_note"])
                continue
            ax.hlines(cell["ideal"], x - width / 2, x + width / 2, colors="black",
                      linestyles="--", linewidth=1.0, label=ideal_label)
            ideal_label = None  # one legend entry for all marks
            tops.append(cell["ideal"])
            notes.add(_baseline_text(cell))
    return tops, notes


def _decorate(fig, ax, chart: dict, notes: set[str]) -> None:
    """Axes labels, ticks, title, legend (with the PS hatch key) and the caption."""
    ticks = [text for _, text in chart["groups"]]
    long_ticks = max(len(text) for text in ticks) * len(ticks) > 60
    ax.set_xticks(range(len(ticks)), ticks, rotation=15 if long_ticks else 0,
                  ha="right" if long_ticks else "center")
    ax.set_xlabel(chart["xlabel"])
    ax.set_ylabel(f"throughput ({chart['unit']})")
    ax.set_title(chart["title"], loc="left")
    handles, labels = ax.get_legend_handles_labels()
    if any(c["mode"] == "ps" for series in chart["series"] for c in series["cells"]):
        handles.append(Patch(facecolor="white", edgecolor="black", linewidth=0.5, hatch=PS_HATCH))
        labels.append("hatched: parameter server")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    caption = "error bars: std; labels: speedup and efficiency vs " + "; ".join(sorted(notes))
    failed = sum(c["failed"] for series in chart["series"] for c in series["cells"])
    if failed:
        caption += f"; {failed} failed run(s) not drawn (see table)"
    fig.text(0.01, 0.005, caption, fontsize=7, ha="left", va="bottom", wrap=True)


def _baseline_text(cell: dict) -> str:
    base = cell["baseline"]
    where = "1 node" if cell["axis"] == "nodes" else "world size 1"
    return f"{where} '{base['method']}' run = {fmt(base['mean'])} {cell['unit']} (from these results)"


def _vertical_labels(chart: dict) -> bool:
    """Labels go vertical when a horizontal two-line label would be wider than its bar."""
    return len(chart["series"]) > LABEL_ROTATE_OVER or \
        len(chart["series"]) * len(chart["groups"]) > LABEL_BARS_HORIZONTAL


def _label_bars(ax, chart, width, vertical) -> None:
    for i, series in enumerate(chart["series"]):
        for cell in series["cells"]:
            if cell["efficiency"] is None or cell["scale"] == 1:  # the baseline itself: 1.00x
                continue
            x = _bar_x(chart, cell, i, width)
            # above the ideal mark too, so a label never hides the mark it is measured against
            y = max(cell["mean"] + (cell["std"] or 0.0), cell["ideal"])
            text = eff_label(cell).replace(" ", " " if vertical else "\n")
            ax.annotate(text, (x, y), xytext=(0, 2), textcoords="offset points", ha="center",
                        va="bottom", fontsize=6.5 if vertical else 7,
                        rotation=90 if vertical else 0)


# ---- markdown -----------------------------------------------------------------------------------

def table_markdown(table: dict) -> str:
    cells, columns = table["cells"], table["columns"]
    ns = {c["n"] for c in cells if c["mean"] is not None}
    per_cell_n = len(ns) > 1
    noun = _size_noun(cells)
    head = ["Network", "Method"] + [f"{text} {noun}{'s' if layout[0] > 1 else ''}"
                                    for layout, text in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows: dict[tuple, dict] = {}
    for c in cells:
        rows.setdefault((c["network"], c["mode"], c["method"]), {})[_layout(c)] = c
    for (network, mode, method), by_layout in rows.items():
        values = [_cell_text(by_layout.get(layout), per_cell_n) for layout, _ in columns]
        label = f"{method} (ps)" if mode == "ps" and not method.endswith("PS") else method
        lines.append("| " + " | ".join([network or "—", label] + values) + " |")
    return "\n".join(lines)


def _cell_text(cell, per_cell_n: bool) -> str:
    if cell is None:
        return ""
    if cell["mean"] is None:
        return f"failed ×{cell['failed']}"
    text = fmt(cell["mean"])
    if cell["std"] is not None and cell["n"] != 1:
        text += f" ± {fmt(cell['std'])}"
    if cell["efficiency"] is not None and cell["world_size"] > 1:
        text += f" ({eff_label(cell).replace(' ', ', ')})"
    if per_cell_n:
        text += f" n={cell['n'] if cell['n'] is not None else '?'}"
    if cell["failed"]:
        text += f" +{cell['failed']} failed"
    return text


def _caption(table: dict) -> str:
    cells = [c for c in table["cells"] if c["mean"] is not None]
    failed = sum(c["failed"] for c in table["cells"])
    if not cells:
        return f"All {failed} run(s) of this benchmark failed; the errors are in the records."
    units = sorted({c["unit"] for c in cells})
    ns = sorted({c["n"] for c in cells}, key=lambda n: (n is None, n or 0))
    if table["source"]:
        spread = ("n not published; ± is the published std (population std, ddof 0)"
                  if ns == [None] else f"n = {', '.join(str(n) for n in ns)}")
        origin = f"Published numbers, not measured here: {table['source']}. {spread}."
    else:
        spread = (f"n = {ns[0]} run{'s' if ns[0] != 1 else ''} per cell" if len(ns) == 1
                  else "n per cell as shown")
        origin = f"Measured by fleetbench: mean ± sample std over repeats, {spread}."
    text = f"Throughput in {', '.join(units)}. {origin}"
    notes = sorted({c["baseline_note"] for c in cells if c["world_size"] > 1})
    if notes:
        text += (" In brackets: speedup and scaling efficiency = throughput(N) / "
                 f"(N × baseline); {'; '.join(notes)}.")
    if failed:
        text += f" {failed} failed run(s) are counted, not averaged."
    differs = sorted({k for c in table["cells"] for k in c["config_differs"]})
    if differs:
        text += f" Pooled runs differ in config: {', '.join(differs)}."
    return text


def report_markdown(title: str, plans: list[dict], images: dict, inputs: list[str],
                    nrecords: int) -> str:
    out = [f"## {title}", "",
           f"Generated by `fleetbench report` from {nrecords} records in "
           f"{', '.join(f'`{p}`' for p in inputs)}; edit the results, not this section.", ""]
    for table in plans:
        heading = table["benchmark"] + (f" [{table['preset']}]" if table["preset"] else "")
        if table["source"]:
            heading += f" — published: {table['source']}"
        out += [f"### {heading}", "", _caption(table), "", table_markdown(table), ""]
        for chart in table["charts"]:
            out += [f"![{chart['name']}]({images[chart['name']]})", ""]
    return "\n".join(out).rstrip("\n") + "\n"


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


def _write_if_changed(path: str, data: bytes) -> bool:
    """Atomic replace, and only when the bytes differ (re-runs leave files and mtimes alone)."""
    try:
        with open(path, "rb") as handle:
            if handle.read() == data:
                return False
    except FileNotFoundError:
        pass
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)
    return True


# ---- command line -------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fleetbench report",
                                description="Charts, CSVs and tables regenerated from result records.")
    p.add_argument("results", nargs="+", help="JSONL result files (schema 1)")
    p.add_argument("--images", default="images", help="directory for <name>.png/.csv (default: images)")
    p.add_argument("--readme", help="markdown file whose marked results section is replaced "
                   "(default: print the section on stdout)")
    p.add_argument("--title", default="Results", help="heading of the generated section")
    return p


def run(paths, images_dir, readme=None, title="Results") -> list[str]:
    """Generate everything; returns the files written or confirmed. Raises ValueError
    (RecordError included) with a one-line message before writing anything."""
    readme_text = None
    if readme is not None:
        try:
            with open(readme, encoding="utf-8", newline="") as handle:
                readme_text = handle.read()
        except OSError as exc:
            raise ValueError(f"{readme}: cannot read ({exc.strerror})")
        replace_section(readme_text, "", readme)  # check the markers before any output
    records = results.load(paths)
    if not records:  # failed runs alone still make a table: failures are results
        raise ValueError(f"{', '.join(paths)}: no records to report")
    plans = plan(records)
    os.makedirs(images_dir, exist_ok=True)
    base = os.path.dirname(os.path.abspath(readme)) if readme else os.getcwd()
    written, links = [], {}
    for chart in (c for table in plans for c in table["charts"]):
        png = os.path.join(images_dir, chart["name"] + ".png")
        write_csv(png[:-4] + ".csv", chart_rows(chart))
        _write_if_changed(png, draw(chart))
        written += [png, png[:-4] + ".csv"]
        links[chart["name"]] = os.path.relpath(os.path.abspath(png), base).replace(os.sep, "/")
    section = report_markdown(title, plans, links, list(paths), len(records))
    if readme is None:
        sys.stdout.write(section)
    else:
        _write_if_changed(readme, replace_section(readme_text, section, readme).encode("utf-8"))
        written.append(readme)
    return written


def cli(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        written = run(args.results, args.images, args.readme, args.title)
    except ValueError as exc:
        print(f"fleetbench report: {exc}", file=sys.stderr)
        return 2
    charts = sum(path.endswith(".png") for path in written)
    print(f"fleetbench report: {charts} chart(s) (PNG + CSV) in {args.images}"
          + (f"; results section of {args.readme} regenerated" if args.readme else ""),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
