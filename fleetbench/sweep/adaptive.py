"""Adaptive repeats, warm-up runs, seeds and run order of a sweep (pure: the runner runs, this decides).

    fleetbench sweep ... --until-stable [--target-ci PCT] [--max-repeats N] [--warmup-run] [--vary-seed]
                         [--interleave]

or the same as top-level sweep keys (`until_stable: true`, `target_ci: 2`, `max_repeats: 10`,
`warmup_run: true`, `vary_seed: true`, `interleave: true`; a flag wins over its key; the first three may also be keys of a cell group,
which win for its cells). With until-stable a cell runs its `repeats` (the
minimum), then more until the 95 % confidence interval half-width of its throughput mean is within
`target_ci` % of the mean or it has `max_repeats` successful runs (fleetbench.measure.repeats.stability.
stop_reason), and the console says which. The CI is that of the group's figure: over the runs not
flagged as outliers (at least `repeats` of them), so one disturbed run costs one more run, and
the console names it. The policy goes into every run's record as
`config.runtime.repeats` (through the launcher contract), so the report can tell from the records
alone whether a cell ended stable or at its maximum (stability.verdict on the stored throughputs); it is
not part of the experiment (measure.repeats.experiment.NOISE_KEYS), so runs with and without it pool, and
resume finds them (sweepfile.run_key leaves `runtime` out).

A warm-up run is one unrecorded run of a cell (its own config, stored in a scratch file in the log
directory, never in the results) before the first measured run of each (benchmark, Paddle
version, shape) in this sweep; see docs/guide/launch.md (Warm-up runs) for why it is off by default.

With vary_seed, repeat k of a cell runs with seed = the cell's configured seed + k - 1 (through
the launcher contract, FLEETBENCH_SEED), so its repeats differ in initialisation and data order,
as MLPerf's do: without it the repeats of a convergence run are bit-identical and measure time only.
The numbering is the repeat's, so a resumed sweep goes on with the next seed; the seed is not
part of the experiment (measure.repeats.experiment.NOISE_KEYS), so the runs stay one cell.

With interleave the cells run in rounds, one repeat of each cell not yet over a round
(fleetbench.sweep.order), so that a drift of the machine's speed falls on every cell alike.
"""
from __future__ import annotations

import argparse
import dataclasses

from fleetbench import cmdline
from fleetbench.measure import contract
from fleetbench.measure.repeats import stability
from fleetbench.sweep.sweepfile import (
    STABILITY_KEYS,
    Cell,
    SweepError,
    check_stability_key,
)

KEYS = ("until_stable", "target_ci", "max_repeats", "warmup_run", "vary_seed", "interleave")


@dataclasses.dataclass(frozen=True)
class Policy:
    until_stable: bool = False
    target_ci_pct: float = stability.TARGET_CI_PCT
    max_repeats: int = stability.MAX_REPEATS
    warmup_run: bool = False
    vary_seed: bool = False
    interleave: bool = False  # rounds of one run of each cell (sweep/order.py), not each cell's runs in turn

    def of(self, cell: Cell) -> Policy:
        """The policy of `cell`: the sweep's, with the cell group's own keys over it."""
        mine = {"until_stable": cell.until_stable, "target_ci_pct": cell.target_ci, "max_repeats": cell.max_repeats}
        return dataclasses.replace(self, **{k: v for k, v in mine.items() if v is not None})

    def adaptive(self, cell: Cell) -> bool:
        return self.of(cell).until_stable

    def limit(self, cell: Cell) -> int:
        """Most runs of `cell` a sweep asks for."""
        own = self.of(cell)
        return own.max_repeats if own.until_stable else cell.repeats

    def finished(self, cell: Cell, values: list[float], quiet: list[bool] | None = None) -> bool:
        """Whether `cell`, with these successful throughputs stored (`quiet`: which runs were not
        disturbed), needs no more runs. Until stable, a disturbed run does not count towards the
        figure: it costs one more run, up to the maximum."""
        own = self.of(cell)
        if not own.until_stable:
            return len(values) >= cell.repeats
        return stability.stop_reason(values, own.target_ci_pct, cell.repeats, own.max_repeats, quiet) is not None

    def record_block(self, cell: Cell) -> dict | None:
        """What each run's record keeps of the policy (config.runtime.repeats); None without one."""
        own = self.of(cell)
        if not own.until_stable:
            return None
        return {"until_stable": True, "target_ci_pct": float(own.target_ci_pct),
                "min_repeats": cell.repeats, "max_repeats": own.max_repeats}

    def seed(self, repeat: int, base_seed: int | None) -> int | None:
        """The seed of repeat `repeat` (from 1) of a cell configured with `base_seed`; None: its own."""
        if not self.vary_seed or base_seed is None:
            return None
        return base_seed + repeat - 1

    def rank_env(self, cell: Cell, repeat: int = 1, base_seed: int | None = None) -> dict[str, str]:
        return contract.RankContract(repeats=self.record_block(cell), seed=self.seed(repeat, base_seed)).to_env()


def quiet_flags(runs: list[dict]) -> list[bool]:
    """Per stored run (a record) of one cell, whether it was not disturbed (stability.disturbed_reasons:
    CPU or GPUs to others, or its speed probe against its own edges and the cell's median)."""
    return [reason is None for reason in stability.disturbed_reasons([r["metrics"] for r in runs])]


def disturbed_text(runs: list[dict], index: int = -1) -> str:
    """`, DISTURBED (47% CPU to others): not in the figure` after the console line of run `index`
    of a cell's stored runs (judged with its cell: the probe's median); "" if not disturbed."""
    reason = stability.disturbed_reasons([r["metrics"] for r in runs])[index] if runs else None
    return f", DISTURBED ({reason}): not in the figure" if reason else ""


def verdict_text(block: dict | None, runs: list[dict]) -> str:
    """One line for the console: which stop it was, with the CI it reached over the runs the stop
    rule judged (stability.kept: undisturbed, outliers left out), the disturbed runs and the
    outliers it left out, by run number and figure."""
    values, quiet = [r["metrics"]["throughput"] for r in runs], quiet_flags(runs)
    unit = runs[0]["metrics"]["unit"] if runs else ""
    reason, figure = stability.verdict(block, values, quiet), stability.kept(values, quiet)
    pct = stability.ci_pct(figure)
    ci = "no CI (fewer than 2 runs)" if pct is None else f"95% CI ±{pct:.1f}% of the mean"
    target = f"±{block['target_ci_pct']:g}%" if block else ""
    over = f"over {len(figure)} runs" + _left_out_text(runs, values, quiet, unit)
    if reason == stability.STABLE:
        return f"stable: {ci} within {target} {over}"
    if reason == stability.AT_MAX:
        if not figure:
            return (f"NOT stable: every one of {len(values)} runs was disturbed{_left_out_text(runs, values, quiet, unit)}; "
                    f"no undisturbed figure could be had (stopped at the maximum of {block['max_repeats']} runs)")
        return f"NOT stable: {ci} {over}, target {target}, stopped at the maximum of {block['max_repeats']} runs"
    return f"unfinished: {ci} {over} (target {target}); run the sweep again to go on"


def _left_out_text(runs: list[dict], values: list[float], quiet: list[bool], unit: str) -> str:
    """`, 2 disturbed (run 1: 19.2 images/s, 47% CPU to others, ...)`, `, 1 outlier excluded (run 2:
    16.58 images/s)`, and the flagged runs kept beyond the cap (stability.excluded); "" without any."""
    def runs_text(indexes, why=lambda i: ""):
        return ", ".join(f"run {i + 1}: {stability.format_pm(values[i], None)}{' ' + unit if unit else ''}{why(i)}"
                         for i in indexes)
    shaken = [i for i, q in enumerate(quiet) if not q]
    why = stability.disturbed_reasons([r["metrics"] for r in runs])
    text = (f", {len(shaken)} disturbed not counted ({runs_text(shaken, lambda i: ', ' + (why[i] or ''))})"
            if shaken else "")
    pool = quiet if any(quiet) else None
    left_out = stability.excluded(values, pool)
    extra = [i for i in stability.flagged(values, pool) if i not in left_out]
    text += f", {len(left_out)} outlier{'s' if len(left_out) > 1 else ''} excluded ({runs_text(left_out)})" if left_out else ""
    if extra:
        text += (f", {len(extra)} more far from the median kept ({runs_text(extra)}; at most "
                 f"{stability.max_excluded(len(stability.quiet_runs(values, pool)))} of "
                 f"{len(stability.quiet_runs(values, pool))} runs are left out)")
    return text


def warmup_key(cell: Cell, paddle: str | None) -> tuple:
    """What one warm-up run serves: a benchmark, a Paddle version and a job shape."""
    return (cell.benchmark, paddle, cell.mode, cell.nodes, cell.counts or cell.devices_per_node,
            cell.servers, cell.workers, cell.network)


# ---- flags and keys -----------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--until-stable", action="store_true", default=None,
                   help="repeat each cell beyond its repeats until the 95%% CI of its mean is within "
                   "--target-ci or --max-repeats runs")
    p.add_argument("--target-ci", type=cmdline.number(0.0, 100.0), metavar="PCT",
                   help=f"CI half-width, %% of the mean (default {stability.TARGET_CI_PCT:g})")
    p.add_argument("--max-repeats", type=cmdline.integer(2), metavar="N",
                   help=f"runs of a cell at most with --until-stable (default {stability.MAX_REPEATS})")
    p.add_argument("--warmup-run", action="store_true", default=None,
                   help="one unrecorded run before the first measured run of each benchmark and shape")
    p.add_argument("--vary-seed", action="store_true", default=None,
                   help="repeat k of a cell runs with its seed + k - 1 (MLPerf's repeats differ by seed)")
    p.add_argument("--interleave", action="store_true", default=None,
                   help="run in rounds, one repeat of each unfinished cell a round, so that a drift of the "
                   "machine's speed falls on every cell alike (docs/guide/compare.md)")


def policy(spec: dict, args: argparse.Namespace, path: str, cells: list[Cell]) -> Policy:
    """The sweep's policy: the file's keys, then the flags over them, checked (one line naming the
    flag or the file and key)."""
    chosen = {key: check_stability_key(f"{path}: {key}", key, spec[key]) for key in KEYS if key in spec}
    for key in KEYS:
        value = getattr(args, key, None)
        if value is not None:
            chosen[key] = check_stability_key(f"--{key.replace('_', '-')}", key, value)
    result = Policy(until_stable=bool(chosen.get("until_stable")),
                    target_ci_pct=float(chosen.get("target_ci", stability.TARGET_CI_PCT)),
                    max_repeats=chosen.get("max_repeats", stability.MAX_REPEATS),
                    warmup_run=bool(chosen.get("warmup_run")), vary_seed=bool(chosen.get("vary_seed")),
                    interleave=bool(chosen.get("interleave")))
    asked = ("target_ci" in chosen or "max_repeats" in chosen
             or any(getattr(c, k) is not None for c in cells for k in STABILITY_KEYS[1:]))
    if asked and not any(result.adaptive(c) for c in cells):
        raise SweepError(f"{path}: target_ci / max_repeats (--target-ci / --max-repeats) need "
                         "until_stable: true (--until-stable)")
    low = [c for c in cells if result.adaptive(c) and c.repeats > result.of(c).max_repeats]
    if low:
        raise SweepError(f"{path}: max_repeats {result.of(low[0]).max_repeats} is below the repeats "
                         f"({low[0].repeats}) of cell {low[0].label()}: expected max_repeats >= every cell's repeats")
    return result
