"""Published and GPU records in the model (issue 22): what --published derives, the link a GPU
node gets without a comm record, links known only by their rate, and the scaling chart; all on
constructed records."""
import csv
import json

import pytest

from fleetbench.perfmodel import validate

from fleetbench.perfmodel import alphabeta, cells, links, nccl, node, published
from fleetbench.measure import registry
from fleetbench.report import explain

RESNET_BYTES, RESNET_TENSORS = registry.GRADIENTS[("resnet50", "full")]
TCP = 1448 / 1538


def pub(method, gpus, throughput, network="10gbe", rate=10, transport="tcp", model="ResNet-50", batch=64):
    """A record as fleetbench/perfmodel/sources/ddl_benchmarks.py writes it."""
    net = None if network is None else {"profile": network, "rate_gbit": rate, "transport": transport}
    return {"schema": 1, "id": f"{method}{gpus}{network}{model}", "benchmark": model.lower(), "mode": "collective",
            "method": method, "preset": None, "config": {"model": model, "batch_size": batch, "device": "GPU"},
            "nodes": max(1, gpus // 4), "devices_per_node": min(gpus, 4), "world_size": gpus,
            "network": net, "metrics": {"throughput": throughput, "unit": "images/s", "repeats": None},
            "env": None, "error": None, "time": "2020-05-29T00:00:00+00:00", "topology": None, "git": None,
            "source": {"kind": "published", "name": "t", "citation": "constructed", "url": "https://example.org",
                       "cell": f"{method} {gpus}"}}


def table(network="10gbe", rate=10, transport="tcp"):
    # 1 GPU: 64 images in 250 ms; 1 node: 4 x 64 in 280 ms (30 ms exposed); 2 nodes measured 8 x 64 in 400 ms
    return [pub("single", 1, 256.0, network=None), pub("BSP-A2A", 4, 4 * 64 / 0.280, network, rate, transport),
            pub("BSP-A2A", 8, 8 * 64 / 0.400, network, rate, transport)]


def test_published_records_are_out_unless_asked_and_in_with_derived_figures():
    records = table()
    assert cells.pool(published.adopt(records, published=False))[0] == []
    pooled, _ = cells.pool(published.adopt(records, published=True))
    node = next(c for c in pooled if c.shape == cells.Shape(1, 4))
    assert node.method == "bsp" and node.gpu and node.transport == "tcp"
    assert node.step_ms == pytest.approx(280.0) and node.units_per_rank_step == pytest.approx(64)
    assert node.comm_bytes == RESNET_BYTES and node.comm_buckets == 1  # 102 MB: one 128 MiB bucket
    assert records[1]["metrics"].get("step_time_ms") is None  # the input is not changed


def test_gradient_sizes_come_from_the_registered_model_of_the_published_name():
    record = published.complete(pub("WFBP-A2A", 8, 100.0, model="BERT-Base"))
    m = record["metrics"]
    assert (m["grad_bytes"], m["grad_tensors"]) == registry.gradients("bert_large", "base")
    assert m["comm_buckets_per_step"] == m["grad_tensors"]  # wfbp: one all-reduce per tensor
    assert any("registry gradients of bert_large base" in d for d in m["derived"])


def test_records_measured_here_on_cpu_are_left_alone():
    cpu = dict(pub("bsp", 4, 10.0), source=None, config={"batch_size": 8, "runtime": {"device": "cpu"}})
    assert published.adopt([cpu], published=True)[0] is cpu


def test_intra_node_link_derived_from_the_one_node_run():
    pooled, _ = cells.pool(published.adopt(table(), True))
    target = next(c for c in pooled if c.shape == cells.Shape(2, 4))
    node_run = next(c for c in pooled if c.shape == cells.Shape(1, 4))
    derived, _ = node.derive(node_run, cells.find_single(target, pooled), "point")
    # 30 ms exposed by a ring of 4: bus bandwidth = 2*3/4 * S / 30 ms
    assert derived.bandwidth_GBps == pytest.approx(1.5 * RESNET_BYTES / 30e6)
    assert "1-node run" in derived.source and not derived.latency_known


def test_gpu_work_gets_nccl_flat_ring_cpu_work_gloo_hierarchical():
    pooled, _ = cells.pool(published.adopt(table(), True))
    gpu = next(c for c in pooled if c.shape == cells.Shape(2, 4))
    found = links.link_for(gpu, "10gbe", gpu.shape, pooled, [])
    assert isinstance(found.link, nccl.NcclLink) and found.link.ranks == 8
    assert any("derived from the 1-node run" in n for n in found.notes)
    intra = alphabeta.Link(0.0, 5.0, 4, "intra")
    comm = [cells.CommCell(None, cells.Shape(1, 4), intra, None)]
    cpu = cells.Cell(**{**gpu.__dict__, "gpu": False})
    gloo = links.link_for(cpu, "10gbe", cpu.shape, pooled, comm).link
    assert isinstance(gloo, alphabeta.Hierarchical) and gloo.intra == intra


def test_link_by_rate_without_and_with_a_comm_record():
    pooled, _ = cells.pool(published.adopt(table(), True))
    cell = next(c for c in pooled if c.shape == cells.Shape(2, 4))
    found = links.link_for(cell, "10gbe", cells.Shape(2, 1), pooled, [])
    assert found.link.bandwidth_GBps == pytest.approx(10 / 8 * TCP)
    assert any("no comm record of network 10gbe" in n and "would replace this" in n for n in found.notes)
    override = links.link_for(cell, None, cells.Shape(2, 1), pooled, [],
                              {"rate_gbit": 100, "transport": "rdma", "efficiency": 0.4}).link
    assert override.bandwidth_GBps == pytest.approx(100 / 8 * 0.4)
    rdma = links.link_for(cell, None, cells.Shape(2, 1), pooled, [], {"rate_gbit": 100, "transport": "rdma"}).link
    assert rdma.bandwidth_GBps == pytest.approx(12.5 * 4096 / 4122)
    rails = links.link_for(cell, None, cells.Shape(2, 1), pooled, [], {"rate_gbit": 200, "transport": "rdma",
                                                                       "nics": 8}).link
    assert rails.bandwidth_GBps == pytest.approx(8 * 25 * 4096 / 4122)  # 8 NICs a node carry the ring
    measured = alphabeta.Link(40.0, 0.9, 2, "comm record")
    comm = [cells.CommCell("10gbe", cells.Shape(2, 1), measured, 10)]
    found = links.link_for(cell, "10gbe", cells.Shape(2, 1), pooled, comm, {"efficiency": 0.5})
    assert found.link == measured and any("not used" in n for n in found.notes)


def test_validate_on_published_predicts_two_nodes_from_one():
    (row,) = validate.validate(published.adopt(table(), True), {"nodes": 1})
    intra_bw, inter_bw = 1.5 * RESNET_BYTES / 30e6, 10 / 8 * TCP
    wire_ms = 2 * 7 / 8 * RESNET_BYTES / (min(intra_bw, inter_bw) * 1e6)  # the NIC hop is the slowest
    # one call (102 MB < a 128 MiB bucket): 12 intra-node ring steps at NCCL's default and 2 across
    # 10 GbE, a TCP network, at its socket transport's; the 1-node run's 6 steps of default latency,
    # inside its 30 ms, come back as a host cost below 0
    latency_ms = (12 * nccl.DEFAULT_HOP_US["nvlink"] + 2 * links.SOCKET_HOP_US) / 1e3
    comm_ms = wire_ms + latency_ms - 6 * nccl.DEFAULT_HOP_US["nvlink"] / 1e3
    assert row["predicted_step_ms"] == pytest.approx(250.0 + comm_ms)
    assert row["predicted_throughput"] == pytest.approx(8 * 64 / (250.0 + comm_ms) * 1e3)
    assert row["measured_step_ms"] == pytest.approx(400.0)


@pytest.mark.parametrize("spec, message", [
    ("nodes=2,rate_gbit=-5", "rate_gbit must be a number of Gbit/s above 0"),
    ("rate_gbit=100,efficiency=1.5", "efficiency must be a share of the rate in (0, 1]"),
    ("rate_gbit=100,transport=udp", "transport must be one of tcp, rdma"),
    ("nodes=2,network=10gbee", "--predict network=10gbee: unknown (known: 100gbe, 100mbe, 10gbe, 1gbe"),
    ("nodes=2,benchmark=resnet5", "--predict benchmark=resnet5: unknown"),
])
def test_bad_predict_values_exit_2_with_one_line(tmp_path, capsys, spec, message):
    path = tmp_path / "pub.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in table()))
    assert explain.cli([str(path), "--published", "--predict", spec]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_scaling_chart_png_beside_csv(tmp_path, capsys):
    path = tmp_path / "pub.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in table()))
    assert explain.cli([str(path), "--published", "--predict", "nodes=2,4,8,method=bsp",
                        "--images", str(tmp_path / "img")]) == 0
    png = tmp_path / "img" / "explain-scaling-resnet-50-bsp.png"
    rows = list(csv.DictReader(open(png.with_suffix(".csv"))))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(int(r["devices"]) for r in rows if r["predicted_throughput"]) == [8, 16, 32]
    measured = {int(r["devices"]): float(r["measured_throughput"]) for r in rows if r["measured_throughput"]}
    assert measured == pytest.approx({4: 4 * 64 / 0.280, 8: 8 * 64 / 0.400})
    assert all(float(r["ideal_throughput"]) == pytest.approx(256.0 * int(r["devices"])) for r in rows)


# The second held-out set (issue 47, 2026-11-29; fleetbench/perfmodel/sources/nvidia_dle_frameworks.py): every file
# loads and validates, and every cell is predicted or says why, with the counts docs/explain.md
# reports (table: records, selector, cells, predicted).
SECOND_SET = {"dle-tf1-biobert": (36, "nodes", 28, 28), "dle-tf1-bert-dgx1": (24, "world_size", 16, 16),
              "dle-pytorch-bert-dgx1": (8, "world_size", 4, 4),
              "dle-pytorch-txl-dgxa100-dgx1": (44, "world_size", 33, 33), "dle-tf1-txl": (28, "world_size", 18, 18),
              "dle-pytorch-rn50": (12, "world_size", 6, 6), "dle-tf1-rn50": (12, "world_size", 6, 6),
              "dle-paddle-rn50-asp": (4, "world_size", 2, 2)}


@pytest.mark.parametrize("name", sorted(SECOND_SET))
def test_second_held_out_set_loads_validates_and_every_cell_is_predicted_or_says_why(name):
    from pathlib import Path

    from fleetbench.store import results

    path = Path(__file__).resolve().parents[2] / "results" / "reference" / f"{name}.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    count, key, cells_, predicted = SECOND_SET[name]
    assert len(records) == count
    for record in records:
        results.validate(record, name)
        # a table the node-sharing prior was fitted on is a fitted one (the ranges' calibration set is too)
        assert record["source"]["name"] == name
        assert name not in node.PRIOR_TABLES or name in validate.FITTED_TABLES
        assert record["source"]["url"].startswith("https://github.com/NVIDIA/DeepLearningExamples/blob/729963dd/")
        assert record["source"]["assumed"]
    rows = validate.validate(published.adopt(records, True), {key: 1})
    assert len(rows) == cells_
    assert sum(r.get("throughput_error") is not None for r in rows) == predicted
    assert all(r.get("throughput_error") is not None or r["not_predicted"] for r in rows)
