"""Precision, framework, units and model names of published records (issue 36): the bytes a
gradient travels in, the work a record belongs to, step times from samples, sequences and tokens,
aliases, and the one-line refusals (exit 2) of what the model cannot read."""
import json

import pytest

from fleetbench.perfmodel import validate

from fleetbench.perfmodel import cells, gradbytes, published
from fleetbench.measure import registry
from fleetbench.report import explain

RESNET = registry.GRADIENTS[("resnet50", "full")][0]
BERT_BASE = registry.GRADIENTS[("bert_large", "base")][0]


def pub(gpus=8, throughput=2000.0, unit="images/s", method="BSP-A2A", **config):
    cfg = {"model": "ResNet-50", "batch_size": 64, "device": "GPU", **config}
    return {"schema": 1, "id": f"{gpus}{sorted(cfg.items())}{unit}", "benchmark": "resnet50", "mode": "collective",
            "method": method, "preset": None, "config": cfg, "nodes": max(1, gpus // 8),
            "devices_per_node": min(gpus, 8), "world_size": gpus,
            "network": {"profile": "100gbib", "rate_gbit": 100, "transport": "rdma"},
            "metrics": {"throughput": throughput, "unit": unit, "repeats": None}, "env": None, "error": None,
            "time": "2021-01-01T00:00:00+00:00", "topology": None, "git": None,
            "source": {"kind": "published", "name": "t", "citation": "constructed", "cell": f"{gpus} {cfg}"}}


@pytest.mark.parametrize("config, expected", [
    ({}, (4, 4, 4)),  # no precision: fp32
    ({"precision": "TF32"}, (4, 4, 4)),
    ({"precision": "amp", "framework": "PyTorch 1.8"}, (4, 4, 4)),  # O1 keeps float32 gradients
    ({"precision": "fp16"}, (4, 2, 4)),  # amp of an unnamed framework: the range spans float16
    ({"precision": "amp_o2"}, (2, 2, 2)),
    ({"precision": "O2"}, (2, 2, 2)),
    ({"precision": "bf16"}, (2, 2, 2)),
    ({"precision": "amp", "grad_dtype": "float16"}, (2, 2, 2)),  # Horovod's fp16 compression, say
])
def test_gradient_bytes_follow_the_precision(config, expected):
    assert gradbytes.precision_bytes(config, "r")[:3] == expected


def test_published_gradient_bytes_scale_with_precision_and_accumulation():
    half = published.complete(pub(precision="amp_o2"))["metrics"]
    assert half["comm_bytes_per_step"] == RESNET / 2
    merged = published.complete(pub(precision="fp32", grad_merge_steps=4))["metrics"]
    assert merged["comm_bytes_per_step"] == RESNET / 4 and merged["comm_buckets_per_step"] == 0.25
    assert any("once every 4 micro-steps" in d for d in merged["derived"])


@pytest.mark.parametrize("unit, config, step_ms", [
    ("images/s", {}, 64 * 8 / 2000.0 * 1e3),
    ("sequences/s", {}, 64 * 8 / 2000.0 * 1e3),
    ("tokens/s", {"tokens_per_sample": 128}, 64 * 128 * 8 / 2000.0 * 1e3),
    ("words/s", {"seq_len": 128}, 64 * 128 * 8 / 2000.0 * 1e3),
])
def test_step_time_from_samples_sequences_or_tokens(unit, config, step_ms):
    record = published.complete(pub(unit=unit, **config))
    assert record["metrics"]["step_time_ms"] == pytest.approx(step_ms)


@pytest.mark.parametrize("name", ["BERT-base", "bert-base-uncased", "BERT Base", "BERT-Base (seq 128)", "bertbase"])
def test_model_aliases_find_the_registered_network(name):
    record = published.complete(pub(model=name))
    assert record["metrics"]["grad_bytes"] == BERT_BASE


def test_gradient_bytes_given_in_the_record_serve_a_model_the_registry_lacks():
    record = pub(model="ResNet-101")
    record["metrics"]["grad_bytes"] = 44_549_160 * 4
    done = published.complete(record)["metrics"]
    assert done["grad_bytes"] == 44_549_160 * 4 and "given in the record" in done["derived"][-1]


def test_framework_and_precision_are_part_of_the_work():
    records = [pub(1, 250.0, framework="MXNet"), pub(8, 1900.0, framework="MXNet"),
               pub(1, 260.0, framework="TensorFlow"), pub(8, 1800.0, framework="TensorFlow", precision="amp")]
    pooled, _ = cells.pool(published.adopt(records, True))
    tf_amp = next(c for c in pooled if c.framework == "TensorFlow" and c.shape.world_size == 8)
    # TF's fp32 1-GPU run (64/260 s) is another work, and so is MXNet's: the TF AMP work has only its
    # 1-node run, so its 1-GPU cell is derived from that run's micro-step (published.single_from_node)
    single = cells.find_single(tf_amp, pooled)
    assert single.framework == "TensorFlow" and single.precision == "amp"
    assert single.step_ms == pytest.approx(64 / (1800.0 / 8) * 1e3)
    mx = next(c for c in pooled if c.framework == "MXNet" and c.shape.world_size == 8)
    assert cells.find_single(mx, pooled).step_ms == pytest.approx(64 / 250.0 * 1e3)
    rows = validate.validate(published.adopt(records, True), {"world_size": 1})
    tf_row = next(r for r in rows if "TensorFlow" in r["cell"])
    assert tf_row["predicted_step_ms"] is not None and not tf_row.get("not_predicted")


@pytest.mark.parametrize("change, message", [
    ({"config": {"model": "GPT-2", "batch_size": 8, "device": "GPU"}},
     "config.model 'GPT-2': no gradient sizes known (known models: ResNet-50"),
    ({"unit": "tokens/s"}, "metrics.unit tokens/s needs config.tokens_per_sample"),
    ({"unit": "img/s"}, "metrics.unit: expected one of"),
    ({"precision": "fp8"}, "config.precision 'fp8': unknown (known: fp32, tf32, amp, amp_o2, bf16"),
    ({"config": {"model": "ResNet-50", "device": "GPU"}}, "config.batch_size missing"),
])
def test_a_record_the_model_cannot_read_is_refused_in_one_line(tmp_path, capsys, change, message):
    record = pub()
    if "unit" in change:
        record["metrics"]["unit"] = change["unit"]
    if "precision" in change:
        record["config"]["precision"] = change["precision"]
    if "config" in change:
        record["config"] = change["config"]
    path = tmp_path / "table.jsonl"
    path.write_text(json.dumps(record) + "\n")
    assert explain.cli([str(path), "--published"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
