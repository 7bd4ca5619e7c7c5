"""Overlapped all-reduce predicted from the 1-GPU and 1-node runs alone (issue 36): the overlap
model on constructed gradient orders, the registry's order of the real models, and predictions of
mgwfbp tables that have no bsp run at all."""
import pytest

from fleetbench.perfmodel import validate

from fleetbench.perfmodel import alphabeta, cells, node, overlap, published, ranges
from fleetbench.measure import registry

MB = 1e6


def order(*tensors):
    return overlap.Order(tuple(tensors), "constructed")


def test_buckets_go_one_after_another_and_only_the_tail_is_exposed():
    four = order((10 * MB, 0.25), (10 * MB, 0.5), (10 * MB, 0.75), (10 * MB, 1.0))
    per_tensor = overlap.buckets(four, 1.0, (0, 0))
    assert per_tensor == [(10 * MB, 0.25), (10 * MB, 0.5), (10 * MB, 0.75), (10 * MB, 1.0)]
    fast = lambda b: b / MB  # noqa: E731  1 ms a MB
    # backward 100 ms: each 10 ms call starts when its gradient is ready; the last ends at 110
    assert overlap.exposed_ms(per_tensor, 100.0, fast) == pytest.approx(10.0)
    slow = lambda b: 3 * b / MB  # noqa: E731  calls of 30 ms queue up: 25-55, 55-85, 85-115, 115-145
    assert overlap.exposed_ms(per_tensor, 100.0, slow) == pytest.approx(45.0)
    # a link slow enough exposes everything but what backward overlapped of the first call
    assert overlap.exposed_ms(per_tensor, 100.0, lambda b: 100 * b / MB) == pytest.approx(4 * 1000 + 25 - 100)


def test_bucket_caps_by_method_framework_and_record():
    mib = overlap.MIB
    assert overlap.bucket_caps("wfbp", {}) == (0, 0)
    assert overlap.bucket_caps("mgwfbp", {}) == (25 * mib, 1 * mib)  # DDP's and Paddle's
    assert overlap.bucket_caps("mgwfbp", {"framework": "TensorFlow 1.15 + Horovod 0.19"}) == (64 * mib, 64 * mib)
    assert overlap.bucket_caps("mgwfbp", {"comm_buffer_mb": 4}) == (4 * mib, 1 * mib)
    merged = overlap.buckets(order((MB, 0.1), (30 * MB, 0.2), (2 * MB, 0.3), (2 * MB, 1.0)), 1.0,
                             (25 * mib, 1 * mib))
    assert merged == [(31 * MB, 0.2), (4 * MB, 1.0)]  # the first closes past 1 MiB, the rest at the end


def test_best_merge_is_never_worse_than_one_call_per_gradient_or_one_after_backward():
    grads = order(*[(4 * MB, (i + 1) / 20) for i in range(20)])
    price = lambda b: 0.5 + b / (2 * MB)  # noqa: E731  0.5 ms a call, 2 MB a ms
    best = overlap.best_merge_ms(grads, 1.0, 60.0, price)
    assert best <= overlap.exposed_ms(overlap.buckets(grads, 1.0, (0, 0)), 60.0, price)
    assert best <= price(80 * MB)


def test_solving_for_the_bandwidth_inverts_the_model():
    grads = order((50 * MB, 0.5), (50 * MB, 1.0))
    at = lambda bw: overlap.exposed_ms(overlap.buckets(grads, 1.0, (0, 0)), 100.0, lambda b: b / (bw * 1e6))  # noqa: E731
    bw = overlap.solve_bandwidth(at(2.0), at)
    assert bw == pytest.approx(2.0, rel=1e-6)
    assert overlap.solve_bandwidth(0.0, at) is None  # nothing exposed: no bandwidth says so


@pytest.mark.parametrize("key", sorted(registry.GRADIENTS))
def test_registry_order_covers_every_gradient_of_the_model(key):
    found = overlap.registered(*key)
    assert (found.total, len(found.tensors)) == registry.GRADIENTS[key]
    ready = [r for _, r in found.tensors]
    assert ready == sorted(ready) and 0.0 <= ready[0] and ready[-1] == 1.0


def test_bert_word_embedding_is_ready_last_and_resnet_fc_first():
    bert = overlap.registered("bert_large", "full").tensors
    assert bert[-1] == (30522 * 1024 * 4, 1.0)  # tied to the decoder: ready when backward ends
    resnet = overlap.registered("resnet50", None).tensors
    assert resnet[0][1] < 0.01 and 2048 * 1000 * 4 in (b for b, _ in resnet[:2])  # fc comes first


# ---- whole predictions from published tables without a bsp run -------------------------------------

def pub(method, nodes, per_node, throughput, network="100gbib", rate=100, **config):
    net = None if network is None else {"profile": network, "rate_gbit": rate, "transport": "rdma"}
    cfg = {"model": "ResNet-50", "batch_size": 64, "device": "GPU", "framework": "PyTorch 1.8 DDP",
           "precision": "fp32", **config}
    gpus = nodes * per_node
    return {"schema": 1, "id": f"{method}{gpus}{network}{sorted(cfg.items())}", "benchmark": "resnet50",
            "mode": "collective", "method": method, "preset": None, "config": cfg, "nodes": nodes,
            "devices_per_node": per_node, "world_size": gpus, "network": net,
            "metrics": {"throughput": throughput, "unit": "images/s", "repeats": None}, "env": None,
            "error": None, "time": "2021-01-01T00:00:00+00:00", "topology": None, "git": None,
            "source": {"kind": "published", "name": "constructed", "citation": "constructed", "cell": f"{gpus}"}}


def mgwfbp_table(node_throughput=8 * 250.0 * 0.97, **config):
    return [pub("mgwfbp", 1, 1, 250.0, None, **config), pub("mgwfbp", 1, 8, node_throughput, **config),
            pub("mgwfbp", 2, 8, 16 * 250.0 * 0.9, **config), pub("mgwfbp", 4, 8, 32 * 250.0 * 0.85, **config)]


def test_an_mgwfbp_table_without_any_bsp_run_is_predicted_with_ranges():
    rows = validate.validate(published.adopt(mgwfbp_table(), True), {"nodes": 1})
    assert len(rows) == 2 and all(r["predicted_step_ms"] is not None for r in rows)
    for r in rows:
        low, high = r["predicted_throughput_range"]
        assert low <= r["predicted_throughput"] <= high and low < high
        assert any(n.startswith("overlap model:") for n in r["notes"])
        assert "PyTorch 1.8 DDP" in r["cell"] and "fp32" in r["cell"] and "batch 64" in r["cell"]


def test_a_super_linear_node_run_is_said_and_its_link_taken_from_the_topology():
    table = mgwfbp_table(node_throughput=8 * 250.0 * 1.02)
    for record in table:
        record["topology"] = {"intra_node": "nvlink"}
        record["config"]["gpu"] = "Tesla V100-SXM2-16GB"
    pooled, _ = cells.pool(published.adopt(table, True))
    target = next(c for c in pooled if c.shape == cells.Shape(2, 8))
    found = node.of_work(target, [c for c in pooled if c.shape.nodes == 1], None, ranges.POINT)
    assert found.sharing < 1 and any("super-linear 1-node run" in n for n in found.notes)
    assert "topology: nvlink, Tesla V100-SXM2-16GB NVLink, 150 GB/s" in found.link.source
    # without a topology: said, and PCIe of the GPU's generation assumed for the node's ring
    for record in table:
        record["topology"] = None
    pooled, _ = cells.pool(published.adopt(table, True))
    target = next(c for c in pooled if c.shape == cells.Shape(2, 8))
    found = node.of_work(target, [c for c in pooled if c.shape.nodes == 1], None, ranges.POINT)
    assert any("no link derivable" in n for n in found.notes) and "assumed" in found.link.source


def test_a_slow_node_teaches_the_link_through_the_overlap_model_when_no_bsp_ran():
    table = mgwfbp_table(node_throughput=8 * 250.0 * 0.5)  # half the node lost: far more than a tail
    pooled, _ = cells.pool(published.adopt(table, True))
    run = next(c for c in pooled if c.shape == cells.Shape(1, 8))
    link, why = node.derive(run, cells.find_single(run, pooled), ranges.POINT)
    assert link is not None and "overlap model" in why and not link.latency_known
    single = cells.find_single(run, pooled)
    exposed = node._exposure_ms(run, link, single.step_ms * overlap.BACKWARD_SHARE[0], ranges.POINT)
    assert exposed == pytest.approx(run.step_ms - single.step_ms, rel=1e-3)


def test_the_node_run_of_the_method_teaches_backwards_share_only_beyond_noise():
    table = mgwfbp_table(8 * 250.0 * 0.85) + [pub("bsp", 1, 1, 250.0, None), pub("bsp", 1, 8, 8 * 250.0 * 0.8)]
    pooled, _ = cells.pool(published.adopt(table, True))
    run = next(c for c in pooled if c.shape == cells.Shape(1, 8) and c.method == "mgwfbp")
    bsp = next(c for c in pooled if c.shape == cells.Shape(1, 8) and c.method == "bsp")
    link, _ = node.derive(bsp, cells.find_single(bsp, pooled), ranges.POINT)
    share, note = node.backward_share(run, "mgwfbp", pooled, link, ranges.POINT)
    assert 0 < share < overlap.BACKWARD_SHARE[0] and "learned from the 1-node mgwfbp run" in note
    # a link from the topology leaves the node's loss to node sharing: nothing learned of backward
    same, note = node.backward_share(run, "mgwfbp", pooled, alphabeta.Link(0, 1e4, 8, "topology: nvswitch"),
                                     ranges.POINT)
    assert same == overlap.BACKWARD_SHARE[0] and note == ""
