"""Slurm: `fleetbench slurm SWEEP.yaml`, which writes an sbatch script that runs the sweep on
the allocation's nodes.

Inside the allocation the sweep runs with `--executor slurm`: its hosts are the allocation's
nodes (fleetbench.hosts.allocation), and each run starts one job step per node (srun, through
fleetbench.hosts.reach). This module only writes the script; nothing in hosts/ imports it.

The script asks for whole nodes with one task each (`--ntasks-per-node=1 --exclusive`): one
Paddle launcher per node starts that node's ranks itself, and each job step gets all the node's
CPUs (`--cpus-per-task=$SLURM_CPUS_ON_NODE`); otherwise Slurm would pin a step to one CPU.
"""
import argparse
import os
import re
import shlex
import sys

from fleetbench import cmdline
from fleetbench.measure import registry
from fleetbench.store import results

# The allocation's time limit: every run's timeout plus 10 %, plus STARTUP_S for what no run's
# timeout covers (the sweep's start: imports and each cell's --check; the summary at the end),
# which a sweep of short runs would otherwise not fit.
TIME_MARGIN = 1.1
STARTUP_S = 60


# ----------------------------------------------------------------------------------------------
# sbatch script


def time_limit(cells: list) -> str:
    """Slurm's D-HH:MM:SS for running every repeat of every cell to its timeout."""
    seconds = int(sum(c.timeout * c.repeats for c in cells) * TIME_MARGIN) + STARTUP_S
    days, rest = divmod(seconds, 86400)
    return f"{days}-{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"


def sbatch_script(sweep_file: str, cells: list, results: str, options: dict) -> str:
    """The script's text. options: partition, account, gpus (bool), python, workdir, log_dir."""
    nodes = max(c.nodes for c in cells)
    name = os.path.splitext(os.path.basename(sweep_file))[0]
    lines = ["#!/bin/bash", f"#SBATCH --job-name=fleetbench-{name}", f"#SBATCH --nodes={nodes}",
             "#SBATCH --ntasks-per-node=1", "#SBATCH --exclusive", f"#SBATCH --time={time_limit(cells)}",
             f"#SBATCH --output={os.path.abspath(options['log_dir'])}/slurm-%j.out"]
    if options.get("gpus"):
        lines.append(f"#SBATCH --gpus-per-node={max(c.devices_per_node for c in cells)}")
    lines += [f"#SBATCH --{k}={options[k]}" for k in ("partition", "account") if options.get(k)]
    sweep = [options["python"], "-m", "fleetbench", "sweep", os.path.abspath(sweep_file), "--executor", "slurm",
             "--results", os.path.abspath(results)]
    lines += ["# one Paddle launcher per node (srun --nodes=1 per node); master: the first node",
              "set -euo pipefail", f"cd {shlex.quote(options['workdir'])}",
              f'exec {shlex.join(sweep)} --log-dir "{os.path.abspath(options["log_dir"])}/sweep-{name}-$SLURM_JOB_ID"', ""]
    return "\n".join(lines)


def _slurm_names(text: str, several: bool = True) -> str:
    if not re.fullmatch(r"[\w.-]+(,[\w.-]+)*" if several else r"[\w.-]+", text):
        raise ValueError(text)
    return text


# sbatch --partition takes a comma-separated list of partition names, --account one name; a name
# with a space or '=' would not survive slurm.conf (and would break the #SBATCH line)
PARTITIONS = cmdline.Kind("Slurm partition names like gpu or gpu,debug", _slurm_names, ("", "a b", "gpu,", "x=y"))
ACCOUNT = cmdline.Kind("a Slurm account name", lambda text: _slurm_names(text, several=False), ("", "a b", "a,b"))


def parser() -> cmdline.Parser:
    p = cmdline.Parser(prog="fleetbench slurm", description="Write an sbatch script running a sweep.")
    p.add_argument("sweep", type=cmdline.INPUT_FILE, help="sweep file (YAML)")
    p.add_argument("--results", default=registry.DEFAULT_RESULTS, type=results.STORE)
    p.add_argument("--partition", type=PARTITIONS)
    p.add_argument("--account", type=ACCOUNT)
    p.add_argument("--gpus", action="store_true", help="request devices_per_node GPUs per node")
    p.add_argument("--python", default=sys.executable, type=cmdline.TEXT, help="Python on the nodes (default: this one)")
    p.add_argument("--workdir", default=str(registry.REPO_ROOT), type=cmdline.TEXT, help="this repository on the nodes")
    p.add_argument("--log-dir", default="log", type=cmdline.OUTPUT_DIR,
                   help="where the job's output and run logs go (default log)")
    p.add_argument("--out", type=cmdline.OUTPUT_FILE, help="write the script here (default: stdout)")
    return p


def cli(argv: list[str]) -> int:
    import dataclasses

    from fleetbench.sweep import adaptive, sweepfile

    args = parser().parse_args(argv)
    try:
        spec = sweepfile.load_spec(args.sweep)
        cells = sweepfile.expand(spec, args.sweep, on_hosts=True)
        emulated = [c for c in cells if c.network]
        if emulated:
            raise sweepfile.SweepError(f"{args.sweep}: cell {emulated[0].label()}: `network` profiles are emulated "
                                   f"links; on Slurm the links are the cluster's (drop `network:`)")
        # an until-stable cell may run up to its max_repeats: the time limit must allow them all
        policy = adaptive.policy(spec, argparse.Namespace(), args.sweep, cells)
        cells = [dataclasses.replace(c, repeats=policy.limit(c)) for c in cells]
    except sweepfile.SweepError as e:
        return cmdline.refused("fleetbench slurm", e)
    text = sbatch_script(args.sweep, cells, args.results, vars(args))
    os.makedirs(args.log_dir, exist_ok=True)  # Slurm does not create the --output directory: the job would fail
    if not args.out:
        sys.stdout.write(text)
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)  # --out was checked by the parser
    with open(args.out, "w") as f:
        f.write(text)
    os.chmod(args.out, 0o755)
    print(f"fleetbench slurm: wrote {args.out}; submit it with: sbatch {args.out}", file=sys.stderr)
    return 0
