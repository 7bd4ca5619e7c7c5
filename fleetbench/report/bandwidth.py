"""Communication charts: bus bandwidth against message size, per network, beside the wire's limit.

Reads comm records (mode `comm`, fleetbench.comm.opmath). Repeats of one experiment
(fleetbench.measure.repeats.experiment) are pooled per size. For every op and job shape (benchmark,
preset, config, nodes x devices, build, host: everything but the network) it makes
- one chart: busbw (GB/s, log axis) against message size (bytes, log axis), one line per network (mean
  over the repeats, std as error bars); each shaped network's rate (rate_gbit / 8 GB/s) as a
  dashed limit line, and the raw TCP rate measured through the same link (metrics.link_tcp_GBps)
  as a dotted one, in the network's colour; a CSV beside it holding exactly the numbers drawn;
- one markdown table: per network, the headline busbw (mean ± std over repeats of the op's
  average over sizes >= its threshold), the shaped rate, the raw TCP rate, busbw as a fraction
  of each, the alpha-beta fit, and what limited the op (fleetbench.comm.limits: link, CPU
  reduction, latency), judged from the repeats' mean figures.

    markdown, files = section(records, images_dir, link)   # link(png_path) -> path for markdown
"""
from __future__ import annotations

import dataclasses
import io
import statistics

from fleetbench.comm import limits, opmath
from fleetbench.measure.repeats import experiment
from fleetbench.report import output
from fleetbench.report.style import (
    COLORS,
    DPI,
    FIGSIZE,
    MARGINS,
    SAVE,
    STYLE,
    Figure,
    matplotlib,
    slug,
    wrapped_text,
)
from fleetbench.report.tables import fmt

NOTE = ("busbw = bytes / time x the op's factor (nccl-tests); shaped = the emulated link's rate; "
        "raw TCP = one TCP stream between two nodes through the same link")


def _mean_std(values: list) -> tuple:
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


# ---- pooling ---------------------------------------------------------------------------------

def _series_of(exp, op: str, members: list[dict]) -> dict:
    """One line of a chart: an experiment's op, its repeats pooled."""
    sizes: dict[int, dict] = {}
    for record in members:
        for row in (r for r in record["metrics"]["rows"] if r["op"] == op and r["bytes"] > 0):
            sizes.setdefault(row["bytes"], {"busbw": [], "algbw": [], "time_us": []})
            for key, name in (("busbw", "busbw_GBps"), ("algbw", "algbw_GBps"), ("time_us", "time_us")):
                sizes[row["bytes"]][key].append(row[name])
    # Each run's headline and fit are computed again from its rows, so a fit improved since the
    # run was made (e.g. alpha kept >= 0) applies to stored records too.
    parts = [opmath.summarize_op(op, [row for row in r["metrics"]["rows"] if row["op"] == op], r["world_size"],
                               ((r["metrics"].get("ops") or {}).get(op) or {}).get("headline_min_bytes")
                               or r["metrics"]["headline_min_bytes"]) for r in members]
    network = members[0].get("network") or {}
    rate = network.get("rate_gbit")
    series = {"network": exp.network, "runs": len(members), "sizes": dict(sorted(sizes.items())),
            "shaped_GBps": None if rate is None else rate / 8,
            "tcp": _mean_std([r["metrics"].get("link_tcp_GBps") for r in members]),
            "headline": _mean_std([p.get("busbw_GBps") for p in parts]),
            "threshold": parts[0].get("headline_min_bytes"),
            "alpha_us": _mean_std([p.get("alpha_us") for p in parts])[0],
            "bandwidth_GBps": _mean_std([p.get("bandwidth_GBps") for p in parts])[0]}
    return dict(series, limit=_limit(op, members, series))


def _limit(op: str, members: list[dict], series: dict):
    """What limited the op, judged on the repeats' means (busbw, alpha, raw TCP, triad)."""
    figures = limits.of_record(members[0], op)
    if figures is None or series["headline"][0] is None:
        return None
    triad = _mean_std([limits.triad(r["metrics"]) for r in members])[0]
    job, others = (_mean_std([r["metrics"].get(key) for r in members])[0]
                   for key in ("job_cpu_pct", "interference_cpu_pct"))
    return limits.judge(dataclasses.replace(
        figures, busbw_GBps=series["headline"][0], alpha_us=series["alpha_us"],
        link_GBps=series["tcp"][0] or figures.link_GBps,
        triad_GBps=triad if figures.triad_GBps is not None else None, job_cpu_pct=job, others_cpu_pct=others))


def plan(records: list[dict]) -> list[dict]:
    """Charts of the successful comm records, in first-seen order; series sorted by network rate
    (unshaped last)."""
    pooled: dict = {}
    for record in records:
        if record["mode"] != "comm" or record.get("error") is not None or not record.get("metrics"):
            continue
        pooled.setdefault(experiment.of(record), []).append(record)
    charts: dict = {}
    for exp, members in pooled.items():
        ops = opmath.parse_ops(exp.method)
        for op in (op for op in ops if op != "barrier"):
            key = (dataclasses.replace(exp, network=None), op)
            charts.setdefault(key, []).append(_series_of(exp, op, members))
    out = []
    for (shape, op), series in charts.items():
        config = shape.fields()["config"]
        series.sort(key=lambda s: (s["shaped_GBps"] is None, s["shaped_GBps"] or 0, s["network"] or ""))
        layout = f"{shape.nodes}x{shape.devices_per_node}"
        out.append({"name": slug(shape.source, "comm", shape.preset, op, config.get("dtype"), layout),
                    "title": (f"{op} {config.get('dtype')} [{shape.preset}] on {shape.nodes} node(s) "
                              f"x {shape.devices_per_node} — bus bandwidth by message size"),
                    "op": op, "layout": layout, "series": series})
    return out


# ---- numbers drawn -----------------------------------------------------------------------------

def chart_rows(chart: dict) -> list[dict]:
    """The CSV: one row per network and size (means over repeats), with the limits beside."""
    rows = []
    for s in chart["series"]:
        tcp = s["tcp"][0]
        for nbytes, v in s["sizes"].items():
            busbw, busbw_std = _mean_std(v["busbw"])
            rows.append({"network": s["network"] or "local", "bytes": nbytes, "n": len(v["busbw"]),
                         "busbw_GBps": busbw, "busbw_std": busbw_std,
                         "algbw_GBps": _mean_std(v["algbw"])[0], "time_us": _mean_std(v["time_us"])[0],
                         "shaped_GBps": s["shaped_GBps"], "link_tcp_GBps": tcp,
                         "busbw_of_tcp": busbw / tcp if tcp else None})
    return rows


def _fraction(value, limit) -> str:
    return "—" if value is None or not limit else f"{value / limit:.0%}"


def table_markdown(chart: dict) -> str:
    head = ("| network | runs | busbw GB/s (sizes ≥ threshold) | shaped GB/s | raw TCP GB/s "
            "| busbw / raw TCP | busbw / shaped | α µs | fit bandwidth GB/s | limit |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for s in chart["series"]:
        busbw, std = s["headline"]
        tcp, tcp_std = s["tcp"]
        busbw_text = "—" if busbw is None else f"{fmt(busbw)} ± {fmt(std)}"
        tcp_text = "—" if tcp is None else f"{fmt(tcp)} ± {fmt(tcp_std)}"
        lines.append(f"| {s['network'] or 'local'} | {s['runs']} | {busbw_text} (≥ {s['threshold']} B) "
                     f"| {fmt(s['shaped_GBps'])} | {tcp_text} | {_fraction(busbw, tcp)} "
                     f"| {_fraction(busbw, s['shaped_GBps'])} | {fmt(s['alpha_us'])} | {fmt(s['bandwidth_GBps'])} "
                     f"| {s['limit'].text if s.get('limit') else '—'} |")
    return "\n".join(lines)


# ---- drawing -----------------------------------------------------------------------------------

def draw(chart: dict) -> bytes:
    """PNG bytes: busbw lines by size (log x), limit lines per network."""
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=FIGSIZE, dpi=DPI)
        fig.subplots_adjust(**MARGINS)
        ax = fig.add_subplot()
        for index, s in enumerate(chart["series"]):
            _draw_series(ax, s, COLORS[index % len(COLORS)])
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(size_label))
        # log y: networks 100x apart stay readable; four decades below the top hide only the
        # latency-bound smallest sizes (the CSV has them all)
        ax.set_yscale("log")
        ax.set_ylim(bottom=_top(chart) / 1e4, top=_top(chart) * 1.5)
        ax.set_xlabel("message size (bytes, log scale)")
        ax.set_ylabel("bus bandwidth, GB/s (1e9 B/s), log scale")
        ax.set_title(chart["title"])
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        wrapped_text(fig, 0.075, 0.04, NOTE, fontsize=7)
        buffer = io.BytesIO()
        fig.savefig(buffer, **SAVE)
    return buffer.getvalue()


def _top(chart: dict) -> float:
    """The highest busbw or limit drawn (GB/s)."""
    values = [b for s in chart["series"] for v in s["sizes"].values() for b in v["busbw"]]
    values += [s["shaped_GBps"] or 0 for s in chart["series"]] + [s["tcp"][0] or 0 for s in chart["series"]]
    return max(values + [1e-9])


def _draw_series(ax, s: dict, color: str) -> None:
    sizes = list(s["sizes"])
    stats = [_mean_std(v["busbw"]) for v in s["sizes"].values()]
    name = s["network"] or "local"
    ax.errorbar(sizes, [m for m, _ in stats], yerr=[sd for _, sd in stats], color=color, marker="o",
                markersize=3, linewidth=1.2, label=f"{name} (n={s['runs']})")
    if s["shaped_GBps"] is not None:
        ax.axhline(s["shaped_GBps"], color=color, linestyle="--", linewidth=0.9,
                   label=f"{name} shaped {fmt(s['shaped_GBps'])}")
    if s["tcp"][0] is not None:
        ax.axhline(s["tcp"][0], color=color, linestyle=":", linewidth=1.1,
                   label=f"{name} raw TCP {fmt(s['tcp'][0])}")


def size_label(nbytes: float, _position=None) -> str:
    """Axis label of a size: 8B, 4K, 64M, 2G (powers of 1024, as nccl-tests prints sizes)."""
    for unit, scale in (("G", 2 ** 30), ("M", 2 ** 20), ("K", 2 ** 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g}{unit}"
    return f"{nbytes:g}B"


# ---- the report section ------------------------------------------------------------------------

def section(records: list[dict], images_dir: str, link) -> tuple[str, list[str]]:
    """(markdown, files written): every comm chart with its CSV and table; "" without comm records."""
    return output.chart_sections(plan(records), lambda chart: f"Communication: {chart['title']}",
                               (chart_rows, draw, table_markdown), images_dir, link)
