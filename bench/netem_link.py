"""What the emulated cluster's 1 Gbit/s link carries: the measurements the tests only bound.

The tests assert what shaping promises on any machine, loaded or not: one TCP stream never
exceeds the tbf rate (tests/root/test_netem.py), and a ResNet50 step at 1gbe never moves its gradients
faster than the link (tests/root/test_netem_cluster.py). How close they come to the rate depends on
the machine's load, so it is measured here, over repeats:

1. raw TCP: `--streams` one-way streams of `--seconds` each, node0 -> node1 of a 2-node 1gbe
   cluster, timed by the receiver (fleetbench.comm.linkprobe); min / median / max in Gbit/s.
2. the step slowdown: ResNet50 tiny, method bsp, batch 2 (94 MB of fp32 gradients per step,
   all-reduced after backward) on 2 emulated nodes, unshaped and 1gbe, `--repeats` runs each
   (`fleetbench sweep`); the 1gbe/unshaped step-time ratio, the implied all-reduce bandwidth
   gradient / (t_1gbe - t_unshaped) and its lower bound gradient / t_1gbe (docs/guide/launch.md).

    python bench/netem_link.py [--streams 5] [--seconds 1] [--repeats 3] [--skip-sweep]
(root; it brings its own clusters up and down, named fbbench*)
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fleetbench.emulate import netem  # noqa: E402
from fleetbench.store import results  # noqa: E402

RECEIVER = ("import sys;from fleetbench.comm import linkprobe as l;s=l.listen(sys.argv[1]);"
            "print(s.getsockname()[1],flush=True);n,t=l.receive(s,60);print(n*8/t/1e9)")
SENDER = "import sys;from fleetbench.comm import linkprobe as l;l.stream(sys.argv[1],int(sys.argv[2]),float(sys.argv[3]))"


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=5)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-sweep", action="store_true", help="raw TCP only (the sweep takes minutes)")
    return p.parse_args(argv)


def _in(netns, code, *args):
    return ["ip", "netns", "exec", netns, sys.executable, "-c", code, *map(str, args)]


def tcp_gbit(name, seconds):
    """One receiver-timed stream node0 -> node1 of cluster `name`, in Gbit/s."""
    dst = netem.status(name)["nodes"][1]["ip"]
    server = subprocess.Popen(_in(f"{name}-node1", RECEIVER, dst), cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        subprocess.run(_in(f"{name}-node0", SENDER, dst, port, seconds), cwd=REPO, check=True, timeout=120)
        return float(server.communicate(timeout=60)[0])
    finally:
        server.kill()
        server.wait()


def raw_tcp(args):
    name = "fbbench" + uuid.uuid4().hex[0]
    netem.up(2, netem.shaping_from("1gbe"), prefix=name)
    try:
        rates = sorted(tcp_gbit(name, args.seconds) for _ in range(args.streams))
    finally:
        netem.down(name)
    print(f"raw TCP over tbf 1gbit, {args.streams} x {args.seconds:g} s: min {rates[0]:.3f} "
          f"median {statistics.median(rates):.3f} max {rates[-1]:.3f} Gbit/s")


def gradient_gbit():
    code = ("import paddle;m=paddle.vision.models.resnet50(num_classes=10);"
            "print(sum(int(p.size) for p in m.parameters() if not p.stop_gradient)*4*8/1e9)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    return float(out.stdout.strip().splitlines()[-1])


def step_slowdown(args):
    with tempfile.TemporaryDirectory() as tmp:
        spec, store = Path(tmp) / "net.yaml", Path(tmp) / "runs.jsonl"
        spec.write_text(yaml.safe_dump({"repeats": args.repeats, "timeout": 600, "stall": 300, "cells": [
            {"benchmark": "resnet50", "preset": "tiny", "method": "bsp", "set": {"batch_size": 2}, "nodes": 2,
             "network": ["unshaped", "1gbe"]}]}))
        env = dict(os.environ, GLOG_minloglevel="2", PYTHONWARNINGS="ignore")
        subprocess.run([sys.executable, "-m", "fleetbench", "sweep", str(spec), "--results", str(store),
                        "--log-dir", str(Path(tmp) / "log"), "--cluster-name", "fbbench" + uuid.uuid4().hex[0]],
                       cwd=REPO, env=env, check=True)
        steps = {}
        for r in results.load(str(store)):
            if r["error"] is None:
                steps.setdefault(r["network"]["profile"], []).append(r["metrics"]["step_time_ms"] / 1000)
    moved = gradient_gbit()
    t_free, t_1g = statistics.mean(steps["unshaped"]), statistics.mean(steps["1gbe"])
    implied = moved / (t_1g - t_free) if t_1g > t_free else float("inf")
    print(f"ResNet50 tiny bsp batch 2, {args.repeats} repeats: step unshaped {t_free:.3f} s, 1gbe {t_1g:.3f} s "
          f"(x{t_1g / t_free:.2f}); {moved:.3f} Gbit per step per node -> implied all-reduce bandwidth "
          f"{implied:.3f} Gbit/s, lower bound {moved / t_1g:.3f} Gbit/s")


def main(argv=None):
    args = parse(argv)
    if netem.requirements_problem():
        sys.exit(netem.requirements_problem())
    raw_tcp(args)
    if not args.skip_sweep:
        step_slowdown(args)


if __name__ == "__main__":
    main()
