"""The machine-speed probe's own cost and cv (fleetbench/machine/speed.py; docs/reference/metrics.md): R probes
in a row, each timed, in one process whose threads are those a single rank gets. Measure on a quiet
machine: the cv is what the probe's limits (measure/repeats/stability.LIMITS) must stand well above.
bench/probe_in_job.py measures it inside real runs.

    python bench/probe_cv.py [--repeats 30]
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fleetbench  # noqa: E402,F401  (before numpy: sets the thread count)
from fleetbench.machine import speed  # noqa: E402
from fleetbench.measure import timing  # noqa: E402
from fleetbench.measure.repeats import stability  # noqa: E402


def limit_text(limit: float | None) -> str:
    return "shown, not judged" if limit is None else f"{limit:g}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    start = time.perf_counter()
    probe = speed.Probe()
    setup_s = time.perf_counter() - start
    figures, costs = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        figures.append(probe.measure())
        costs.append(time.perf_counter() - start)
    print(f"one thread (the rank's: {fleetbench.threads_info()['omp_num_threads']}); set-up (arrays) {setup_s:.3f} s once")
    cost = timing.summarize(costs)
    print(f"cost per edge: {cost['mean']:.3f} ± {cost['std']:.3f} s (max {cost['max']:.3f} s) over {args.repeats}")
    for i, ((label, name), unit) in enumerate(zip(stability.PROBES, ("GFLOP/s", "GB/s", "M iterations/s"))):
        values = [row[i] for row in figures]
        s = timing.summarize(values)
        print(f"{name}: {s['mean']:.1f} ± {s['std']:.1f} {unit}, cv {100 * stability.cv(values):.1f}%, "
              f"min {s['min']:.1f} max {s['max']:.1f} (limit for disturbed: {limit_text(stability.LIMITS[label])})")


if __name__ == "__main__":
    main()
