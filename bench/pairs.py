"""What the overhead benchmarks share: run a job under Paddle's launcher, alternate a fleetbench
job with its bare hand-written twin R times, and print both throughputs and their ratio."""
import math
import os
import random
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# scipy before anything imports paddle: the other order crashed in zlib (inflateReset2) with
# Paddle 2.6.2 here
from scipy import stats  # noqa: E402

from fleetbench.measure import timing  # noqa: E402

TARGET = 0.98  # fleetbench / bare, issue 10's acceptance


def fleetrun(launcher: list, script_args: list, log_dir: Path, **env_extra) -> str:
    """Run `fleetrun LAUNCHER SCRIPT_ARGS` from log_dir's parent (Paddle writes files into the
    current directory); return its stdout and every worker log, or exit naming the command."""
    env = dict(os.environ, GLOG_minloglevel="2", PYTHONWARNINGS="ignore", PYTHONPATH=str(REPO),
               **{k: str(v) for k, v in env_extra.items()})
    if "OMP_NUM_THREADS" not in env_extra:  # importing fleetbench here set it: let each job choose
        env.pop("OMP_NUM_THREADS", None)
    cmd = [sys.executable, "-m", "paddle.distributed.launch", "--log_dir", str(log_dir), *map(str, launcher),
           *map(str, script_args)]
    out = subprocess.run(cmd, cwd=log_dir.parent, env=env, capture_output=True, text=True, timeout=3600)
    logs = "".join(p.read_text(errors="replace") for p in sorted(log_dir.glob("workerlog.*")))
    if out.returncode != 0:
        sys.exit(f"run failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr[-2000:]}\n{logs[-2000:]}")
    return out.stdout + logs


def bare_figure(text: str) -> float:
    return float(re.search(r"BARE_RESULT ([\d.]+)", text)[1])


def alternate(repeats: int, label: str, unit: str, fleetbench_run, bare_run, seed: int = 0) -> tuple:
    """R pairs, each a fleetbench run and a bare run in a random order (a drift of the machine, or
    a cost the first run of a pair pays, falls on either alike; issue 44 found the fixed order
    unexplained); (fleetbench, bare) lists, pair by pair. `seed` makes the order reproducible."""
    order = random.Random(seed)
    fleet, bare = [], []
    for i in range(repeats):
        first_bare = order.random() < 0.5
        if first_bare:
            b = bare_run(i)
        fleet.append(fleetbench_run(i))
        bare.append(b if first_bare else bare_run(i))
        print(f"{label} pair {i + 1}/{repeats} ({'bare first' if first_bare else 'fleetbench first'}): "
              f"fleetbench {fleet[-1]:.2f} bare {bare[-1]:.2f} {unit}, ratio {fleet[-1] / bare[-1]:.4f}", flush=True)
    return fleet, bare


def ratio_ci(fleet: list, bare: list, confidence: float = 0.95) -> tuple:
    """(ratio, low, high): the geometric mean of the pairs' ratios fleetbench/bare and its
    `confidence` interval, Student's t on the log ratios (pairs are paired: each shares its
    moment's machine); low = high = ratio for one pair."""
    logs = [math.log(f / b) for f, b in zip(fleet, bare)]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), math.exp(mean), math.exp(mean)
    low, high = stats.t.interval(confidence, len(logs) - 1, loc=mean, scale=stats.sem(logs))
    return math.exp(mean), math.exp(low), math.exp(high)


def report(label: str, unit: str, fleet: list, bare: list) -> tuple:
    """Print both figures and the ratio with its 95 % interval; return (ratio, low, high)."""
    f, b = timing.summarize(fleet), timing.summarize(bare)
    ratio, low, high = ratio_ci(fleet, bare)
    slower = sum(x < y for x, y in zip(fleet, bare))
    print(f"{label}: fleetbench {f['mean']:.2f} ± {f['std']:.2f} {unit}, bare {b['mean']:.2f} ± {b['std']:.2f} "
          f"{unit}, ratio fleetbench/bare = {ratio:.4f} (95% CI {low:.4f} to {high:.4f}; fleetbench slower in "
          f"{slower} of {len(fleet)} pairs; target >= {TARGET})", flush=True)
    return ratio, low, high
