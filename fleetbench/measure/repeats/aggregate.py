"""Aggregation of result records (store/results.py loads them): one group of repeats per
experiment (`experiment.of`), the figure each group keeps and how far its runs agree
(measure/repeats/stability.py), and scaling efficiency against a measured baseline. Reports and sweeps
import this; ranks never do.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from fleetbench import cmdline
from fleetbench.measure.registry import CONTROL, SINGLE
from fleetbench.measure.repeats import experiment, stability
from fleetbench.measure.repeats.experiment import Experiment
from fleetbench.measure.timing import summarize

class GroupError(cmdline.UserError):
    """Runs of one experiment that cannot make one figure (other units); the message is one line."""


# The name of a record's network setting, as groups and reports show it (analysis reads it here).
network_profile = experiment.network_name


class _Fields(Mapping):
    """A frozen dataclass read as a mapping of its shown fields (`_shown`), as JSON output
    and code that has not moved to the fields yet read it."""

    def _shown(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self)]

    def __getitem__(self, key: str) -> Any:
        if key not in self._shown():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._shown())

    def __len__(self) -> int:
        return len(self._shown())

    def as_dict(self) -> dict:
        """The shown fields as plain JSON values."""
        return {name: _plain(getattr(self, name)) for name in self._shown()}


def _plain(value):
    if isinstance(value, _Fields):
        return value.as_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclasses.dataclass(frozen=True, eq=False)
class Run(_Fields):
    """One successful run of a measured group, in store order (`stability_fields`)."""
    id: str
    throughput: float
    disturbed: bool
    interference_cpu_pct: float | None
    interference_gpu_procs: int | None
    probe_gemm_gflops: float | None
    mfu: float | None  # model FLOPs utilisation (measure/flops.py), shown beside the figure
    imbalance: str  # a rank far slower a step than another (stability.imbalance_text), or ""


@dataclasses.dataclass(frozen=True, eq=False)
class Group(_Fields):
    """The repeats of one experiment (`aggregate`) and, after `add_efficiency`, its scaling
    against a measured baseline. Identity: the Experiment's fields. Figure: n, mean, std, median,
    min, max over the runs kept (`stability_fields`), or the publisher's (`published_aggregate`).
    Agreement: cv, unstable and the rest of `stability_fields`."""
    source: str | None
    benchmark: str
    preset: str | None
    mode: str
    method: str
    network: str | None
    nodes: int
    devices_per_node: int
    world_size: int
    paddle: str | None
    device: str | None
    host: str | None
    config: dict
    unit: str | None
    failed: int  # runs with an error, left out of the figure
    errors: list[str]
    noise_differs: list[str]  # noise keys (e.g. seed) whose values differ between the pooled runs
    n: int | None
    mean: float | None
    std: float | None
    median: float | None
    min: float | None
    max: float | None
    runs: list[Run]
    cv: float | None
    unstable: bool
    target_ci_pct: float | None
    cv_threshold: float
    outliers: list[str]
    excluded: list[str]
    disturbed: dict  # {run id: why it was disturbed}
    disturbed_pct: float | None
    figure_disturbed: bool
    mean_all: float | None
    ci95_pct: float | None
    until_stable: str | None
    published_aggregate: bool
    published_figures: int | None = None  # a published configuration printed in several of its tables
    # scaling (add_efficiency; axis None before it)
    axis: str | None = None
    scale: int | None = None
    baseline_note: str | None = None
    baseline: dict | None = None
    ideal: float | None = None
    speedup: float | None = None
    efficiency: float | None = None
    speedup_err: float | None = None
    efficiency_err: float | None = None

    def _shown(self) -> list[str]:
        names = _GROUP_FIELDS if self.axis is not None else _GROUP_FIELDS[:_SCALING]
        return [n for n in names if n != "published_figures" or self.published_figures is not None]

    def experiment(self) -> Experiment:
        """The Experiment this group pools (`experiment.of` of its runs)."""
        return experiment.key_of(self)


_GROUP_FIELDS = [f.name for f in dataclasses.fields(Group)]
_SCALING = _GROUP_FIELDS.index("axis")


def aggregate(records: list[dict], cv_threshold: float = stability.CV_THRESHOLD,
              disturbed_pct: float = stability.DISTURBED_PCT) -> list[Group]:
    """One group per experiment (`experiment.of`): throughput n/mean/std/median/min/max over the
    group's successful runs that are not outliers, groups in a fixed order.

    A Group holds the Experiment's fields (source, benchmark, preset, mode, method, network,
    nodes, devices_per_node, world_size, paddle, device, host, config without the noise keys),
    then unit, the statistics, failed, errors, noise_differs and published_aggregate. Failed runs
    (error set) are counted in `failed` and excluded from the statistics. A published record
    (source set) already is a summary: its mean and std (metrics.throughput_std, null when not
    published) pass through as published, its n is metrics.repeats (null when the source does not
    say). `noise_differs` names the noise keys (e.g. seed) whose values differ between the pooled
    runs. Measured groups: n/mean/std/median/min/max over the runs not flagged as outliers, plus
    `stability_fields` (runs, cv, unstable, outliers, excluded, disturbed, mean_all, ci95_pct,
    until_stable).
    """
    groups: dict[Experiment, list[dict]] = {}
    for record in records:
        groups.setdefault(experiment.of(record), []).append(record)
    return [_group(exp, groups[exp], cv_threshold, disturbed_pct) for exp in sorted(groups, key=Experiment.sort_key)]


def stability_fields(ok: list[dict], cv_threshold: float, disturbed_pct: float = stability.DISTURBED_PCT) -> dict:
    """A measured group's figure and how far its runs agree (fleetbench.measure.repeats.stability).

    The figure (n, mean, std, median, min, max; so ci95_pct, speedup and efficiency too) is over
    the runs not `disturbed` (more than `disturbed_pct` % of the machine's CPU to other processes
    in their timed window, or a speed probe that moved: stability.disturbed_reasons) and not flagged by the MAD rule among those
    (stability.kept): a disturbed or far-off run is shown and excluded, never silently: `disturbed`
    and `excluded` hold the ids left out (stability.excluded: at most a quarter of the runs, so
    some `outliers` may be flagged and kept) and `mean_all` the mean over every run, and
    everything that prints the figure says so. When every run was disturbed the figure is over
    them all and `figure_disturbed` says it (no undisturbed figure could be had). How far the runs
    agree is judged on the undisturbed ones, the far-off among them included (they did disagree):
    cv, unstable (cv > cv_threshold), and until_stable: how a sweep's adaptive repeats ended
    (stability.verdict; null without them). A neighbour that stays must not make a disturbed
    majority look stable, nor one disturbed run an undisturbed cell look unstable; a
    group whose every run was disturbed has no stability verdict (cv null, not unstable,
    `figure_disturbed`), and `agreement` says so. Also: runs (id, throughput, interference,
    disturbed, in store order; a rank far slower a step than another: stability.imbalance_text) and
    outliers (ids flagged among the undisturbed runs)."""
    values = [r["metrics"]["throughput"] for r in ok]
    why = stability.disturbed_reasons([r["metrics"] for r in ok], disturbed_pct)  # CPU, GPUs, speed probe
    quiet = [reason is None for reason in why]
    judged = [v for v, q in zip(values, quiet) if q]
    pool = stability.figure_quiet([r["metrics"] for r in ok], disturbed_pct)  # None: all disturbed, says so
    figure = stability.kept(values, pool)
    runs = [Run(id=r["id"], throughput=v, disturbed=not q,
                interference_cpu_pct=r["metrics"].get("interference_cpu_pct"),
                interference_gpu_procs=r["metrics"].get("interference_gpu_procs"),
                probe_gemm_gflops=stability.probe_figure(r["metrics"], "probe_gemm_gflops"),
                mfu=r["metrics"].get("mfu"),
                imbalance=stability.imbalance_text(r["metrics"], "worker" if r.get("mode") == "ps" else "rank"))
            for r, v, q in zip(ok, values, quiet)]
    until, unstable, target = _judged(ok, values, quiet, judged, cv_threshold)
    return dict(summarize(figure), runs=runs,
                cv=stability.cv(judged), unstable=unstable,
                target_ci_pct=target,
                cv_threshold=cv_threshold, outliers=[ok[i]["id"] for i in stability.flagged(values, pool)],
                excluded=[ok[i]["id"] for i in stability.excluded(values, pool)],
                disturbed={r["id"]: reason for r, reason in zip(ok, why) if reason},
                disturbed_pct=disturbed_pct, figure_disturbed=bool(ok) and pool is None,
                mean_all=summarize(values)["mean"], ci95_pct=stability.ci_pct(figure),
                until_stable=until)


def _judged(ok: list[dict], values: list, quiet: list, judged: list, cv_threshold: float) -> tuple:
    """(until-stable verdict or None, unstable, the CI target it repeated for or None). A cell
    repeated until stable is judged by the rule it was repeated under (its mean's 95 % CI within its
    target), as the sweep judged it: judged by cv, a cell the sweep stopped as stable could read
    unstable (one word, two meanings). One undisturbed
    run has no spread to judge under either rule (`cv undefined`, not unstable)."""
    policy = _policy(ok)
    until = stability.verdict(policy, values, quiet)
    if until is None or len(judged) < 2:
        return until, stability.is_unstable(judged, cv_threshold), policy.get("target_ci_pct") if until else None
    return until, until != stability.STABLE, policy.get("target_ci_pct")


def disturbed_out(group: dict) -> int:
    """How many disturbed runs a group's figure leaves out (none when every run was disturbed:
    then the figure is theirs, `figure_disturbed`)."""
    return 0 if group.get("figure_disturbed") else len(group.get("disturbed") or ())


def judged_by_ci(group: dict) -> bool:
    """Whether a group was judged by its adaptive repeats' rule (the mean's 95% CI against the target
    it repeated for, `_judged`) rather than by the runs' cv."""
    return bool(group.get("until_stable")) and group.get("ci95_pct") is not None


def agreement(group: dict, unstable_mark: str = "") -> str:
    """How far a measured group's runs agree, in words (`stability_fields`: over its undisturbed
    runs): `stable (cv 3%)`, `! unstable: cv 12% > 5%` (with `unstable_mark` "! "); a cell repeated
    until stable by its rule: `stable: the mean's 95% CI ±4.8% within the ±5% it repeated for (runs'
    cv 6%)`; `cv undefined:
    one run`; with disturbed runs left out, how many, `stable (cv 2%) over 3 undisturbed runs; 2
    disturbed runs left out`; and `no stability verdict: all 3 runs were disturbed`."""
    runs, out = len(group.get("runs") or ()), disturbed_out(group)
    if group.get("figure_disturbed"):
        return f"no stability verdict: {'its one run was' if runs == 1 else f'all {runs} runs were'} disturbed"
    if group["cv"] is None:
        state = f"cv undefined: one {'undisturbed ' if out else ''}run"
    elif judged_by_ci(group):
        ci, target = group["ci95_pct"], group["target_ci_pct"]
        state = (f"{unstable_mark}unstable: the mean's 95% CI ±{ci:.1f}% > the ±{target:g}% it repeated for"
                 if group.get("unstable") else
                 f"stable: the mean's 95% CI ±{ci:.1f}% within the ±{target:g}% it repeated for") \
            + f" (runs' cv {group['cv']:.0%})"
    elif group.get("unstable"):
        state = f"{unstable_mark}unstable: cv {_pct(group['cv'], group['cv_threshold'])} > {group['cv_threshold']:.0%}"
    else:
        state = f"stable (cv {_pct(group['cv'], group.get('cv_threshold'))})"
    if not out:
        return state
    over = f" over {runs - out} undisturbed runs" if group["cv"] is not None else ""
    return f"{state}{over}; {out} disturbed run{'s' if out > 1 else ''} left out"


def _pct(value: float, threshold: float | None) -> str:
    """`value` as a whole percentage, or to a tenth where that would read as the threshold itself
    (a cv of 5.2% printed "cv 5% > 5%")."""
    if threshold is not None and round(value * 100) == round(threshold * 100):
        return f"{value:.1%}"
    return f"{value:.0%}"


def why_unstable(group: dict) -> str:
    """An unstable group's reason in a few words, by the rule that judged it (`stability_fields`):
    `95% CI ±9.1% > ±5%` for a cell repeated until stable, else `cv 12% > 5%`."""
    if judged_by_ci(group):
        return f"95% CI ±{group['ci95_pct']:.1f}% > ±{group['target_ci_pct']:g}%"
    return f"cv {_pct(group['cv'], group['cv_threshold'])} > {group['cv_threshold']:.0%}"


def figure_note(group: dict) -> str:
    """What follows a group's printed figure: the runs it leaves out (`(n=3; 2 disturbed runs
    excluded; 1 outlier excluded)`), or that every run was disturbed."""
    note = stability.excluded_note(group["n"], len(group.get("excluded") or ()), disturbed_out(group))
    if group.get("figure_disturbed"):
        note += f" (all {len(group.get('runs') or ())} runs disturbed: no undisturbed figure)"
    return note


def runs_made(group: dict) -> int | None:
    """The successful runs of a group, those its figure leaves out included (its n is the runs
    kept); None for a published figure that does not say."""
    return None if group["n"] is None else group["n"] + len(group.get("excluded") or ()) + disturbed_out(group)


def _policy(ok: list[dict]) -> dict | None:
    """The until-stable policy of the group's latest run (config.runtime.repeats), if any."""
    return ((ok[-1]["config"].get("runtime") or {}).get("repeats")) if ok else None


def _group(exp: Experiment, members: list[dict], cv_threshold: float, disturbed_pct: float) -> Group:
    ok = [r for r in members if r.get("error") is None]
    failed = [r for r in members if r.get("error") is not None]
    units = sorted({r["metrics"]["unit"] for r in ok})
    where = f"{exp.mode}/{exp.method}, world size {exp.world_size}, network {exp.network or 'none'}"
    if len(units) > 1:
        raise GroupError(f"{exp.benchmark}: runs of one experiment ({where}) report different "
                          f"units ({', '.join(units)}); expected one")
    group = dict(exp.fields(), unit=units[0] if units else None, failed=len(failed),
                 errors=sorted({r["error"] for r in failed}),
                 noise_differs=experiment.differing([r["config"] for r in members]))
    if exp.source and ok:
        metrics = ok[0]["metrics"]
        group.update({"n": metrics.get("repeats"), "mean": metrics["throughput"],
                      "std": metrics.get("throughput_std"), "median": None, "min": None,
                      "max": None, "published_aggregate": True})
        if len(ok) > 1:  # one configuration printed in two of the publisher's tables (NVIDIA's single-
            # and multi-node tables repeat the 1-node row): their figures pooled, the spread theirs
            figures = [r["metrics"]["throughput"] for r in ok]
            group.update(summarize(figures), published_figures=len(figures))
        published_cv = group["std"] / group["mean"] if group["std"] is not None and group["mean"] else None
        group.update(runs=[], cv=published_cv, cv_threshold=cv_threshold, outliers=[], excluded=[], disturbed={},
                     disturbed_pct=None, figure_disturbed=False,
                     mean_all=group["mean"], ci95_pct=None, until_stable=None, target_ci_pct=None,
                     unstable=published_cv is not None and published_cv > cv_threshold)
    else:
        group.update(stability_fields(ok, cv_threshold, disturbed_pct), published_aggregate=False)
    return Group(**group)


def series_key(group: dict, comparable: Callable[[dict], tuple] = experiment.comparable) -> tuple:
    """Groups of one scaling curve: everything but the size of the job."""
    return comparable(group) + (group["mode"], group["method"], group["network"])


def _usable(group: dict) -> bool:
    return group.get("mean") is not None


def is_control(group: dict) -> bool:
    """A method=none control (a record or a group): no efficiency, no baseline, no chart."""
    return group.get("mode") == "collective" and group.get("method") == CONTROL


def baseline_for(group: dict, groups: list[dict],
                 comparable: Callable[[dict], tuple] = experiment.comparable) -> tuple[dict | None, str, str]:
    """(baseline group, axis, note) for the scaling efficiency of `group`.

    Looked for among `groups` (the same results), in this order:
      1. the 1-device group of the same curve (same method and network);
      2. the 1-device group of the same method with no network setting (one device sends nothing);
      3. the 1-device `single` run of the same benchmark (plain training, no distribution);
      4. the 1-node group of the same curve with the same devices per node (axis "nodes").
    The baseline must be comparable (`experiment.comparable`: same source, benchmark, preset,
    unit, Paddle build, device, host and config apart from method and runtime keys). No match:
    (None, axis, why). `comparable`: that function, or a memo of it (add_efficiency's).
    """
    mine = comparable(group)
    same = [g for g in groups if _usable(g) and g["world_size"] == 1 and not is_control(g)
            and comparable(g) == mine]
    tiers = (
        ("same method and network", lambda g: g["mode"] == group["mode"]
         and g["method"] == group["method"] and g["network"] == group["network"]),
        ("same method, no network", lambda g: g["mode"] == group["mode"]
         and g["method"] == group["method"] and g["network"] is None),
        ("single-device run", lambda g: g["method"] == SINGLE),
    )
    for label, match in tiers:
        found = [g for g in same if match(g)]
        if len(found) == 1:
            return found[0], "devices", f"baseline: world size 1, {label}"
        if len(found) > 1:
            return None, "devices", f"no efficiency: {len(found)} candidate world-size-1 baselines ({label})"
    # The nodes axis exists only where the curve really spans several nodes of equal size.
    series = series_key(group, comparable)
    curve = [g for g in groups if _usable(g) and series_key(g, comparable) == series
             and g["devices_per_node"] == group["devices_per_node"]]
    one_node = [g for g in curve if g["nodes"] == 1]
    if one_node and any(g["nodes"] > 1 for g in curve):
        return one_node[0], "nodes", "baseline: 1 node of the same curve"
    return None, "devices", ("no efficiency: no world-size-1 or 1-node baseline of this "
                             "benchmark in these results")


def add_efficiency(groups: list) -> list:
    """Copies of `groups` with scale, ideal, speedup and efficiency = thr(N) / (N x thr(1))
    against the measured baseline found by `baseline_for`, plus a `baseline_note` saying which,
    and speedup_err / efficiency_err carrying the uncertainty of both means (`_ratio_errors`)."""
    # Each group's key once: computed per pair, a report of 476 published groups spent 28 of its
    # 42 s here (163,744 keys).
    keys = {id(g): experiment.comparable(g) for g in groups}
    out = []
    for group in groups:
        baseline, axis, note = (baseline_for(group, groups, lambda g: keys[id(g)]) if _usable(group)
                                else (None, "devices", ""))
        if is_control(group):
            baseline, note = None, "control run (method=none): not a training result, no efficiency"
        out.append(_with(group, **_scaling(group, baseline, axis, note)))
    return out


def _with(group, **fields):
    """`group` with `fields` set: a Group replaced, a dict (a sweep's row) copied."""
    return dataclasses.replace(group, **fields) if isinstance(group, Group) else dict(group, **fields)


def _scaling(group, baseline, axis: str, note: str) -> dict:
    """The scaling fields of `group` against `baseline` (None: no efficiency)."""
    scale = group["world_size"] if axis == "devices" else group["nodes"]
    out = {"axis": axis, "scale": scale, "baseline_note": note, "baseline": None, "ideal": None,
           "speedup": None, "efficiency": None, "speedup_err": None, "efficiency_err": None}
    if baseline is None or not baseline["mean"] > 0:
        return out
    speedup = group["mean"] / baseline["mean"]
    out.update(baseline={k: baseline[k] for k in ("method", "network", "nodes", "devices_per_node", "world_size",
                                                  "mean", "std", "n", "excluded")},
               ideal=scale * baseline["mean"], speedup=speedup, efficiency=speedup / scale)
    out.update(_ratio_errors(dict(group, **out), baseline))
    return out


def _ratio_errors(group: dict, baseline: dict) -> dict:
    """Standard errors of speedup and efficiency from the standard errors (std / sqrt(n)) of both
    means (stability.ratio_rel_error); None where a std is unknown."""
    rel = stability.ratio_rel_error(group["mean"], stability.sem(group["std"], group["n"]),
                                    baseline["mean"], stability.sem(baseline["std"], baseline["n"]))
    if rel is None:
        return {}
    return {"speedup_err": rel * group["speedup"], "efficiency_err": rel * group["efficiency"]}


def summarize_records(records: list[dict], cv_threshold: float = stability.CV_THRESHOLD,
                      disturbed_pct: float = stability.DISTURBED_PCT) -> list[Group]:
    """aggregate + add_efficiency: the groups a sweep or a report prints."""
    return add_efficiency(aggregate(records, cv_threshold, disturbed_pct))
