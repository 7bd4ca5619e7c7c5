"""AllReduce against parameter server on the same model, drawn as the seed study draws it.

Reads the records of every benchmark that has runs in both families in the input (a model
registered with a collective and a parameter-server script under one name: ctr, resnet18).
Repeats pool as everywhere (aggregate.summarize_records, fleetbench.measure.repeats.experiment). For each
(benchmark, preset, network) it makes
- one chart, two panels: throughput against the number of training processes (collective ranks,
  PS workers), one bar per scheme (AllReduce with its method, PS async, PS geo; PS hatched), the
  ideal line N x the model's 1-process collective throughput (one process trains alone: no
  all-reduce, no server), mean ± std; and beside it the model's quality in the same runs: AUC
  for CTR (higher is better), the final loss otherwise (loss_last, lower is better);
- a CSV beside it with exactly the numbers drawn, and one markdown table.

    markdown, files = section(records, images_dir, link)   # link(png_path) -> path for markdown
"""
from __future__ import annotations

import io

from fleetbench.measure import timing
from fleetbench.measure.repeats import aggregate, experiment
from fleetbench.report import output
from fleetbench.report.style import (COLORS, DPI, FIGSIZE, PS_HATCH, SAVE, STYLE, Figure, Patch, matplotlib,
                                     slug)
from fleetbench.report.tables import columns, distinguishing, fmt, layout, variant_text

FAMILIES = ("collective", "ps")
# (metric, label): the first one the chart's runs report is its quality panel
QUALITY = (("auc", "AUC (higher is better)"), ("loss_last", "final loss (lower is better)"))
SCHEME = {"collective": "AllReduce", "ps": "PS"}


# ---- groups ----------------------------------------------------------------------------------

def paired(records: list[dict]) -> list[dict]:
    """Records (measured here) of the benchmarks that ran in both families in `records`."""
    ours = [r for r in records if not r.get("source") and r["mode"] in FAMILIES]
    modes: dict[str, set] = {}
    for record in ours:
        modes.setdefault(record["benchmark"], set()).add(record["mode"])
    return [r for r in ours if modes[r["benchmark"]] == set(FAMILIES)]


def quality_metric(records: list[dict]) -> tuple:
    """(metric, label) of the first QUALITY metric the successful runs report."""
    reported = {k for r in records if r.get("error") is None for k, v in r["metrics"].items() if v is not None}
    return next((q for q in QUALITY if q[0] in reported), QUALITY[-1])


def groups(records: list[dict]) -> list[dict]:
    """Aggregation groups (no method=none control) with their runs' quality statistics."""
    metric, _ = quality_metric(records)
    out = []
    for group in aggregate.summarize_records(records):
        if aggregate.is_control(group):
            continue
        key = experiment.key_of(group)
        values = [r["metrics"].get(metric) for r in records if r.get("error") is None and experiment.of(r) == key]
        stats = timing.summarize([v for v in values if v is not None])
        out.append(dict(group, quality={k: stats[k] for k in ("n", "mean", "std")}))
    return _fold_failures(out)


def _fold_failures(groups: list[dict]) -> list[dict]:
    """Count a failed-only group's runs in the successful group at the same place (mode, method,
    network, job shape): a run the launcher stored as failed has no config.runtime block, so it
    forms an experiment of its own, which would otherwise become a series of its own."""
    def place(g):
        return g["mode"], g["method"], g["network"], layout(g)

    succeeded = {place(g): g for g in groups if g["mean"] is not None}
    for g in groups:
        if g["mean"] is None and place(g) in succeeded:
            succeeded[place(g)]["failed"] += g["failed"]
    return [g for g in groups if g["mean"] is not None or place(g) not in succeeded]


def _labels(members: list[dict]) -> dict:
    """Series label per group: the scheme and method, plus what tells groups of a family apart."""
    labels = {}
    for family in FAMILIES:
        of_family = [g for g in members if g["mode"] == family]
        table = {"dims": distinguishing(of_family) if of_family else []}
        for g in of_family:
            extra = variant_text(table, g)
            labels[id(g)] = f"{SCHEME[family]} {g['method']}" + (f" ({extra})" if extra else "")
    return labels


def _settings(group: dict) -> dict:
    """A group's config without what follows from its family's scheme and place (method/mode,
    runtime.*): compared on the keys two groups share, it says whether they train the same model
    on the same data with the same batch and optimizer."""
    return {k: v for k, v in experiment.flat_config(group["config"]).items()
            if k not in experiment.METHOD_KEYS and not k.startswith(experiment.RUNTIME_PREFIX)}


def ideal_base(group: dict, candidates: list[dict]):
    """The 1-process collective group of the same settings (on the keys both configs have) that
    `group`'s ideal is measured against (the one with the most runs), or None."""
    mine = _settings(group)
    alone = [c for c in candidates if c["mode"] == "collective" and c["world_size"] == 1 and c["network"] is None
             and c["mean"] is not None and c["unit"] == group["unit"]
             and all(mine[k] == v for k, v in _settings(c).items() if k in mine)]
    return max(alone, key=lambda c: (c["n"], c["mean"])) if alone else None


def plan(records: list[dict]) -> list[dict]:
    """One chart per (benchmark, preset, network) of the paired benchmarks, in first-seen order."""
    runs = paired(records)
    charts = []
    for benchmark in dict.fromkeys(r["benchmark"] for r in runs):
        mine = [r for r in runs if r["benchmark"] == benchmark]
        metric, quality_label = quality_metric(mine)
        every = groups(mine)
        for preset in dict.fromkeys(r.get("preset") for r in mine):
            of_preset = [g for g in every if g["preset"] == preset]
            for network in dict.fromkeys(experiment.network_name(r.get("network")) for r in mine
                                         if r.get("preset") == preset):
                members = [dict(g, ideal_base=ideal_base(g, of_preset)) for g in of_preset if g["network"] == network]
                charts.append(_chart(benchmark, preset, network, members, metric, quality_label))
    return charts


def _chart(benchmark, preset, network, members, metric, quality_label) -> dict:
    labels = _labels(members)
    series: dict[str, list] = {}
    for g in sorted(members, key=lambda g: (FAMILIES.index(g["mode"]), labels[id(g)], layout(g))):
        series.setdefault(labels[id(g)], []).append(g)
    heading = f"{benchmark}" + (f" [{preset}]" if preset else "") + f", network {network or 'local'}"
    return {"name": slug("arch", benchmark, preset, network or "local"), "heading": heading,
            "title": f"AllReduce vs PS: {heading}", "metric": metric,
            "quality_label": quality_label, "ticks": columns(members),
            "unit": next((g["unit"] for g in members if g["unit"]), ""),
            "series": [{"label": k, "mode": v[0]["mode"], "groups": v} for k, v in series.items()]}


def ideal(group: dict):
    """N x the 1-process collective throughput of the same settings (None without one)."""
    base = group["ideal_base"]
    return None if base is None else group["world_size"] * base["mean"]


# ---- the numbers drawn (CSV) and the table ----------------------------------------------------

def chart_rows(chart: dict) -> list[dict]:
    rows = []
    for series in chart["series"]:
        for g in series["groups"]:
            best = ideal(g)
            rows.append({"series": series["label"], "mode": g["mode"], "method": g["method"],
                         "world_size": g["world_size"], "nodes": g["nodes"], "devices_per_node": g["devices_per_node"],
                         "throughput_mean": g["mean"], "throughput_std": g["std"], "n": g["n"], "failed": g["failed"],
                         "ideal": best, "of_ideal": None if best is None or g["mean"] is None else g["mean"] / best,
                         "quality_metric": chart["metric"], "quality_mean": g["quality"]["mean"],
                         "quality_std": g["quality"]["std"], "quality_n": g["quality"]["n"]})
    return rows


def _stat(mean, std, n) -> str:
    return "—" if mean is None else fmt(mean) + (f" ± {fmt(std)}" if n and n > 1 else "")


def table_markdown(chart: dict) -> str:
    quality = chart["quality_label"].split(" (")[0]
    head = ["Scheme", "Processes", f"Throughput ({chart['unit']})", "Of ideal", quality, "n"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in chart_rows(chart):
        failed = f" (+{row['failed']} failed)" if row["failed"] else ""
        lines.append("| " + " | ".join([
            row["series"], f"{row['world_size']} ({row['nodes']}×{row['devices_per_node']})",
            _stat(row["throughput_mean"], row["throughput_std"], row["n"]),
            "—" if row["of_ideal"] is None else f"{row['of_ideal']:.0%}",
            _stat(row["quality_mean"], row["quality_std"], row["quality_n"]), f"{row['n']}{failed}"]) + " |")
    bases = {(g["ideal_base"]["method"], g["ideal_base"]["mean"], g["ideal_base"]["n"])
             for series in chart["series"] for g in series["groups"] if g["ideal_base"]}
    note = ("ideal = processes × the 1-process collective run of the same settings (training alone, "
            "nothing sent): " + "; ".join(f"{fmt(mean)} {chart['unit']} ({method}, n={n})"
                                          for method, mean, n in sorted(bases))
            if bases else "no 1-process collective run of these settings in these results: no ideal")
    return "\n".join(lines) + f"\n\nMean ± sample std over repeats; {note}."


# ---- drawing ------------------------------------------------------------------------------------

def draw(chart: dict) -> bytes:
    """PNG bytes: throughput bars with the ideal line (left), quality bars (right)."""
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(FIGSIZE[0] + 1.5, FIGSIZE[1]), dpi=DPI)
        fig.subplots_adjust(left=0.07, right=0.74, top=0.86, bottom=0.14, wspace=0.3)
        speed, quality = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
        width = 0.8 / max(1, len(chart["series"]))
        ideal_label = "ideal (N × 1 process alone)"
        for i, series in enumerate(chart["series"]):
            xs = _bars(speed, chart, series, i, width, lambda g: (g["mean"], g["std"]))
            _points(quality, chart, series, i, width)
            for x, g in xs:
                if ideal(g) is not None:
                    speed.hlines(ideal(g), x - width / 2, x + width / 2, colors="black", linestyles="--",
                                 linewidth=1.0, label=ideal_label)
                    ideal_label = None  # one legend entry for all marks
        for ax, ylabel in ((speed, f"throughput ({chart['unit']})"), (quality, chart["quality_label"])):
            ax.set_xticks(range(len(chart["ticks"])), [text for _, text in chart["ticks"]])
            ax.set_xlim(-0.5, len(chart["ticks"]) - 0.5)
            ax.set_xlabel("training processes (ranks / PS workers)")
            ax.set_ylabel(ylabel)
        _quality_scale(quality, chart)
        speed.set_title(chart["title"], loc="left")
        handles, labels = speed.get_legend_handles_labels()
        handles.append(Patch(facecolor="white", edgecolor="black", linewidth=0.5, hatch=PS_HATCH))
        labels.append("hatched: parameter server")
        quality.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
        fig.text(0.01, 0.005, "error bars: std over repeats; right: the same runs' quality (squares: "
                 "parameter server)", fontsize=7, ha="left", va="bottom")
        buffer = io.BytesIO()
        fig.savefig(buffer, **SAVE)
    return buffer.getvalue()


def _bars(ax, chart: dict, series: dict, index: int, width: float, value) -> list:
    """Draw a series' bars of `value(group) -> (mean, std)`; returns [(x, group)] drawn."""
    ticks = [lay for lay, _ in chart["ticks"]]
    drawn = [(g, *value(g)) for g in series["groups"] if value(g)[0] is not None]
    if not drawn:
        return []
    xs = [ticks.index(layout(g)) - 0.4 + width * (index + 0.5) for g, _, _ in drawn]
    bars = ax.bar(xs, [m for _, m, _ in drawn], width * 0.92, yerr=[s or 0.0 for _, _, s in drawn],
                  label=series["label"], color=COLORS[index % len(COLORS)], edgecolor="black", linewidth=0.5,
                  error_kw={"elinewidth": 0.8, "ecolor": "black"})
    for bar in bars:
        bar.set_hatch(PS_HATCH if series["mode"] == "ps" else None)
    return [(x, g) for x, (g, _, _) in zip(xs, drawn)]


def _quality_scale(ax, chart: dict) -> None:
    """A log axis when the quality values span more than a decade (losses near 0 beside a run
    that did not converge), so that both stay readable."""
    values = [g["quality"]["mean"] for s in chart["series"] for g in s["groups"] if g["quality"]["mean"] is not None]
    if values and min(values) > 0 and max(values) / min(values) > 10:
        ax.set_yscale("log")
        ax.set_ylabel(chart["quality_label"] + ", log scale")


def _points(ax, chart: dict, series: dict, index: int, width: float) -> None:
    """Quality as points with std bars at the series' bar positions (a bar from zero would hide
    differences of a few hundredths of AUC); squares for the parameter server."""
    ticks = [lay for lay, _ in chart["ticks"]]
    drawn = [g for g in series["groups"] if g["quality"]["mean"] is not None]
    if drawn:
        ax.errorbar([ticks.index(layout(g)) - 0.4 + width * (index + 0.5) for g in drawn],
                    [g["quality"]["mean"] for g in drawn], yerr=[g["quality"]["std"] or 0.0 for g in drawn],
                    fmt="s" if series["mode"] == "ps" else "o", color=COLORS[index % len(COLORS)],
                    markeredgecolor="black", markeredgewidth=0.5, elinewidth=0.8, ecolor="black")


def section(records: list[dict], images_dir: str, link) -> tuple[str, list[str]]:
    """(markdown, files written): every AllReduce-vs-PS chart with its CSV and table; "" when no
    benchmark ran both ways."""
    return output.chart_sections(plan(records), lambda chart: f"AllReduce vs parameter server: {chart['heading']}",
                               (chart_rows, draw, table_markdown), images_dir, link)
