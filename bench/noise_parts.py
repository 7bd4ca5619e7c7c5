"""What each run's noise is made of, from a sweep's stored runs (it measures nothing itself):

- within one process: the spread of a run's own sub-windows (its measured steps cut into
  --windows contiguous windows, `step_times_ms`), pooled over the runs, and what it leaves in a
  run's mean (its spread / sqrt(windows));
- between processes: what stays of run-to-run spread once the round's common drift is taken out
  (start-up, placement, threads), less the within-process part;
- drift across rounds: each round's common level (the median over cells of a run's log-throughput
  against its cell's mean; a cell's k-th run, by time, is in round k, as the sweep interleaves),
  and its trend (linear fit, % a round);
then per family (collective, ps) the cheapest way to a stable figure: the runs (rounds) a cell
needs for a 95% interval of +-TARGET% with the process's windows as they are, with 4x the measured
time per process (more windows or a longer one: the same in-process term), and without drift (a
ratio of two runs of one round, where the drift cancels). And whether the machine-speed probe
tracks the throughput on these runs (Pearson r of log-throughput against log-probe, cell means
out; scipy.stats), and whether dividing by it narrows the spread: a probe-normalised throughput
is worth making only where both hold.

    python bench/noise_parts.py results/demo.jsonl [more.jsonl ...] [--windows 4] [--target-pct 5]

Each file is one sweep (its rounds are its own); give one file per sweep.

Read from a quiet machine's sweep (`make demo`, or `fleetbench sweep` with several rounds): on a
shared machine every part is mostly the neighbours'.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scipy import stats  # noqa: E402

from fleetbench.measure.repeats import experiment, stability  # noqa: E402

PROBES = ("probe_gemm_gflops", "probe_triad_gbps", "probe_scalar_mops")
# the probe's correlation holds when it is positive at this significance (three figures tried:
# about 0.03 for the family) and dividing by it narrows the spread
HOLDS_P = 0.01


@dataclasses.dataclass(frozen=True)
class Run:
    cell: experiment.Experiment
    family: str  # the record's mode: collective | ps | ...
    round: int  # the cell's k-th run, by time (0 first)
    log_rate: float  # log throughput
    window_cv: float | None  # the spread of its sub-windows' rates (relative), None: too few steps
    probes: dict  # PROBES -> mean of the two edges (None: not probed)


def window_rates(step_times_ms: list[list[float]], windows: int) -> list[float]:
    """The job's rate in each of `windows` contiguous sub-windows: every rank's steps cut alike,
    each window's steps / its time, summed over ranks (steps a second)."""
    rates = [0.0] * windows
    for steps in step_times_ms:
        if len(steps) < windows:
            return []
        size = len(steps) / windows
        for w in range(windows):
            part = steps[round(w * size):round((w + 1) * size)]
            rates[w] += len(part) / (sum(part) / 1000)
    return rates


def _probe(metrics: dict, name: str) -> float | None:
    edges = [metrics.get(f"{name}_{edge}") for edge in ("before", "after")]
    edges = [v for v in edges if v]
    return statistics.fmean(edges) if edges else None


def runs_of(records: list[dict], windows: int) -> list[Run]:
    """The successful, undisturbed training runs (interference, probe: stability's judgement), each
    with its round."""
    cells: dict = {}
    for record in sorted(records, key=lambda r: r.get("time") or ""):
        m = record.get("metrics") or {}
        if record.get("error") or record["mode"] == "comm" or not m.get("throughput") or stability.is_disturbed(m):
            continue
        cells.setdefault(experiment.of(record), []).append(record)
    out = []
    for cell, members in cells.items():
        for k, record in enumerate(members):
            m = record["metrics"]
            rates = window_rates(m.get("step_times_ms") or [], windows)
            out.append(Run(cell, record["mode"], k, math.log(m["throughput"]),
                           stability.cv(rates) if len(rates) > 1 else None,
                           {name: _probe(m, name) for name in PROBES}))
    return out


@dataclasses.dataclass(frozen=True)
class Parts:
    """One family's noise, each a relative standard deviation of one run's figure (0.05 = 5%)."""
    runs: int
    cells: int
    within: float | None  # a run's sub-window spread
    windows: int
    between: float  # between processes, drift out, within-process part out
    drift: float  # the rounds' common level, its spread
    drift_per_round: float  # the fitted trend (relative, a round)
    rounds: list  # each round's common level (relative)


def parts(runs: list[Run], windows: int) -> Parts | None:
    """The decomposition of one family's runs (module docstring); None without 2 runs in 2 rounds."""
    by_cell: dict = {}
    for run in runs:
        by_cell.setdefault(run.cell, []).append(run)
    repeated = [rs for rs in by_cell.values() if len(rs) >= 2]
    if not repeated:
        return None
    offsets = {r.round: [] for rs in repeated for r in rs}
    for rs in repeated:
        mean = statistics.fmean(r.log_rate for r in rs)
        for r in rs:
            offsets[r.round].append(r.log_rate - mean)
    level = {k: statistics.median(v) for k, v in sorted(offsets.items())}
    residuals = [r.log_rate - statistics.fmean(x.log_rate for x in rs) - level[r.round] for rs in repeated for r in rs]
    dof = max(1, len(residuals) - len(repeated) - len(level) + 1)
    within = [r.window_cv for rs in repeated for r in rs if r.window_cv is not None]
    within_rms = math.sqrt(statistics.fmean(w * w for w in within)) if within else None
    between_sq = sum(e * e for e in residuals) / dof - (within_rms ** 2 / windows if within_rms else 0.0)
    trend = stats.linregress(list(level), list(level.values())).slope if len(level) >= 3 else 0.0
    return Parts(len(residuals), len(repeated), within_rms, windows, math.sqrt(max(0.0, between_sq)),
                 statistics.pstdev(level.values()) if len(level) > 1 else 0.0, trend,
                 [round(math.expm1(v), 4) for v in level.values()])


def runs_needed(sigma: float, target: float, most: int = 100) -> int | None:
    """Runs whose 95% interval of the mean is within +-target (relative), t-based; None past `most`."""
    for n in range(2, most + 1):
        if stats.t.ppf(0.975, n - 1) * sigma / math.sqrt(n) <= target:
            return n
    return None


def cheapest(p: Parts, target: float) -> list[str]:
    """The runs a cell needs each way (module docstring), as lines."""
    inproc = (p.within or 0.0) ** 2 / p.windows
    ways = {"as run": p.between ** 2 + inproc + p.drift ** 2,
            "4x the measured time per process": p.between ** 2 + inproc / 4 + p.drift ** 2,
            "ratio within a round (drift cancels; two runs' noise)": 2 * (p.between ** 2 + inproc)}
    lines = []
    for way, variance in ways.items():
        n = runs_needed(math.sqrt(variance), target)
        lines.append(f"  {way}: {'more than 100' if n is None else n} runs (rounds) for +-{100 * target:g}% "
                     f"(one run's spread {100 * math.sqrt(variance):.1f}%)")
    dominant = max(("between processes", p.between ** 2), ("within a process", inproc), ("drift", p.drift ** 2),
                   key=lambda kv: kv[1])[0]
    return lines + [f"  the largest part: {dominant}"]


def probe_tracks(runs: list[Run]) -> list[str]:
    """Per probe figure: r and p of log-throughput against log-probe, each cell's means taken out."""
    lines = []
    for name in PROBES:
        by_cell: dict = {}
        for r in (r for r in runs if r.probes.get(name)):
            by_cell.setdefault(r.cell, []).append((r.log_rate, math.log(r.probes[name])))
        xs, ys = [], []
        for pairs in (p for p in by_cell.values() if len(p) >= 2):
            my, mx = statistics.fmean(y for y, _ in pairs), statistics.fmean(x for _, x in pairs)
            ys += [y - my for y, _ in pairs]
            xs += [x - mx for _, x in pairs]
        if len(xs) < 4:
            lines.append(f"  {name}: too few probed repeats ({len(xs)})")
            continue
        r, pvalue = stats.pearsonr(xs, ys)
        # dividing by the probe must also narrow the spread: it adds the probe's own noise
        spread, normalised = statistics.stdev(ys), statistics.stdev(y - x for x, y in zip(xs, ys))
        holds = r > 0 and pvalue < HOLDS_P and normalised < spread
        verdict = ("holds: a throughput normalised by it may be shown" if holds
                   else "does not hold: no normalised figure")
        lines.append(f"  {name}: r {r:+.2f} (p {pvalue:.2g}, {len(xs)} runs), spread {100 * spread:.1f}% "
                     f"-> {100 * normalised:.1f}% normalised: {verdict}")
    return lines


def report(records: list[dict], windows: int, target: float) -> str:
    runs = runs_of(records, windows)
    lines = []
    for family in sorted({r.family for r in runs}):
        mine = [r for r in runs if r.family == family]
        p = parts(mine, windows)
        if p is None:
            lines.append(f"{family}: no cell with two runs")
            continue
        within = "-" if p.within is None else (f"{100 * p.within:.1f}% a sub-window "
                                                f"({100 * p.within / math.sqrt(windows):.1f}% in a run's mean)")
        lines += [f"{family}: {p.runs} runs of {p.cells} cells, {len(p.rounds)} rounds",
                  f"  within a process: {within}",
                  f"  between processes (drift and in-process part out): {100 * p.between:.1f}%",
                  f"  drift: rounds at {', '.join(f'{100 * v:+.1f}%' for v in p.rounds)} (spread {100 * p.drift:.1f}%, "
                  f"trend {100 * p.drift_per_round:+.1f}% a round)",
                  *cheapest(p, target), "  machine-speed probe against throughput:", *probe_tracks(mine)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="JSONL stores of a sweep's runs")
    parser.add_argument("--windows", type=int, default=4, help="sub-windows a run's measured steps are cut into")
    parser.add_argument("--target-pct", type=float, default=5.0, help="the interval a stable figure needs (+-%%)")
    args = parser.parse_args()
    if args.windows < 2 or not 0 < args.target_pct < 100:
        parser.error("--windows: expected an integer >= 2; --target-pct: expected a number in (0, 100)")
    for path in args.results:  # one sweep a file: rounds are a sweep's, never pooled across sweeps
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        print(f"== {path}\n{report(records, args.windows, args.target_pct / 100)}")


if __name__ == "__main__":
    main()
