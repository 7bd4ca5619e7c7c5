"""Golden outputs of the commands that read stored records: a redesign must leave them byte-identical.

    python tools/goldens.py                 # regenerate every golden in tests/golden/
    python tools/goldens.py --check         # compare; a unified diff of what differs, exit 1
    python tools/goldens.py --check NAME..  # only these goldens (tests/unit/test_goldens.py)
    python tools/goldens.py --list          # the goldens' names and their commands

Each golden is one command's stdout (and, for `report --readme`, the files it writes), run from the
repository's root with the same interpreter. Normalised before it is stored or compared, because
they differ between machines and runs and not with the code: the temporary directory a golden
writes into (`<tmp>`), the repository's own path (`<repo>`). Nothing else is normalised: no output
of these commands carries a timestamp of its own run or a git sha of the checkout (`report`
prints the records' own dates and commits, which are data).
"""
import argparse
import difflib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden"
REFERENCE = REPO / "results" / "reference"


@dataclass(frozen=True)
class Golden:
    """One command whose output is kept: `argv` after `fleetbench` (or after `python` when
    `python` is set); `<tmp>` in it is a fresh temporary directory; `setup` the files written
    there first; `files` the paths (or glob patterns) under it whose text is kept after stdout; `exits` the exit
    statuses that are the command's answer (compare's 1 says a cell got slower)."""
    name: str
    argv: tuple
    files: tuple = ()
    python: bool = False
    exits: tuple = (0,)
    setup: dict = field(default_factory=dict)


def _reference_tables() -> list[Path]:
    return sorted(REFERENCE.glob("*.jsonl"))


def _multi_node(table: Path) -> bool:
    """Whether a table has a cell of more than one node (then it is validated from its 1-node cells)."""
    return any(json.loads(line).get("nodes", 1) > 1 for line in table.read_text().splitlines() if line.strip())


def _explain_goldens() -> list[Golden]:
    """`explain --published --validate` on every reference table, text and JSON: multi-node tables
    from their 1-node cells, single-node tables from their 1-GPU run (docs/explain.md, Results)."""
    out = []
    for table in _reference_tables():
        selector = "nodes=1" if _multi_node(table) else "world_size=1"
        argv = ("explain", str(table.relative_to(REPO)), "--published", "--validate", selector)
        out += [Golden(f"explain-{table.stem}.txt", argv), Golden(f"explain-{table.stem}.json", argv + ("--json",))]
    every = tuple(str(t.relative_to(REPO)) for t in _reference_tables())
    return out + [Golden("explain-every-table.txt", ("explain",) + every + ("--published", "--validate", "nodes=1"))]


GPT3 = ("--layers", "96", "--hidden", "12288", "--heads", "96", "--seq", "2048", "--vocab", "51200",
        "--global-batch", "1536", "--micro-batch", "1", "--gpus", "1024", "--gpus-per-node", "8", "--gpu", "A100-SXM")
LLAMA7B = ("--layers", "32", "--hidden", "4096", "--heads", "32", "--seq", "4096", "--vocab", "32000",
           "--ffn-hidden", "11008", "--swiglu", "--flash-attention", "--global-batch", "512",
           "--micro-batch", "1", "--gpus", "64", "--gpus-per-node", "8", "--gpu", "H100-SXM")
# A README whose marked section `report --readme` replaces (report/generate.py's BEGIN and END).
README = "# fleetbench\n\n<!-- fleetbench:results:begin -->\n<!-- fleetbench:results:end -->\n\nAfter.\n"
MEASURED = tuple(sorted(str(p.relative_to(REPO)) for p in (REPO / "results").glob("*.jsonl")))

# Diagnose's judging on a measurement as `fleetbench diagnose --results` stores it: three nodes, the
# third short of CPU, one slow link; the shipped rules, judged against the peers.
JUDGING = """
import itertools, json
from fleetbench.diagnose.cli import DEFAULT_RULES
from fleetbench.diagnose.judging import rules, verdicts
from fleetbench.hosts.hostlist import Host
nodes = {i: {"matmul_gflops": 40.0, "triad_gbps": 20.0, "train_images_per_s": 500.0} for i in range(4)}
nodes[2].update(matmul_gflops=20.0, train_images_per_s=250.0)
links = {p: {"link_gbps": 1.0 if 3 in p else 9.5} for p in itertools.combinations(range(4), 2)}
m = {"nodes": nodes, "problems": {}, "links": links, "cluster": None, "remeasured": {}, "elapsed_s": 1.0,
     "phases": {}}
hosts = [Host(f"h{i}", reach="netns", index=i, address=f"10.0.0.{i + 1}") for i in range(4)]
report = verdicts.report(m, rules.parse_rules(DEFAULT_RULES.read_text(), "shipped"), None, hosts)
print(json.dumps(report, indent=1, sort_keys=True, default=str))
"""


def goldens() -> list[Golden]:
    return _explain_goldens() + [
        Golden("plan-validate.json", ("plan", "--validate", "--json")),
        Golden("plan-validate.txt", ("plan", "--validate")),
        Golden("plan-gpt3-175b-1024.txt", ("plan",) + GPT3),
        Golden("plan-gpt3-175b-1024.json", ("plan",) + GPT3 + ("--json",)),
        Golden("plan-llama7b-64.txt", ("plan",) + LLAMA7B),
        Golden("plan-gpt3-175b-split.json", ("plan",) + GPT3 + ("--tp", "8", "--pp", "16", "--json")),
        Golden("explain-predict-grid.txt", ("explain", "results/reference/ddl-benchmarks-2020-05-29.jsonl", "--published",
                                            "--predict", "nodes=2,8,32,rate_gbit=10,25,100,method=mgwfbp,benchmark=resnet50",
                                            "--target-efficiency", "0.9")),
        Golden("explain-predict-grid.json", ("explain", "results/reference/ddl-benchmarks-2020-05-29.jsonl", "--published",
                                             "--predict", "nodes=2,8,32,rate_gbit=10,25,100,method=mgwfbp,benchmark=resnet50",
                                             "--json")),
        Golden("explain-predict-validate-images.txt", ("explain", "results/reference/ddl-benchmarks-2020-05-29.jsonl",
                                                       "--published", "--predict",
                                                       "nodes=2,8,rate_gbit=10,25,method=mgwfbp,benchmark=resnet50",
                                                       "--validate", "nodes=1", "--images", "<tmp>/images"),
               files=("images/*.csv",)),
        Golden("explain-measured.txt", ("explain",) + MEASURED),
        Golden("explain-measured.json", ("explain",) + MEASURED + ("--json",)),
        Golden("report.json", ("report",) + MEASURED + ("--json",)),
        Golden("report-readme.md", ("report",) + MEASURED + ("--readme", "<tmp>/README.md", "--images", "<tmp>/images"),
               files=("README.md",), setup={"README.md": README}),
        Golden("compare-versions.txt", ("compare", "results/kvm-2vcpu-paddle2.6.2-versions.jsonl",
                                        "results/kvm-2vcpu-paddle3.3.1-versions.jsonl"), exits=(0, 1)),
        Golden("compare-versions.json", ("compare", "results/kvm-2vcpu-paddle2.6.2-versions.jsonl",
                                         "results/kvm-2vcpu-paddle3.3.1-versions.jsonl", "--json"), exits=(0, 1)),
        Golden("history.json", ("history",) + MEASURED + ("--json", "--images", "<tmp>/images")),
        Golden("diagnose-judging.json", ("-c", JUDGING), python=True),
    ]


def _argv(golden: Golden, tmp: str) -> list[str]:
    head = [sys.executable] if golden.python else [sys.executable, "-m", "fleetbench"]
    return head + [a.replace("<tmp>", tmp) for a in golden.argv]


def _normalised(text: str, tmp: str) -> str:
    return text.replace(os.path.realpath(tmp), "<tmp>").replace(tmp, "<tmp>").replace(str(REPO), "<repo>")


def run(golden: Golden) -> str:
    """The golden's text as it is stored: stdout, then each file it writes, normalised."""
    with tempfile.TemporaryDirectory(prefix="fleetbench-golden-") as tmp:
        for name, text in golden.setup.items():
            (Path(tmp) / name).write_text(text)
        env = dict(os.environ, MPLBACKEND="Agg")
        done = subprocess.run(_argv(golden, tmp), cwd=REPO, env=env, capture_output=True, text=True)
        if done.returncode not in golden.exits:
            raise SystemExit(f"goldens: {golden.name}: exit {done.returncode}\n{done.stderr[-2000:]}")
        text = done.stdout
        for pattern in golden.files:
            for path in sorted(Path(tmp).glob(pattern)):
                text += f"\n==> {path.relative_to(tmp)} <==\n" + path.read_text()
        return _normalised(text + f"\n==> exit {done.returncode} <==\n", tmp)


def check(selected: list[Golden]) -> int:
    """0 when every selected golden's output is byte-identical to its stored file, else 1 with a diff."""
    differ = 0
    for golden in selected:
        path = GOLDEN / golden.name
        stored = path.read_text() if path.exists() else ""
        now = run(golden)
        if now != stored:
            differ += 1
            sys.stdout.writelines(difflib.unified_diff(stored.splitlines(True), now.splitlines(True),
                                                       f"stored/{golden.name}", f"now/{golden.name}"))
    print(f"goldens: {len(selected) - differ} of {len(selected)} identical", file=sys.stderr)
    return 1 if differ else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("names", nargs="*", help="only these goldens (default: every one)")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument("--list", action="store_true", help="print each golden's name and command")
    args = parser.parse_args(argv)
    known = {g.name: g for g in goldens()}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"no golden named {', '.join(unknown)} (see --list)")
    selected = [known[n] for n in args.names] if args.names else list(known.values())
    if args.list:
        for g in selected:
            print(g.name, " ".join(g.argv) if not g.python else "python -c JUDGING")
        return 0
    if args.check:
        return check(selected)
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for golden in selected:
        (GOLDEN / golden.name).write_text(run(golden))
    return 0


if __name__ == "__main__":
    sys.exit(main())
