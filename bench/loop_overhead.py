"""Overhead of fleetbench's measured loop against a bare hand-written Paddle loop.

Runs collective/resnet50.py and bench/bare_resnet50.py alternately under Paddle's launcher with the
same model, data, batch, steps, process count and threads, R times each, and prints both
throughputs (mean ± std) and their ratio. Target: ratio >= 0.98.

    python bench/loop_overhead.py [--nproc 2] [--repeats 3] [--preset small]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fleetbench import usable_cores  # noqa: E402
from fleetbench.measure import config, timing  # noqa: E402


def launch(nproc, script_args, log_dir, threads):
    env = dict(os.environ, GLOG_minloglevel="2", PYTHONWARNINGS="ignore", FLEETBENCH_OMP_THREADS=str(threads))
    cmd = [sys.executable, "-m", "paddle.distributed.launch", "--log_dir", str(log_dir),
           "--nproc_per_node", str(nproc), *map(str, script_args)]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        sys.exit(f"run failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr[-2000:]}")
    return out.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--preset", default="small")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "collective"))
    from resnet50 import ResNet50Config

    cfg = config.build("resnet50", ResNet50Config, args.preset, ["synthetic_noise=1.0", "synthetic_batches=8"])
    threads = max(1, usable_cores() // args.nproc)
    shared = ["--image_size", cfg.image_size, "--batch_size", cfg.batch_size, "--num_classes", cfg.num_classes,
              "--warmup_steps", cfg.warmup_steps, "--steps", cfg.steps, "--lr", cfg.lr]
    fleet_ips, bare_ips = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            store = Path(tmp) / "r.jsonl"
            launch(args.nproc, ["collective/resnet50.py", "--preset", args.preset, "--set", "synthetic_noise=1.0",
                                "--set", "synthetic_batches=8", "--results", store], Path(tmp) / f"f{i}", threads)
            fleet_ips.append(json.loads(store.read_text().splitlines()[-1])["metrics"]["throughput"])
            out = launch(args.nproc, ["bench/bare_resnet50.py", "--threads", threads, *shared],
                         Path(tmp) / f"b{i}", threads)
            bare_ips.append(float(re.search(r"BARE_RESULT ([\d.]+)", out + open(Path(tmp) / f"b{i}" / "workerlog.0").read())[1]))
            print(f"repeat {i + 1}/{args.repeats}: fleetbench {fleet_ips[-1]:.2f} bare {bare_ips[-1]:.2f} images/s",
                  flush=True)
    f, b = timing.summarize(fleet_ips), timing.summarize(bare_ips)
    print(f"resnet50 preset={args.preset} nproc={args.nproc} threads={threads} repeats={args.repeats}")
    print(f"fleetbench loop: {f['mean']:.2f} ± {f['std']:.2f} images/s")
    print(f"bare loop:       {b['mean']:.2f} ± {b['std']:.2f} images/s")
    print(f"ratio fleetbench/bare = {f['mean'] / b['mean']:.4f} (target >= 0.98)")


if __name__ == "__main__":
    main()
