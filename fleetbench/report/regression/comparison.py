"""`fleetbench compare`: did it get slower? Two sides of runs, cells matched on the declared key.

    fleetbench compare BASE NEW                       two results files
    fleetbench compare BASE... -- NEW...              several files a side
        [--ignore KEY]... [--match KEY]... [--threshold PCT] [--alpha A]
        [--cv-threshold PCT] [--disturbed PCT] [--markdown | --json]

Cells are matched on measure/repeats/experiment.cell_key (WORK: benchmark, preset, method, shape, network,
the config that defines the work), across what the comparison is about (the Paddle build, host,
device, commit, date); `--ignore KEY` leaves a key out (compare `bsp` with `mgwfbp`: --ignore
method), `--match KEY` adds a circumstance (--match paddle). A side's runs are grouped as the
report groups them (measure/repeats/aggregate.py: outliers and disturbed runs left out of a figure, and
said); a side holding two experiments of one cell is not pooled, it is named. The statistics are
history/compare.py's. Exit 0 when no cell is slower, 1 when one is, 2 on bad input (one line).
"""
from __future__ import annotations

import argparse
import json
import sys

from fleetbench import cmdline
from fleetbench.history import circumstances as circ
from fleetbench.history import compare
from fleetbench.measure.repeats import aggregate, experiment, stability
from fleetbench.store import results, select

MARK = {compare.FASTER: "faster", compare.SLOWER: "SLOWER", compare.SAME: "~", compare.INSUFFICIENT: "?",
        compare.HARDWARE: "not judged"}


class InputError(cmdline.UserError):
    """Bad input to compare or history: one line naming the flag, file or side."""


def split_sides(paths: list[str], flag_sep: str = "--") -> tuple[list[str], list[str]]:
    """(base files, new files) from `BASE NEW` or `BASE... -- NEW...`; InputError if neither."""
    if flag_sep in paths:
        cut = paths.index(flag_sep)
        base, new = paths[:cut], paths[cut + 1:]
        for name, side in (("base", base), ("new", new)):
            if not side:
                raise InputError(f"the {name} side is empty: expected BASE... -- NEW... with at least one "
                                 f"results file on each side of --")
        return base, new
    if len(paths) != 2:
        raise InputError(f"expected two results files (BASE NEW) or BASE... -- NEW..., got {len(paths)} "
                         f"file{'s' if len(paths) != 1 else ''} and no --")
    return paths[:1], paths[1:]


def load_side(source, name: str) -> list[dict]:
    """The side's throughput records (`source`: files or a select.Side); InputError when it has none."""
    source = select.side(source)
    records = compare.comparable_records(source.records())
    if not [r for r in records if r.get("error") is None]:
        raise InputError(f"the {name} side ({', '.join(source.names())}) has no successful throughput run to compare")
    return records


def circumstances(records: list[dict]) -> dict:
    """What a side ran on: Paddle builds, hosts, devices, commits, first and last run time."""
    def values(fn):
        return sorted({v for v in map(fn, records) if v})
    times = values(lambda r: r.get("time"))
    return {"paddle": values(lambda r: experiment.paddle_build(r.get("env"))),
            "host": values(experiment.host_class), "device": values(experiment.device_model),
            "git": [results.short_commit(g) for g in values(lambda r: r.get("git"))],
            "from": times[0] if times else None, "to": times[-1] if times else None}


def run(base_paths, new_paths, *, ignore=(), match=(), alpha: float = compare.ALPHA,
        threshold_pct: float = compare.THRESHOLD_PCT, cv_threshold: float = stability.CV_THRESHOLD,
        disturbed_pct: float = stability.DISTURBED_PCT, across_hardware: bool = False) -> dict:
    """The comparison as one object (the --json output); InputError / RecordError / KeyNameError
    (one line) on bad input, before any output. A side is a list of files or a select.Side."""
    base, new = load_side(base_paths, "base"), load_side(new_paths, "new")
    base_paths, new_paths = select.side(base_paths).names(), select.side(new_paths).names()
    for flag, names in (("--ignore", ignore), ("--match", match)):
        if names:  # reads every record's keys: only when there are names to check
            experiment.check_key_names(list(names), base + new, flag)
    groups = [aggregate.aggregate(side, cv_threshold, disturbed_pct) for side in (base, new)]
    matched = compare.match_cells(*groups, ignore=compare.widen(ignore), match=match)
    if not matched["pairs"]:
        raise InputError(no_common_cell(matched, groups))
    cells = compare.compare_pairs(matched["pairs"], alpha, threshold_pct,
                                  times={r["id"]: r.get("time") for r in base + new})
    circ.judge_cells(cells, {r["id"]: r for r in base + new}, across_hardware)
    every = [c["key"] for c in cells] + [dict(k) for k in matched["only_base"] + matched["only_new"]]
    every += [dict(k) for k, _, _ in matched["unlike"]]
    names = dict(zip(map(compare.json_key, map(lambda k: tuple(sorted(k.items())), every)), labels(every)))

    def name(key) -> str:
        return names[compare.json_key(tuple(sorted(dict(key).items())))]
    for cell in cells:
        cell["label"] = name(cell["key"])
    counts = {v: sum(c["verdict"] == v for c in cells) for v in compare.VERDICTS}
    return {"base": {"files": base_paths, **circumstances(base)}, "new": {"files": new_paths, **circumstances(new)},
            "alpha": alpha, "threshold_pct": threshold_pct, "disturbed_pct": disturbed_pct,
            "ignore": list(ignore), "match": list(match), "cells": cells, "counts": counts,
            "across_hardware": across_hardware,
            "differences": circ.differences(*[[r for r in side if r.get("error") is None] for side in (base, new)]),
            "only_base": [name(k) for k in matched["only_base"]],
            "only_new": [name(k) for k in matched["only_new"]],
            "unlike": [{"cell": name(k), "side": side,
                        "differ_in": _differ(gs)} for k, side, gs in matched["unlike"]]}


def _differ(groups: list[dict]) -> dict:
    return {name: sorted({str(g.get(name)) for g in groups}) for name in experiment.CIRCUMSTANCES
            if len({g.get(name) for g in groups}) > 1}


def no_common_cell(matched: dict, groups: list[list[dict]]) -> str:
    if matched["unlike"]:
        key, side, gs = matched["unlike"][0]
        differ = "; ".join(f"{n}: {', '.join(v)}" for n, v in _differ(gs).items())
        return (f"no cell to compare: the {side} side holds {len(gs)} experiments of {label(dict(key), ())} "
                f"({differ}), never pooled: --match {next(iter(_differ(gs)), 'paddle')} compares them apart, or give that side one of them")
    names = [sorted({label(dict(experiment.cell_key(g)), ()) for g in side}) for side in groups]
    return (f"no cell in both sides: base has {len(names[0])} ({'; '.join(names[0][:3])}{'...' if len(names[0]) > 3 else ''}), "
            f"new has {len(names[1])} ({'; '.join(names[1][:3])}{'...' if len(names[1]) > 3 else ''}); "
            f"--ignore KEY matches cells that differ in KEY (e.g. --ignore method)")


# ---- cell names ---------------------------------------------------------------------------------

def _value(text):
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return text
    return value


def labels(keys: list[dict]) -> list[str]:
    """A name per cell key (`label`), showing the config keys whose values differ between cells
    of the same benchmark and preset (plain: `batch_size 16`); the method and runtime keys
    follow from the name."""
    def family(key):
        return (key.get("source"), key.get("benchmark"), key.get("preset"))
    varying: dict[tuple, list[str]] = {}
    for fam in {family(k) for k in keys}:
        same = [k for k in keys if family(k) == fam]
        names = sorted({n for k in same for n in k if n.startswith("config.")})
        varying[fam] = [n for n in names if len({k[n] for k in same if n in k}) > 1
                        and n[len("config."):] not in experiment.METHOD_KEYS
                        and not n.startswith("config." + experiment.RUNTIME_PREFIX)]
    names = [label(k, varying[family(k)]) for k in keys]
    for text in {n for n in names if names.count(n) > 1}:  # a key only some have tells them apart
        same = [k for k, n in zip(keys, names) if n == text]
        extra = sorted(n for n in {n for k in same for n in k} if len({k.get(n) for k in same}) > 1)
        names = [label(k, varying[family(k)] + extra) if n == text else n for k, n in zip(keys, names)]
    return names


def label(key: dict, shown) -> str:
    """`resnet50 tiny mgwfbp 2x1 10gbe batch_size 16`: the cell's work as a reader names it."""
    shape = (f"{key['nodes']}x{key['devices_per_node']}" if "nodes" in key and "devices_per_node" in key
             else str(key.get("world_size", "")))
    parts = [key.get("source"), key.get("benchmark"), key.get("preset"), key.get("method"), shape,
             key.get("network") or ("local" if "network" in key else None)]
    parts += [f"{n.rsplit('.', 1)[-1]} {_value(key[n]) if n in key else '—'}" for n in shown]
    parts += [f"{n} {key[n]}" for n in experiment.CIRCUMSTANCES if n in key]
    return " ".join(str(p) for p in parts if p not in (None, ""))


# ---- text ----------------------------------------------------------------------------------------

def side_text(side: dict) -> str:
    if side["mean"] is None:
        return "—"
    text = stability.format_pm(side["mean"], side["std"] if (side["n"] or 0) > 1 else None)
    return text


def change_text(cell: dict) -> str:
    """`-10.0% [-14.1, -6.2] (p=0.001 n=10+10)`, `~ (p=0.548 n=10+10)`, `? (n=1+3: ...)`."""
    n = f"n={cell['base']['n'] or 0}+{cell['new']['n'] or 0}"
    if cell["verdict"] == compare.INSUFFICIENT:
        return f"? ({n}: {cell['note']})"
    if cell["verdict"] == compare.HARDWARE:
        change = f"{cell['change_pct']:+.1f}% " if cell["change_pct"] is not None else ""
        return f"{change}(not judged: hardware differs; {n})"
    p = f"p={_p(cell['p_adjusted'])} {n}"
    if cell["verdict"] == compare.SAME:
        return f"~ ({p})"
    ci = cell["ci95_pct"]
    interval = f" [{ci[0]:+.1f}%, {ci[1]:+.1f}%]" if ci else ""
    return f"{cell['change_pct']:+.1f}%{interval} ({p})"


def _p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def notes(cell: dict) -> list[str]:
    """What a reader must know about a cell beyond its line: the test when not the rank test, runs
    left out of a side's figure, a change below the minimum effect."""
    out = []
    if cell["verdict"] != compare.HARDWARE and (cell["test"] == compare.WELCH
                                                or (cell["verdict"] != compare.INSUFFICIENT and cell["note"])):
        out.append(cell["note"])
    for name in ("base", "new"):
        side = cell[name]
        if side["disturbed"] and not side["figure_disturbed"]:
            out.append(f"{name}: {len(side['disturbed'])} disturbed run(s) left out ("
                       + ", ".join(f"{i[:8]}: {why}" for i, why in side["disturbed"].items()) + ")")
        if side["figure_disturbed"]:
            out.append(f"{name}: every run was disturbed ({len(side['disturbed'])}): no undisturbed figure")
        if side["excluded"]:
            out.append(f"{name}: {len(side['excluded'])} outlier(s) left out ({', '.join(i[:8] for i in side['excluded'])})")
    p = cell["p_adjusted"]
    if cell["verdict"] == compare.SAME and p is not None and p < cell.get("alpha", compare.ALPHA) \
            and cell["change_pct"] is not None:
        out.append(f"p={_p(p)} but |{cell['change_pct']:+.1f}%| is below the minimum effect "
                   f"{cell['min_effect_pct']:.1f}% (--threshold or the runs' own cv)")
    return out


def sequential_lines(cells: list[dict]) -> list[str]:
    """A line for each cell whose sides were measured one after the other (compare.design), or one
    line for the comparison when every cell was and in the same order: a drift of the machine
    between the sides reads as a change. The verdicts stand as they are."""
    seq = [c for c in cells if c.get("design") == compare.SEQUENTIAL]
    if not seq:
        return []
    when = compare.run_time
    if len(seq) == len(cells) > 1 and len({when(c["base"]["to"]) < when(c["new"]["from"]) for c in seq}) == 1:
        base, new = ({"from": min((c[n]["from"] for c in seq), key=when), "to": max((c[n]["to"] for c in seq), key=when)}
                     for n in ("base", "new"))
        return [f"all {len(seq)} cells: {_sequential_text(base, new)}"]
    return [f"{c['label']}: {_sequential_text(c['base'], c['new'])}" for c in seq]


def _sequential_text(base: dict, new: dict) -> str:
    """`base's runs all came before new's (15:02-15:05 -> 15:06-15:09 UTC): ...`."""
    (first, a), (second, b) = sorted((("base", base), ("new", new)), key=lambda p: compare.run_time(p[1]["from"]))
    times = [compare.run_time(t) for t in (a["from"], a["to"], b["from"], b["to"])]
    fmt = "%H:%M" if len({t.date() for t in times}) == 1 else "%Y-%m-%d %H:%M"
    t = [x.strftime(fmt) for x in times]
    return (f"{first}'s runs all came before {second}'s ({t[0]}-{t[1]} -> {t[2]}-{t[3]} UTC): a drift of the machine "
            f"between them reads as a change; interleave the sides (fleetbench sweep --interleave, docs/guide/compare.md)")


def table_rows(report: dict) -> list[tuple]:
    mixed = len({c["base"]["unit"] for c in report["cells"]}) > 1
    return [(c["label"] + (f" ({c['base']['unit']})" if mixed else ""), side_text(c["base"]), side_text(c["new"]),
             change_text(c), MARK[c["verdict"]]) for c in report["cells"]]


def _unit(report: dict) -> str:
    units = sorted({c["base"]["unit"] for c in report["cells"]})
    return units[0] if len(units) == 1 else "unit by cell"


def console(report: dict) -> str:
    head = ("cell", f"base ({_unit(report)})", "new", "change (95% CI, Holm-adjusted p)", "verdict")
    rows = [head] + table_rows(report)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [_sides_line(report), ""]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines += [""] + footer(report)
    return "\n".join(lines) + "\n"


def markdown(report: dict) -> str:
    head = ("Cell", f"Base ({_unit(report)})", "New", "Change (95% CI, Holm-adjusted p)", "Verdict")
    lines = [f"- {line.strip()}" for line in _sides_line(report).splitlines()]
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(v.replace("|", "/") for v in row) + " |" for row in table_rows(report)]
    lines += [""] + [f"- {line}" for line in footer(report)]
    return "\n".join(lines) + "\n"


def _sides_line(report: dict) -> str:
    def side(s):
        when = f"{(s['from'] or '?')[:10]}..{(s['to'] or '?')[:10]}"
        return (f"{', '.join(s['files'])} (Paddle {', '.join(s['paddle']) or '?'}; {when}; "
                f"commit {', '.join(s['git'][:3]) or '?'}{'...' if len(s['git']) > 3 else ''})")
    return f"base: {side(report['base'])}\nnew:  {side(report['new'])}"


def footer(report: dict) -> list[str]:
    counts = report["counts"]
    tested = sum(c["p_value"] is not None for c in report["cells"])
    lines = [f"{len(report['cells'])} cell(s): " + ", ".join(f"{counts[v]} {v}" for v in compare.VERDICTS if counts[v])
             + f". Mann–Whitney U (Welch's t where the runs are too few, said), p adjusted by Holm over {tested} test(s); "
             f"a change is called when p < {report['alpha']:g} and it is at least the larger of "
             f"{report['threshold_pct']:g}% (--threshold) and the cell's run-to-run cv. Intervals: bootstrap of both sides."]
    unjudged = [c for c in report["cells"] if c["verdict"] == compare.HARDWARE]
    if len({c["note"] for c in unjudged}) == 1:  # one reason for all: said once
        lines.append(f"{len(unjudged)} cell(s) not judged: {unjudged[0]['note']}")
    else:
        lines += [f"{c['label']}: {c['note']}" for c in unjudged]
    for cell in report["cells"]:
        lines += [f"{cell['label']}: {text}" for text in notes(cell)]
    lines += sequential_lines(report["cells"])
    differ = circ.lines(report.get("differences") or {})
    lines += ([f"circumstances that differ between the sides ({len(differ)}): " + " | ".join(differ)] if differ
              else ["circumstances: the sides ran on the same CPU, GPU, driver, CUDA, cuDNN, NCCL, Paddle, kernel, "
                    "commit, network and threads (as recorded)"])
    if report["only_base"]:
        lines.append(f"only in base ({len(report['only_base'])}): {'; '.join(report['only_base'])}")
    if report["only_new"]:
        lines.append(f"only in new ({len(report['only_new'])}): {'; '.join(report['only_new'])}")
    for u in report["unlike"]:
        differ = "; ".join(f"{n}: {', '.join(v)}" for n, v in u["differ_in"].items())
        lines.append(f"not compared: the {u['side']} side holds several experiments of {u['cell']} ({differ}): "
                     f"never pooled; --match {next(iter(u['differ_in']), 'paddle')} compares them apart")
    return lines


# ---- command line --------------------------------------------------------------------------------

PERCENT = cmdline.number(0.0, 1000.0, low_included=True, high_included=False)
ALPHA = cmdline.number(0.0, 1.0, high_included=False)  # a significance level, e.g. 0.05


def add_common(p: argparse.ArgumentParser) -> None:
    """Flags compare and history share."""
    p.add_argument("--ignore", action="append", default=[], metavar="KEY",
                   help="leave KEY out of the cell key (e.g. method, network, config.batch_size)")
    p.add_argument("--match", action="append", default=[], metavar="KEY",
                   help="add a circumstance to the cell key (paddle, host, device)")
    p.add_argument("--threshold", type=PERCENT, default=compare.THRESHOLD_PCT, metavar="PCT",
                   help=f"least change worth a verdict, %% (default {compare.THRESHOLD_PCT:g}; the runs' cv when larger)")
    p.add_argument("--alpha", type=ALPHA, default=compare.ALPHA, help=f"significance level (default {compare.ALPHA:g})")
    p.add_argument("--cv-threshold", type=PERCENT, default=100 * stability.CV_THRESHOLD, metavar="PCT",
                   help="cv above which a cell is marked unstable, %% (default 5)")
    p.add_argument("--disturbed", type=PERCENT, default=stability.DISTURBED_PCT, metavar="PCT",
                   help=f"a run whose window gave more than PCT %% of the CPU to other processes is disturbed "
                   f"(default {stability.DISTURBED_PCT:g})")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--markdown", action="store_true", help="a markdown table")
    out.add_argument("--json", action="store_true", help="one JSON object")


def parser(prog: str = "fleetbench compare", nargs: str = "+") -> cmdline.Parser:
    p = cmdline.Parser(prog=prog, description="Did it get slower? Cells of two sides compared: BASE NEW, "
                       "or BASE... -- NEW...")
    p.add_argument("results", nargs=nargs, type=cmdline.INPUT_FILE, help="results files: BASE NEW, or BASE... -- NEW...")
    add_common(p)
    p.add_argument(circ.ACROSS_HARDWARE_FLAG, action="store_true",
                   help="judge cells whose sides ran on other CPUs or GPUs too (by default: not judged, said)")
    select.add_db(p)
    for name in ("base", "new"):
        p.add_argument(f"--{name}", type=select.FILTER, action="append", default=[], metavar="KEY=VALUE",
                       help=f"with --db: the {name} side's runs (e.g. tag=main, commit=03c1503, since=2026-11-22)")
    return p


def parse_sides(argv: list[str], make_parser) -> tuple[argparse.Namespace, list[str]]:
    """(arguments, results files with "--" between the sides where the command line had it):
    argparse drops `--`, so how many files stood before it is counted by parsing that part alone
    (flags may stand on either side)."""
    argv = list(argv)
    if "--" not in argv:
        args = make_parser("+").parse_args(argv)
        return args, list(args.results)
    sep = argv.index("--")
    args = make_parser("*").parse_args(argv[:sep] + argv[sep + 1:])
    before = len(make_parser("*").parse_known_args(argv[:sep])[0].results)
    return args, args.results[:before] + ["--"] + args.results[before:]


def db_sides(args, paths: list[str]) -> tuple:
    """(base, new) from the files, or from --db with --base/--new filters (and --where for both)."""
    if not args.db:
        if args.base or args.new or args.where:
            raise InputError("--base/--new/--where KEY=VALUE: expected with --db URL (files are given as BASE -- NEW)")
        return split_sides(paths)
    if paths or not (args.base and args.new):
        raise InputError(f"--db {args.db}: expected --base KEY=VALUE... and --new KEY=VALUE... "
                         "(which runs each side is) "
                         f"and no results files{f', got {len(paths)}' if paths else ''}")
    return tuple(select.Side(db=args.db, where=tuple(args.where + getattr(args, name))) for name in ("base", "new"))


@cmdline.refusing("fleetbench compare")
def cli(argv: list[str]) -> int:
    args, paths = parse_sides(argv, lambda nargs: parser(nargs="*"))
    base, new = db_sides(args, paths)
    report = run(base, new, ignore=args.ignore, match=args.match, alpha=args.alpha,
                 threshold_pct=args.threshold, cv_threshold=args.cv_threshold / 100, disturbed_pct=args.disturbed,
                 across_hardware=args.across_hardware)
    if args.json:
        sys.stdout.write(json.dumps(report, sort_keys=True, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(markdown(report) if args.markdown else console(report))
    return 1 if report["counts"][compare.SLOWER] else 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
