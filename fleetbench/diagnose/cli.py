"""`fleetbench diagnose`: name the sick node and the slow link.

    fleetbench diagnose --cluster [NAME]   the emulated cluster (default fb)
    fleetbench diagnose --hosts a,b,c      real hosts over SSH (or --hostfile FILE; --ssh-config FILE)
    fleetbench diagnose --executor slurm   the nodes of the Slurm allocation it runs in (srun per node)
    fleetbench diagnose                    this machine alone (node tests only)

Exit 0: every node and link healthy; 1: a node defective or unreachable, a link slow or failed
(or, with --paddle-links, the all-node job failed or slow); 2: bad input (before anything runs);
3: nothing found, but something not judged: a figure that broke a rule was measured, each time,
while other processes used more than --disturbed % of the machine (its row says how much), or a
node's deficit stayed inside the noise after --resolve-rounds ("cannot tell at this noise").
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from fleetbench import cmdline
from fleetbench.emulate.netem_plan import NAME
from fleetbench.diagnose import session
from fleetbench.diagnose.judging import baseline as baselines
from fleetbench.diagnose.judging import rules, verdicts
from fleetbench.hosts.hostlist import Host
from fleetbench.measure.registry import REPO_ROOT
from fleetbench.measure.repeats.stability import DISTURBED_PCT

DEFAULT_RULES = Path(__file__).resolve().parents[1] / "presets" / "diagnose" / "rules.yaml"
DEFAULT_RUNS = 5  # --save-baseline: healthy runs a baseline is made of


def parser() -> argparse.ArgumentParser:
    p = cmdline.Parser(prog="fleetbench diagnose", description=__doc__.splitlines()[0])
    where = p.add_mutually_exclusive_group()
    where.add_argument("--cluster", nargs="?", const="fb", metavar="NAME", type=NAME, help="the emulated cluster (default fb)")
    where.add_argument("--hosts", help="real hosts over SSH: a,b,c (slots, as in a:8, are ignored)")
    where.add_argument("--hostfile", type=cmdline.INPUT_FILE, help="real hosts over SSH, one `HOST [slots=N]` per line")
    where.add_argument("--executor", choices=("slurm",), help="slurm: the allocation's nodes (inside salloc/sbatch)")
    p.add_argument("--ssh-config", type=cmdline.INPUT_FILE, help="ssh -F FILE for --hosts/--hostfile (default: your ~/.ssh/config)")
    p.add_argument("--remote-python", type=cmdline.TEXT, help="the Python with fleetbench on the hosts (default: this one's path)")
    p.add_argument("--rules", default=str(DEFAULT_RULES), type=cmdline.INPUT_FILE, help="rules YAML (default: the shipped rules)")
    p.add_argument("--baseline", type=cmdline.INPUT_FILE, help="judge each node and link against its own figures in this baseline")
    p.add_argument("--save-baseline", metavar="FILE", help="write a baseline of --runs healthy runs' figures")
    p.add_argument("--runs", type=int, help=f"with --save-baseline: runs the baseline is made of (default {DEFAULT_RUNS})")
    p.add_argument("--results", help="store the figures and the verdict as records (JSONL)")
    p.add_argument("--passes", type=int, default=3, help="node probes per node, interleaved (default 3)")
    p.add_argument("--resolve-rounds", type=cmdline.NON_NEGATIVE, default=2, metavar="N",
                   help="while a node's deficit is inside the noise, every node's passes again, at most N "
                   "times; still inside it, the node is 'cannot tell at this noise' (exit 3), never healthy (default 2)")
    p.add_argument("--seconds", type=float, default=0.6, help="seconds per probe figure (default 0.6)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before a probe is a failure")
    p.add_argument("--disturbed", type=cmdline.number(0.0, 100.0, low_included=True, high_included=True),
                   default=DISTURBED_PCT, metavar="PCT",
                   help="a figure that breaks a rule while other processes used more than PCT %% of the machine "
                   f"in every measurement of it is not judged (exit 3 when nothing else is found; default "
                   f"{DISTURBED_PCT:g}; 100 judges everything)")
    p.add_argument("--concurrent", action="store_true",
                   help="real hosts: each pass's node probes at once, each round's pairs at once")
    p.add_argument("--iperf3", action="store_true",
                   help="also iperf3 per pair (where Python's TCP probe tops out below the links' rate)")
    p.add_argument("--paddle-links", action="store_true",
                   help="also Paddle's sendrecv and all_reduce busbw per pair, then over all nodes (slower)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true")
    out.add_argument("--markdown", action="store_true")
    return p


def _hosts(args) -> list[Host]:
    """The nodes to diagnose, as hosts of fleetbench.hosts (each says how a probe reaches it)."""
    from fleetbench.hosts import allocation, hostlist, reach

    python = args.remote_python or sys.executable
    try:
        if args.executor == "slurm":  # the allocation's nodes in Slurm's order, each at its NodeAddr
            return allocation.slurm_hosts(python=python, workdir=str(REPO_ROOT))
        if args.hosts is not None or args.hostfile:
            found = hostlist.load_hostfile(args.hostfile) if args.hostfile else hostlist.parse_hosts_arg(args.hosts)
            # a host that does not resolve is judged unreachable by its probe, the others still judged
            return [reach.with_address(dataclasses.replace(h, ssh_config=args.ssh_config, python=python), strict=False)
                    for h in found]
    except hostlist.HostsError as e:
        raise rules.DiagnoseError(str(e)) from None
    if args.cluster is None:
        return [Host("localhost", reach="local", address="127.0.0.1")]
    return emulated_hosts(args.cluster)


def emulated_hosts(cluster: str) -> list[Host]:
    """The nodes `fleetbench cluster up` made, from its state file, whether or not each is still
    there: a node whose namespace is gone is judged unreachable, and the others are still judged."""
    from fleetbench.emulate import netem, netem_state
    from fleetbench.hosts.remote import emulated_host

    state = netem_state.read_state(cluster)
    if not state:
        raise rules.DiagnoseError(f"--cluster {cluster}: not up (`fleetbench cluster up --nodes N` first)")
    return [emulated_host(n, name=n.netns) for n in netem.Layout.from_dict(state["layout"]).nodes]


def machine() -> dict:
    """What a baseline must match: the host class and the Paddle build."""
    from fleetbench.machine import env

    info = env.collect()
    return {"cpu": (info.get("cpu") or {}).get("model"), "cpus": os.cpu_count(),
            "paddle": (info.get("paddle") or {}).get("version")}


def _positive(args) -> None:
    """Each numeric option named on its own when it is out of range."""
    for flag, value, kind in (("--passes", args.passes, "an integer >= 1"), ("--runs", args.runs, "an integer >= 1"),
                              ("--seconds", args.seconds, "a number > 0"), ("--timeout", args.timeout, "a number > 0")):
        if value is not None and not value > 0:
            raise rules.DiagnoseError(f"{flag} {value:g}: expected {kind}")
    if args.runs is not None and not args.save_baseline:
        raise rules.DiagnoseError(f"--runs {args.runs}: the runs a baseline is made of; give --save-baseline FILE")


def _unused_host_options(args) -> None:
    """Options for real hosts given without them would be silently unused: refused, naming them."""
    ssh = args.hosts is not None or bool(args.hostfile)
    if args.ssh_config and not ssh:
        raise rules.DiagnoseError(f"--ssh-config {args.ssh_config}: for hosts reached over SSH; expected --hosts or "
                                  "--hostfile with it (nothing else here is reached by ssh)")
    if args.remote_python and not (ssh or args.executor):
        raise rules.DiagnoseError(f"--remote-python {args.remote_python}: the Python on real hosts; expected "
                                  "--hosts, --hostfile or --executor slurm with it (the probes here run this Python)")


def _check_outputs(args) -> None:
    """Where results and a baseline go, checked before any test runs: a store with a corrupt line
    is refused (appending to it would bury the damage), a baseline path that cannot be written too."""
    from fleetbench.store import results

    try:
        if args.results:
            results.check_appendable(args.results)
            if os.path.isfile(args.results):
                results.load(args.results)
        if args.save_baseline and os.path.isdir(args.save_baseline):
            raise rules.DiagnoseError(f"--save-baseline {args.save_baseline}: is a directory, expected a file")
        if args.save_baseline:  # written once every run is done: refused now if it could not be
            cmdline.check_output_file(args.save_baseline, "--save-baseline", "a baseline file (JSON)")
    except (results.PathError, results.RecordError, cmdline.PathProblem) as e:
        raise rules.DiagnoseError(f"--results {e}" if isinstance(e, results.RecordError) else str(e)) from None


def _load_inputs(args) -> tuple[list, dict | None]:
    try:
        rule_list = rules.parse_rules(Path(args.rules).read_text(), args.rules)
    except OSError as e:
        raise rules.DiagnoseError(f"--rules {args.rules}: {e.strerror}") from None
    if args.concurrent and not (args.hosts is not None or args.hostfile or args.executor):
        raise rules.DiagnoseError("--concurrent: for real hosts (--hosts, --hostfile, --executor slurm); "
                                  "emulated nodes share this machine's cores, so their tests run one at a time")
    _unused_host_options(args)
    _positive(args)
    _check_outputs(args)
    if not args.baseline:
        return rule_list, None
    try:
        return rule_list, json.loads(Path(args.baseline).read_text())
    except (OSError, ValueError) as e:
        raise rules.DiagnoseError(f"--baseline {args.baseline}: {getattr(e, 'strerror', None) or e} "
                                  "(expected a baseline --save-baseline wrote)") from None


def _options(args) -> session.Options:
    return session.Options(args.passes, args.seconds, args.timeout, args.concurrent, args.paddle_links, args.iperf3,
                           disturbed_pct=args.disturbed, resolve_rounds=args.resolve_rounds)


def _save_baseline(args, hosts: list[Host], rule_list: list, first: dict, report: dict) -> dict:
    """--save-baseline: `--runs` measurements in all (the first already made), each judged by its
    peers; the baseline of all of them written, and what any run flagged said in the report."""
    runs, flagged = [first], {1: verdicts.flagged(report)}
    for number in range(2, (args.runs or DEFAULT_RUNS) + 1):
        runs.append(session.measure(hosts, _options(args), rule_list, [None]))
        report = verdicts.report(runs[-1], rule_list, None, hosts)
        flagged[number] = verdicts.flagged(report)
    made = baselines.make_baseline(runs, machine(), [h.name for h in hosts])
    made["flagged"] = {str(k): v for k, v in flagged.items() if v}
    Path(args.save_baseline).parent.mkdir(parents=True, exist_ok=True)
    Path(args.save_baseline).write_text(json.dumps(made, indent=1) + "\n")
    report["baseline_saved"] = {"file": args.save_baseline, "runs": len(runs), "flagged": made["flagged"]}
    return report


def diagnose(args) -> dict:
    rule_list, baseline = _load_inputs(args)  # bad input: one line before anything runs
    hosts = _hosts(args)
    if baseline is not None:
        baseline = baselines.check_baseline(baseline, machine(), [h.name for h in hosts], f"--baseline {args.baseline}")
    m = session.measure(hosts, _options(args), rule_list, [baseline])
    report = verdicts.report(m, rule_list, baseline, hosts)
    if args.save_baseline:
        report = _save_baseline(args, hosts, rule_list, m, report)
    return report


def cli(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        report = diagnose(args)
    except rules.DiagnoseError as e:
        print(f"fleetbench diagnose: {e}", file=sys.stderr)
        return 2
    if args.results:
        from fleetbench.diagnose.records import store

        store(args.results, report, args.cluster or args.executor or ("ssh" if args.hosts or args.hostfile else None))
    from fleetbench.diagnose.output import console, markdown

    print(json.dumps(report, indent=1) if args.json else markdown(report) if args.markdown else console(report))
    return verdicts.exit_code(report)
