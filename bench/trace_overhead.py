"""What the step breakdown and `--trace` cost: three runs of the same ResNet50 job, interleaved in
rounds (a drift of the machine hits all three alike), R rounds:

    bare       bench/bare_resnet50.py: a plain fleet.distributed_model loop, nothing measured
    untraced   collective/resnet50.py: the run layer with its step breakdown (always on)
    traced     collective/resnet50.py --trace DIR: the breakdown and one Chrome trace per rank

It prints each one's throughput (mean ± std), traced / untraced (the trace's cost; the issue's bar:
keep --trace off by default if it costs more than 2%, ratio < 0.98), untraced / bare (the run
layer and breakdown together; docs/architecture.md's bar 0.98), and, from the traced runs, how much
of the gradient communication ran inside backward and on its thread. Run it on a quiet machine:

    python bench/trace_overhead.py --preset small --repeats 9
    python bench/trace_overhead.py --preset tiny --repeats 1     # a check that it runs (seconds)
"""
import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import pairs

from fleetbench import usable_cores
from fleetbench.measure import config, timing

SETS = ["synthetic_noise=1.0", "synthetic_batches=8"]  # what bare_resnet50.py generates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--method", default="mgwfbp", help="the gradient method (bare runs Paddle's default, mgwfbp)")
    args = parser.parse_args()
    sys.path.insert(0, str(pairs.REPO / "collective"))
    from resnet50 import ResNet50Config

    sets = SETS + [f"method={args.method}"]
    cfg = config.build("resnet50", ResNet50Config, args.preset, sets)
    threads = max(1, usable_cores() // args.nproc)
    launcher = ["--nproc_per_node", args.nproc]
    shared = ["--image_size", cfg.image_size, "--batch_size", cfg.batch_size, "--num_classes", cfg.num_classes,
              "--warmup_steps", cfg.warmup_steps, "--steps", cfg.steps, "--lr", cfg.lr]
    figures, records = {"bare": [], "untraced": [], "traced": []}, []
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "r.jsonl"
        flags = [a for kv in sets for a in ("--set", kv)]

        def fleetbench_run(name: str, i: int, extra: list) -> dict:
            pairs.fleetrun(launcher, [pairs.REPO / "collective/resnet50.py", "--preset", args.preset, *flags,
                                      "--results", store, *extra], Path(tmp) / f"{name}{i}",
                           FLEETBENCH_OMP_THREADS=threads)
            return json.loads(store.read_text().splitlines()[-1])

        for i in range(args.repeats):
            figures["bare"].append(pairs.bare_figure(pairs.fleetrun(
                launcher, [pairs.REPO / "bench/bare_resnet50.py", "--threads", threads, *shared], Path(tmp) / f"b{i}",
                FLEETBENCH_OMP_THREADS=threads)))
            figures["untraced"].append(fleetbench_run("u", i, [])["metrics"]["throughput"])
            records.append(fleetbench_run("t", i, ["--trace", Path(tmp) / f"trace{i}"]))
            figures["traced"].append(records[-1]["metrics"]["throughput"])
            print(f"round {i + 1}/{args.repeats}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in figures.items())
                  + " images/s", flush=True)
    report(args, figures, records, threads)


def report(args: argparse.Namespace, figures: dict, records: list, threads: int) -> None:
    s = {k: timing.summarize(v) for k, v in figures.items()}
    print(f"resnet50 preset={args.preset} method={args.method} nproc={args.nproc} threads={threads} "
          f"rounds={args.repeats}")
    for name, summary in s.items():
        print(f"  {name:9s} {summary['mean']:.2f} ± {summary['std']:.2f} images/s")
    print(f"  traced / untraced = {s['traced']['mean'] / s['untraced']['mean']:.4f} (--trace costs more than "
          f"2% below 0.98); untraced / bare = {s['untraced']['mean'] / s['bare']['mean']:.4f} (target >= 0.98)")
    rows = [row for rec in records for row in rec["metrics"]["step_breakdown"]["ranks"]]
    share = lambda key: statistics.fmean(r[key] / r["comm"] for r in rows if r["comm"] > 0)  # noqa: E731
    if any(r["comm"] > 0 for r in rows):
        print(f"  gradient communication: {share('comm_in_backward'):.0%} of it inside backward, "
              f"{share('comm_blocking'):.0%} on the step's thread; parts cover "
              f"{min(r['covered'] for r in rows):.1%} of the step at worst")


if __name__ == "__main__":
    main()
