"""A cell's figures through time and the change points in them: the statistics of `fleetbench
history` (pure: records in, series out).

A series is one cell's successful runs (cells keyed by measure/repeats/experiment.cell_key, as `compare`
keys them), in order of time, of Paddle version or of commit; consecutive runs of one Paddle
build, host, commit and day are one *point* of it (a sweep's repeats). Candidate change points are
found on the runs' throughputs by PELT (Killick, Fearnhead and Eckley 2012: the exact optimal
segmentation under a penalty) with the l2 cost (a shift of the mean), from ruptures; the penalty
is 3 log(n) x sigma^2 (the modified BIC of Zhang and Siegmund's order, stricter than BIC's
log(n): with a few runs BIC split a flat series one time in two), sigma the runs' own noise
estimated from successive differences (robust to the shifts themselves). Each candidate is then
judged by history/compare.py between the runs before it and after it (Holm across the changes of
one cell, compare's minimum effect and bootstrap interval), in compare's verdicts: faster,
slower, same, insufficient; the p-value is a permutation test of the best split
(E-Divisive's way: the split was chosen as the strongest, so a plain two-sample test between its
sides would be optimistic). Disturbed runs are shown and left out of the detection, as they
are left out of figures. Why not E-Divisive's own libraries: docs/guide/compare.md.

At each change, what changed in the runs' circumstances between its two segments
(history/circumstances.explain: `NCCL 2.18.3 → 2.19.3; Paddle unchanged`); `together` links the
called changes of several cells in one interval of time; `regressions` lists the cells whose latest
change is a slowdown.
"""
from __future__ import annotations

import math
import re

from fleetbench.history import circumstances, compare
from fleetbench.measure.repeats import experiment, stability
from fleetbench.measure.timing import summarize
from fleetbench.store import results
from fleetbench.store.results import Record

ORDERS = ("time", "paddle", "commit")
MIN_SEGMENT = 2  # runs on each side of a change: a test needs a spread on both
PENALTY = 3.0  # x log(n) x noise^2: see the module's docstring
MIN_SERIES = 2 * MIN_SEGMENT  # fewer runs cannot show a change and the runs on both sides of it
MAD_SCALE = stability.MAD_SCALE
RESOLUTION = 0.002  # the least noise assumed, a fraction of the median: equal runs are not perfectly known
PERMUTATION = "permutation"  # the test of a change found: split_p
PERMUTATIONS = 999  # its resolution: p is a multiple of 1 / (PERMUTATIONS + 1)
SEED = 34  # its random orders: a fixed input gives fixed p-values


def version_key(text: str | None) -> tuple:
    """'2.6.2 CPU 8ce0de5' sorts before '3.3.1 CPU ...' and '2.10.0' after '2.6.2'."""
    head = (text or "").split(" ", 1)[0]
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.\-+]", head)), text or ""


def run_point(record: Record) -> dict:
    """What a run ran on, its point's label parts: date, Paddle build, host, commit."""
    return {"date": record.time[:10], "paddle": experiment.paddle_build(record["env"]),
            "host": experiment.host_class(record), "git": results.short_commit(record.git, 7)}


def point_label(point: dict, by: str) -> str:
    paddle = (point["paddle"] or "?").split(" ")[0]
    if by == "paddle":
        return f"Paddle {paddle}"
    if by == "commit":
        return point["git"] or "no commit"
    return f"{point['date']} {paddle}" + (f" {point['git']}" if point["git"] else "")


def order_key(by: str):
    def key(record: Record):
        if by == "paddle":
            return version_key(experiment.paddle_build(record["env"])), record.time
        return record.time
    return key


def series(records: list[dict], by: str = "time", ignore=(), match=(),
           disturbed_pct: float = stability.DISTURBED_PCT) -> list[dict]:
    """One series per cell with a successful run: {"key", "unit", "runs": [{id, time, throughput,
    disturbed, point, record}], "points": [{label, n, mean, std, ids, first}]} (`record`: the run's
    record, for `changes` to read the circumstances of the runs beside a change; not output). With `by="commit"` runs are
    ordered by the first time their commit was seen, then by time."""
    if by not in ORDERS:
        raise ValueError(f"--by {by}: expected one of {', '.join(ORDERS)}")
    runs = [r for r in map(Record.of, compare.comparable_records(records)) if r.ok and r.measured]
    keys = compare.cell_keys(runs, ignore, match)
    canonical = compare.unify(set(keys))
    cells: dict[tuple, list[dict]] = {}
    for record, key in zip(runs, keys):
        cells.setdefault(canonical[key], []).append(record)
    out = []
    for key in sorted(cells, key=compare.json_key):
        runs = sorted(cells[key], key=order_key(by))
        if by == "commit":
            first = {}
            for r in sorted(runs, key=lambda r: r.time):
                first.setdefault(r.git, r.time)
            runs.sort(key=lambda r: (first[r.git], r.time))
        out.append(_series(dict(key), runs, by, disturbed_pct))
    return out


def _series(key: dict, runs: list[Record], by: str, disturbed_pct: float) -> dict:
    items = [{"id": r.id, "time": r.time, "throughput": r.metrics.throughput,
              "disturbed": stability.is_disturbed(r["metrics"], disturbed_pct),
              "interference_cpu_pct": r.metrics.figure("interference_cpu_pct"),
              "point": point_label(run_point(r), by), "record": r} for r in runs]
    points: list[dict] = []
    for index, item in enumerate(items):
        if not points or points[-1]["label"] != item["point"]:
            points.append({"label": item["point"], "ids": [], "first": index, "values": []})
        points[-1]["ids"].append(item["id"])
        if not item["disturbed"]:
            points[-1]["values"].append(item["throughput"])
    for point in points:
        point.update(summarize(point.pop("values")))
    return {"key": key, "unit": runs[0]["metrics"]["unit"], "runs": items, "points": points}


def noise(values: list[float]) -> float:
    """The runs' standard deviation within segments, from successive differences (each has twice
    a run's variance; the median absolute deviation ignores the few differences that straddle a
    shift), floored at RESOLUTION of the median so that equal runs do not make every run a change."""
    import numpy as np
    diffs = np.diff(np.asarray(values, dtype=float))
    mad = float(np.median(np.abs(diffs - np.median(diffs)))) if len(diffs) else 0.0
    return max(MAD_SCALE * mad / math.sqrt(2), RESOLUTION * abs(float(np.median(values))))


def change_points(values: list[float]) -> list[int]:
    """Indexes where a new segment starts (sorted): PELT (ruptures) on the l2 cost, penalty
    PENALTY x log(n) x noise^2, segments of at least MIN_SEGMENT runs; none for fewer than MIN_SERIES runs."""
    if len(values) < MIN_SERIES:
        return []
    import numpy as np
    import ruptures
    signal = np.asarray(values, dtype=float).reshape(-1, 1)
    penalty = PENALTY * math.log(len(values)) * noise(values) ** 2
    # PELT on the l2 cost, in ruptures' C implementation: KernelCPD's linear kernel is the l2 cost
    # (tests/unit/test_history.py holds it to ruptures.Pelt(model="l2")); the Python Pelt made
    # `history` of 100,000 runs minutes long (bench/history_store.py)
    ends = ruptures.KernelCPD(kernel="linear", min_size=MIN_SEGMENT, jump=1).fit(signal).predict(pen=penalty)
    return sorted(int(i) for i in ends if 0 < int(i) < len(values))


def split_statistic(values):
    """The largest drop of the l2 cost one split of `values` can make: max over k of
    k (n - k) / n x (mean of the first k - mean of the rest)^2 (a CUSUM statistic). Of each row,
    as an array, when `values` is a matrix (one series a row)."""
    import numpy as np
    x = np.asarray(values, dtype=float)
    n = x.shape[-1]
    if n < 2:
        return float(0.0) if x.ndim == 1 else np.zeros(x.shape[:-1])
    k = np.arange(1, n)
    before = np.cumsum(x, axis=-1)[..., :-1]
    left = before / k
    right = (x.sum(axis=-1, keepdims=True) - before) / (n - k)
    best = np.max(k * (n - k) / n * (left - right) ** 2, axis=-1)
    return float(best) if x.ndim == 1 else best


PERMUTED_BLOCK = 1 << 22  # values of permuted series held at once (32 MiB)


def split_p(values, permutations: int = PERMUTATIONS, seed: int = SEED) -> float:
    """p of the best split of `values` against the same runs in random orders (a permutation test,
    E-Divisive's way): the share of orders whose best split is at least as strong. The split was
    chosen as the strongest, so a two-sample test between its sides would be optimistic; this one
    pays for the choice. The orders are drawn a block of rows at a time (Generator.permuted shuffles
    each row as Generator.permutation would, in turn: the p-values of one order at a time, a test
    holds it) and their statistics computed together."""
    import numpy as np
    rng = np.random.default_rng(seed)
    x = np.asarray(values, dtype=float)
    observed = split_statistic(x)
    rows = max(1, PERMUTED_BLOCK // max(1, len(x)))
    stronger = 0
    for start in range(0, permutations, rows):
        block = rng.permuted(np.tile(x, (min(rows, permutations - start), 1)), axis=1)
        stronger += int(np.count_nonzero(split_statistic(block) >= observed))
    return (stronger + 1) / (permutations + 1)


def changes(all_series: list[dict], alpha: float = compare.ALPHA,
            threshold_pct: float = compare.THRESHOLD_PCT) -> list[dict]:
    """Every series with its change points: `segments` (start, end, n, mean, std) of its
    undisturbed runs and `changes` (at: the run index where the new segment starts, its point,
    before/after: the runs of the segments on both sides, and compare's figures between them: the
    change, its bootstrap interval, the minimum effect, the verdict). The p-value is the
    permutation test's (`split_p`) over the two segments, Holm-adjusted across the changes of the
    same cell (as MongoDB judges each series apart: across cells, about one flat cell in 20 shows a
    false change, docs/guide/compare.md)."""
    for s in all_series:
        segment(s)
    for s in all_series:  # each cell's history is one question: its changes are corrected together
        raw = [split_p(c["before"] + c["after"]) for c in s["changes"]]
        for change, p, p_adj in zip(s["changes"], raw, compare.holm(raw)):
            change.update(p_value=p, p_adjusted=p_adj)
    for change in (c for s in all_series for c in s["changes"]):
        p, p_adj = change["p_value"], change["p_adjusted"]
        base, new = change["before"], change["after"]
        change_pct = 100.0 * (sum(new) / len(new)) / (sum(base) / len(base)) - 100.0
        ci, method = compare.change_ci(base, new)
        effect = compare.minimum_effect(base, new, threshold_pct)
        change.update(compare.Result(change_pct=change_pct, ci95_pct=ci, ci_method=method, test=PERMUTATION,
                                     note="", p_value=p, p_adjusted=p_adj, min_effect_pct=effect,
                                     verdict=compare.verdict(change_pct, p_adj, effect, alpha)).as_dict())
    return all_series


def segment(s: dict) -> None:
    """One series' `segments` and `changes` (without their statistics) from its undisturbed runs.
    What a run ran on is worked out only for the runs beside a change: at 100,000 records doing it
    for every run was most of `history`'s time."""
    named: dict[int, dict] = {}

    def of(i: int) -> dict:
        if i not in named:
            named[i] = circumstances.of(s["runs"][i]["record"])
        return named[i]
    quiet = [i for i, run in enumerate(s["runs"]) if not run["disturbed"]]
    values = [s["runs"][i]["throughput"] for i in quiet]
    s["segments"], s["changes"] = [], []
    if not values:
        return
    bounds = [0] + change_points(values) + [len(values)]
    s["segments"] = [dict(summarize(values[a:b]), start=quiet[a], end=quiet[b - 1])
                     for a, b in zip(bounds, bounds[1:])]
    for a, cut, b in zip(bounds, bounds[1:-1], bounds[2:]):
        s["changes"].append({"at": quiet[cut], "point": s["runs"][quiet[cut]]["point"],
                             "before": values[a:cut], "after": values[cut:b],
                             "from": s["runs"][quiet[cut - 1]]["time"], "to": s["runs"][quiet[cut]]["time"],
                             **circumstances.explain([of(i) for i in quiet[a:cut]], [of(i) for i in quiet[cut:b]])})


def together(cells: list[dict]) -> None:
    """Each change gets `together`: the labels of the other cells with a called change (faster or
    slower) in the same
    interval of time (between the last run before it and the first run after it, overlapping),
    so that one cause seen in several series is said once as one event."""
    windows = [(sorted((compare.run_time(c["from"]), compare.run_time(c["to"]))), cell["label"], c)
               for cell in cells for c in cell["changes"]
               if c["from"] and c["to"] and c["verdict"] in (compare.FASTER, compare.SLOWER)]
    items = sorted(((w[0], w[1], label, c) for w, label, c in windows if None not in w), key=lambda item: item[0])
    for change in (c for cell in cells for c in cell["changes"]):
        change["together"] = []
    for i, (start, end, label, change) in enumerate(items):
        for start2, end2, label2, change2 in items[i + 1:]:
            if start2 > end:
                break
            if label2 != label and start2 <= end and start <= end2:
                change["together"].append(label2)
                change2["together"].append(label)


def regressions(cells: list[dict]) -> list[dict]:
    """Every cell whose latest change point is a slowdown, newest first: [{"label", "change"}]."""
    found = [{"label": cell["label"], "unit": cell["unit"], "change": cell["changes"][-1]}
             for cell in cells if cell["changes"] and cell["changes"][-1]["verdict"] == compare.SLOWER]
    return sorted(found, key=lambda item: item["change"]["to"] or "", reverse=True)
