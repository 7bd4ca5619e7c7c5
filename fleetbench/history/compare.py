"""Is a difference between two sets of runs real? The statistics of `fleetbench compare` and
`fleetbench history` (pure: figures in, numbers and verdicts out).

The shape is benchstat's and asv's: a rank test on the runs (Mann–Whitney U, scipy.stats), or
Welch's t-test where the runs are too few for the rank test to ever reach significance (said in
the result); a 95 % interval of the change from a bootstrap of both sides (scipy.stats.bootstrap,
BCa, a fixed seed so the same runs give the same interval); Holm's correction when many cells are
tested at once (a few lines here: scipy.stats.false_discovery_control is Benjamini–Hochberg, and
statsmodels would bring pandas and patsy for one function); and a minimum effect, the larger of
`threshold_pct` and the cells' own run-to-run spread (cv), so that a change smaller than one run's
usual noise does not page anyone, however many runs made it significant.

Verdicts: FASTER / SLOWER (adjusted p below alpha and the change at least the minimum effect),
SAME (`~`), INSUFFICIENT (fewer runs than a test needs, with how many more), HARDWARE (the sides
ran on other CPUs or GPUs: two experiments; `compare --across-hardware` judges them anyway).

How a cell's sides were measured (`design`, from its runs' times): INTERLEAVED when the two sides'
time spans overlap, SEQUENTIAL when every run of one side came before every run of the other.
Sequential sides carry whatever the machine's speed did between them (+-10% between sets of runs
minutes apart on a quiet guest); the verdict is
the same either way, and the report says so beside it.
"""
from __future__ import annotations

import dataclasses
import datetime
import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetbench.measure.repeats.aggregate import Group

ALPHA = 0.05
THRESHOLD_PCT = 2.0  # --threshold: the least change worth a verdict, whatever the noise
MIN_RUNS = 2  # a side needs a spread: Welch's test needs 2 runs, the rank test more (mwu_min_p)
FASTER, SLOWER, SAME, INSUFFICIENT = "faster", "slower", "same", "insufficient"
HARDWARE = "hardware differs"  # sides on other CPUs/GPUs: no verdict unless asked (history/circumstances.py)
VERDICTS = (FASTER, SLOWER, SAME, INSUFFICIENT, HARDWARE)
MWU, WELCH = "mann-whitney-u", "welch"
INTERLEAVED, SEQUENTIAL = "interleaved", "sequential"
RESAMPLES = 9999
SEED = 34  # the bootstrap's: a fixed input gives a fixed interval


def mwu_min_p(n_base: int, n_new: int) -> float:
    """The smallest two-sided p the exact Mann–Whitney U test gives n_base + n_new runs without
    ties: one side entirely above the other, 2 orderings of C(n, n_base). 3+3 runs: 0.1, so no
    3-run comparison can ever be significant at 0.05 by ranks."""
    return min(1.0, 2 / math.comb(n_base + n_new, n_base))


def choose_test(n_base: int, n_new: int, alpha: float) -> tuple[str | None, str]:
    """(test, why) for sides of these sizes, significance judged at `alpha` (Holm's first step:
    alpha / cells). None with the reason when no test can be made."""
    if min(n_base, n_new) < MIN_RUNS:
        need = [f"{MIN_RUNS - n} more {side} run{'s' if MIN_RUNS - n > 1 else ''}"
                for side, n in (("base", n_base), ("new", n_new)) if n < MIN_RUNS]
        return None, f"n={n_base}+{n_new}: a test needs {MIN_RUNS} runs a side; {' and '.join(need)}"
    if mwu_min_p(n_base, n_new) < alpha:
        return MWU, ""
    return WELCH, (f"Welch's t-test: with {n_base}+{n_new} runs Mann–Whitney U's least p is "
                   f"{mwu_min_p(n_base, n_new):.2g}, not below {alpha:.2g}; {_mwu_needs(n_base, n_new, alpha)}")


def _mwu_needs(n_base: int, n_new: int, alpha: float) -> str:
    n = max(n_base, n_new)
    while mwu_min_p(n, n) >= alpha:
        n += 1
    return f"{n} runs a side would allow it"


def p_value(base: Sequence[float], new: Sequence[float], test: str) -> float | None:
    """Two-sided p of `test` on the two samples; None when it is undefined (Welch with no spread)."""
    from scipy import stats
    if test == MWU:
        return float(stats.mannwhitneyu(new, base, alternative="two-sided", method="auto").pvalue)
    if statistics.pstdev(base) == 0 and statistics.pstdev(new) == 0:
        return None
    return float(stats.ttest_ind(new, base, equal_var=False).pvalue)


def _pct_change(base, new, axis=-1):
    import numpy as np
    return 100.0 * (np.mean(new, axis=axis) / np.mean(base, axis=axis) - 1.0)


def change_ci(base: Sequence[float], new: Sequence[float], seed: int = SEED) -> tuple[list[float] | None, str]:
    """([lo, hi], method) of the 95 % interval of the change in % (new mean / base mean - 1), by
    bootstrap of both sides (BCa; percentile where BCa is undefined, e.g. runs all equal)."""
    import warnings

    import numpy as np
    from scipy import stats
    if min(len(base), len(new)) < MIN_RUNS:
        return None, ""
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # BCa's "degenerate distribution": the fallback handles it
            interval = stats.bootstrap((np.asarray(base, float), np.asarray(new, float)), _pct_change,
                                       n_resamples=RESAMPLES, method=method, vectorized=True,
                                       rng=np.random.default_rng(seed)).confidence_interval
        if math.isfinite(interval.low) and math.isfinite(interval.high):
            return [float(interval.low), float(interval.high)], method
    return None, ""


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (None stays None and is not counted): the i-th smallest
    of m times (m - i), made non-decreasing, capped at 1."""
    order = sorted((i for i, p in enumerate(pvalues) if p is not None), key=lambda i: pvalues[i])
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * pvalues[i]))
        out[i] = running
    return out


def cv_pct(values: Sequence[float]) -> float | None:
    if len(values) < 2 or statistics.fmean(values) == 0:
        return None
    return 100.0 * statistics.stdev(values) / abs(statistics.fmean(values))


def minimum_effect(base: Sequence[float], new: Sequence[float], threshold_pct: float) -> float:
    """The least |change| in % a verdict other than SAME needs: `threshold_pct`, or the larger
    side's run-to-run cv when that is larger (a change inside one run's noise is not news)."""
    return max([threshold_pct] + [c for c in (cv_pct(base), cv_pct(new)) if c is not None])


@dataclasses.dataclass
class Result:
    """One comparison of two samples (a cell's two sides, or two segments of a history)."""

    change_pct: float | None
    ci95_pct: list[float] | None
    ci_method: str
    test: str | None
    note: str  # why Welch, or why no test
    p_value: float | None
    p_adjusted: float | None
    min_effect_pct: float
    verdict: str

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def compare_many(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], alpha: float = ALPHA,
                 threshold_pct: float = THRESHOLD_PCT) -> list[Result]:
    """A Result per (base values, new values) pair; the p-values Holm-adjusted across the pairs
    that could be tested, the rank test chosen where it can reach Holm's first step (alpha / m)."""
    testable = sum(min(len(b), len(n)) >= MIN_RUNS for b, n in pairs)
    first_step = alpha / max(1, testable)
    chosen = [choose_test(len(b), len(n), first_step) for b, n in pairs]
    raw = [p_value(b, n, test) if test else None for (b, n), (test, _) in zip(pairs, chosen)]
    adjusted = holm(raw)
    results = []
    for (base, new), (test, note), p, p_adj in zip(pairs, chosen, raw, adjusted):
        change = _pct_change(base, new).item() if base and new and statistics.fmean(base) else None
        ci, method = change_ci(base, new)
        effect = minimum_effect(base, new, threshold_pct)
        if test and p is None:
            note = "every run of each side is equal: no spread to test a difference against"
        results.append(Result(change_pct=change, ci95_pct=ci, ci_method=method, test=test, note=note,
                              p_value=p, p_adjusted=p_adj, min_effect_pct=effect,
                              verdict=verdict(change, p_adj, effect, alpha)))
    return results


def verdict(change_pct: float | None, p_adjusted: float | None, min_effect_pct: float,
            alpha: float = ALPHA) -> str:
    if change_pct is None or p_adjusted is None:
        return INSUFFICIENT
    if p_adjusted < alpha and abs(change_pct) >= min_effect_pct:
        return FASTER if change_pct > 0 else SLOWER
    return SAME


# ---- cells of two sides, matched on the declared key (measure/repeats/experiment.py) ----------------------

def comparable_records(records: list[dict]) -> list[dict]:
    """The records a comparison reads: throughput runs (comm and diagnose records have none)."""
    return [r for r in records if r["mode"] not in ("comm", "diagnose")]


def side_of(group: Group, times: dict | None = None) -> dict:
    """A cell's side: its figure's runs (stability.kept: undisturbed, outliers left out, as the
    report's figure), their n/mean/std/median/cv, what was left out, the circumstances, and the
    first and last time of all its runs (`from`, `to`; None unless `times`, {run id: record time},
    gives every run's)."""
    first_last = span(group, times or {})
    left_out = set(group.excluded) | (set() if group.figure_disturbed else set(group.disturbed))
    runs = [r for r in group.runs if r.id not in left_out]
    values = [r.throughput for r in runs]
    return {"ids": [r.id for r in runs], "values": values, "n": len(values) if runs else group.n,
            "mean": group.mean, "std": group.std, "median": group.median,
            "cv_pct": cv_pct(values), "unit": group.unit, "runs": len(group.runs),
            "excluded": sorted(group.excluded), "disturbed": dict(group.disturbed),
            "figure_disturbed": group.figure_disturbed, "failed": group.failed,
            "published": group.published_aggregate,
            "from": first_last[0].isoformat() if first_last else None,
            "to": first_last[1].isoformat() if first_last else None,
            "paddle": group.paddle, "device": group.device, "host": group.host}


def widen(ignore) -> tuple:
    """`ignore` with the config's copy of each ignored cell-key field (a run's config repeats its
    method: --ignore method must leave config.method out too, or bsp never meets mgwfbp)."""
    from fleetbench.measure.repeats import experiment
    names = tuple(ignore)
    return names + tuple(f"config.{n}" for n in names if n in experiment.WORK and f"config.{n}" not in names)


def unify(keys) -> dict[tuple, tuple]:
    """{cell key: the key it is matched as}. A key whose every item is in exactly one larger key
    (the largest of its kind), which adds config keys only, is matched as that one: a benchmark
    that grew a config key (e.g. data.val_path) records it from then on, and its older
    runs, which cannot say it, are the same work. Two candidates: kept apart (ambiguous)."""
    keys = set(keys)
    out = {k: k for k in keys}
    for key in keys:
        items = set(key)
        wider = [o for o in keys if items < set(o) and all(n.startswith("config.") for n, _ in set(o) - items)]
        widest = [o for o in wider if not any(set(o) < set(p) for p in wider)]
        if len(widest) == 1:
            out[key] = widest[0]
    return out


# what a record's cell key (WORK) is made of; its circumstances only enter through --match
WORK_INPUTS = ("source", "benchmark", "preset", "mode", "method", "network", "nodes", "devices_per_node",
               "world_size", "config")


def cell_keys(records: list[dict], ignore=(), match=()) -> list[tuple]:
    """experiment.cell_key of each record, made once per distinct work: a store's 100,000 runs are
    a few hundred cells, and a key costs the config flattened and hashed."""
    import json

    from fleetbench.measure.repeats import experiment
    if match:
        return [experiment.cell_key(r, ignore, match) for r in records]
    made: dict[str, tuple] = {}
    out = []
    for record in records:
        text = json.dumps([record.get(k) for k in WORK_INPUTS], sort_keys=True, default=str)
        if text not in made:
            made[text] = experiment.cell_key(record, ignore, match)
        out.append(made[text])
    return out


def match_cells(base: list[dict], new: list[dict], ignore=(), match=()) -> dict:
    """Groups (aggregate.aggregate) of both sides matched on experiment.cell_key(ignore, match):
    {"pairs": [(key, base group, new group)], "only_base": [key], "only_new": [key],
     "unlike": [(key, side, [groups])]}: a side holding several experiments of one cell (two Paddle
    builds, two hosts) is not pooled; it is named, and `--match` the circumstance that tells them
    apart compares them apart."""
    from fleetbench.measure.repeats import experiment
    by_side = []
    usable = [[g for g in groups if g.mean is not None] for groups in (base, new)]
    canonical = unify(experiment.cell_key(g, ignore, match) for side in usable for g in side)
    for groups in usable:
        keyed: dict[tuple, list[dict]] = {}
        for group in groups:
            keyed.setdefault(canonical[experiment.cell_key(group, ignore, match)], []).append(group)
        by_side.append(keyed)
    out = {"pairs": [], "only_base": [], "only_new": [], "unlike": []}
    for key in sorted(set(by_side[0]) | set(by_side[1]), key=lambda k: json_key(k)):
        b, n = by_side[0].get(key, []), by_side[1].get(key, [])
        unlike = [(side, gs) for side, gs in (("base", b), ("new", n)) if len(gs) > 1]
        if unlike:
            out["unlike"] += [(key, side, gs) for side, gs in unlike]
        elif b and n:
            out["pairs"].append((key, b[0], n[0]))
        else:
            out["only_base" if b else "only_new"].append(key)
    return out


def json_key(key: tuple) -> str:
    import json
    return json.dumps(key, default=str)


def run_time(text: str | None) -> datetime.datetime | None:
    """A record's `time` (ISO 8601) as a datetime in UTC (a time naming no zone taken as UTC); None
    if absent or unreadable."""
    try:
        when = datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    utc = datetime.timezone.utc
    return when.astimezone(utc) if when.tzinfo else when.replace(tzinfo=utc)


def span(group: dict, times: dict) -> tuple[datetime.datetime, datetime.datetime] | None:
    """(first, last) time of a group's successful runs, from `times` ({run id: record time}); None
    when a run's time is unknown (a published figure has no runs)."""
    when = [run_time(times.get(r.id)) for r in group.runs]
    return (min(when), max(when)) if when and None not in when else None


def design(base: dict, new: dict) -> str | None:
    """How two sides (side_of) were measured: INTERLEAVED when their spans of run times overlap,
    SEQUENTIAL when one side's last run came before the other's first; None when a span is unknown."""
    if not (base["from"] and new["from"]):
        return None
    (b0, b1), (n0, n1) = [(run_time(s["from"]), run_time(s["to"])) for s in (base, new)]
    return SEQUENTIAL if b1 < n0 or n1 < b0 else INTERLEAVED


def compare_pairs(pairs: list[tuple], alpha: float = ALPHA, threshold_pct: float = THRESHOLD_PCT,
                  times: dict | None = None) -> list[dict]:
    """One cell per (key, base group, new group): both sides (side_of, with their runs' times from
    `times`: {run id: record time}), how they were measured (`design`) and the comparison (compare_many over all pairs: Holm across them). Published
    figures have no runs to test: insufficient, said."""
    sides = [(side_of(b, times), side_of(n, times)) for _, b, n in pairs]
    results = compare_many([([] if b["published"] else b["values"], [] if n["published"] else n["values"])
                            for b, n in sides], alpha, threshold_pct)
    cells = []
    for (key, _, _), (b, n), result in zip(pairs, sides, results):
        cell = {"key": dict(key), "base": b, "new": n, "design": design(b, n), **result.as_dict()}
        if b["published"] or n["published"]:
            cell["note"] = "a published figure is a summary without runs: nothing to test"
        if b["unit"] != n["unit"]:
            cell.update(verdict=INSUFFICIENT, note=f"units differ ({b['unit']} vs {n['unit']})")
        cells.append(cell)
    return cells
