"""The diagnoser's own confusion matrix (issue 35): faults it was not built on, each measured
several times and every measurement judged both ways, by its peers and against a baseline.

For each cluster size (emulated nodes at 10gbe, `fleetbench cluster up`):
1. a baseline of --baseline-runs clean diagnoses (each node and link its own figures and spread);
2. every fault of the list applied (`fleetbench cluster degrade`), measured --runs times and
   healed. ONE measurement per run, judged twice: its re-measurements cover what either
   judgement found broken (fleetbench.diagnose.session), so both modes see the same figures;
3. per fault and mode: whether the fault is inside the resolution the diagnosis itself stated,
   found (its node flagged in its category) / missed / false flags (any other node, or a link
   with no faulted end) / not judged (a node or link whose figure broke a rule only while other
   processes used more than 10% of the machine: `disturbed`, or a node whose deficit stayed inside
   the noise: `unresolved`; neither a flag nor a pass), and the time each diagnosis took.

Faults per size n: none; CPU fractions 0.4-0.8 on node 0, the middle node and the last; link
rates 1, 2, 5 and 8 Gbit/s (up to the 10 Gbit/s links and the probe's ceiling) on those nodes;
a CPU fault and a link fault at once on two nodes.

    python bench/diagnose_matrix.py                    # 3, 4, 6, 8 nodes, 3 runs a fault
    python bench/diagnose_matrix.py --quick            # 3 and 4 nodes, 4 faults, 1 run, passes 2
    python bench/diagnose_matrix.py --aa 10 --sizes 4  # clean A/A: 10 runs against a baseline of 5 others
    ... --json matrix.json                             # every measurement and verdict, for tracing
(root; clusters named fbdm<N>, brought up and torn down here; nothing else may run beside it if
the times and figures are to be quoted)
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fleetbench.diagnose import session  # noqa: E402
from fleetbench.diagnose.judging import baseline as baselines  # noqa: E402
from fleetbench.diagnose.judging import rules, verdicts  # noqa: E402
from fleetbench.diagnose.cli import DEFAULT_RULES, emulated_hosts, machine  # noqa: E402

MODES = ("peers", "baseline")
MARGIN_PCT = 5.0  # a fault this close to the stated resolution is at its edge: neither found nor missed counts


def faults(n: int, quick: bool = False) -> list[tuple]:
    """(label, [(node, 'cpu' | 'rate', value), ...]) for a cluster of n nodes."""
    first, middle, last = 0, n // 2, n - 1
    cpu = [(0.4, first), (0.6, last), (0.8, middle), (0.5, middle), (0.7, first)]
    rate = [("1gbit", middle), ("2gbit", first), ("5gbit", last), ("8gbit", middle)]
    out = [("none", [])]
    out += [(f"cpu {f} on node {i}", [(i, "cpu", f)]) for f, i in cpu]
    out += [(f"link {r} on node {i}", [(i, "rate", r)]) for r, i in rate]
    out.append((f"cpu 0.5 on node {first} + link 1gbit on node {last}", [(first, "cpu", 0.5), (last, "rate", "1gbit")]))
    if quick:
        out = [out[0], out[1], out[6], out[-1]]
    return out


def fleetbench(*args) -> None:
    subprocess.run([sys.executable, "-m", "fleetbench", *map(str, args)], cwd=REPO, check=True,
                   capture_output=True, text=True, timeout=300)


def apply(name: str, fault: list) -> None:
    for node, kind, value in fault:
        fleetbench("cluster", "degrade", node, f"--{kind}", value, "--name", name)


def heal(name: str, fault: list) -> None:
    for node in sorted({f[0] for f in fault}):
        fleetbench("cluster", "heal", node, "--name", name)


def seen(report: dict, kind: str, value) -> str:
    """Whether one fault is inside what this diagnosis says it resolves (its `resolution`):
    inside | edge | outside. A CPU quota of f runs the node's matmul and training step at f of a
    healthy node's (every core busy); a link capped at r Gbit/s measures min(r, the test's
    ceiling). Within MARGIN of the flagging threshold a fault is at the edge. CPU figures that
    must corroborate each other resolve a quota only below all their thresholds."""
    names = ("matmul_gflops", "train_images_per_s") if kind == "cpu" else ("link_gbps", "iperf3_gbps")
    entries = [r for r in report["resolution"] if r["metric"] in names and r.get("judged") and r["reference"] > 0]
    if not entries:
        return "outside"
    margin = MARGIN_PCT / 100
    if kind == "cpu":
        ratios = [(float(value), e["flagged_below"] / e["reference"]) for e in entries]
    else:
        rate = float(str(value).removesuffix("gbit"))
        ratios = [(min(rate, e["ceiling"]) / e["reference"], e["flagged_below"] / e["reference"]) for e in entries]
    # figures that must agree (rules' corroborated_by) flag only when every one of them is below
    agree = kind == "cpu" and all(e.get("corroborated_by") for e in entries)
    inside, outside = (all, any) if agree else (any, all)
    if inside(expected < threshold - margin for expected, threshold in ratios):
        return "inside"
    return "outside" if outside(expected > threshold + margin for expected, threshold in ratios) else "edge"


def score(report: dict, fault: list) -> dict:
    """found / missed / edge / outside per fault part, and the false flags of this report."""
    faulted = {node for node, _, _ in fault}
    out = {"found": 0, "missed": 0, "edge": 0, "outside": 0, "false": [], "not_judged": verdicts.not_judged(report)}
    for node, kind, value in fault:
        category = "compute" if kind == "cpu" else "network"
        hit = any(n["index"] == node and category in n["categories"] for n in report["nodes"])
        where = seen(report, kind, value)
        out["found" if hit else "missed" if where == "inside" else where] += 1
    out["false"] = [f"node {n['index']}" for n in report["nodes"]
                    if n["verdict"] not in ("healthy", *verdicts.NOT_JUDGED_NODES) and n["index"] not in faulted]
    out["false"] += [f"link {l['a']}-{l['b']}" for l in report["links"]
                     if l["verdict"] not in verdicts.NOT_FINDINGS and not faulted & {l["a"], l["b"]}]
    return out


def clean_baseline(hosts: list, opts: session.Options, rule_list: list, runs: int) -> tuple[dict, list]:
    measured = [session.measure(hosts, opts, rule_list, [None]) for _ in range(runs)]
    made = baselines.make_baseline(measured, machine(), [h.name for h in hosts])
    return made, measured


def run_size(n: int, args, rule_list: list, record: list) -> list[dict]:
    name = f"fbdm{n}"
    fleetbench("cluster", "up", "--nodes", n, "--profile", "10gbe", "--name", name)
    rows = []
    try:
        hosts, opts = emulated_hosts(name), session.Options(passes=args.passes, iperf3=args.iperf3)
        base, _ = clean_baseline(hosts, opts, rule_list, args.baseline_runs)
        record.append({"nodes": n, "baseline": base})
        chosen = faults(n, args.quick)
        chosen = [chosen[i] for i in args.faults] if args.faults else chosen
        for label, fault in ([("none", [])] if args.aa else chosen):
            apply(name, fault)
            try:
                rows.append(run_fault(n, label, fault, (hosts, opts, rule_list, base), args, record))
            finally:
                heal(name, fault)
    finally:
        fleetbench("cluster", "down", "--name", name)
    return rows


def run_fault(n: int, label: str, fault: list, ctx: tuple, args, record: list) -> dict:
    hosts, opts, rule_list, base = ctx
    row = {"nodes": n, "fault": label, "times": [], **{m: [] for m in MODES}}
    for _ in range(args.aa or args.runs):
        start = time.monotonic()
        m = session.measure(hosts, opts, rule_list, [None, base])
        row["times"].append(time.monotonic() - start)
        for mode, reference in zip(MODES, (None, base)):
            report = verdicts.report(m, rule_list, reference, hosts)
            row[mode].append(score(report, fault))
            record.append({"nodes": n, "fault": label, "mode": mode, "report": report})
        print(f"  {n} nodes, {label}: {row['times'][-1]:.0f} s; peers {verdicts.flagged(record[-2]['report'])}, "
              f"baseline {verdicts.flagged(record[-1]['report'])}; not judged "
              f"{verdicts.not_judged(record[-2]['report']) + verdicts.not_judged(record[-1]['report'])}",
              file=sys.stderr, flush=True)
    return row


def table(rows: list[dict]) -> str:
    """The markdown table for docs/guide/diagnose.md: per fault and mode, over its runs."""
    lines = ["| nodes | fault | judged by | runs | found | missed | at the edge | outside resolution | "
             "false flags | not judged (disturbed) | s per diagnosis |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        times = f"{min(row['times']):.0f}-{max(row['times']):.0f}"
        for mode in MODES:
            s = row[mode]
            false = sorted({f for x in s for f in x["false"]})
            shaken = sum(bool(x.get("not_judged")) for x in s)
            lines.append(f"| {row['nodes']} | {row['fault']} | {mode} | {len(s)} | {sum(x['found'] for x in s)} | "
                         f"{sum(x['missed'] for x in s)} | {sum(x['edge'] for x in s)} | "
                         f"{sum(x['outside'] for x in s)} | {len(false) and ', '.join(false) or 0} | "
                         f"{shaken and f'{shaken} run(s)' or 0} | {times} |")
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    missed = sum(x["missed"] for r in rows for m in MODES for x in r[m])
    false = sum(len(x["false"]) for r in rows for m in MODES for x in r[m])
    runs = sum(len(r["times"]) for r in rows)
    shaken = sum(bool(x.get("not_judged")) for r in rows for m in MODES for x in r[m])
    return (f"{runs} diagnoses, each judged both ways: {missed} fault(s) inside the stated resolution missed, "
            f"{false} false flag(s) of a healthy node or link, {shaken} judgement(s) with something not judged "
            f"(measured while others used the machine)")


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default=None, help="cluster sizes, comma-separated (default 3,4,6,8; --quick 3,4)")
    p.add_argument("--runs", type=int, default=3, help="diagnoses per fault (default 3)")
    p.add_argument("--baseline-runs", type=int, default=5, help="clean diagnoses the baseline is made of (default 5)")
    p.add_argument("--passes", type=int, default=3, help="node probe passes (the diagnosis's default 3)")
    p.add_argument("--quick", action="store_true", help="3 and 4 nodes, 4 faults, 1 run, 2 baseline runs, 2 passes")
    p.add_argument("--iperf3", action="store_true", help="also iperf3 per pair (fleetbench diagnose --iperf3)")
    p.add_argument("--faults", default=None, help="indexes into the fault list, comma-separated (default all: "
                   "0 none, 1-5 CPU, 6-9 link, 10 both)")
    p.add_argument("--aa", type=int, default=0, metavar="N", help="clean A/A: N runs, no fault")
    p.add_argument("--json", help="write every measurement's reports and the baselines here, and the table so far beside it (.md), after every size")
    args = p.parse_args(argv)
    if args.quick:
        args.runs, args.baseline_runs, args.passes = 1, 2, 2
    args.faults = [int(x) for x in args.faults.split(",")] if args.faults else None
    args.sizes = [int(x) for x in (args.sizes or ("3,4" if args.quick else "3,4,6,8")).split(",")]
    return args


def main(argv=None) -> int:
    args = parse(argv)
    rule_list = rules.parse_rules(DEFAULT_RULES.read_text(), str(DEFAULT_RULES))
    rows, record, start = [], [], time.monotonic()
    for n in args.sizes:
        rows += run_size(n, args, rule_list, record)
        # written after every size: a matrix takes hours, and what was measured is kept if it stops
        if args.json:
            Path(args.json).write_text(json.dumps(record, indent=1, default=str) + "\n")
            Path(args.json).with_suffix(".md").write_text(f"{table(rows)}\n\n{summary(rows)}\n")
    print(table(rows))
    print(f"\n{summary(rows)}; {time.monotonic() - start:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
