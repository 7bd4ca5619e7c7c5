"""`fleetbench explain`: why a multi-device cell is not N times faster, and what unmeasured cells
would do.

    fleetbench explain RESULTS.jsonl... [--json] [--predict SPEC]... [--validate SELECTOR]...
                       [--target-efficiency E] [--images DIR] [--markdown] [--published]

Without options: one console line per multi-device training cell (breakdown of its step time and
the efficiency lost to each part). --predict nodes=3 (or nodes=2,4,8 and rate_gbit=10,25,100: a
grid, one prediction per combination)[,network=1gbe|rate_gbit=5][,devices_per_node=2][,nics=8]
[,benchmark=..,preset=..,method=..]: every measured cell passing the filters, moved to the new
shape/network, each with its range; a grid prints the efficiency table and, with
--target-efficiency 0.9, the slowest network keeping it. --validate nodes=2: fit on the records
the selector picks, predict the others, every held-out cell listed (predicted or why not) and a
summary per source table. --json: a list of cells (kind measured | predicted | validation).
--images DIR: a stacked-bar chart per benchmark, scaling and efficiency charts, with their CSVs.
--markdown: the section `fleetbench report` puts in the README. The model: docs/guide/explain.md.
"""
from __future__ import annotations

import json
import os
import sys

from fleetbench import cmdline
from fleetbench.perfmodel import explanation, stragglers, validate
from fleetbench.perfmodel import breakdown as bd
from fleetbench.perfmodel.cells import MEASURED_PARTS
from fleetbench.perfmodel.breakdown import ACCOUNTING_TOLERANCE, LOSSES
from fleetbench.measure.repeats import stability
from fleetbench.report import explain_scaling as scaling
from fleetbench.store import select

# The stacks of a breakdown bar, bottom to top: (CSV column, legend label).
SEGMENTS = (("compute_1dev_ms", "compute (1 device)"), ("contention_ms", "core sharing"),
            ("exposed_comm_ms", "exposed communication"), ("imbalance_ms", "rank imbalance"),
            ("reader_ms", "reader wait"))


def _ms(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def _pct(value) -> str:
    return "-" if value is None else f"{value:+.0%}"


def _acct(cell: dict) -> str:
    """The accounting error, marked `!` beyond the tolerance."""
    if cell.get("accounting_error") is None:
        return "-"
    return _pct(cell["accounting_error"]) + ("" if cell["accounting_ok"] else "!")


def _losses_text(cell: dict) -> str:
    if not cell.get("losses"):
        return "-"
    return " ".join(f"{name[:4]} {cell['losses'][name]:.0%}" for name in LOSSES)


def miss_text(cell: dict) -> str:
    """For a cell whose prediction misses and no weak input explains it (the Why off column): what its own breakdown shows, the part that misses and, for exposed communication, the
    host cost the calibration brought from the work's other cells against the one this cell took
    beyond its link model (on CPU a slow emulated link's residual is not a fast one's per byte:
    leave-one-out prices each from the other)."""
    check = cell.get("parts_check")
    if not check:
        return ""
    part = check["misses"] or max(check["off_ms"], key=lambda p: abs(check["off_ms"][p]))
    text = (("" if check["misses"] else f"no part alone beyond {bd.PART_TOLERANCE:.0%} of the step, the largest miss ")
            + f"{bd.PART_NAMES[part]} predicted {check['predicted'][part]:.0f} ms, measured {check['measured'][part]:.0f}")
    host, comm = cell.get("predicted_host_ms"), cell.get("predicted_comm_ms")
    if part == "exposed_comm_ms" and host and comm is not None and cell.get("exposed_comm_ms") is not None:
        own = cell["exposed_comm_ms"] - comm
        text += (f": host cost {host:.0f} ms from the work's other cells, {own:.0f} here beyond the link "
                 "model (it is not one cost per byte across these links)")
    return text


def parts_text(check: dict) -> str:
    """`compute 120/118, exposed comm 40/61 (misses), imbalance 3/5, reader 0/0` (predicted /
    measured ms a step), or what the miss is when none is beyond the tolerance."""
    text = ", ".join(f"{bd.PART_NAMES[p]} {check['predicted'][p]:.0f}/{check['measured'][p]:.0f}"
                     + (" (misses)" if check["misses"] == p else "") for p in MEASURED_PARTS)
    return text + ("" if check["misses"] else f"; every part within {bd.PART_TOLERANCE:.0%} of the step")


def console_table(cells: list[dict]) -> str:
    head = ("cell", "n", "measured", "explained", "acct", "predicted", "err", "compute", "exposed",
            "pred.comm", "overlap", "imbal", "reader", "eff", "efficiency lost to")
    rows = [head]
    for c in cells:
        rows.append((c["label"], str(c["runs"]) + (f" (+{c['excluded']} outlier)" if c.get("excluded") else ""),
                     _ms(c["measured_step_ms"]), _ms(c.get("explained_step_ms")),
                     _acct(c), _ms(c.get("predicted_step_ms")),
                     _pct(c.get("prediction_error")), _ms(c.get("compute_ms")), _ms(c.get("exposed_comm_ms")),
                     _ms(c.get("predicted_comm_ms")), _ms(c.get("overlap_ms")), _ms(c.get("imbalance_ms")),
                     _ms(c.get("reader_ms")), "-" if c.get("efficiency") is None else f"{c['efficiency']:.0%}",
                     _losses_text(c)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    notes = sorted({f"{c['label']}: {n}" for c in cells for n in c.get("notes", [])})
    legend = (f"(ms per step; acct: explained/measured - 1, ! beyond {ACCOUNTING_TOLERANCE:.0%}; "
              f"efficiency lost to {', '.join(LOSSES)})")
    return "\n".join(lines + [legend] + notes)


def _range(values, fmt: str) -> str:
    return f" ({fmt.format(values[0])}-{fmt.format(values[1])})" if values else ""


def predictions_table(rows: list[dict], title: str, notes: bool = True) -> str:
    lines = [title]
    for r in rows:
        head = r.get("cell") or r.get("target")
        if r.get("not_predicted"):
            lines.append(f"  {head}: not predicted: {r['not_predicted']}")
            continue
        measured = r.get("measured_step_ms")
        text = f"  {head}: predicted {_ms(r['predicted_step_ms'])} ms{_range(r.get('predicted_step_range'), '{:.1f}')}"
        if measured is not None:
            text += f", measured {_ms(measured)} ms, error {_pct(r.get('error'))}"
        if r.get("predicted_throughput") is not None:
            text += f", {r['predicted_throughput']:.4g} per s{_range(r.get('predicted_throughput_range'), '{:.4g}')}"
            if r.get("throughput_error") is not None:
                text += f" ({_pct(r['throughput_error'])} of {r['measured_throughput']:.4g})"
        lines.append(text + (f"  [{'; '.join(r['notes'])}]" if notes and r.get("notes") else ""))
    errors = [abs(r["error"]) for r in rows if r.get("error") is not None]
    if errors:
        within = sum(e <= 0.15 for e in errors)
        lines.append(f"  {within}/{len(errors)} within 15%, worst {max(errors):.0%}")
    return "\n".join(lines)


def validation_text(found: explanation.Validation) -> str:
    """Every held-out cell (predicted or why not), then per source table its count within 15%,
    median error and worst cells with the notes that explain them."""
    parts = [predictions_table(found.rows, f"validation: fitted on {found.selector}, predicting the other cells",
                               notes=False)]
    for s in found.summary:
        median = "-" if s["median_error"] is None else f"{s['median_error']:.1%}"
        lines = [f"{s['source']}: {s['predicted']} of {s['cells']} cells predicted, {s['within']} within 15% of "
                 f"the throughput, median error {median}, {s['in_range']} of {s['ranged']} inside their 80% "
                 f"range; {len(s['not_predicted'])} not predicted (listed above, each with why)"]
        for r in s["worst"]:
            lines.append(f"  worst: {r['cell']}: {_pct(r['throughput_error'])}"
                         f"{_range(r.get('predicted_throughput_range'), '{:.4g}')} against "
                         f"{r['measured_throughput']:.4g}  [{'; '.join(r['notes'])}]")
        parts.append("\n".join(lines))
    parts.append("\n".join(f"{t['group']} tables: {t['within']} of {t['predicted']} predicted cells within 15% "
                           f"({t['within'] / max(1, t['predicted']):.0%}), {t['in_range']} of {t['ranged']} inside "
                           f"their 80% range ({t['in_range'] / max(1, t['ranged']):.0%}); {t['cells']} cells"
                           for t in found.totals))
    return "\n\n".join(parts)


def whatif_text(tables: list[dict], target: float | None) -> str:
    """The what-if efficiency tables (perfmodel/whatif.tables) as console text, with the slowest
    network keeping `target`."""
    parts = []
    for t in tables:
        head = ["GPUs"] + [str(n) for n in t["networks"]] + (
            [f"slowest network keeping {target:.0%}"] if target else [])
        lines = [head]
        for size in t["sizes"]:
            line = [str(size)]
            for network in t["networks"]:
                eff = t["cells"].get((size, network))
                line.append("-" if eff is None else f"{eff[0]:.0%} ({eff[1]:.0%}-{eff[2]:.0%})")
            if target:
                found = t["slowest"].get(size)
                line.append("none of these" if found is None else
                            f"{found[0]}" + ("" if found[1] else " (not at the range's slow end)"))
            lines.append(line)
        widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
        parts.append("\n".join([f"predicted efficiency: {t['title']} (point, range)"] +
                               ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in lines]))
    return "\n\n".join(parts)


# ---- chart and markdown ---------------------------------------------------------------------------

def chart_rows(cells: list[dict]) -> list[dict]:
    """One row per bar: the segments drawn (ms), the measured and predicted marks."""
    rows = []
    for c in cells:
        if c.get("compute_ms") is None:
            continue
        contention = c.get("contention_ms") or 0.0
        rows.append({"cell": c["label"], "method": c["method"], "network": c["network"] or "",
                     "nodes": c["nodes"], "devices_per_node": c["devices_per_node"],
                     "compute_1dev_ms": c["compute_ms"] - contention, "contention_ms": contention,
                     "exposed_comm_ms": c["exposed_comm_ms"], "imbalance_ms": c["imbalance_ms"],
                     "reader_ms": c["reader_ms"], "measured_step_ms": c["measured_step_ms"],
                     "predicted_step_ms": c.get("predicted_step_ms"), "efficiency": c.get("efficiency")})
    return rows


def draw(rows: list[dict], title: str) -> bytes:
    """PNG of stacked bars (negative parts, within noise, are drawn as 0; the CSV has them)."""
    import matplotlib

    from fleetbench.report import (
        style,  # the one plot style (and matplotlib's Agg backend)
    )

    with matplotlib.rc_context(style.STYLE):
        fig = style.Figure(figsize=style.FIGSIZE, dpi=style.DPI)
        fig.subplots_adjust(**style.MARGINS)
        ax = fig.add_subplot()
        xs = range(len(rows))
        bottom = [0.0] * len(rows)
        for i, (key, label) in enumerate(SEGMENTS):
            heights = [max(0.0, r[key]) for r in rows]
            ax.bar(xs, heights, 0.6, bottom=bottom, label=label, color=style.COLORS[i],
                   edgecolor="black", linewidth=0.5)
            bottom = [b + h for b, h in zip(bottom, heights)]
        ax.scatter(xs, [r["measured_step_ms"] for r in rows], marker="_", s=400, color="black",
                   label="measured step", zorder=3)
        predicted = [(x, r["predicted_step_ms"]) for x, r in zip(xs, rows) if r["predicted_step_ms"]]
        if predicted:
            ax.scatter(*zip(*predicted), marker="x", color="black", label="predicted step", zorder=3)
        ticks = [f"{r['method']}\n{r['network'] or 'local'}\n{r['nodes']}x{r['devices_per_node']}" for r in rows]
        ax.set_xticks(list(xs), ticks)
        ax.set_ylabel("time per step (ms)")
        return style.finish(fig, ax, title, "bars: parts of the step (docs/guide/explain.md); compute from the "
                            "method=none control where one exists")


def write_charts(cells: list[dict], images_dir: str) -> dict:
    """images_dir/explain-<benchmark>-<preset>.png beside its CSV; returns {(benchmark, preset): png}."""
    from fleetbench.report import output, style

    written = {}
    for key in dict.fromkeys((c["benchmark"], c["preset"]) for c in cells):
        rows = chart_rows([c for c in cells if (c["benchmark"], c["preset"]) == key])
        if rows:
            written[key] = output.save_chart(images_dir, style.slug("explain", *key), rows,
                                           draw(rows, f"{key[0]} [{key[1]}] — where the step time goes"))
    return written


def _share(value: float) -> str:
    return f"{0.0 if abs(value) < 0.005 else value:.0%}"  # no "-0%" for noise around zero


# What a prediction's notes say about its weak inputs, each said in a phrase on a README row that
# is off by more than 15% (marker in the note -> phrase).
WHY_OFF = (("no comm record of network", "link from the network's rate (a ceiling), no comm record of it"),
           ("latency unknown", "per-call latency not measured"),
           ("host cost taken as 0", "no bsp cell of this work: host cost (packing gradients) taken as 0"),
           ("thread scaling borrowed", "thread scaling borrowed from other works"),
           ("assumed linear", "thread scaling assumed linear"),
           ("host cost", "host cost borrowed from other works", "borrowed"),
           ("node-sharing prior", "no 1-node run: node sharing assumed from the prior"),
           ("upper bound", "overlap not measured: an upper bound"),
           ("latency-bound", "latency-bound: as uncertain as its latency"),
           ("not modelled", "method not modelled"))


def _why_off(cell: dict) -> str:
    """For a README row whose prediction is off by more than 15%: what its notes say is weak."""
    if cell.get("prediction_error") is None or abs(cell["prediction_error"]) <= 0.15:
        return ""
    notes = cell.get("prediction_notes") or []
    said = [entry[1] for entry in WHY_OFF
            if any(entry[0] in n and (len(entry) < 3 or entry[2] in n) for n in notes)]
    return "; ".join(dict.fromkeys(said)) or miss_text(cell) or "no note explains it: the model misses something here"


def _lost(cell: dict) -> str:
    """The loss split as the console and --json give it, summing to 1 - efficiency; without a
    control or a measured thread scaling, core sharing cannot be told from communication."""
    losses = cell.get("losses")
    if not losses:
        return "—"
    parts = [_share(losses[k]) for k in LOSSES]
    if cell.get("contention_ms") is None:  # sharing is inside the communication share
        parts[0], parts[1] = "—", parts[1] + " (incl. sharing)"
    return " / ".join(parts)


def markdown(cells: list[dict], images: dict, link) -> str:
    """The README section: per benchmark a table of the breakdown and its chart (`link(png)` is
    the path the markdown links to)."""
    out = ["### Why not better", "",
           "Generated by `fleetbench explain` (model and definitions: docs/guide/explain.md). Times in ms "
           "per step; the efficiency lost to each part sums to 1 − efficiency (— : core sharing not "
           "measured, so it is inside communication). Error: predicted / measured step − 1; beyond "
           "15% the last column says why.", ""]
    head = ["Cell", "Measured", "Compute (source)", "Exposed comm", "Predicted comm", "Imbalance",
            "Reader", "Predicted step", "Error", "Efficiency",
            "Lost to sharing / comm / imbalance / reader / unexplained", "Why off", "MFU"]
    for key in dict.fromkeys((c["benchmark"], c["preset"]) for c in cells):
        group = [c for c in cells if (c["benchmark"], c["preset"]) == key]
        out += [f"#### {key[0]}" + (f" [{key[1]}]" if key[1] else ""), "",
                "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for c in group:
            controlled = (c.get("compute_source") or "").startswith("method=none control")
            source = "control" if controlled else "1 device" + (" x sharing" if c.get("contention_ms") else "")
            out.append("| " + " | ".join([
                c["label"], _ms(c["measured_step_ms"]) + stability.excluded_note(c["runs"], c.get("excluded", 0)),
                f"{_ms(c.get('compute_ms'))} ({source})",
                _ms(c.get("exposed_comm_ms")), _ms(c.get("predicted_comm_ms")), _ms(c.get("imbalance_ms")),
                _ms(c.get("reader_ms")), _ms(c.get("predicted_step_ms")), _pct(c.get("prediction_error")),
                "—" if c.get("efficiency") is None else f"{c['efficiency']:.0%}", _lost(c),
                _why_off(c) or "—", "—" if c.get("mfu") is None else f"{100 * c['mfu']:.2g}%"]) + " |")
        checks = [f"- {c['label']}, part by part (predicted/measured ms): {parts_text(c['parts_check'])}"
                  for c in group if c.get("parts_check")]
        out += [""] + checks if checks else []
        if key in images:
            out += ["", f"![explain {key[0]} {key[1] or ''}]({link(images[key])})"]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def section(records: list[dict], images_dir: str, link) -> tuple[str, list[str]]:
    """For `fleetbench report`: (markdown section, files written); empty when no multi-device
    cell has a breakdown (a control or a 1-device run of its work)."""
    cells = explanation.breakdowns(records)
    if not cells:
        return "", []
    images = write_charts(cells, images_dir)
    files = [p for png in images.values() for p in (png, png[:-4] + ".csv")]
    return markdown(cells, images, link), files


# ---- command line -------------------------------------------------------------------------------

def parser() -> cmdline.Parser:
    p = cmdline.Parser(prog="fleetbench explain", description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="*", type=cmdline.INPUT_FILE,
                   help="JSONL result files (training, method=none and comm records)")
    p.add_argument("--json", action="store_true", help="print a JSON list of cells")
    p.add_argument("--predict", action="append", default=[], metavar="SPEC",
                   help="key=value,... with keys " + ", ".join(validate.FILTER_KEYS + validate.CHANGE_KEYS)
                   + "; nodes, devices_per_node and rate_gbit take lists (a what-if grid)")
    p.add_argument("--validate", action="append", default=[], metavar="SELECTOR",
                   help="fit on records matching key=value,... (keys " + ", ".join(validate.SELECT_KEYS)
                   + "), predict the others")
    p.add_argument("--target-efficiency", type=cmdline.FRACTION, metavar="E",
                   help="with --predict: the slowest network keeping this scaling efficiency (0 < E <= 1)")
    p.add_argument("--images", type=cmdline.OUTPUT_DIR, help="write a stacked-bar chart (PNG + CSV) per benchmark, "
                   "and scaling and efficiency charts of what --predict/--validate gives, here")
    p.add_argument("--markdown", action="store_true", help="print the README section instead of the table")
    p.add_argument("--published", action="store_true",
                   help="read published reference records too, deriving step time and gradient sizes "
                        "(docs/guide/explain.md)")
    p.add_argument("--model-def", type=cmdline.INPUT_FILE, metavar="FILE",
                   help="YAML or JSON mapping a model name (a record's config.model) to its definition "
                        "(perfmodel/modeldef: gpt, bert, vit, transformer_xl, layers, params), for models "
                        "outside the registry")
    p.add_argument("--straggler-pct", type=cmdline.number(0.0), default=stragglers.DEFAULT_THRESHOLD_PCT,
                   help="name ranks this much slower than their peers' median (default 10)")
    select.add_db(p)
    return p


def _text(found: explanation.Explanation) -> str:
    cells = found.cells
    parts = [console_table(cells) if cells else "no multi-device training cell to explain" + (
        " (published records are read with --published)" if found.published_left_out else "")]
    if found.predicted:
        parts.append(predictions_table(found.predicted, "predicted (not measured), with ranges:", notes=not found.grid))
        if found.grid:
            parts.append(whatif_text(found.whatif, found.target_efficiency))
    for v in found.validations:
        parts.append(validation_text(v))
    if found.stragglers:
        parts.append("stragglers (ranks slower than their peers' median):\n" + "\n".join(f"  {line}" for line in found.stragglers))
    return "\n\n".join(parts)


def run(args) -> str:
    """The output text; raises ValueError (one line) on bad input, before writing anything: the
    records loaded, the model asked once (perfmodel/explanation), its answer rendered."""
    from fleetbench.store import results

    found = explanation.explain(select.marked(args.results, results.load, args.db, args.where), args.predict,
                                args.validate, args.target_efficiency, published=args.published,
                                model_def=args.model_def, straggler_pct=args.straggler_pct)
    validation = [r for v in found.validations for r in v.rows]
    images = write_charts(found.cells, args.images) if args.images else {}
    if args.images:
        scaling.write_charts(found.cells, found.predicted + validation, args.images)
        scaling.write_efficiency(found.predicted, found.networks, args.images)
    if args.json:
        return json.dumps(found.rows(), indent=1, sort_keys=True)
    if args.markdown:
        return markdown(found.cells, images, lambda png: os.path.relpath(os.path.abspath(png)).replace(os.sep, "/"))
    return _text(found)


def cli(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        text = run(args)
    except ValueError as err:  # RecordError, SpecError and FitError are ValueErrors
        print(f"fleetbench explain: {err}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
