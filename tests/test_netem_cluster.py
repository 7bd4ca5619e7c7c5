"""Acceptance of the emulated cluster (root): a real 2-node data-parallel job whose gradients cross
tbf-shaped links. ResNet50 tiny with batch 2 is communication-heavy (94 MB of gradients per step
for two 32x32 images), and method bsp all-reduces after backward (no overlap), so a 1 Gbit/s link
must show in the step time, and the extra time per step must match the bytes the all-reduce
moves at about the link's rate.
"""
import os
import subprocess

import pytest
import yaml

from fleetbench.cluster import netem
from util import PYTHON, REPO, env, records

PROBLEM = netem.requirements_problem()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")


def gradient_bytes():
    """fp32 bytes all-reduced per step by resnet50 tiny (10 classes), counted from the real model."""
    code = ("import paddle;m=paddle.vision.models.resnet50(num_classes=10);"
            "print(sum(int(p.size) for p in m.parameters() if not p.stop_gradient)*4)")
    out = subprocess.run([PYTHON, "-c", code], env=env(), capture_output=True, text=True, timeout=120)
    return int(out.stdout.strip().splitlines()[-1])


def test_two_nodes_at_1gbe_are_slower_by_the_bytes_the_link_must_carry(tmp_path, monkeypatch):
    name = f"fbc{os.getpid() % 100000}"
    state_dir = tmp_path / "state"
    spec = tmp_path / "net.yaml"
    spec.write_text(yaml.safe_dump({"repeats": 1, "timeout": 300, "stall": 150, "cells": [
        {"benchmark": "resnet50", "preset": "tiny", "method": "bsp", "set": {"batch_size": 2}, "nodes": 2,
         "network": ["unshaped", "1gbe"]}]}))
    store = tmp_path / "runs.jsonl"
    run_env = env(FLEETBENCH_CLUSTER_STATE_DIR=state_dir)
    try:
        p = subprocess.run([PYTHON, "-m", "fleetbench", "sweep", str(spec), "--results", str(store),
                            "--log-dir", str(tmp_path / "log"), "--cluster-name", name],
                           cwd=REPO, env=run_env, capture_output=True, text=True, timeout=600)
    finally:
        monkeypatch.setenv("FLEETBENCH_CLUSTER_STATE_DIR", str(state_dir))
        netem.down(name)  # the sweep already did; this guards a failed run
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    # down left nothing: no namespace, no link (their qdiscs go with them)
    assert netem.leftovers(name) == [] and netem.load_state(name) is None

    by_profile = {r["network"]["profile"]: r for r in records(store)}
    assert set(by_profile) == {"unshaped", "1gbe"}
    for r in by_profile.values():
        assert r["error"] is None and r["nodes"] == 2 and r["world_size"] == 2
    assert by_profile["1gbe"]["network"]["rate_gbit"] == 1.0

    t_free = by_profile["unshaped"]["metrics"]["step_time_ms"] / 1000
    t_1g = by_profile["1gbe"]["metrics"]["step_time_ms"] / 1000
    # An all-reduce over N nodes sends 2 (N-1)/N of the gradient bytes from each node (ring
    # reduce-scatter + all-gather): with N = 2, the whole gradient once per step each way.
    moved_gbit = gradient_bytes() * 8 / 1e9
    # Upper estimate: all extra time is link time (the unshaped run's own transfer time is not
    # subtracted). Lower bound: the whole 1gbe step is transfer time.
    implied = moved_gbit / (t_1g - t_free) if t_1g > t_free else float("inf")
    floor = moved_gbit / t_1g
    print(f"\nstep time unshaped {t_free:.3f} s, 1gbe {t_1g:.3f} s (x{t_1g / t_free:.2f}); "
          f"{moved_gbit:.3f} Gbit per step per node -> implied all-reduce bandwidth {implied:.3f} Gbit/s "
          f"(factor {implied / 1.0:.2f} of the 1 Gbit/s link; lower bound {floor:.3f} Gbit/s)")
    assert t_1g > 1.25 * t_free, "a 1 Gbit/s link did not slow the communication-heavy job"
    assert floor < 1.05, "more bytes crossed the link than 1 Gbit/s allows: shaping is not in effect"
    # Measured on a quiet machine: factor 1.16-1.2 (see docs/launch.md). Other jobs on the two
    # shared cores stretch either run, so the test allows a factor of 3 either way.
    assert 3.0 > implied > 1 / 3
