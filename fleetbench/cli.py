"""`fleetbench <subcommand>`: each subcommand lives in its own module as `cli(argv) -> int`.

Modules are imported only when their subcommand runs, so `fleetbench env` does not pay for
matplotlib and `fleetbench report` does not import paddle.
"""
import importlib
import signal
import sys

SUBCOMMANDS = {
    "env": ("fleetbench.machine.env", "environment report (Paddle, CUDA, GPUs, CPU, memory, NICs)"),
    "topo": ("fleetbench.machine.topology", "parse and analyse `nvidia-smi topo -m`"),
    "report": ("fleetbench.report.generate", "charts and README tables from stored results"),
    "explain": ("fleetbench.report.explain", "why not better: step-time breakdown, prediction, validation"),
    "compare": ("fleetbench.report.comparison", "did it get slower: cells of two sides of runs, tested"),
    "history": ("fleetbench.report.history", "each cell's figures through time, with change points"),
    "diagnose": ("fleetbench.diagnose.cli", "find the sick node and the slow link (per-node and pair-wise tests)"),
    "launch": ("fleetbench.hosts.launch", "run a script under Paddle's launcher with timeouts and fault reports"),
    "sweep": ("fleetbench.sweep.runner", "run a matrix of benchmark cells with repeats"),
    "cluster": ("fleetbench.emulate.netem", "emulated multi-node cluster in network namespaces"),
    "sshd": ("fleetbench.emulate.sshd", "an OpenSSH server on every node of the emulated cluster"),
    "slurmd": ("fleetbench.emulate.slurmd", "a real Slurm (munged, slurmctld, slurmd) on the emulated cluster"),
    "slurm": ("fleetbench.engines.slurm", "write an sbatch script that runs a sweep on a Slurm allocation"),
    "k8s": ("fleetbench.engines.k8s", "write Kubeflow PaddleJob manifests for a benchmark or a sweep"),
    "results": ("fleetbench.measure.result_logs", "results import LOG...: store FLEETBENCH_RESULT lines from logs"),
    "data": ("datasets.cli", "generate and validate data sets"),
}


def usage() -> str:
    lines = ["usage: fleetbench <subcommand> [args]", "", "subcommands:"]
    lines += [f"  {name:<8} {help_text}" for name, (_, help_text) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"fleetbench: unknown subcommand {name!r}; expected one of {', '.join(SUBCOMMANDS)}",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `fleetbench env | head` ends quietly
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return int(module.cli(rest) or 0)
