"""The machine-speed probe inside real runs (fleetbench/machine/speed.py; docs/reference/metrics.md): how far
a quiet machine's probe moves between a run's own two edges and from its cell's median, per cell
and figure, and how many quiet runs the limits (measure/repeats/stability.LIMITS) would call
disturbed. bench/probe_cv.py times the probe alone; this times it where it is used: beside the
job's own threads (Paddle's spinning OpenMP workers, DataLoader workers, other ranks, PS servers).

    python bench/probe_in_job.py [--repeats 4]            # runs the demo's one-host cells, then judges
    python bench/probe_in_job.py --judge results.jsonl    # judges records already made

Measure on a quiet machine (nothing else running): every run it calls disturbed is a false alarm.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleetbench.measure.repeats import experiment, stability  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# The demo's cells on one host (fleetbench/presets/sweeps/demo.yaml), a fixed number of runs each.
SWEEP = """description: the demo's one-host cells, {repeats} runs each (bench/probe_in_job.py)
repeats: {repeats}
timeout: 300
stall: 60
interleave: true
cells:
  - {{benchmark: resnet50, preset: tiny, devices_per_node: [1, 2], set: {{measure.settle_steps: 10, measure.window_s: 5}}}}
  - {{benchmark: resnet50, preset: tiny, method: none, devices_per_node: 2, set: {{measure.settle_steps: 10, measure.window_s: 5}}}}
  - {{benchmark: ctr, preset: tiny, method: [async, geo], servers_workers: ["1/1", "2/2"], set: {{measure.settle_steps: 60}}}}
"""


def cell_of(record: dict) -> str:
    """The record's experiment (measure/repeats/experiment.of: its repeats), named short."""
    exp = experiment.of(record)
    return f"{exp.benchmark} {exp.method} {exp.nodes}x{exp.devices_per_node} ({exp.world_size} ranks)"


def judge(path: Path) -> None:
    cells = defaultdict(list)
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if (record.get("metrics") or {}).get("probe_gemm_gflops_before") is not None:
            cells[cell_of(record)].append(record["metrics"])  # one-shot of a cell key per experiment
    flagged = total = 0
    for cell, runs in cells.items():
        reasons = stability.disturbed_reasons(runs)
        flagged, total = flagged + sum(r is not None for r in reasons), total + len(runs)
        medians = stability.probe_medians(runs)
        for label, name in stability.PROBES:
            edges = [100 * abs(m[f"{name}_after"] / m[f"{name}_before"] - 1) for m in runs]
            off = [100 * abs(stability.probe_figure(m, name) / medians[name] - 1) for m in runs]
            print(f"{cell:22} {label:5} median {medians[name]:6.1f}  |after/before-1| median {statistics.median(edges):4.1f}% "
                  f"max {max(edges):4.1f}%  |slower edge/cell median-1| max {max(off):4.1f}%  "
                  f"(limit {'none: shown, not judged' if stability.LIMITS[label] is None else f'{stability.LIMITS[label]:g}%'})")
        for m, reason in zip(runs, reasons):
            if reason:
                print(f"  disturbed: {reason} (interference {m.get('interference_cpu_pct')}%)")
    print(f"runs called disturbed: {flagged} of {total}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--judge", type=Path, help="judge this results file instead of running")
    args = parser.parse_args()
    if args.judge:
        return judge(args.judge)
    with tempfile.TemporaryDirectory() as tmp:
        config, results = Path(tmp) / "sweep.yaml", Path(tmp) / "runs.jsonl"
        config.write_text(SWEEP.format(repeats=args.repeats))
        subprocess.run([sys.executable, "-m", "fleetbench", "sweep", str(config), "--results", str(results)],
                       cwd=REPO, check=True)
        judge(results)


if __name__ == "__main__":
    main()
