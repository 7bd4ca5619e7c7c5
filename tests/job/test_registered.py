"""One tiny 2-rank run of every registered collective benchmark (fleetbench/measure/registry.py),
built from the registry as TorchBench builds its tests from its model list: a benchmark added
there is run here with nothing else to write.

Each run is Paddle's real launcher with 2 gloo processes on the benchmark's tiny preset; it must
append exactly one record (rank 0's), say what the registry says of it, and hold the figures the
ranks logged themselves. A model's own checks follow (a data file or directory read, what its
unit counts). The runs are made once per session (util.two_rank_run) and shared with the models'
own test files, which check more of the same run.
"""
import math

import pytest
import util

from datasets import bert, wmt16
from fleetbench.measure import metrics, registry
from fleetbench.store import results
from fleetbench.train import phases

COLLECTIVE = [b for b in registry.REGISTERED if b.family == "collective"]


def bert_data(tmp_path) -> list:
    """A generated pretraining file at the tiny preset's sizes: the run must read it, not its
    synthetic data."""
    data = tmp_path / "bert.npz"
    assert bert.cli(["--out", str(data), "--examples", "64", "--seq-len", "32", "--vocab-size", "2048",
                     "--max-predictions", "5"]) == 0
    return [f"data.path={data}"]


def wmt16_data(tmp_path) -> list:
    data = tmp_path / "wmt16"
    assert wmt16.cli(["--out", str(data), "--pairs", "512", "--vocab-size", "1000", "--max-len", "16"]) == 0
    return [f"data.path={data}"]


DATA = {"bert_large": bert_data, "transformer": wmt16_data}


def check_bert_large(record: dict, sets: list) -> None:
    sizes = {key: record["config"][key] for key in ("vocab_size", "seq_len", "max_predictions")}
    arrays = bert.load(sets[0].split("=", 1)[1], **sizes)
    tokens_per_example = (arrays["input_ids"] != bert.PAD).sum(axis=1)
    ratio = record["metrics"]["throughput"] / record["metrics"]["samples_per_s"]  # tokens per example
    seq_len = sizes["seq_len"]
    assert tokens_per_example.min() <= ratio <= seq_len and ratio > 0.8 * seq_len  # mostly full-length examples


def check_transformer(record: dict, sets: list) -> None:
    ratio = record["metrics"]["throughput"] / record["metrics"]["samples_per_s"]  # target tokens per pair
    assert 2 <= ratio <= 17
    assert record["config"]["vocab_size"] == 1000  # taken from the data directory's vocab.txt


MODEL_CHECKS = {"bert_large": check_bert_large, "transformer": check_transformer}
SAMPLE_UNITS = ("images/s", "examples/s")  # units that count samples: throughput is samples_per_s


@pytest.mark.parametrize("bench", COLLECTIVE, ids=lambda b: b.name)
def test_two_ranks_of_every_registered_collective_benchmark(bench, tmp_path_factory):
    sets = DATA[bench.name](tmp_path_factory.mktemp(f"{bench.name}-data")) if bench.name in DATA else []
    proc, where = util.two_rank_run(tmp_path_factory, bench.name, *sets)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (record,) = util.records(where / "r.jsonl")  # rank 0's only
    results.validate(record, bench.name)
    assert (record["benchmark"], record["mode"], record["preset"], record["error"]) == \
        (bench.name, "collective", "tiny", None)
    assert (record["world_size"], record["nodes"], record["devices_per_node"]) == (2, 1, 2)
    assert record["method"] == record["config"]["method"]
    m = record["metrics"]
    assert m["unit"] == bench.unit and set(m) <= set(metrics.DEFINITIONS)
    # global work over the slowest rank's time, from the ranks' own log lines
    ranks = util.rank_summaries(where / "log")
    assert sorted(ranks) == [0, 1]
    slowest = max(ranks.values(), key=lambda r: r[1])
    assert m["elapsed_s"] == pytest.approx(slowest[1], rel=1e-5) and m["measured_steps"] == slowest[0]
    assert m["throughput"] == pytest.approx(sum(r[3] for r in ranks.values()) / m["elapsed_s"], rel=1e-6)
    assert m["samples_per_s"] == pytest.approx(sum(r[2] for r in ranks.values()) / m["elapsed_s"], rel=1e-6)
    assert math.isfinite(m["loss_first"]) and m["loss_last"] < m["loss_first"]  # it learns
    if bench.unit in SAMPLE_UNITS:
        assert m["throughput"] == pytest.approx(m["samples_per_s"])
    # every model's FLOPs counted from its layers, MFU beside the throughput (docs/reference/metrics.md#mfu)
    assert m["model_flops_per_sample"] > 0 and 0 < m["mfu"] <= 1
    if "epochs" not in m:  # the step loop takes its steps apart (the epoch schedule does not)
        block = m["step_breakdown"]  # its parts make each rank's step (within 5 %: measured quiet, bench/)
        assert len(block["ranks"]) == 2 and all(
            sum(r[p] for p in phases.PARTS) + r["other"] == pytest.approx(r["step"]) for r in block["ranks"])
    if bench.name in MODEL_CHECKS:
        MODEL_CHECKS[bench.name](record, sets)


def test_a_bad_data_path_is_one_line_before_training(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"")
    done = util.run_script("collective/bert_large.py", "--preset", "tiny", "--set", f"data.path={bad}",
                           "--check")
    errors = [line for line in done.stderr.splitlines() if line.startswith("bert_large: error:")]
    assert done.returncode == 2 and len(errors) == 1  # (paddle's own import warnings may precede it)
    assert str(bad) in errors[0] and "empty file" in errors[0]
    assert done.stdout == ""  # no config printed: it stopped at the data
