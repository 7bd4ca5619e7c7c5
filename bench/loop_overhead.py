"""Overhead of fleetbench's measured loop against a bare hand-written Paddle loop.

Runs collective/resnet50.py and bench/bare_resnet50.py alternately under Paddle's launcher with the
same model, data, batch, steps, process count and threads, R times each, and prints both
throughputs (mean ± std) and their ratio with its 95 % interval (bench/pairs.py: each pair in a
random order). Target: ratio >= 0.98.

    python bench/loop_overhead.py [--nproc 2] [--repeats 3] [--preset small]
"""
import argparse
import json
import sys
import tempfile
from pathlib import Path

import pairs

from fleetbench import usable_cores
from fleetbench.measure import config

SETS = ["synthetic_noise=1.0", "synthetic_batches=8"]  # what bare_resnet50.py generates


def measure(nproc: int, repeats: int, preset: str, extra: list = (), seed: int = 0) -> tuple:
    """(ratio, low, high) of `repeats` pairs at `preset` with `extra` --set overrides (both jobs)."""
    sys.path.insert(0, str(pairs.REPO / "collective"))
    from resnet50 import ResNet50Config

    sets_all = SETS + list(extra)
    cfg = config.build("resnet50", ResNet50Config, preset, sets_all)
    threads = max(1, usable_cores() // nproc)
    shared = ["--image_size", cfg.image_size, "--batch_size", cfg.batch_size, "--num_classes", cfg.num_classes,
              "--warmup_steps", cfg.warmup_steps, "--steps", cfg.steps, "--lr", cfg.lr]
    launcher = ["--nproc_per_node", nproc]
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "r.jsonl"

        def fleetbench_run(i):
            sets = [a for kv in sets_all for a in ("--set", kv)]
            pairs.fleetrun(launcher, [pairs.REPO / "collective/resnet50.py", "--preset", preset, *sets,
                                      "--results", store], Path(tmp) / f"f{i}", FLEETBENCH_OMP_THREADS=threads)
            return json.loads(store.read_text().splitlines()[-1])["metrics"]["throughput"]

        def bare_run(i):
            return pairs.bare_figure(pairs.fleetrun(launcher, [pairs.REPO / "bench/bare_resnet50.py", "--threads",
                                                               threads, *shared], Path(tmp) / f"b{i}",
                                                    FLEETBENCH_OMP_THREADS=threads))

        fleet, bare = pairs.alternate(repeats, f"resnet50 {preset}", "images/s", fleetbench_run, bare_run, seed)
    return pairs.report(f"collective resnet50 preset={preset} nproc={nproc} threads={threads} repeats={repeats}",
                        "images/s", fleet, bare)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--seed", type=int, default=0, help="the pairs' random order")
    args = parser.parse_args()
    measure(args.nproc, args.repeats, args.preset, seed=args.seed)


if __name__ == "__main__":
    main()
