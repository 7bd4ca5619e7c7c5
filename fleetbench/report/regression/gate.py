"""`fleetbench gate`: a CI gate. The new runs against a baseline chosen in the results database,
with `fleetbench compare`'s statistics; exit 1 on a slowdown beyond the threshold, a Markdown
summary fit for a pull request's comment.

    fleetbench gate NEW.jsonl... --db URL [--base KEY=VALUE]... [--last N]
        [--threshold PCT] [--alpha A] [--summary FILE] [--json]
    fleetbench gate --db URL --new tag=pr-123 --base tag=main --last 10

The baseline is the store's runs that pass every --base filter (a branch's tag, a commit, a
date range), of the cells the new runs have, on the same device and host class, the last N of each
cell (default 10; 0: all). Cells are compared as `fleetbench compare` compares them (Mann–Whitney U,
Holm across cells, the minimum effect: --threshold or the runs' own cv); a cell whose sides differ
in hardware is not judged. Exit 0 passed, 1 a cell is slower, 2 bad input (one line).
"""
from __future__ import annotations

import json
import sys

from fleetbench import cmdline
from fleetbench.history import compare
from fleetbench.measure.repeats import experiment
from fleetbench.report.regression import comparison
from fleetbench.store import results, select

LAST = 10
LAST_KIND = cmdline.integer(0)


def baseline(candidates: list[dict], new: list[dict], last: int | None) -> list[dict]:
    """The gate's baseline: the successful runs of `candidates` (not themselves among `new`) of the
    cells `new` has (compare's cell key), on the same device and host class, the `last` newest of
    each cell (all with None), in time order."""
    def usable(record) -> bool:
        return record.get("error") is None and bool((record.get("metrics") or {}).get("throughput"))
    new = [r for r in new if usable(r)]
    ids = {r["id"] for r in new}
    candidates = [r for r in candidates if usable(r) and r["id"] not in ids]

    def keys(records):  # the work's key made once per distinct work; the machine's beside it
        return [(work, experiment.device_model(r), experiment.host_class(r))
                for work, r in zip(compare.cell_keys(records), records)]
    wanted = set(keys(new))
    cells: dict[tuple, list[dict]] = {}
    for key, record in zip(keys(candidates), candidates):
        if key in wanted:
            cells.setdefault(key, []).append(record)
    chosen = []
    for runs in cells.values():
        runs.sort(key=lambda r: r.get("time") or "")
        chosen += runs[-last:] if last else runs
    return sorted(chosen, key=lambda r: r.get("time") or "")


def run(new: list[dict], candidates: list[dict], last: int = LAST, **options) -> dict:
    """The comparison of `new` against its baseline among `candidates` (comparison.run's report),
    with `passed` and the baseline's size; InputError when the baseline is empty."""
    chosen = baseline(candidates, new, last or None)
    if not chosen:
        raise comparison.InputError("the baseline is empty: no run in the store of the new runs' cells (same "
                                    "device and host class) passes the --base filters")
    report = comparison.run(select.Side(given=tuple(chosen), label="baseline"),
                            select.Side(given=tuple(new), label="new"), **options)
    report.update(passed=report["counts"][compare.SLOWER] == 0, last=last, baseline_runs=len(chosen))
    return report


def summary(report: dict) -> str:
    """Markdown for a pull request: the outcome first, then compare's table and notes."""
    slower = [c["label"] for c in report["cells"] if c["verdict"] == compare.SLOWER]
    head = ("### fleetbench gate: passed" if report["passed"] else
            f"### fleetbench gate: FAILED, {len(slower)} of {len(report['cells'])} cell(s) slower")
    lines = [head, "", f"Baseline: {report['baseline_runs']} run(s), the last {report['last'] or 'all'} of each cell; "
             f"a change is called at p < {report['alpha']:g} (Holm) and at least {report['threshold_pct']:g}% "
             "or the runs' own cv.", ""]
    lines += [f"- **slower**: {label}" for label in slower]
    return "\n".join(lines) + ("\n\n" if slower else "\n") + comparison.markdown(report)


def parser() -> cmdline.Parser:
    p = cmdline.Parser(prog="fleetbench gate",
                       description="CI gate: new runs against a baseline in the results database.")
    p.add_argument("results", nargs="*", type=cmdline.INPUT_FILE,
                   help="the new runs' results files (or --new KEY=VALUE)")
    select.add_db(p, required=True)
    p.add_argument("--base", type=select.FILTER, action="append", default=[], metavar="KEY=VALUE",
                   help="which stored runs may be the baseline (e.g. tag=main); repeat to narrow")
    p.add_argument("--new", type=select.FILTER, action="append", default=[], metavar="KEY=VALUE",
                   help="the new runs from the database instead of files (e.g. tag=pr-123)")
    p.add_argument("--last", type=LAST_KIND, default=LAST, metavar="N",
                   help=f"the last N baseline runs of each cell (default {LAST}; 0: all)")
    p.add_argument("--summary", type=cmdline.OUTPUT_FILE, metavar="FILE",
                   help="also write the Markdown summary here (a pull request's comment)")
    comparison.add_common(p)
    return p


@cmdline.refusing("fleetbench gate")
def cli(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if bool(args.results) == bool(args.new):
        raise comparison.InputError("expected the new runs as results files or as --new KEY=VALUE, one of them")
    new = results.load(args.results) if args.results else select.records(args.db, args.where + args.new)
    new = compare.comparable_records(new)
    if not [r for r in new if r.get("error") is None]:
        raise comparison.InputError("the new side has no successful throughput run")
    experiment.check_key_names(list(args.ignore), new, "--ignore")  # before the database is read
    experiment.check_key_names(list(args.match), new, "--match")
    candidates = select.records(args.db, args.where + args.base)
    report = run(new, candidates, args.last, ignore=args.ignore, match=args.match, alpha=args.alpha,
                 threshold_pct=args.threshold, cv_threshold=args.cv_threshold / 100, disturbed_pct=args.disturbed)
    text = summary(report)
    if args.summary:
        with open(args.summary, "w", encoding="utf-8") as handle:
            handle.write(text)
    sys.stdout.write(json.dumps(report, sort_keys=True, ensure_ascii=False) + "\n" if args.json else text)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
