"""A model outside the registry predicted from its definition (issue 47, item 2): parameter counts
against the published ones, the ready order, and a constructed table of a model no registry holds
predicted through `--published --validate`."""
import pytest

from fleetbench.perfmodel import validate

from fleetbench.perfmodel import modeldef, published
from fleetbench.measure import registry

TXL_LARGE = {"kind": "transformer_xl", "n_token": 267735, "n_layer": 18, "n_head": 16, "d_model": 1024,
             "d_head": 64, "d_inner": 4096, "div_val": 4, "tie_projs": [False, True, True, True],
             "cutoffs": [19997, 39997, 199997], "seq_len": 384}


@pytest.mark.parametrize("defn, params", [
    # GPT-2 small (124,439,808: Hugging Face's gpt2 num_parameters()), ViT-B/16 (86,567,656: timm's
    # vit_base_patch16_224), each with its published shape
    ({"kind": "gpt", "n_layer": 12, "d_model": 768, "vocab": 50257, "n_ctx": 1024}, 124_439_808),
    ({"kind": "vit", "n_layer": 12, "d_model": 768, "image": 224, "patch": 16, "classes": 1000}, 86_567_656),
    ({"kind": "gpt", "n_layer": 24, "d_model": 1024, "vocab": 50257, "n_ctx": 1024}, 354_823_168),  # gpt2-medium
    ({"kind": "params", "params": 1_000_003, "tensors": 7}, 1_000_003),
    ({"kind": "layers", "layers": [{"name": "a", "params": 10}, {"name": "b", "params": 32}]}, 42),
])
def test_parameter_counts_of_published_shapes(defn, params):
    assert modeldef.parameters(defn) == params


def test_bert_large_from_its_shape_is_the_registry_model():
    # the registry's bytes come from the Paddle model (tools/gradient_order.py); the shape alone gives them
    defn = {"kind": "bert", "n_layer": 24, "d_model": 1024, "vocab": 30522}
    assert 4 * modeldef.parameters(defn) == registry.gradients("bert_large", "full")[0]


def test_transformer_xl_large_counted_layer_by_layer():
    layer = 1024 * 3072 + 1024 * 1024 + 1024 * 1024 + 2048 + (1024 * 4096 + 4096) + (4096 * 1024 + 1024) + 2048
    clusters = 19997 * 1024 + 20000 * 256 + 160000 * 64 + 67738 * 16
    projections = 1024 * (1024 + 256 + 64 + 16) + 1024 * 1024  # embedding projections + untied out_proj0
    heads = 267735 + 3 * 1024 + 3 + 2 * 16 * 64  # softmax biases, cluster weights, r_w/r_r biases
    assert modeldef.parameters(TXL_LARGE) == 18 * layer + clusters + projections + heads


def test_ready_order_runs_backward_and_ends_with_the_tied_embedding():
    sizes, ready = modeldef.gradients(TXL_LARGE, "t")
    assert len(sizes) == len(ready) and sum(sizes) == 4 * modeldef.parameters(TXL_LARGE)
    assert ready == sorted(ready) and 0 < ready[0] < 0.2 and ready[-1] == 1.0
    assert sizes[-1] == 4 * 19997 * 1024 or 4 * 19997 * 1024 in sizes[-8:]  # the first cluster, ready last


@pytest.mark.parametrize("defn, message", [
    ({"kind": "gpt", "n_layer": 0, "d_model": 8, "vocab": 10}, "model_def.n_layer must be an integer >= 1"),
    ({"kind": "rnn"}, "model_def.kind 'rnn': expected one of gpt, bert, vit"),
    ({"kind": "layers", "layers": []}, "model_def.layers must be a list"),
    ("gpt", "config.model_def must be a mapping"),
])
def test_bad_definitions_refused_in_one_line(defn, message):
    with pytest.raises(modeldef.ModelDefError, match=message.replace("(", r"\(")):
        modeldef.gradients(defn, "t")


def _pub(gpus, throughput, defn, precision="amp_o2"):
    nodes = max(1, gpus // 8)
    return {"schema": 1, "id": f"txl{gpus}{precision}", "benchmark": "transformer_xl", "mode": "collective",
            "method": "mgwfbp", "preset": None,
            "config": {"model": "Transformer-XL large", "model_def": defn, "batch_size": 8, "seq_len": 384,
                       "precision": precision, "device": "GPU", "gpu": "V100-SXM2-16GB"},
            "nodes": nodes, "devices_per_node": min(gpus, 8), "world_size": gpus,
            "network": {"profile": "ib", "rate_gbit": 100, "transport": "rdma"} if nodes > 1 else None,
            "metrics": {"throughput": throughput, "unit": "tokens/s", "repeats": None},
            "topology": {"intra_node": "nvlink", "gpus": 8}, "env": None, "error": None, "git": None,
            "time": "2020-01-01T00:00:00+00:00",
            "source": {"kind": "published", "name": "t", "citation": "constructed", "url": "https://example.org",
                       "cell": f"{gpus}"}}


def test_a_model_given_only_by_its_config_is_predicted():
    table = [_pub(1, 14000.0, TXL_LARGE), _pub(8, 105000.0, TXL_LARGE), _pub(16, 200000.0, TXL_LARGE),
             _pub(32, 390000.0, TXL_LARGE)]
    done = published.complete(table[1])
    assert sum(done["metrics"]["grad_tensor_bytes"]) == 4 * modeldef.parameters(TXL_LARGE)
    assert any("config.model_def" in d for d in done["metrics"]["derived"])
    rows = validate.validate(published.adopt(table, True), {"nodes": 1})
    assert len(rows) == 2 and all(r.get("not_predicted") is None and r["predicted_throughput"] for r in rows)
    # float16 gradients (apex O2): half the bytes of the float32 count
    assert done["metrics"]["grad_bytes"] == pytest.approx(2 * modeldef.parameters(TXL_LARGE))


def test_a_parameter_count_alone_is_predicted_and_a_bad_definition_refused():
    record = _pub(16, 200000.0, None)
    record["config"].pop("model_def")
    record["config"]["params"] = 300_000_000
    assert published.complete(record)["metrics"]["grad_bytes"] == pytest.approx(2 * 300_000_000)
    bad = _pub(16, 200000.0, {"kind": "gpt", "n_layer": 2})
    with pytest.raises(published.PublishedError, match=r"published record t \[16\]: model_def.d_model"):
        published.complete(bad)


def test_model_def_file_gives_a_table_its_models(tmp_path, capsys):
    import json as _json
    from pathlib import Path

    from fleetbench.report import explain

    reference = Path(__file__).resolve().parents[2] / "results" / "reference" / "dle-pytorch-txl.jsonl"
    records = [_json.loads(line) for line in reference.read_text().splitlines()]
    table = {}
    for record in records:
        table[record["config"]["model"]] = record["config"].pop("model_def")
    stripped, defs = tmp_path / "txl.jsonl", tmp_path / "defs.json"
    stripped.write_text("".join(_json.dumps(r) + "\n" for r in records))
    defs.write_text(_json.dumps(table))
    assert explain.cli([str(stripped), "--published", "--validate", "nodes=1"]) == 2
    assert "config.model_def, or --model-def FILE" in capsys.readouterr().err
    assert explain.cli([str(stripped), "--published", "--validate", "nodes=1", "--model-def", str(defs)]) == 0
    assert "dle-pytorch-txl: 6 of 6 cells predicted" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text(_json.dumps({"Transformer-XL large (WikiText-103)": {"kind": "gpt", "n_layer": 2}}))
    assert explain.cli([str(stripped), "--published", "--validate", "nodes=1", "--model-def", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--model-def" in err and "model_def.d_model" in err


def test_mixed_precision_shrinks_the_overlap_window_and_latency_counts_more():
    """Issue 47, item 1: AMP cuts compute about 3x while fp16 gradients halve the bytes, so less of
    the all-reduce hides behind a shorter backward and the per-call latency is a larger part."""
    from fleetbench.perfmodel import overlap

    order = overlap.registered("bert_large", "full")
    alpha_ms, gbps = 0.05, 10.0

    def call(nbytes):
        return alpha_ms + nbytes / (gbps * 1e6)

    def exposed_share(compute_ms, scale):
        calls = overlap.buckets(order, scale, overlap.bucket_caps("mgwfbp", {}))
        backward = overlap.BACKWARD_SHARE[0] * compute_ms
        return overlap.exposed_ms(calls, backward, call) / compute_ms, len(calls) * alpha_ms / sum(
            call(b) for b, _ in calls)

    fp32, fp32_latency = exposed_share(600.0, 1.0)
    amp, amp_latency = exposed_share(200.0, 0.5)
    assert amp > fp32 > 0
    assert amp_latency > fp32_latency
