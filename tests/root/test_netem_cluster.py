"""Acceptance of the emulated cluster (root): a real 2-node data-parallel job whose gradients cross
tbf-shaped links. ResNet50 tiny with batch 2 is communication-heavy (94 MB of gradients per step
for two 32x32 images), and method bsp all-reduces after backward (no overlap), so every 1gbe step
must push the whole gradient through a 1 Gbit/s link: its step can never be shorter than that.
That bound is the test; how much slower 1gbe is than unshaped, and the all-reduce bandwidth it
implies, depend on the machine's load and are measured by bench/netem_link.py (docs/guide/launch.md).
"""
import subprocess

import pytest
from util import PYTHON, emulated_sweep, env, records

from fleetbench.emulate import netem

PROBLEM = netem.requirements_problem()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")


def gradient_bytes():
    """fp32 bytes all-reduced per step by resnet50 tiny (10 classes), counted from the real model."""
    code = ("import paddle;m=paddle.vision.models.resnet50(num_classes=10);"
            "print(sum(int(p.size) for p in m.parameters() if not p.stop_gradient)*4)")
    out = subprocess.run([PYTHON, "-c", code], env=env(), capture_output=True, text=True, timeout=120)
    return int(out.stdout.strip().splitlines()[-1])


def test_a_1gbe_step_never_moves_its_gradients_faster_than_the_link(tmp_path, monkeypatch):
    p, store, name = emulated_sweep(tmp_path, monkeypatch, {"repeats": 1, "timeout": 300, "stall": 150, "cells": [
        {"benchmark": "resnet50", "preset": "tiny", "method": "bsp", "nodes": 2, "network": ["unshaped", "1gbe"],
         "set": {"batch_size": 2, "steps": 6, "warmup_steps": 1}}]}, "fbc")
    # down left nothing: no namespace, no link (their qdiscs go with them)
    assert netem.leftovers(name) == [] and netem.load_state(name) is None

    by_profile = {r["network"]["profile"]: r for r in records(store)}
    assert set(by_profile) == {"unshaped", "1gbe"}
    for r in by_profile.values():
        assert r["error"] is None and r["nodes"] == 2 and r["world_size"] == 2
    assert by_profile["1gbe"]["network"]["rate_gbit"] == 1.0 and by_profile["unshaped"]["network"]["rate_gbit"] is None

    t_1g = by_profile["1gbe"]["metrics"]["step_time_ms"] / 1000
    # An all-reduce over N nodes sends 2 (N-1)/N of the gradient bytes from each node (ring
    # reduce-scatter + all-gather): with N = 2, the whole gradient once per step each way.
    moved_gbit = gradient_bytes() * 8 / 1e9
    # The whole 1gbe step counted as transfer time: a rate the link can never exceed (0.36-0.54
    # Gbit/s under load, docs/guide/launch.md), and load only lengthens the step, so this holds on any
    # machine. Unshaped, a quiet machine's step is 0.58 s (1.3 Gbit/s by this count): there, a
    # cluster whose shaping is not in effect fails this.
    floor = moved_gbit / t_1g
    assert floor < 1.05, f"{moved_gbit:.3f} Gbit in a {t_1g:.3f} s step: more than 1 Gbit/s, shaping is not in effect"
