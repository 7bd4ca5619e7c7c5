"""How far repeats of one experiment can be trusted: pure statistics on a list of figures.

- `cv`: coefficient of variation, sample std (ddof 1) / mean; None for fewer than 2 runs.
- `is_unstable`: cv above a threshold (default CV_THRESHOLD = 5 %, as pyperf warns when the std
  is a large share of the mean).
- `outliers`: runs far from the others by a robust rule (median absolute deviation), flagged and
  shown (see `outliers` for the rule and its small-n and MAD = 0 cases); `excluded`: those of them
  a figure leaves out, at most a quarter of the runs (one of 3 to 7), the farthest first; `kept`:
  the runs a figure is computed over (never silently: whoever prints the figure says so).
- `is_disturbed`: a run during which processes outside the job used more than DISTURBED_PCT % of
  the machine's CPU (or any of its GPUs), or whose machine-speed probe moved (`probe_reason`,
  `disturbed_reasons`: against its own other edge and its cell's median; LIMITS): shown, never in a figure, not in the cv that judges
  whether a cell is stable, and not counted towards the until-stable stop (`quiet` flags, one per
  run, say which runs were not disturbed).
- `ci_half_width`: the 95 % confidence interval half-width of the mean (Student t, scipy.stats).
- `stop_reason`: the stop rule of adaptive repeats (`fleetbench sweep --until-stable`), judged on
  the kept runs.
- `ratio_rel_error`: the relative uncertainty of a ratio of two means (speedup, efficiency).
- `format_pm` / `round_to`: a mean ± spread printed with the digits the spread supports;
  `excluded_note`: what follows a figure that left outliers out.

Nothing here imports Paddle or reads files: figures in, numbers or text out.
"""
from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence

CV_THRESHOLD = 0.05  # a cell whose runs vary more than this (std / mean) is marked unstable
TARGET_CI_PCT = 2.0  # --until-stable: 95 % CI half-width of the mean within ±2 % of the mean
MAX_REPEATS = 10  # --until-stable: runs of a cell at most, unless --max-repeats says otherwise
MAD_LIMIT = 3.0  # outlier: more than this many scaled MADs from the median
MAD_SCALE = 1.4826  # MAD x this estimates the std of normally distributed runs
# A run is `disturbed` when processes outside the job took more than this share (%) of the machine's
# CPU in its timed window (measure/interference.py) or used one of its GPUs: the machine's daemons
# take ~1 %, a neighbour on one of 2 cores ~50 %; a run slowed by a tenth is no figure of the job.
DISTURBED_PCT = 10.0
# Also `disturbed`: the speed probe (machine/speed.py) moved by more than its limit (%) between the
# run's edges or, at its slower edge, from its cell's median, since a hypervisor slows vCPUs unseen
# in /proc/stat. Each limit stands well above its probe's quiet noise (bench/probe_cv.py; docs/reference/metrics.md).
PROBE_PCT = 15.0  # the GEMM's limit: its quiet cv is 1.3-1.7 %
TRIAD_PCT = 40.0  # the triad's: its memory is shared with the host's other guests (cv 10-15 %)
# The scalar loop is shown, not judged: its slower edges drift without the run slowing, so judging
# needs its usual edge's median and its in-job noise first (bench/probe_in_job.py).
SCALAR_PCT = None
PROBES = (("gemm", "probe_gemm_gflops"), ("triad", "probe_triad_gbps"), ("scalar", "probe_scalar_mops"))
LIMITS = {"gemm": PROBE_PCT, "triad": TRIAD_PCT, "scalar": SCALAR_PCT}  # by probe label; None: shown, not judged

CONFIDENCE = 0.95  # every interval here: two-sided 95 %


def cv(values: Sequence[float]) -> float | None:
    """Sample std / mean; None for fewer than 2 runs or a mean of 0 (nothing to compare with)."""
    if len(values) < 2 or statistics.fmean(values) == 0:
        return None
    return statistics.stdev(values) / abs(statistics.fmean(values))


def is_unstable(values: Sequence[float], threshold: float = CV_THRESHOLD) -> bool:
    """True when the runs vary more than `threshold` (a fraction: 0.05 is 5 %). One run cannot
    show variation: it is not called unstable (its n = 1 is shown beside it instead)."""
    value = cv(values)
    return value is not None and value > threshold


def outliers(values: Sequence[float], min_rel: float = CV_THRESHOLD) -> list[int]:
    """Indexes of runs more than MAD_LIMIT scaled MADs (1.4826 x median |x - median|) from the
    median AND more than `min_rel` (a fraction of the median) from it.

    Why the second condition: the MAD of a few runs can be tiny or 0 by chance (3 runs: it is the
    smaller of the two distances to the middle run; over half the runs equal: exactly 0), and then
    any difference at all would be "many MADs"; a run is flagged only when it is also far enough
    to matter, by the same measure that marks a cell unstable. With fewer than 3 runs nothing is
    flagged: 2 runs are equally far from their median, so neither can be told to be the odd one.
    """
    if len(values) < 3:
        return []
    middle = statistics.median(values)
    mad = MAD_SCALE * statistics.median(abs(v - middle) for v in values)
    limit = max(MAD_LIMIT * mad, min_rel * abs(middle))
    return [i for i, v in enumerate(values) if abs(v - middle) > limit]


def max_excluded(n: int) -> int:
    """How many runs of `n` a figure may leave out: a quarter, and one of 3 to 7 runs."""
    return max(1, n // 4) if n >= 3 else 0


def excluded(values: Sequence[float], quiet: Sequence[bool] | None = None) -> list[int]:
    """Indexes of the `outliers` a figure leaves out, in order: all of them up to `max_excluded`,
    else the farthest from the median up to it (the others stay in, flagged and shown). With
    `quiet` (a flag per run: not `disturbed`), only the undisturbed runs are judged, and the
    disturbed ones are never in the figure anyway (`kept`).

    Why a cap: one disturbed run among a few is what exclusion is for (one slow run beside two
    fast ones widens a mean's spread several-fold). Two of five runs far from the median is a cell
    that varies, not one run disturbed: a figure that dropped both would rest on three runs and call
    a varying cell stable. MLPerf's olympic mean drops
    one run at each end of 5 to 10; a quarter at most is of that order."""
    pool = quiet_runs(values, quiet)
    sub = [values[i] for i in pool]
    flagged = outliers(sub)
    cap = max_excluded(len(sub))
    if len(flagged) > cap:
        middle = statistics.median(sub)
        flagged = sorted(sorted(flagged, key=lambda i: -abs(sub[i] - middle))[:cap])
    return [pool[i] for i in flagged]


def flagged(values: Sequence[float], quiet: Sequence[bool] | None = None) -> list[int]:
    """`outliers` among the undisturbed runs (all runs without `quiet`), as indexes of `values`."""
    pool = quiet_runs(values, quiet)
    return [pool[i] for i in outliers([values[i] for i in pool])]


def quiet_runs(values: Sequence[float], quiet: Sequence[bool] | None = None) -> list[int]:
    """Indexes of the runs not disturbed (every run when `quiet` is None)."""
    return list(range(len(values))) if quiet is None else [i for i in range(len(values)) if quiet[i]]


def kept(values: Sequence[float], quiet: Sequence[bool] | None = None) -> list[float]:
    """The runs a figure (mean, std, CI) is computed over, in order: the undisturbed ones (`quiet`;
    every run without it) but the `excluded` outliers among them. Empty when every run was disturbed.

    The cv and the unstable flag are computed over every undisturbed run, the outliers included:
    those runs did disagree (aggregate.stability_fields)."""
    return [values[i] for i in kept_indexes(values, quiet)]


def kept_indexes(values: Sequence[float], quiet: Sequence[bool] | None = None) -> list[int]:
    """Indexes of the runs `kept` keeps."""
    left_out = set(excluded(values, quiet))
    return [i for i in quiet_runs(values, quiet) if i not in left_out]


def figure_quiet(metrics: Sequence[dict], limit_pct: float = DISTURBED_PCT) -> list[bool] | None:
    """The `quiet` flags a figure of these runs (their metrics) uses: which runs were not disturbed;
    None (every run) when all of them were, so that such a cell still has a figure, which says so."""
    quiet = [reason is None for reason in disturbed_reasons(metrics, limit_pct)]
    return quiet if any(quiet) else None




def is_disturbed(metrics: dict | None, limit_pct: float = DISTURBED_PCT) -> bool:
    """Whether a run's measured interference (null: not measured, e.g. older records) exceeds the
    limit, or its speed probe moved between its own edges (`probe_reason`; a run alone: its cell's
    median is `disturbed_reasons`')."""
    return _interfered(metrics, limit_pct) or (_probed(metrics) and probe_reason(metrics) is not None)


_PROBE_EDGES = frozenset(f"{name}_{edge}" for _, name in PROBES for edge in ("before", "after"))


def _probed(metrics: dict | None) -> bool:
    """Whether a run has any probe figure: most have none, and `history` asks of 100,000 runs."""
    return bool(metrics) and not _PROBE_EDGES.isdisjoint(metrics)


def _interfered(metrics: dict | None, limit_pct: float) -> bool:
    cpu = (metrics or {}).get("interference_cpu_pct")
    gpu = (metrics or {}).get("interference_gpu_procs")
    return (cpu is not None and cpu > limit_pct) or bool(gpu)


def probe_figure(metrics: dict | None, name: str) -> float | None:
    """A run's probe figure `name` (probe_gemm_gflops, probe_triad_gbps): its slower edge's; None
    when not probed (older records, measure.probe off)."""
    edges = [(metrics or {}).get(f"{name}_{edge}") for edge in ("before", "after")]
    edges = [v for v in edges if v is not None and v > 0]
    return min(edges) if edges else None


def probe_medians(metrics: Sequence[dict]) -> dict[str, float]:
    """The cell's usual probe: each figure's median over the runs that have it."""
    out = {}
    for _, name in PROBES:
        values = [v for v in (probe_figure(m, name) for m in metrics) if v is not None]
        if values:
            out[name] = statistics.median(values)
    return out


def _pct(value: float, base: float) -> str:
    return f"{100 * (value / base - 1):+.0f}%".replace("-", "\u2212")


def probe_reason(metrics: dict | None, medians: dict | None = None, limit_pct: float | None = None) -> str | None:
    """Why the machine, not the job, decided a run's figure (None: it did not): `machine slowed in
    the run: probe gemm −31% after vs before` when the probe's two edges differ by more than its
    limit (`LIMITS`, or `limit_pct` for every probe), `machine slow: probe gemm −31% vs the cell's
    median` (or `fast`) when its slower edge is that far from `medians` (`probe_medians` of the
    run's cell)."""
    reasons = []
    for label, name in PROBES:
        limit = LIMITS[label] if limit_pct is None else limit_pct
        if limit is None:
            continue
        before, after = ((metrics or {}).get(f"{name}_{edge}") for edge in ("before", "after"))
        if before and after and abs(after / before - 1) * 100 > limit:
            way = "slowed" if after < before else "sped up"
            reasons.append(f"machine {way} in the run: probe {label} {_pct(after, before)} after vs before")
        figure, usual = probe_figure(metrics, name), (medians or {}).get(name)
        if figure is not None and usual and abs(figure / usual - 1) * 100 > limit:
            way = "slow" if figure < usual else "fast"
            reasons.append(f"machine {way}: probe {label} {_pct(figure, usual)} vs the cell's median")
    return "; ".join(reasons) or None


def disturbed_reasons(metrics: Sequence[dict], limit_pct: float = DISTURBED_PCT,
                      probe_pct: float | None = None) -> list[str | None]:
    """Per run of one cell, what disturbed it (None: nothing): other processes on its CPU or GPUs
    (`disturbance_text`), its speed probe against its own edges and the cell's median (`probe_reason`)."""
    medians = probe_medians(metrics)
    out = []
    for m in metrics:
        parts = [interference_text(m)] if _interfered(m, limit_pct) else []
        probe = probe_reason(m, medians, probe_pct)
        out.append("; ".join(parts + ([probe] if probe else [])) or None)
    return out


def t975(df: int) -> float:
    """The two-sided 95 % Student t quantile for `df` degrees of freedom (df >= 1), scipy.stats.t."""
    if df < 1:
        raise ValueError(f"t quantile: df {df}: expected >= 1")
    return _t_quantile(df)


@functools.lru_cache(maxsize=256)
def _t_quantile(df: int) -> float:
    # imported here, not at the top: ranks import this module (measure/resultline) after Paddle,
    # and scipy imported after Paddle 2.6.2 crashed in zlib (bench/pairs.py)
    from scipy import stats

    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, df))


def ci_half_width(values: Sequence[float]) -> float | None:
    """Half-width of the 95 % confidence interval of the mean: t(0.975, n-1) x s / sqrt(n);
    None for fewer than 2 runs."""
    if len(values) < 2:
        return None
    return t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def ci_pct(values: Sequence[float]) -> float | None:
    """`ci_half_width` as a percentage of the mean (None when undefined)."""
    half = ci_half_width(values)
    mean = statistics.fmean(values) if values else 0.0
    return None if half is None or mean == 0 else 100.0 * half / abs(mean)


STABLE, AT_MAX = "stable", "max_repeats"


def stop_reason(values: Sequence[float], target_pct: float = TARGET_CI_PCT, min_repeats: int = 3,
                max_repeats: int = MAX_REPEATS, quiet: Sequence[bool] | None = None) -> str | None:
    """Why a cell of adaptive repeats stops after these runs (every successful run, outliers
    included, in order), or None to run another.

    STABLE: at least `min_repeats` kept runs (`kept`: the outliers left out, as the group's figure
    leaves them out) and the 95 % CI half-width of their mean within `target_pct` % of it (checked
    first: a cell that got there on its last allowed run is stable). So a disturbed run costs one
    more run instead of holding the CI wide until the maximum; so does a `disturbed` run (`quiet`
    False): a neighbour that stays cannot make a disturbed majority look stable. AT_MAX:
    `max_repeats` runs in all (outliers and disturbed runs count: they were run) without that."""
    figure = kept(values, quiet)
    pct = ci_pct(figure)
    if len(figure) >= min_repeats and pct is not None and pct <= target_pct:
        return STABLE
    return AT_MAX if len(values) >= max_repeats else None


def verdict(policy: dict | None, values: Sequence[float], quiet: Sequence[bool] | None = None) -> str | None:
    """STABLE, AT_MAX or "unfinished" for runs made under an until-stable `policy` (a record's
    config.runtime.repeats: until_stable, target_ci_pct, min_repeats, max_repeats); None when the
    runs had no such policy."""
    if not policy or not policy.get("until_stable"):
        return None
    reason = stop_reason(values, policy["target_ci_pct"], policy["min_repeats"], policy["max_repeats"], quiet)
    return reason or "unfinished"


def ratio_rel_error(num: float, num_err: float | None, den: float, den_err: float | None) -> float | None:
    """Relative uncertainty of num / den from the uncertainties of both (independent runs, first
    order): sqrt((num_err/num)^2 + (den_err/den)^2). An efficiency = speedup / N has the same
    relative error as the speedup (N is exact). None when a value is 0 or an error unknown."""
    if num == 0 or den == 0 or num_err is None or den_err is None:
        return None
    return math.hypot(num_err / num, den_err / den)


def sem(std: float | None, n: int | None) -> float | None:
    """Standard error of a mean: std / sqrt(n); the std itself when n is unknown (a published
    figure: the cautious choice); None for one run (its std of 0 says nothing about its spread)."""
    if std is None or n == 1:
        return None
    return std / math.sqrt(n) if n else std


# ---- digits ----------------------------------------------------------------------------------------

def decimals_for(spread: float) -> int:
    """Decimal places a spread supports: 2 significant digits when its first digit is 1, else 1
    (0.14 -> 0.14, 0.7213 -> 0.7, 14.81 -> 15, 230 -> 200). Rounding 0.14 to one digit would
    change it by 29 %, 0.7213 to 0.7 by 3 %; the same rule as the Particle Data Group's, simplified.
    Negative: round to tens, hundreds, ..."""
    exponent = math.floor(math.log10(spread))
    digits = 2 if int(spread / 10 ** exponent) == 1 else 1
    places = digits - 1 - exponent
    if round(spread, places) >= 10 ** (exponent + 1):  # 0.96 rounds to 1.0: now it starts with 1
        places = 1 - (exponent + 1)
    return places


def round_to(value: float, places: int) -> str:
    """`value` rounded to `places` decimals (negative: to tens, hundreds...), as text."""
    if places > 0:
        return f"{value:.{places}f}"
    text = f"{round(value, places):.0f}"
    return "0" if text == "-0" else text


def format_pm(mean: float, spread: float | None, sep: str = " ± ") -> str:
    """`27.2 ± 0.7`: the spread with 1 or 2 significant digits (`decimals_for`), the mean to the
    same decimal place. Without a spread (None, 0, not finite): the mean alone, to 4 significant
    digits at most and no fewer than its integer part, trailing zeros dropped (40, not 40.00)."""
    if spread is None or spread <= 0 or not math.isfinite(spread):
        text = round_to(mean, max(0, 3 - math.floor(math.log10(abs(mean))))) if mean else "0"
        return text.rstrip("0").rstrip(".") if "." in text else text
    places = decimals_for(spread)
    return f"{round_to(mean, places)}{sep}{round_to(spread, places)}"


def run_mark(run_id: str, excluded_ids, outlier_ids, disturbed: dict | None = None, imbalance: str = "") -> str:
    """What follows a run in a list of a cell's runs: ` (disturbed: 47% CPU to others)` (a run in
    `disturbed`, {id: what disturbed it}), ` (outlier, excluded)`, ` (outlier, kept)` (flagged
    beyond `max_excluded`), both when both (every run of the cell disturbed), the run's
    `imbalance_text` after them, or ""."""
    marks = [f"disturbed: {disturbed[run_id]}"] if disturbed and run_id in disturbed else []
    if run_id in excluded_ids:
        marks.append("outlier, excluded")
    elif run_id in outlier_ids:
        marks.append("outlier, kept")
    if imbalance:
        marks.append(imbalance)
    return f" ({'; '.join(marks)})" if marks else ""


# One rank of a run this many times slower a step than another: said beside the run (it explains an
# outlier whose probes and interference are clean; healthy runs' ranks stay within ~1.15x).
IMBALANCE_RATIO = 1.5


def imbalance_text(metrics: dict, who: str = "rank") -> str:
    """`worker 0's median step 10.0 ms, 2.1x worker 1's`: one rank of the run slower a step than
    another by IMBALANCE_RATIO or more, by the median of each rank's own `step_times_ms` (so the
    long step where a PS worker waits for the others at a pass's end leaves it alone; ranks that
    synchronise every step wait for each other and show none); "" otherwise."""
    times = metrics.get("step_times_ms") or []
    medians = [statistics.median(t) for t in times if t]
    if len(medians) < 2 or len(medians) != len(times):
        return ""
    slow = max(range(len(medians)), key=medians.__getitem__)
    fast = min(range(len(medians)), key=medians.__getitem__)
    if medians[fast] <= 0 or medians[slow] < IMBALANCE_RATIO * medians[fast]:
        return ""
    return f"{who} {slow}'s median step {medians[slow]:.3g} ms, {medians[slow] / medians[fast]:.1f}x {who} {fast}'s"


def disturbance_text(metrics: dict) -> str:
    """What disturbed a run, for a run list: `47% CPU to others`, `2 other GPU processes`, `machine
    slowed in the run: probe gemm −31% after vs before` (a run alone; with its cell:
    `disturbed_reasons`)."""
    probe = probe_reason(metrics)
    return "; ".join(p for p in (interference_text(metrics), probe) if p)


def interference_text(metrics: dict) -> str:
    """`47% CPU to others`, `2 other GPU process(es)`: what measure/interference.py saw."""
    parts = []
    if metrics.get("interference_cpu_pct") is not None:
        parts.append(f"{metrics['interference_cpu_pct']:.0f}% CPU to others")
    if metrics.get("interference_gpu_procs"):
        parts.append(f"{metrics['interference_gpu_procs']} other GPU process(es)")
    return ", ".join(parts)


def excluded_note(n: int | None, excluded: int, disturbed: int = 0) -> str:
    """What a printed figure says after it when runs were left out of it (`kept`):
    ` (n=4; 1 outlier excluded)`, ` (n=3; 2 disturbed runs excluded)`; "" when none was."""
    parts = [f"{excluded} outlier{'s' if excluded > 1 else ''} excluded"] if excluded else []
    if disturbed:
        parts.insert(0, f"{disturbed} disturbed run{'s' if disturbed > 1 else ''} excluded")
    return f" (n={n}; {'; '.join(parts)})" if parts else ""


# ---- time to quality, MLPerf Training's way ------------------------------------------------------

MIN_SCORED_RUNS = 5  # MLPerf asks 5 to 10 runs by benchmark; fleetbench scores a cell from 5


def olympic_score(times: Sequence[float | None], min_runs: int = MIN_SCORED_RUNS) -> dict:
    """The score of a cell from its runs' times to target (None: the run missed the target or
    failed), by MLPerf Training's rule: at least `min_runs` runs and at most one miss, which counts
    as the slowest run; the fastest and the slowest runs are dropped and the rest averaged (the
    olympic mean).

    {"score_s": the mean, or None with "reason" saying why there is no score, "runs", "missed",
    "kept": indexes of the runs averaged, "dropped": [fastest, slowest]}."""
    out = {"score_s": None, "runs": len(times), "missed": sum(t is None for t in times), "kept": [],
           "dropped": [], "reason": None}
    if len(times) < min_runs:
        out["reason"] = f"{len(times)} run(s): a score needs {min_runs}"
        return out
    if out["missed"] > 1:
        out["reason"] = f"{out['missed']} runs missed the target: a score allows one"
        return out
    # a miss sorts after every time, so it is the slowest run and dropped
    order = sorted(range(len(times)), key=lambda i: (times[i] is None, times[i] or 0.0))
    out["dropped"], out["kept"] = [order[0], order[-1]], sorted(order[1:-1])
    out["score_s"] = statistics.fmean(times[i] for i in out["kept"])
    return out
