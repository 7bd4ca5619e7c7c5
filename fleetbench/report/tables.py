"""The report's tables: which groups go in which table, row and column, and their markdown.

One table per (source, benchmark, preset). A row is a network, a method and, when the table holds
groups that differ in more than that, the values that tell them apart (`distinguishing`): a Paddle
version, a device, a host, or a config key such as batch_size. Columns are job sizes. Two groups
never share a place in a table, so nothing that was not pooled looks as if it were.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from fleetbench.measure.repeats import aggregate, experiment, stability
from fleetbench.measure.repeats.aggregate import Group
from fleetbench.measure.registry import SINGLE

# Experiment fields shown by name when they distinguish groups, before any config key.
TRAITS = (("paddle", "Paddle"), ("device", "Device"), ("host", "Host"))


def fmt(value) -> str:
    """Numbers for tables and labels: up to 3 decimals, trailing zeros dropped (925.020 -> 925.02)."""
    if value is None:
        return "—"
    if value != 0 and abs(value) < 1:
        return f"{value:.4g}"
    return f"{value:.3f}".rstrip("0").rstrip(".")


def eff_label(group: dict, sep: str = " ") -> str:
    """`1.8x{sep}53 ± 12%`: speedup and efficiency with the digits their uncertainty (from both
    means, aggregate._ratio_errors) supports; 2 decimals and whole percent when it is unknown."""
    speedup_err, eff_err = group.get("speedup_err"), group.get("efficiency_err")
    if not speedup_err or not eff_err:
        return f"{group['speedup']:.2f}x{sep}{group['efficiency']:.0%}"
    speedup = stability.round_to(group["speedup"], stability.decimals_for(speedup_err))
    return f"{speedup}x{sep}{stability.format_pm(100 * group['efficiency'], 100 * eff_err)}%"


UNSTABLE_MARK = "!"


def mean_text(group: dict) -> str:
    """mean ± std with the digits the std supports, `(n=2; 1 outlier excluded)` when outliers were
    left out of it, `!` after an unstable group. Published figures keep the digits their source
    printed (a reader checks them against it)."""
    spread = group["std"] if group["n"] != 1 else None
    if group["source"]:
        text = fmt(group["mean"]) + (f" ± {fmt(spread)}" if spread is not None else "")
    else:
        text = stability.format_pm(group["mean"], spread)
    text += aggregate.figure_note(group)
    return text + f" {UNSTABLE_MARK}" if group.get("unstable") else text


def mfu_of(group: dict) -> float | None:
    """Mean MFU of the runs a group's figure keeps (records before MFU have none: None)."""
    left_out = set(group.get("excluded") or ()) | (set() if group.get("figure_disturbed") else
                                                   set(group.get("disturbed") or ()))
    values = [r["mfu"] for r in group.get("runs") or () if r.get("mfu") is not None and r["id"] not in left_out]
    return sum(values) / len(values) if values else None


def mfu_text(group: dict) -> str:
    """` MFU 7.1%` beside a figure (two significant digits: it is a ratio of two measurements),
    or nothing when its runs have none."""
    value = mfu_of(group)
    return "" if value is None else f" MFU {100 * value:.2g}%"


def run_text(group: dict, run: dict) -> str:
    mark = stability.run_mark(run["id"], group.get("excluded", ()), group.get("outliers", ()), group.get("disturbed"),
                              run.get("imbalance", ""))
    return f"{stability.format_pm(run['throughput'], None)} [{run['id'][:8]}]{mark}"


def stability_lines(table: dict) -> list[str]:
    """One legend line per unstable group or group with an outlier or a disturbed run: where it
    is, its cv, every run (throughput, first 8 characters of the record id) with the excluded
    outliers and the disturbed runs marked, and the mean over all of them beside the figure that
    left them out."""
    lines = []
    for g in table["groups"]:
        if g["mean"] is None or not (g.get("unstable") or g.get("outliers") or g.get("disturbed")):
            continue
        where = ", ".join(filter(None, [g["network"], g["method"], f"world size {g['world_size']}",
                                        variant_text(table, g)]))
        state = aggregate.agreement(g, f"{UNSTABLE_MARK} ")
        runs = g.get("runs", ())
        if not runs:  # a published cell: a mean and its std, no runs to list
            lines.append(f"{where}: {state} (from the published std; no runs published).")
            continue
        every = (f"; mean of all {len(runs)} runs {stability.format_pm(g['mean_all'], None)}"
                 if g.get("excluded") or aggregate.disturbed_out(g) else "")
        lines.append(f"{where}: {state}; runs in {g['unit']}: "
                     + ", ".join(run_text(g, run) for run in runs) + every + ".")
    return lines


def size_noun(groups: list[dict]) -> str:
    """Parameter-server jobs grow by workers (their world size); collective ones by devices."""
    return "worker" if all(g["mode"] == "ps" for g in groups) else "device"


def layout(group: dict) -> tuple:
    return (group["world_size"], group["nodes"], group["devices_per_node"])


# ---- planning ------------------------------------------------------------------------------------

def _first_seen(records: list[dict]) -> dict:
    """Order of first appearance of tables, methods and networks in the input: the order of
    tables, rows and legends (a fixed input gives a fixed order)."""
    order = {"method": {}, "network": {}, "table": {}}
    for record in records:
        order["table"].setdefault((experiment.source_name(record) or "", record["benchmark"],
                                   record.get("preset") or ""), len(order["table"]))
        order["method"].setdefault((record["mode"], record["method"]), len(order["method"]))
        order["network"].setdefault(experiment.network_name(record.get("network")),
                                    len(order["network"]))
    return order


def columns(groups: list[dict]) -> list[tuple]:
    """(world_size, nodes, devices_per_node) columns, labelled by world size alone when that is
    unambiguous and as `W (N×D)` otherwise."""
    layouts = sorted({layout(g) for g in groups})
    worlds = [w for w, _, _ in layouts]
    unique = len(worlds) == len(set(worlds))
    return [(lay, str(lay[0]) if unique else f"{lay[0]} ({lay[1]}×{lay[2]})") for lay in layouts]


SHOWN_ITEMS = 8  # a longer list is summarised: a model definition's layers run to hundreds


def _shown(text: str | None) -> str:
    """A trait value as a reader wants it: strings without JSON quotes, a missing value as —."""
    if text is None:
        return "—"
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, list) and len(value) > SHOWN_ITEMS:
        return _summary(value, text)
    return value if isinstance(value, str) else json.dumps(value)


def _summary(items: list, text: str) -> str:
    """A long list in a few words: a layer list by its tensors and parameters, anything else by its
    length; with a digest of the whole, so two lists that differ never read alike."""
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    if all(isinstance(i, dict) and isinstance(i.get("params"), (int, float)) for i in items):
        params = sum(i["params"] for i in items)
        return f"{len(items)} tensors, {params / 1e6:.2f} M params ({digest})"
    return f"{len(items)} items ({digest})"


def _traits(group: dict) -> dict:
    """Paddle, Device, Host, and the config keys by plain name (`column_name`); the config's copy of
    the Paddle version (experiment.CONFIG_CIRCUMSTANCES) is the Paddle trait already."""
    traits = {label: group[key] for key, label in TRAITS}
    # a key the group's runs lack (or have at that value: experiment.work_config) is the value its
    # absence means, shown as such where another group's value differs
    config = dict({key: json.dumps(value) for key, value in experiment.ABSENT_MEANS.get(group["mode"], {}).items()},
                  **experiment.flat_config(group["config"]))
    names = column_names(config)
    traits.update((names[key], _shown(text)) for key, text in config.items()
                  if f"config.{key}" not in experiment.CONFIG_CIRCUMSTANCES)
    return traits


# Config keys a reader knows by another name (what the runtime block records, plainly).
PLAIN = {"runtime.threads.omp_num_threads": "threads", "runtime.threads.source": "threads by"}


def column_names(config: dict) -> dict:
    """{dotted config key: the plain name a table column shows}: `threads` for
    runtime.threads.omp_num_threads, else the last part (`servers`, `batch_size`) unless another
    key ends the same, which then keeps its path without `runtime.`."""
    last: dict[str, int] = {}
    for key in config:
        last[key.rsplit(".", 1)[-1]] = last.get(key.rsplit(".", 1)[-1], 0) + 1
    return {key: PLAIN.get(key) or (key.rsplit(".", 1)[-1] if last[key.rsplit(".", 1)[-1]] == 1
                                    else key.removeprefix(experiment.RUNTIME_PREFIX))
            for key in config}


RUNTIME_NAMES = {"threads", "threads by", "servers", "workers", "device", "repeats"}


def _follows_from_place(key: str) -> bool:
    """Config keys that differ between a table's rows and columns by construction (the method,
    the threads per process of a job size, a PS job's servers and workers): they distinguish only
    groups at one place."""
    return key in experiment.METHOD_KEYS or key in RUNTIME_NAMES or key.startswith(experiment.RUNTIME_PREFIX)


def distinguishing(groups: list[dict]) -> list[str]:
    """Trait names (Paddle, Device, Host, config keys) that must be shown so that every group of a
    table has a place of its own: those whose values vary across the table, and those that vary
    between groups at the same network, method and job size; then, at a place whose groups those
    do not tell apart, the keys some of them lack."""
    traits = [_traits(g) for g in groups]
    names = list(dict.fromkeys(name for t in traits for name in t))
    places: dict[tuple, list[dict]] = {}
    for group, t in zip(groups, traits):
        places.setdefault((group["network"], group["mode"], group["method"], layout(group)), []).append(t)

    def varies(among, name, where_present=True):
        return len({t.get(name) for t in among if not where_present or name in t}) > 1

    # A key only some groups have is no difference by itself: across the table, a family's own
    # (k_steps beside method for a model run both ways) says nothing the mode does not; at one
    # place, a failed run's record lacks what only a run that started can say (its runtime block:
    # servers, threads), which fold_failures could not fold when two runs there differ.
    dims = [name for name in names if (not _follows_from_place(name) and varies(traits, name))
            or any(varies(among, name) for among in places.values())]
    for among in places.values():  # groups still alike on every shown trait: their absent keys
        while len({tuple(t.get(n) for n in dims) for t in among}) < len(among):
            extra = [n for n in names if n not in dims and varies(among, n, where_present=False)]
            if not extra:
                break
            dims.append(extra[0])
    return [name for name in names if name in dims]


def fold_failures(groups: list[Group]) -> list[Group]:
    """`groups` with each all-failed group counted in the one successful group at its place whose
    config agrees with every key the failed runs' config has. A failed run's record lacks what only
    a run that started can say (its runtime block: threads, servers, the Paddle version); kept apart,
    it made every such key a column of the whole table."""
    def place(g):
        return (g.network, g.mode, g.method, layout(g), g.paddle, g.device, g.host)
    out = list(groups)
    for failed in [g for g in out if g.mean is None]:
        mine = experiment.flat_config(failed.config)
        hosts = [i for i, g in enumerate(out) if g.mean is not None and place(g) == place(failed)
                 and all(experiment.flat_config(g.config).get(k) == v for k, v in mine.items())]
        if len(hosts) == 1:
            host = out[hosts[0]]
            out[hosts[0]] = dataclasses.replace(host, failed=host.failed + failed.failed,
                                                errors=sorted(set(host.errors) | set(failed.errors)))
            out = [g for g in out if g is not failed]
    return out


def variant(table: dict, group: dict) -> tuple:
    """The values of the table's distinguishing traits for `group` (empty when none)."""
    traits = _traits(group)
    return tuple(traits.get(name) or "—" for name in table["dims"])


def variant_text(table: dict, group: dict, sep: str = ", ") -> str:
    return sep.join(f"{name} {value}" for name, value in zip(table["dims"], variant(table, group)))


def _natural(values: tuple) -> tuple:
    """Sort numbers as numbers (batch 8 before 16), text as text."""
    out = []
    for value in values:
        try:
            out.append((0, float(value), ""))
        except ValueError:
            out.append((1, 0.0, value))
    return tuple(out)


def line_key(table: dict, group: dict) -> tuple:
    """Order of method lines: method as first seen, then the distinguishing values."""
    return (table["order"]["method"][(group["mode"], group["method"])],
            _natural(variant(table, group)))


def row_key(table: dict, group: dict) -> tuple:
    """Rows by network (single-device runs first), method, then the distinguishing values, so
    that e.g. two Paddle versions of one method are adjacent rows."""
    order = table["order"]
    network = order["network"][group["network"]] if group["method"] != SINGLE else -1
    return (network,) + line_key(table, group)


@dataclasses.dataclass(frozen=True, eq=False)
class Table(Mapping):
    """One table of the report: a (source, benchmark, preset), its groups in row order, the
    traits that tell its rows apart (`dims`), its job-size columns and, once planned, its charts."""
    source: str | None
    benchmark: str
    preset: str | None
    order: dict  # first appearance of tables, methods and networks in the input (`_first_seen`)
    dims: list[str]
    columns: list[tuple]
    groups: list[Group]
    charts: tuple = ()  # charts.plan's, set by the report (dataclasses.replace)

    def __getitem__(self, key: str) -> Any:  # read as a mapping by the charts' planning
        if key not in _TABLE_FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self):
        return iter(_TABLE_FIELDS)

    def __len__(self) -> int:
        return len(_TABLE_FIELDS)


_TABLE_FIELDS = [f.name for f in dataclasses.fields(Table)]


def plan(records: list[dict], cv_threshold: float = stability.CV_THRESHOLD) -> list[Table]:
    """One table per (source, benchmark, preset): its groups (with efficiency), in row order."""
    order = _first_seen(records)
    by_table: dict[tuple, list[dict]] = {}
    for group in aggregate.summarize_records(records, cv_threshold):
        if aggregate.is_control(group):
            continue  # method=none measures compute for `fleetbench explain`; it trained nothing
        by_table.setdefault((group["source"] or "", group["benchmark"], group["preset"] or ""),
                            []).append(group)
    tables = []
    for (source, benchmark, preset), groups in sorted(by_table.items(),
                                                      key=lambda item: order["table"][item[0]]):
        groups = fold_failures(groups)
        table = Table(source=source or None, benchmark=benchmark, preset=preset or None, order=order,
                      dims=distinguishing(groups), columns=columns(groups), groups=[])
        tables.append(dataclasses.replace(table, groups=sorted(groups, key=lambda g: (row_key(table, g), layout(g)))))
    return tables


# ---- markdown -----------------------------------------------------------------------------------

def table_markdown(table: dict) -> str:
    groups = table["groups"]
    per_group_n = len({runs_made(g) for g in groups if g["mean"] is not None}) > 1
    noun = size_noun(groups)
    head = (["Network", "Method"] + [name for name in table["dims"]]
            + [f"{text} {noun}{'s' if lay[0] > 1 else ''}" for lay, text in table["columns"]])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows: dict[tuple, dict] = {}
    for g in groups:
        rows.setdefault((g["network"], g["mode"], g["method"], variant(table, g)), {})[layout(g)] = g
    for (network, mode, method, values), by_layout in rows.items():
        cells = [_cell_text(by_layout.get(lay), per_group_n) for lay, _ in table["columns"]]
        label = f"{method} (ps)" if mode == "ps" and not method.endswith("PS") else method
        lines.append("| " + " | ".join([network or "—", label, *values] + cells) + " |")
    return "\n".join(lines)


runs_made = aggregate.runs_made


def _cell_text(group, per_group_n: bool) -> str:
    if group is None:
        return ""
    if group["mean"] is None:
        return f"failed ×{group['failed']}"
    text = mean_text(group)
    if group["efficiency"] is not None and group["world_size"] > 1:
        text += f" ({eff_label(group, sep=', ')})"
    text += mfu_text(group)
    if per_group_n and not aggregate.figure_note(group):  # mean_text already said n
        text += f" n={group['n'] if group['n'] is not None else '?'}"
    if group["failed"]:
        text += f" +{group['failed']} failed"
    return text


def _caption(table: dict) -> str:
    groups = [g for g in table["groups"] if g["mean"] is not None]
    failed = sum(g["failed"] for g in table["groups"])
    if not groups:
        return f"All {failed} run(s) of this benchmark failed; the errors are in the records."
    units = sorted({g["unit"] for g in groups})
    ns = sorted({runs_made(g) for g in groups}, key=lambda n: (n is None, n or 0))
    if table["source"]:
        spread = ("n not published; ± is the published std (population std, ddof 0)"
                  if ns == [None] else f"n = {', '.join(str(n) for n in ns)}")
        origin = f"Published numbers, not measured here: {table['source']}. {spread}."
    else:
        spread = (f"n = {ns[0]} run{'s' if ns[0] != 1 else ''} per cell" if len(ns) == 1
                  else "n per cell as shown")
        if len(ns) == 1 and any(aggregate.figure_note(g) for g in groups):
            what = ("outliers or disturbed runs" if any(aggregate.disturbed_out(g) for g in groups)
                    else "outliers")
            spread += f" (fewer where {what} are excluded, as shown)"
        origin = (f"Measured by fleetbench: mean ± sample std over repeats, {spread}, printed to the "
                  "digits the std supports.")
    text = f"Throughput in {', '.join(units)}. {origin}{simulated_note(groups)}"
    if any(mfu_of(g) is not None for g in groups):
        text += (" MFU: model FLOPs utilisation, the model's training FLOPs a second over the devices' "
                 "peak (a CPU's: its measured GEMM rate; docs/reference/metrics.md#mfu), mean of the runs kept.")
    if table["dims"]:
        text += (f" Rows differ in {', '.join(table['dims'])}: different experiments, shown "
                 "side by side, never averaged.")
    notes = merged_notes({g["baseline_note"] for g in groups if g["world_size"] > 1})
    if notes:
        text += (" In brackets: speedup and scaling efficiency = throughput(N) / "
                 f"(N × baseline), ± from the standard errors of both means; {'; '.join(notes)}.")
    text += _left_out_caption(groups)
    if failed:
        text += f" {failed} failed run(s) are counted, not averaged."
    noise = sorted({k for g in table["groups"] for k in g["noise_differs"]})
    if noise:
        text += f" Pooled repeats differ only in {', '.join(noise)} (not part of the experiment)."
    return text


def _left_out_caption(groups: list[dict]) -> str:
    """What the caption says of unstable cells, excluded outliers and disturbed runs."""
    text = ""
    unstable = [g for g in groups if g.get("unstable")]
    if unstable:
        text += (f" {UNSTABLE_MARK} marks {len(unstable)} unstable cell(s): runs vary more than "
                 f"{unstable[0]['cv_threshold']:.0%} of the mean (cv); their runs are listed below the table.")
    excluded = sum(len(g.get("excluded", ())) for g in groups)
    if excluded:
        text += (f" {excluded} run(s) far from the others (more than 3 median absolute deviations "
                 "and 5% from their median) are excluded from their cell's figure, which says so; "
                 "they are shown below the table with the mean over all runs.")
    disturbed = sum(len(g.get("disturbed") or ()) for g in groups)
    if disturbed:
        text += (f" {disturbed} run(s) were disturbed: more than {next(g['disturbed_pct'] for g in groups if g.get('disturbed')):g}% of the machine's "
                 "CPU time in their timed window went to processes outside the job (or another process "
                 "used its GPUs); they are shown below the table and left out of their cell's figure "
                 "unless every run of the cell was disturbed, which the cell then says.")
    kept = sum(len(g.get("outliers", ())) - len(g.get("excluded", ())) for g in groups)
    if kept:
        text += (f" {kept} more such run(s) stay in their cell's figure, marked (outlier, kept): "
                 "at most a quarter of a cell's runs are left out.")
    return text


def simulated_note(groups: list[dict]) -> str:
    """What a table must say of figures from the test suite's simulated GPU host (experiment.SIMULATED)."""
    simulated = sorted({g["paddle"] for g in groups if experiment.SIMULATED in (g.get("paddle") or "")})
    if not simulated:
        return ""
    return (f" SIMULATED GPU host ({'; '.join(simulated)}): device queries answered from a description, "
            "tensors on the CPU: not GPU measurements.")


WORLD_ONE = "baseline: world size 1, "


def merged_notes(notes: set[str]) -> list[str]:
    """Baseline notes with "baseline: world size 1, " said once: `baseline: world size 1 (same
    method and network) or (same method, no network)`."""
    ones = sorted(n[len(WORLD_ONE):] for n in notes if n.startswith(WORLD_ONE))
    rest = sorted(n for n in notes if n and not n.startswith(WORLD_ONE))
    if not ones:
        return rest
    return [WORLD_ONE.rstrip(", ") + " " + " or ".join(f"({label})" for label in ones)] + rest


def report_markdown(title: str, tables: list[dict], images: dict, inputs: list[str],
                    nrecords: int) -> str:
    out = [f"## {title}", "",
           f"Generated by `fleetbench report` from {nrecords} records in "
           f"{', '.join(f'`{p}`' for p in inputs)}; edit the results, not this section.", ""]
    for table in tables:
        heading = table["benchmark"] + (f" [{table['preset']}]" if table["preset"] else "")
        if table["source"]:
            heading += f" — published: {table['source']}"
        out += [f"### {heading}", "", _caption(table), "", table_markdown(table), ""]
        out += [f"- {line}" for line in stability_lines(table)] + ([""] if stability_lines(table) else [])
        for chart in table.charts:
            out += [f"![{chart['name']}]({images[chart['name']]})", ""]
    return "\n".join(out).rstrip("\n") + "\n"
