"""Overhead of fleetbench's parameter-server driver against a bare hand-written Fleet PS job.

Runs parameter_server/ctr.py and bench/bare_ctr.py alternately under Paddle's launcher (1 server,
1 worker) with the same model, data files, pipe, dataset, batch, passes and threads, R times
each, for the tiny and the full preset, and prints both throughputs (examples/s, mean ± std) and
their ratio. Target: ratio >= 0.98.

Both figures count the same span: fleetbench runs with warmup_steps=0, so its window starts
before the first batch (after the workers' start barrier) and ends at the last batch; the bare
job times its train_from_dataset calls. What fleetbench adds inside that span is its per-batch
meter (a py_func), its log lines and the scratch working directory.
`full` is the full model and batch on --full-rows synthetic rows (the full preset's 1M rows take
minutes per run on 2 cores).

    python bench/ps_overhead.py [--repeats 3] [--presets tiny full] [--passes 2] [--full-rows 100000]

fleetbench's side runs without its step breakdown's marks unless asked (train/ps/marks.py: a py_func
mark at each boundary between a batch's pull, compute and push ops; off by default since they cost
5.8% of a tiny step, bench/py_func_cost.py); `--set KEY=VALUE` passes a config override to
fleetbench's job only (`--set measure.breakdown=true` prices the marks).
"""
import argparse
import json
import re
import tempfile
from pathlib import Path

import pairs

LAUNCHER = ["--server_num", 1, "--trainer_num", 1]


def measure(preset: str, sets: list, repeats: int, seed: int = 0, own: tuple = ()) -> tuple:
    """(ratio, low, high) of `repeats` pairs (bench/pairs.py: each in a random order)."""
    threads = {}

    def same_threads(job: str, omp: str) -> None:
        threads[job] = omp
        if len(set(threads.values())) > 1:
            raise SystemExit(f"the jobs differ in threads: {threads}")

    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "r.jsonl"

        def fleetbench_run(i):
            text = pairs.fleetrun(LAUNCHER, [pairs.REPO / "parameter_server/ctr.py", "--preset", preset,
                                             *[a for kv in [*sets, *own] for a in ("--set", kv)], "--results", store],
                                  Path(tmp) / f"f{i}")
            same_threads("fleetbench", re.search(r"^worker 0/1 .* omp (\d+)", text, re.M)[1])
            return json.loads(store.read_text().splitlines()[-1])["metrics"]["throughput"]

        def bare_run(i):
            text = pairs.fleetrun(LAUNCHER, [pairs.REPO / "bench/bare_ctr.py", preset, *sets], Path(tmp) / f"b{i}")
            same_threads("bare", re.search(r"BARE_RESULT [\d.]+ omp (\d+)", text)[1])
            return pairs.bare_figure(text)

        fleet, bare = pairs.alternate(repeats, f"ctr {preset}", "examples/s", fleetbench_run, bare_run, seed)
    return pairs.report(f"ps ctr preset={preset} {' '.join([*sets, *own])} repeats={repeats}", "examples/s", fleet, bare)


def preset_sets(preset: str, passes: int, full_rows: int) -> list:
    """The --set overrides both jobs run with (see the module docstring)."""
    return ["warmup_steps=0", f"passes={passes}"] + ([f"synthetic_rows={full_rows}"] if preset == "full" else [])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--presets", nargs="+", default=["tiny", "full"])
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--full-rows", type=int, default=100000)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override of fleetbench's job only (e.g. measure.probe=false)")
    args = parser.parse_args()
    for preset in args.presets:
        measure(preset, preset_sets(preset, args.passes, args.full_rows), args.repeats, own=tuple(args.set))


if __name__ == "__main__":
    main()
