"""What the overhead benchmarks share: run a job under Paddle's launcher, alternate a fleetbench
job with its bare hand-written twin R times, and print both throughputs and their ratio."""
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

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


def alternate(repeats: int, label: str, unit: str, fleetbench_run, bare_run) -> tuple:
    """R runs of each, alternating (a drift of the machine hits both); (fleetbench, bare) lists."""
    fleet, bare = [], []
    for i in range(repeats):
        fleet.append(fleetbench_run(i))
        bare.append(bare_run(i))
        print(f"{label} repeat {i + 1}/{repeats}: fleetbench {fleet[-1]:.2f} bare {bare[-1]:.2f} {unit}", flush=True)
    return fleet, bare


def report(label: str, unit: str, fleet: list, bare: list) -> float:
    f, b = timing.summarize(fleet), timing.summarize(bare)
    ratio = f["mean"] / b["mean"]
    print(f"{label}: fleetbench {f['mean']:.2f} ± {f['std']:.2f} {unit}, bare {b['mean']:.2f} ± {b['std']:.2f} "
          f"{unit}, ratio fleetbench/bare = {ratio:.4f} (target >= {TARGET})", flush=True)
    return ratio
