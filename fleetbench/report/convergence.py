"""Convergence beside speed: test accuracy against wall time and epochs, and time to target.

Reads records whose metrics hold `epochs` (fleetbench.train.epochs: collective/mnist.py and the
image benchmarks with data.val_path). For each (source, benchmark, preset) it makes
- one chart, two panels: test accuracy against wall-clock time since the start of training and
  against epoch, one line per run, one colour per cell (world size), the target as a dashed line
  (the MLPerf picture), with a CSV beside it holding exactly the points drawn;
- one markdown table: throughput (mean ± std, speedup against the 1-device cell of the same
  results), final accuracy, epochs and time to target (mean ± std over the runs that reached it),
  and how many runs reached it.

It also reads the hand-made logs the suite's users keep (`StepN: X data/sec`, `Epoch E in S sec,
test time T sec, test accuracy: A`, with their variants of punctuation): `parse_log`. fleetbench's
MNIST benchmark prints the same lines, and a test reads them with the same patterns.
"""
from __future__ import annotations

import io
import re

from fleetbench.measure import results, timing

STEP_LINE = re.compile(r"Step\s*(\d+):?\s+([\d.]+)\s+data/sec")
EPOCH_LINE = re.compile(r"Epoch\s+(\d+)\s+in\s+([\d.]+)\s+sec,\s+test time\s+([\d.]+)\s+sec[.,]\s+"
                        r"(?:[Tt]?est\s+)?accuracy:?\s*([\d.]+)")


def parse_log(text: str) -> dict:
    """{"steps": [{step, data_per_s}], "epochs": [{epoch, epoch_time_s, test_time_s, test_accuracy}]}."""
    steps = [{"step": int(m[1]), "data_per_s": float(m[2])} for m in STEP_LINE.finditer(text)]
    epochs = [{"epoch": int(m[1]), "epoch_time_s": float(m[2]), "test_time_s": float(m[3]),
               "test_accuracy": float(m[4])} for m in EPOCH_LINE.finditer(text)]
    return {"steps": steps, "epochs": epochs}


# ---- cells -----------------------------------------------------------------------------------

def _with_epochs(records: list[dict]) -> list[dict]:
    return [r for r in records if (r.get("metrics") or {}).get("epochs")]


def _stat_text(values: list) -> str:
    from fleetbench.report.plot import fmt

    if not values:
        return "—"
    stats = timing.summarize(values)
    return fmt(stats["mean"]) + (f" ± {fmt(stats['std'])}" if stats["n"] > 1 else "")


def cells(records: list[dict]) -> list[dict]:
    """One cell per results.cell_key among records with epochs: its runs and its figures."""
    runs = _with_epochs(records)
    # the throughput cells (mean, std, speedup) of the same runs, by the cell_key of their records
    speed = {(c["source"] or "", c["benchmark"], c["preset"] or "", c["mode"], c["method"], c["network"] or "",
              c["nodes"], c["devices_per_node"], c["world_size"]): c for c in results.summarize_records(runs)}
    groups: dict[tuple, list[dict]] = {}
    for record in runs:
        groups.setdefault(results.cell_key(record), []).append(record)
    out = []
    for key, members in groups.items():
        ok = [r for r in members if r.get("error") is None]
        metrics = [r["metrics"] for r in ok]
        reached = [m for m in metrics if m.get("epochs_to_target") is not None]
        thr = speed[key]
        out.append({"key": key, "source": key[0] or None, "benchmark": key[1], "preset": key[2] or None,
                    "method": key[4], "world_size": key[8], "nodes": key[6], "runs": ok,
                    "failed": len(members) - len(ok), "target": _target(ok),
                    "throughput": thr, "reached": len(reached),
                    "final_accuracy": [m["final_test_accuracy"] for m in metrics],
                    "epochs_to_target": [m["epochs_to_target"] for m in reached],
                    "time_to_target_s": [m["time_to_target_s"] for m in reached]})
    return sorted(out, key=lambda c: (c["source"] or "", c["benchmark"], c["preset"] or "", c["world_size"]))


def _target(runs: list[dict]):
    targets = sorted({r["config"].get("target_accuracy") for r in runs}, key=lambda t: (t is None, t))
    return targets[0] if len(targets) == 1 else None


def tables(records: list[dict]) -> list[dict]:
    """Cells grouped per (source, benchmark, preset), each group one table and one chart."""
    grouped: dict[tuple, list[dict]] = {}
    for cell in cells(records):
        grouped.setdefault((cell["source"] or "", cell["benchmark"], cell["preset"] or ""), []).append(cell)
    from fleetbench.report.plot import slug

    return [{"benchmark": b, "preset": p or None, "source": s or None, "cells": group,
             "name": slug("convergence", s, b, p)} for (s, b, p), group in grouped.items()]


# ---- table -----------------------------------------------------------------------------------

def table_markdown(table: dict) -> str:
    from fleetbench.report.plot import fmt

    head = ["Processes", "Method", "Throughput", "Speedup", "Final accuracy", "Epochs to target",
            "Time to target (s)", "Reached"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in table["cells"]:
        thr = c["throughput"]
        throughput = "—" if thr["mean"] is None else _stat_text([r["metrics"]["throughput"] for r in c["runs"]])
        speedup = "—" if thr.get("speedup") is None else f"{thr['speedup']:.2f}x"
        reached = f"{c['reached']}/{len(c['runs'])}" + (f" (+{c['failed']} failed)" if c["failed"] else "")
        lines.append("| " + " | ".join([
            str(c["world_size"]), c["method"], f"{throughput} {thr['unit'] or ''}".strip(), speedup,
            _stat_text(c["final_accuracy"]), _stat_text(c["epochs_to_target"]),
            _stat_text(c["time_to_target_s"]), reached]) + " |")
    targets = sorted({fmt(c["target"]) for c in table["cells"]})
    return "\n".join(lines) + (f"\n\nTarget test accuracy: {', '.join(targets)}; mean ± sample std over "
                               "the runs that reached it; time from the start of training to the end of "
                               "the evaluation that first reached it, evaluations included.")


# ---- chart -----------------------------------------------------------------------------------

def chart_rows(table: dict) -> list[dict]:
    """The points drawn, one row per run and epoch (also the CSV beside the PNG)."""
    return [{"world_size": c["world_size"], "method": c["method"], "run": r["id"], "epoch": e["epoch"],
             "elapsed_s": e["elapsed_s"], "test_accuracy": e["test_accuracy"]}
            for c in table["cells"] for r in c["runs"] for e in r["metrics"]["epochs"]]


def draw(table: dict) -> bytes:
    """PNG bytes: accuracy vs wall time (left) and vs epoch (right), one line per run."""
    import matplotlib

    from fleetbench.report import plot

    with matplotlib.rc_context(plot.STYLE):
        fig = plot.Figure(figsize=plot.FIGSIZE, dpi=plot.DPI)
        fig.subplots_adjust(left=0.075, right=0.82, top=0.86, bottom=0.14, wspace=0.25)
        by_time, by_epoch = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
        for index, cell in enumerate(table["cells"]):
            color = plot.COLORS[index % len(plot.COLORS)]
            for number, run in enumerate(cell["runs"]):
                epochs = run["metrics"]["epochs"]
                label = f"{cell['world_size']} process{'es' if cell['world_size'] > 1 else ''}" if not number else None
                accuracy = [e["test_accuracy"] for e in epochs]
                by_time.plot([e["elapsed_s"] for e in epochs], accuracy, color=color, marker=".", label=label)
                by_epoch.plot([e["epoch"] for e in epochs], accuracy, color=color, marker=".")
        for ax, xlabel in ((by_time, "wall time since training started (s)"), (by_epoch, "epoch")):
            if table["cells"][0]["target"] is not None:
                ax.axhline(table["cells"][0]["target"], color="black", linestyle="--", linewidth=0.8)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("test accuracy")
        title = table["benchmark"] + (f" [{table['preset']}]" if table["preset"] else "")
        by_time.set_title(f"{title}: test accuracy, one line per run", loc="left")
        by_time.legend(loc="upper left", bbox_to_anchor=(2.28, 1.0), frameon=False)
        buffer = io.BytesIO()
        fig.savefig(buffer, **plot.SAVE)
    return buffer.getvalue()


def section(records: list[dict], images_dir: str, link) -> tuple[str, list[str]]:
    """(markdown, files written): every convergence table with its chart; "" when no record has
    epochs. `link(png_path)` gives the path the markdown uses for an image."""
    import os

    from fleetbench.report import plot

    out, written = [], []
    for table in tables(records):
        png = os.path.join(images_dir, table["name"] + ".png")
        plot.write_csv(png[:-4] + ".csv", chart_rows(table))
        plot._write_if_changed(png, draw(table))
        written += [png, png[:-4] + ".csv"]
        heading = table["benchmark"] + (f" [{table['preset']}]" if table["preset"] else "")
        out += [f"### Convergence: {heading}", "", table_markdown(table), "",
                f"![{table['name']}]({link(png)})", ""]
    return "\n".join(out), written
