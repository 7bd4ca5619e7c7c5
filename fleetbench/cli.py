"""`fleetbench <subcommand>`: each subcommand lives in its own module as `cli(argv) -> int`.

Modules are imported only when their subcommand runs, so `fleetbench env` does not pay for
matplotlib and `fleetbench report` does not import paddle.
"""
import importlib
import signal
import sys

# The subcommands in groups, as the README's Commands table groups them: (group, what it is for,
# {name: (module, one line)}). `fleetbench --help` lists them so; SUBCOMMANDS is the flat table.
GROUPS = (
    ("run", "run benchmarks", {
        "launch": ("fleetbench.hosts.launch", "run a script under Paddle's launcher with timeouts and fault reports"),
        "sweep": ("fleetbench.sweep.runner", "run a matrix of benchmark cells with repeats"),
    }),
    ("results", "what the stored records say, and whether it got slower", {
        "report": ("fleetbench.report.generate", "charts and README tables from stored results"),
        "compare": ("fleetbench.report.regression.comparison", "did it get slower: cells of two sides of runs, tested"),
        "history": ("fleetbench.report.regression.history_view", "each cell's figures through time, with change points"),
        "gate": ("fleetbench.report.regression.gate", "CI gate: new runs against a baseline in the results database"),
        "results": ("fleetbench.store.cli",
                    "store the records printed in logs (results import LOG...), or index stores in a database"),
    }),
    ("why", "why a figure is what it is, what a split would do, which node is sick", {
        "explain": ("fleetbench.report.explain", "why not better: step-time breakdown, prediction, validation"),
        "plan": ("fleetbench.perfmodel.plan_cli", "predict hybrid-parallel GPT training (TP x PP x DP x sharding): step, MFU, memory"),
        "diagnose": ("fleetbench.diagnose.cli", "find the sick node and the slow link (per-node and pair-wise tests)"),
    }),
    ("machine", "what a run runs on", {
        "env": ("fleetbench.machine.env", "environment report (Paddle, CUDA, GPUs, CPU, memory, NICs)"),
        "topo": ("fleetbench.machine.topology", "parse and analyse `nvidia-smi topo -m`"),
    }),
    ("clusters", "a real scheduler's jobs", {
        "slurm": ("fleetbench.engines.slurm", "write an sbatch script that runs a sweep on a Slurm allocation"),
        "k8s": ("fleetbench.engines.k8s", "write Kubeflow PaddleJob manifests for a benchmark or a sweep"),
    }),
    ("emulated", "many nodes on this machine", {
        "cluster": ("fleetbench.emulate.netem", "emulated multi-node cluster in network namespaces"),
        "sshd": ("fleetbench.emulate.sshd", "an OpenSSH server on every node of the emulated cluster"),
        "slurmd": ("fleetbench.emulate.slurmd", "a real Slurm (munged, slurmctld, slurmd) on the emulated cluster"),
    }),
    ("data", "the data sets", {
        "data": ("datasets.cli", "generate and validate data sets"),
    }),
)
SUBCOMMANDS = {name: entry for _, _, members in GROUPS for name, entry in members.items()}


def parsers() -> dict:
    """Every subcommand's parser by the words that reach it: ("k8s",), ("results", "import"),
    ("data", "gen", "bert"), ... A subcommand module has `parser()`, or `parsers()` for the parsers
    it dispatches to; `launch` has its own grammar (hosts/launch.py: its table of flag kinds). The
    bad-input matrix (tests/unit/test_bad_input.py) walks them."""
    found = {}
    for name, (module_name, _) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        own = module.parsers() if hasattr(module, "parsers") else \
            {(): module.parser()} if hasattr(module, "parser") else {}
        for words, parser in own.items():
            found.update(_with_subparsers((name, *words), parser))
    return found


def _with_subparsers(words: tuple, parser) -> dict:
    found = {words: parser}
    for action in parser._actions:  # argparse keeps sub-parsers in a private action type
        for word, sub in (getattr(action, "choices", None) or {}).items() if hasattr(action, "add_parser") else ():
            found.update(_with_subparsers((*words, word), sub))
    return found


def usage() -> str:
    """`fleetbench --help`: the subcommands by group, one line each."""
    lines = ["usage: fleetbench <subcommand> [args]   (fleetbench <subcommand> --help: its flags)"]
    for group, purpose, members in GROUPS:
        lines += ["", f"{group}: {purpose}"]
        lines += [f"  {name:<9} {help_text}" for name, (_, help_text) in members.items()]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(usage())
        return 0
    if not argv:  # an error is one line; the usage is for --help
        print(f"fleetbench: error: missing subcommand (expected one of {', '.join(SUBCOMMANDS)}; "
              "see fleetbench --help)", file=sys.stderr)
        return 2
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"fleetbench: unknown subcommand {name!r}; expected one of {', '.join(SUBCOMMANDS)}",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `fleetbench env | head` ends quietly
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return int(module.cli(rest) or 0)
