"""The report's charts: which charts a table makes, the numbers each draws (its CSV), and the
drawing, in fleetbench's one plot style (`style`). Output is byte-identical for the same input."""
from __future__ import annotations

import csv
import io

from fleetbench.measure.repeats import aggregate, stability
from fleetbench.measure.registry import SINGLE
from fleetbench.report.style import (COLORS, DPI, FIGSIZE, MARGINS, PS_HATCH, SAVE, STYLE, Figure, Patch,
                                     matplotlib, slug, text_renderer, wrapped_text)
from fleetbench.report.tables import (columns, eff_label, layout, line_key, mfu_of, mfu_text, row_key, size_noun,
                                      variant, variant_text)

LABEL_ROTATE_OVER = 3  # more series than this: efficiency labels are written vertically
LABEL_BARS_HORIZONTAL = 12  # ... and so are they when a chart has more bars than this
LABEL_OFFSET_PT = 2  # a bar's label above its bar (or ideal mark)
LAYOUT_PASSES = 4  # the axis grows at most this often to hold the labels (two passes suffice in practice)


# ---- planning: which charts a table makes ----------------------------------------------------------

def _line(table: dict, group: dict) -> tuple:
    """A method run the same way: mode, method and the values that distinguish experiments.
    (`table` may be a chart: both carry the distinguishing traits as "dims".)"""
    return (group["mode"], group["method"], variant(table, group))


def _method_label(table: dict, group: dict, modes_per_method: dict) -> str:
    name = group["method"]
    if len(modes_per_method.get(name, ())) > 1:
        name = f"{group['mode']}/{name}"
    if table["dims"]:  # one line per distinguishing value keeps the legend narrow
        name += "\n" + variant_text(table, group, sep="\n")
    return name


def plan(table: dict) -> list[dict]:
    """Scaling charts split by network (series = method lines) or by method line (series =
    networks), whichever gives more series per chart; plus one network comparison when both vary."""
    drawn = [g for g in table["groups"] if g["method"] != SINGLE and g["mean"] is not None]
    if not drawn:
        return []
    modes: dict[str, set] = {}
    for g in drawn:
        modes.setdefault(g["method"], set()).add(g["mode"])
    lines = list(dict.fromkeys(_line(table, g) for g in sorted(drawn, key=lambda g: line_key(table, g))))
    networks = list(dict.fromkeys(g["network"] for g in sorted(
        drawn, key=lambda g: row_key(table, g))))
    prefix = (table["source"], table["benchmark"], table["preset"])
    charts = []
    by_network = len(lines) >= len(networks)
    for split in (networks if by_network else lines):
        if by_network:
            members = [g for g in drawn if g["network"] == split]
            subtitle = f"network {split}" if split else "no network shaping"
            name = slug(*prefix, split or "local")
            label = lambda g: _method_label(table, g, modes)  # noqa: E731
        else:
            members = [g for g in drawn if _line(table, g) == split]
            subtitle = f"method {_method_label(table, members[0], modes)}".replace("\n", ", ")
            name = slug(*prefix, split[1], *split[2])
            label = lambda g: g["network"] or "no shaping"  # noqa: E731
        charts.append(_scaling_chart(table, name, _title(table, subtitle), members, label))
    if len(networks) > 1:
        chart = _network_chart(table, prefix, drawn, lines, networks, modes)
        if chart:
            charts.append(chart)
    return charts


def _title(table: dict, subtitle: str) -> str:
    head = table["benchmark"] + (f" [{table['preset']}]" if table["preset"] else "") + f" — {subtitle}"
    return head + (f"\npublished by {table['source']} (not measured here)" if table["source"] else "")


def _series(table, members, label) -> list[dict]:
    series: dict[str, list[dict]] = {}
    for g in sorted(members, key=lambda g: (row_key(table, g), layout(g))):
        series.setdefault(label(g), []).append(g)
    return [{"label": k, "mode": v[0]["mode"], "groups": v} for k, v in series.items()]


def _scaling_chart(table, name, title, members, label) -> dict:
    return {"name": name, "title": title, "kind": "scaling", "dims": table["dims"],
            "ticks": columns(members),
            "series": _series(table, members, label),
            "xlabel": f"{size_noun(members)}s (world size)", "unit": members[0]["unit"]}


def _network_chart(table, prefix, drawn, lines, networks, modes):
    """Method × network comparison at the largest job size every method line/network pair ran."""
    per_pair: dict[tuple, dict] = {}
    for g in drawn:
        per_pair.setdefault((_line(table, g), g["network"]), {})[layout(g)] = g
    common = set.intersection(*(set(v) for v in per_pair.values()))
    if not common or len(per_pair) != len(lines) * len(networks):
        return None
    size = max(common)
    series = [{"label": network or "no shaping", "mode": None,
               "groups": [per_pair[(line, network)][size] for line in lines]}
              for network in networks]
    ticks = [(line, _method_label(table, per_pair[(line, networks[0])][size], modes)) for line in lines]
    return {"name": slug(*prefix, "networks", size[0]), "kind": "networks", "dims": table["dims"],
            "title": _title(table, f"methods × networks at {size[0]} devices"), "ticks": ticks,
            "series": series, "xlabel": "method", "unit": drawn[0]["unit"]}


def _tick_of(chart: dict, group: dict):
    return _line(chart, group) if chart["kind"] == "networks" else layout(group)


# ---- the numbers drawn (CSV) ---------------------------------------------------------------------

def chart_rows(chart: dict) -> list[dict]:
    """The numbers a chart draws, one row per bar (also the CSV beside the PNG). The traits that
    distinguish experiments in its table (Paddle, a config key...) get a column each."""
    rows = []
    for series in chart["series"]:
        for g in series["groups"]:
            row = {"series": series["label"].replace("\n", " "), "mode": g["mode"],
                   "method": g["method"], "network": g["network"] or ""}
            row.update(zip(chart["dims"], variant(chart, g)))
            row.update({"world_size": g["world_size"], "nodes": g["nodes"],
                        "devices_per_node": g["devices_per_node"], "mean": g["mean"],
                        "std": g["std"], "n": g["n"], "ideal": g["ideal"],
                        "speedup": g["speedup"], "efficiency": g["efficiency"],
                        "efficiency_err": g.get("efficiency_err"), "cv": g.get("cv"),
                        "unstable": g.get("unstable"), "excluded": len(g.get("excluded", ())),
                        "mfu": mfu_of(g)})
            rows.append(row)
    return rows


def csv_bytes(rows: list[dict]) -> bytes:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:  # repr: the exact float that was plotted, not a rounded copy
        writer.writerow({k: "" if v is None else repr(v) if isinstance(v, float) else v
                         for k, v in row.items()})
    return buffer.getvalue().encode()


# ---- drawing ------------------------------------------------------------------------------------

def draw(chart: dict) -> bytes:
    """PNG bytes of a grouped bar chart with std error bars, ideal marks and efficiency labels."""
    with matplotlib.rc_context(STYLE):
        buffer = io.BytesIO()
        figure(chart).savefig(buffer, **SAVE)
    return buffer.getvalue()


def figure(chart: dict):
    """The chart drawn on a Figure (draw saves it; tests measure its texts), under STYLE's rc."""
    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    fig.subplots_adjust(**MARGINS)
    ax = fig.add_subplot()
    width = 0.8 / len(chart["series"])
    tops, notes = _draw_bars(ax, chart, width)
    _place_labels(fig, ax, chart, width, max(tops))
    _decorate(fig, ax, chart, notes)
    return fig


def _place_labels(fig, ax, chart: dict, width: float, top: float) -> None:
    """The bars' labels, vertical when the chart has many bars (_vertical_labels), else horizontal;
    measured as Agg lays them out, a label that would overlap one to its left is raised above it
    (two-line labels of adjacent bars are wider than their bars), and the y axis is made tall
    enough to hold every label inside the axes. Layout repeats until the axis need not grow."""
    vertical = _vertical_labels(chart)
    labels = _label_bars(ax, chart, width, vertical)
    limit, renderer = top * (1.32 if vertical else 1.18) or 1, text_renderer(fig)
    for _ in range(LAYOUT_PASSES):
        ax.set_ylim(0, limit)
        _raise_overlapping(labels, renderer, fig.dpi)
        needed = max([limit] + [_room_for(ax, label, renderer, limit) for label in labels])
        if needed <= limit * 1.001:
            return
        limit = needed


def _raise_overlapping(labels: list, renderer, dpi: float) -> None:
    """Each label, left to right, lifted (its offset in points) just above any label placed before
    it that it would overlap."""
    placed = []
    for label in sorted(labels, key=lambda t: t.xy[0]):
        label.xyann = (0, LABEL_OFFSET_PT)
        while True:
            box = label.get_window_extent(renderer)
            over = [b for b in placed if min(b.x1, box.x1) - max(b.x0, box.x0) > 0 and min(b.y1, box.y1) - max(b.y0, box.y0) > 0]
            if not over:
                break
            label.xyann = (0, label.xyann[1] + (max(b.y1 for b in over) - box.y0 + 1) * 72 / dpi)
        placed.append(box)


def _room_for(ax, label, renderer, limit: float) -> float:
    """The y-axis top that holds `label` inside the axes (2 % below their top), as drawn now."""
    height, top = ax.bbox.height, ax.bbox.y1
    anchor = ax.bbox.y0 + label.xy[1] / limit * height
    above = label.get_window_extent(renderer).y1 - anchor  # points above its anchor: the same at any limit
    free = 0.98 * height - above
    return label.xy[1] * height / free if free > 0 and label.xy[1] > 0 else limit


def _bar_x(chart: dict, group: dict, index: int, width: float) -> float:
    ticks = [t for t, _ in chart["ticks"]]
    return ticks.index(_tick_of(chart, group)) - 0.4 + width * (index + 0.5)


def _draw_bars(ax, chart: dict, width: float) -> tuple[list[float], set[str]]:
    """Bars, error bars and ideal marks; returns the heights drawn and the baseline notes."""
    tops, notes, ideal_label = [0.0], set(), "ideal (N × baseline)"
    for i, series in enumerate(chart["series"]):
        groups = series["groups"]
        xs = [_bar_x(chart, g, i, width) for g in groups]
        stds = [g["std"] or 0.0 for g in groups]
        bars = ax.bar(xs, [g["mean"] for g in groups], width * 0.92, yerr=stds,
                      label=series["label"], color=COLORS[i % len(COLORS)], edgecolor="black",
                      linewidth=0.5, error_kw={"elinewidth": 0.8, "ecolor": "black"})
        for bar, x, g, std in zip(bars, xs, groups, stds):
            bar.set_hatch(PS_HATCH if g["mode"] == "ps" else None)
            tops.append(g["mean"] + std)
            if g["ideal"] is None:
                notes.add(g["baseline_note"])
                continue
            ax.hlines(g["ideal"], x - width / 2, x + width / 2, colors="black",
                      linestyles="--", linewidth=1.0, label=ideal_label)
            ideal_label = None  # one legend entry for all marks
            tops.append(g["ideal"])
            notes.add(_baseline_text(g))
    return tops, notes


def _decorate(fig, ax, chart: dict, notes: set[str]) -> None:
    """Axes labels, ticks, title, legend (with the PS hatch key) and the caption."""
    ticks = [text for _, text in chart["ticks"]]
    long_ticks = max(len(text) for text in ticks) * len(ticks) > 60
    ax.set_xticks(range(len(ticks)), ticks, rotation=15 if long_ticks else 0,
                  ha="right" if long_ticks else "center")
    ax.set_xlabel(chart["xlabel"])
    ax.set_ylabel(f"throughput ({chart['unit']})")
    ax.set_title(chart["title"], loc="left")
    handles, labels = ax.get_legend_handles_labels()
    if any(g["mode"] == "ps" for series in chart["series"] for g in series["groups"]):
        handles.append(Patch(facecolor="white", edgecolor="black", linewidth=0.5, hatch=PS_HATCH))
        labels.append("hatched: parameter server")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    caption = caption_text(chart, notes)
    wrapped_text(fig, 0.01, 0.005, caption, fontsize=7, ha="left", va="bottom")


def caption_text(chart: dict, notes: set[str]) -> str:
    """The line under a chart: what bars and labels mean, failed runs, cells whose bar leaves an
    outlier out, and unstable cells by name."""
    caption = "error bars: std; labels: speedup and efficiency vs " + "; ".join(sorted(notes))
    drawn = [g for series in chart["series"] for g in series["groups"]]
    failed = sum(g["failed"] for g in drawn)
    if failed:
        caption += f"; {failed} failed run(s) not drawn (see table)"
    excluded = [g for g in drawn if g.get("excluded")]
    if excluded:
        caption += ("; bars without their outliers: "
                    + ", ".join(f"{_cell_name(g)} ({len(g['excluded'])} of {len(g['runs'])} runs excluded)"
                                for g in excluded))
    unstable = [g for g in drawn if g.get("unstable")]
    if unstable:
        caption += ("; UNSTABLE: " + ", ".join(f"{_cell_name(g)} ({aggregate.why_unstable(g)})" for g in unstable))
    if excluded or unstable:
        caption += "; runs listed under the table"
    return caption


def _cell_name(group: dict) -> str:
    return f"{group['method']}{' ' + group['network'] if group['network'] else ''} at {group['world_size']}"


def _baseline_text(group: dict) -> str:
    base = group["baseline"]
    where = "1 node" if group["axis"] == "nodes" else "world size 1"
    mean = stability.format_pm(base["mean"], base["std"] if base["n"] != 1 else None)
    note = stability.excluded_note(base["n"], len(base.get("excluded") or ()))
    return f"{where} '{base['method']}' run = {mean} {group['unit']}{note} (from these results)"


def _vertical_labels(chart: dict) -> bool:
    """Labels go vertical when a horizontal two-line label would be wider than its bar."""
    return len(chart["series"]) > LABEL_ROTATE_OVER or \
        len(chart["series"]) * len(chart["ticks"]) > LABEL_BARS_HORIZONTAL


def _label_bars(ax, chart, width, vertical) -> list:
    """Each bar's label (speedup and efficiency, MFU) above it and its ideal mark: the texts made."""
    made = []
    for i, series in enumerate(chart["series"]):
        for g in series["groups"]:
            scaled = not (g["efficiency"] is None or g["scale"] == 1)  # the baseline itself: 1.00x
            parts = ([eff_label(g, sep=" " if vertical else "\n")] if scaled else []) + \
                ([mfu_text(g).strip()] if mfu_text(g) else [])  # MFU beside every throughput
            if not parts or g["mean"] is None:
                continue
            x = _bar_x(chart, g, i, width)
            # above the ideal mark too, so a label never hides the mark it is measured against
            y = max(g["mean"] + (g["std"] or 0.0), g["ideal"] or 0.0)
            text = (" " if vertical else "\n").join(parts)
            made.append(ax.annotate(text, (x, y), xytext=(0, LABEL_OFFSET_PT), textcoords="offset points", ha="center",
                                    va="bottom", fontsize=6.5 if vertical else 7,
                                    rotation=90 if vertical else 0))
    return made
