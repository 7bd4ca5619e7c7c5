"""Convergence beside speed: test accuracy against wall time and epochs, and time to target.

Reads records whose metrics hold `epochs` (fleetbench.train.epochs: collective/mnist.py and the
image benchmarks with data.val_path). For each (source, benchmark, preset) it makes
- one chart, two panels: test accuracy against wall-clock time since the start of training and
  against epoch, one line per run, one colour per cell (world size), the target as a dashed line
  (the MLPerf picture), with a CSV beside it holding exactly the points drawn;
- one markdown table: throughput (mean ± std, speedup against the 1-device cell of the same
  results), final accuracy, epochs and time to target (mean ± std and range over the runs that
  reached it), how many runs reached it, the seeds, and MLPerf's score (the olympic mean of the
  times to target: measure.repeats.stability.olympic_score; "—" with the reason when the runs allow none).

Time is counted from MLPerf's run_start (`run_elapsed_s`, before the data is touched) where a
record has it; older records counted from the start of training (`elapsed_s`).

It also reads the hand-made logs the suite's users keep (`StepN: X data/sec`, `Epoch E in S sec,
test time T sec, test accuracy: A`, with their variants of punctuation): `parse_log`. fleetbench's
MNIST benchmark prints the same lines, and a test reads them with the same patterns.
"""
from __future__ import annotations

import io
import re

from fleetbench.measure import timing
from fleetbench.measure.repeats import aggregate, experiment, stability
from fleetbench.report import output, style
from fleetbench.report.style import slug
from fleetbench.report.tables import fmt

STEP_LINE = re.compile(r"Step\s*(\d+):?\s+([\d.]+)\s+data/sec")
EPOCH_LINE = re.compile(r"Epoch\s+(\d+)\s+in\s+([\d.]+)\s+sec,\s+test time\s+([\d.]+)\s+sec[.,]\s+"
                        r"(?:[Tt]?est\s+)?accuracy:?\s*([\d.]+)")


def parse_log(text: str) -> dict:
    """{"steps": [{step, data_per_s}], "epochs": [{epoch, epoch_time_s, test_time_s, test_accuracy}]}."""
    steps = [{"step": int(m[1]), "data_per_s": float(m[2])} for m in STEP_LINE.finditer(text)]
    epochs = [{"epoch": int(m[1]), "epoch_time_s": float(m[2]), "test_time_s": float(m[3]),
               "test_accuracy": float(m[4])} for m in EPOCH_LINE.finditer(text)]
    return {"steps": steps, "epochs": epochs}


# ---- groups ----------------------------------------------------------------------------------

def _with_epochs(records: list[dict]) -> list[dict]:
    return [r for r in records if (r.get("metrics") or {}).get("epochs")]


def _stat_text(values: list, spread: bool = False) -> str:
    """mean ± std to the digits the std supports (stability.format_pm), and with `spread` the
    range (min–max) of the values to the same decimal place."""
    if not values:
        return "—"
    stats = timing.summarize(values)
    std = stats["std"] if stats["n"] > 1 else None
    text = stability.format_pm(stats["mean"], std)
    if not (spread and std):
        return text
    if all(float(v).is_integer() for v in values):  # epochs: whole numbers, whatever the spread
        return f"{text} ({int(min(values))}–{int(max(values))})"
    places = stability.decimals_for(std)
    return f"{text} ({stability.round_to(min(values), places)}–{stability.round_to(max(values), places)})"


def _score_text(score: dict) -> str:
    """The olympic mean to the digits the kept runs' spread supports, or why there is none."""
    if score["score_s"] is None:
        return f"— ({score['reason']})"
    return _stat_text([score["times"][i] for i in score["kept"]]).split(" ± ")[0]


def run_clock(epoch: dict) -> float:
    """An epoch's wall time since MLPerf's run_start; records before it existed: since training."""
    return epoch.get("run_elapsed_s", epoch["elapsed_s"])


def _seeds_text(seeds: list) -> str:
    seeds = sorted(set(seeds))
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def groups(records: list[dict]) -> list[dict]:
    """The aggregation groups (aggregate.summarize_records: throughput statistics and speedup) of
    the records with epochs, each with its runs and their convergence figures."""
    runs = _with_epochs(records)
    out = []
    for group in aggregate.summarize_records(runs):
        key = experiment.key_of(group)
        members = [r for r in runs if experiment.of(r) == key]
        ok = [r["metrics"] for r in members if r.get("error") is None]
        reached = [m for m in ok if m.get("epochs_to_target") is not None]
        targets = {r["config"].get("target_accuracy") for r in members}
        # every run counts for the score: a run that failed did not reach the target either
        times = [None if r.get("error") is not None else r["metrics"].get("time_to_target_s") for r in members]
        out.append(dict(group, runs=[r for r in members if r.get("error") is None],
                        target=targets.pop() if len(targets) == 1 else None, reached=len(reached),
                        final_accuracy=[m["final_test_accuracy"] for m in ok],
                        epochs_to_target=[m["epochs_to_target"] for m in reached],
                        time_to_target_s=[m["time_to_target_s"] for m in reached],
                        seeds=[r["config"].get("seed") for r in members if r["config"].get("seed") is not None],
                        score=dict(stability.olympic_score(times), times=times)))
    return out


def tables(records: list[dict]) -> list[dict]:
    """Groups gathered per (source, benchmark, preset): each gathering is one table and one chart."""
    gathered: dict[tuple, list[dict]] = {}
    for group in groups(records):
        gathered.setdefault((group["source"] or "", group["benchmark"], group["preset"] or ""), []).append(group)
    return [{"benchmark": b, "preset": p or None, "source": s or None, "groups": members,
             "name": slug("convergence", s, b, p)} for (s, b, p), members in gathered.items()]


# ---- table -----------------------------------------------------------------------------------

def table_markdown(table: dict) -> str:
    head = ["Processes", "Method", "Throughput", "Speedup", "Final accuracy", "Epochs to target",
            "Time to target (s)", "Reached", "Seeds", "Score (s)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in table["groups"]:
        throughput = "—" if g["mean"] is None else (  # the group's figure: its outliers left out, said
            stability.format_pm(g["mean"], g["std"] if g["n"] != 1 else None)
            + stability.excluded_note(g["n"], len(g.get("excluded") or ())))
        speedup = "—" if g["speedup"] is None else f"{g['speedup']:.2f}x"
        reached = f"{g['reached']}/{len(g['runs'])}" + (f" (+{g['failed']} failed)" if g["failed"] else "")
        lines.append("| " + " | ".join([
            str(g["world_size"]), g["method"], f"{throughput} {g['unit'] or ''}".strip(), speedup,
            _stat_text(g["final_accuracy"]), _stat_text(g["epochs_to_target"], spread=True),
            _stat_text(g["time_to_target_s"], spread=True), reached, _seeds_text(g["seeds"]),
            _score_text(g["score"])]) + " |")
    targets = sorted({fmt(g["target"]) for g in table["groups"]})
    return "\n".join(lines) + (f"\n\nTarget test accuracy: {', '.join(targets)}; mean ± sample std (range) over "
                               "the runs that reached it; time from run start (before the data is read) to "
                               "the end of the evaluation that first reached it, evaluations included. Score: "
                               "MLPerf's olympic mean (5+ runs, fastest and slowest dropped, at most one miss, "
                               "counted as the slowest).")


# ---- chart -----------------------------------------------------------------------------------

def chart_rows(table: dict) -> list[dict]:
    """The points drawn, one row per run and epoch (also the CSV beside the PNG)."""
    return [{"world_size": c["world_size"], "method": c["method"], "run": r["id"], "seed": r["config"].get("seed"),
             "epoch": e["epoch"], "run_elapsed_s": run_clock(e), "test_accuracy": e["test_accuracy"]}
            for c in table["groups"] for r in c["runs"] for e in r["metrics"]["epochs"]]


def draw(table: dict) -> bytes:
    """PNG bytes: accuracy vs wall time (left) and vs epoch (right), one line per run."""
    import matplotlib
    from matplotlib.ticker import MaxNLocator

    with matplotlib.rc_context(style.STYLE):
        fig = style.Figure(figsize=style.FIGSIZE, dpi=style.DPI)
        fig.subplots_adjust(left=0.075, right=0.82, top=0.86, bottom=0.14, wspace=0.25)
        by_time, by_epoch = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
        for index, cell in enumerate(table["groups"]):
            color = style.COLORS[index % len(style.COLORS)]
            for number, run in enumerate(cell["runs"]):
                epochs = run["metrics"]["epochs"]
                label = f"{cell['world_size']} process{'es' if cell['world_size'] > 1 else ''}" if not number else None
                accuracy = [e["test_accuracy"] for e in epochs]
                by_time.plot([run_clock(e) for e in epochs], accuracy, color=color, marker=".", label=label,
                             linewidth=1.0, alpha=0.8)
                by_epoch.plot([e["epoch"] for e in epochs], accuracy, color=color, marker=".", linewidth=1.0,
                              alpha=0.8)
            if cell["score"]["score_s"] is not None:  # MLPerf's score of the cell, where its runs give one
                by_time.axvline(cell["score"]["score_s"], color=color, linestyle=":", linewidth=1.2,
                                label=f"score {_score_text(cell['score'])} s")
        target = table["groups"][0]["target"]
        for ax, xlabel in ((by_time, "wall time since run start (s)"), (by_epoch, "epoch")):
            if target is not None:
                ax.axhline(target, color="black", linestyle="--", linewidth=0.8,
                           label=f"target {target:g}" if ax is by_time else None)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("test accuracy")
        by_epoch.xaxis.set_major_locator(MaxNLocator(integer=True))
        title = table["benchmark"] + (f" [{table['preset']}]" if table["preset"] else "")
        by_time.set_title(f"{title}: test accuracy, one line per run (seed)", loc="left")
        by_time.legend(loc="upper left", bbox_to_anchor=(2.28, 1.0), frameon=False)
        buffer = io.BytesIO()
        fig.savefig(buffer, **style.SAVE)
    return buffer.getvalue()


def section(records: list[dict], images_dir: str, link) -> tuple[str, list[str]]:
    """(markdown, files written): every convergence table with its chart; "" when no record has
    epochs. `link(png_path)` gives the path the markdown uses for an image."""
    def heading(table):
        return "Convergence: " + table["benchmark"] + (f" [{table['preset']}]" if table["preset"] else "")

    return output.chart_sections(tables(records), heading, (chart_rows, draw, table_markdown), images_dir, link)
