"""Every collective rank's step taken apart, a trace per rank, MFU: real 2-rank ResNet50 jobs on
gloo through `fleetbench launch`, one per gradient method (each has its own step)."""
import json
import subprocess

import pytest
from util import CPU_RANKS, PYTHON, REPO, chrome_trace_problems, env, records, result_line

from fleetbench.measure import flops
from fleetbench.train.phases import PARTS

SCRIPT = str(REPO / "collective" / "resnet50.py")


def launch(tmp_path, *script_args, timeout=300, script=SCRIPT) -> dict:
    """The record of `fleetbench launch --nproc_per_node 2 SCRIPT --preset tiny ARGS` (ResNet50's)."""
    store = tmp_path / "r.jsonl"
    cmd = [PYTHON, "-m", "fleetbench", "launch", "--quiet", "--log_dir", str(tmp_path / "log"),
           "--nproc_per_node", "2", script, "--preset", "tiny", "--results", str(store), *script_args]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env(**CPU_RANKS), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = records(store)
    result_line(proc.stdout, record, store)  # the launcher's summary line is this record's (measure/resultline)
    return record


def check_adds_up(m: dict) -> list[dict]:
    block = m["step_breakdown"]
    assert block["units"] == "ms per measured step" and block["steps"] == m["measured_steps"]
    assert len(block["ranks"]) == 2
    # What holds whatever the machine does: the parts and `other` make the step, no part is counted
    # twice (other >= 0), and adds_up says whether other stayed within the tolerance. Whether it does
    # is a measurement (a loaded 2-core machine puts its descheduled gaps in `other`): it is taken
    # quiet by bench/trace_overhead.py, not asserted here (the first fresh clone of this round failed
    # here on ResNet18, its two sessions side by side).
    assert block["adds_up"] == all(abs(r["other"]) <= block["tolerance"] * r["step"] for r in block["ranks"])
    for rank, row in enumerate(block["ranks"]):
        parts = sum(row[p] for p in PARTS)
        assert parts + row["other"] == pytest.approx(row["step"])
        assert row["other"] >= -1e-6 * row["step"], row
        assert 0 <= row["comm_wait"] <= row["comm"] + 1e-6
        assert min(row[p] for p in ("forward", "backward", "optimizer")) > 0
    return block["ranks"]


# 2.6.2 only (build_neutral): the trace files are fleetbench's (train/trace.py); the parts of each
# build's steps, Paddle's reducer included, are taken apart on 3.x by the per-method test below
@pytest.mark.build_neutral
def test_launch_with_trace_writes_a_trace_per_rank_whose_parts_add_up(tmp_path):
    rec = launch(tmp_path, "--trace", str(tmp_path / "T"))
    m = rec["metrics"]
    rows = check_adds_up(m)
    files = m["trace_files"]
    assert [p.rsplit("-", 1)[-1] for p in files] == ["rank0.trace.json", "rank1.trace.json"]
    assert sorted(p.name for p in (tmp_path / "T").iterdir()) == sorted(f.rsplit("/", 1)[-1] for f in files)
    steps_by_rank = []
    for rank, path in enumerate(files):
        doc = json.loads(open(path).read())
        assert chrome_trace_problems(doc) == []
        assert {e["pid"] for e in doc["traceEvents"]} == {rank}
        assert doc["otherData"]["breakdown"] == rows[rank]
        timed = [e for e in doc["traceEvents"] if e["ph"] == "X"]
        assert {e["name"] for e in timed} >= {"step 1", "step 12", *PARTS}
        assert min(e["ts"] for e in timed) >= 0  # zero: the barrier before training
        steps_by_rank.append({e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in timed if e["name"].startswith("step")})
    # every step all-reduces, so step k of both ranks overlaps in time: their clocks line up
    for name, (start, end) in steps_by_rank[0].items():
        other = steps_by_rank[1][name]
        assert start < other[1] and other[0] < end, name
    # MFU: ResNet-50 at 32x32 is 4.09 GMAC x (32/224)^2 forward, x 6 to train
    assert m["model_flops_per_sample"] == pytest.approx(flops.training_flops(4.09e9 * (32 / 224) ** 2), rel=0.02)
    assert 0 < m["mfu"] <= 1 and m["peak_flops"] > 0
    assert m["mfu"] == pytest.approx(m["model_flops_per_sample"] * m["samples_per_s"] / m["peak_flops"])


# 4 measured steps, not tiny's 10: what is asserted holds on every step, and these six jobs were
# a fifth of make test's first pass. The real ResNet18 at tiny's 16 px and batch 2: 62 gradient
# tensors, 45 MB a step to all-reduce, a little compute (ResNet50 here cost a quarter more CPU a
# job; the trace test above keeps ResNet50, whose published FLOPs its MFU is held to)
SHORT = ("model=resnet18", "warmup_steps=1", "steps=5", "batch_size=2")
RESNET18 = str(REPO / "collective" / "resnet18.py")


@pytest.mark.parametrize("method, sets", [
    # 2.6.2 only (build_neutral): bsp's one all-reduce after backward, the control's empty comm and
    # fp16's cast before it are fleetbench's code on both builds; the reducer's methods run on 3.x too
    pytest.param("bsp", SHORT, marks=pytest.mark.build_neutral),
    pytest.param("fp16_allreduce", SHORT, marks=pytest.mark.build_neutral),
    pytest.param("none", SHORT, marks=pytest.mark.build_neutral), ("wfbp", SHORT), ("mgwfbp", SHORT),
    ("grad_merge", ("model=resnet18", "warmup_steps=2", "steps=6", "grad_merge_steps=2", "batch_size=2")),
])
def test_every_method_is_taken_apart(tmp_path, method, sets):
    args = [x for s in (f"method={method}", *sets) for x in ("--set", s)]
    m = launch(tmp_path, *args, script=RESNET18)["metrics"]
    assert "trace_files" not in m  # no trace unless asked
    for row in check_adds_up(m):
        if method == "none":  # the control sends nothing
            assert row["comm"] < 1.0
        elif method in ("bsp", "fp16_allreduce"):  # the average after backward
            assert row["comm"] > 1.0 and row["comm_in_backward"] < 0.05 * row["comm"]
        else:  # the reducer, in backward: on gloo, on the backward thread, all of it
            assert row["comm"] > 1.0
            assert row["comm_in_backward"] == pytest.approx(row["comm"])
            assert row["comm_blocking"] == pytest.approx(row["comm"])
    assert 0 < m["mfu"] <= 1


@pytest.mark.build_neutral  # on 2.6.2 only: the sweep's bookkeeping of trace directories
def test_sweep_with_trace_gives_each_run_its_own_directory(tmp_path):
    import yaml

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"repeats": 2, "cells": [
        # resnet18 tiny (a small CNN): the trace directories' bookkeeping is what is asserted
        {"benchmark": "resnet18", "preset": "tiny", "devices_per_node": 2, "set": {"steps": 4, "warmup_steps": 1, "log_every": 2}},
        # once each: a comm cell has no steps to trace, and says so; a parameter-server cell whose
        # step breakdown is on is traced (its marks are the trace), and stays the cell it was asked as
        {"benchmark": "comm", "preset": "tiny", "devices_per_node": 2, "repeats": 1, "set": {"op": "all_reduce"}},
        {"benchmark": "ctr", "mode": "ps", "preset": "tiny", "repeats": 1, "set": {"measure.breakdown": True}}]}))
    store, traces = tmp_path / "r.jsonl", tmp_path / "T"
    proc = subprocess.run([PYTHON, "-m", "fleetbench", "sweep", str(spec), "--results", str(store), "--log-dir",
                           str(tmp_path / "log"), "--trace", str(traces)], cwd=tmp_path, env=env(**CPU_RANKS),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "cell 2/3 comm tiny comm 1x2: not traced (the comm benchmark times collectives, " \
           "not training steps: it writes no trace)" in proc.stdout.splitlines(), proc.stdout
    assert proc.stdout.count("not traced") == 1  # said once, of that cell only
    recs = [r for r in records(store) if r["mode"] != "comm"]
    assert len(recs) == 3 and all(r["error"] is None for r in records(store))
    dirs = sorted(p.name for p in traces.iterdir())
    assert len(dirs) == 3 and [d[:8] for d in dirs] == ["cell01-r", "cell01-r", "cell03-r"]  # one per run, named as its logs
    for rec in recs:
        files = rec["metrics"]["trace_files"]
        assert len(files) == rec["world_size"] and all(json.loads(open(f).read())["traceEvents"] for f in files)
        # the traces are not part of what the run was: both repeats are one cell
        assert "--trace" not in json.dumps(rec["config"])
