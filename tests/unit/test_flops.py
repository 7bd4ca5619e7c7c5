"""Model FLOPs and MFU (measure/flops.py; the layer count in train/trace.py): the arithmetic, the
convention, and ResNet-50's published 4.1 GMAC forward, checked against paddle.flops too."""
import math

import pytest

from fleetbench.measure import devices, flops


def test_layer_arithmetic():
    # a 3x3 convolution, 64 -> 128 channels, groups 1, on a 56x56 output of batch 2
    assert flops.conv_macs(2 * 128 * 56 * 56, [128, 64, 3, 3]) == 2 * 128 * 56 * 56 * 64 * 9
    # depthwise (groups = channels): one input channel per output
    assert flops.conv_macs(32 * 10 * 10, [32, 1, 3, 3]) == 32 * 10 * 10 * 9
    assert flops.linear_macs(8 * 1000, [2048, 1000]) == 8 * 1000 * 2048  # Paddle's [in, out] weight
    assert flops.attention_macs(2, 128, 64, 1024) == 2 * 2 * 128 * 64 * 1024


def test_training_convention_is_six_flops_a_mac():
    assert flops.training_flops(4.1e9) == pytest.approx(24.6e9)
    assert "x 2 (multiply and add) x 3" in flops.CONVENTION


@pytest.mark.parametrize("per_sample, rate, peak, expected", [
    (24.6e9, 1000.0, 8 * 156e12, 24.6e12 / 1248e12),  # 1000 images/s of ResNet-50 on 8 A100 at tf32
    (1e9, 10.0, 20e9, 0.5),
    (None, 10.0, 20e9, None), (1e9, 10.0, None, None), (1e9, None, 1.0, None), (0.0, 1.0, 1.0, None),
])
def test_mfu(per_sample, rate, peak, expected):
    got = flops.mfu(per_sample, rate, peak)
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_cpu_peak_sums_ranks_measured_together():
    assert flops.cpu_peak_flops([40.0, 38.5]) == pytest.approx(78.5e9)
    for bad in ([], [40.0, 0.0], [math.nan], [-1.0]):
        assert flops.cpu_peak_flops(bad) is None


@pytest.mark.parametrize("name, amp, precision, tflops", [
    ("NVIDIA A100-SXM4-80GB", "off", "tf32", 156.0),  # Paddle lets cuBLAS/cuDNN use TF32 for fp32
    ("NVIDIA A100-SXM4-80GB", "bf16", "bf16", 312.0),
    ("Tesla V100-SXM2-32GB", "off", "fp32", 15.7),   # no TF32 on Volta
    ("Tesla V100-SXM2-32GB", "fp16", "fp16", 125.0),
    ("NVIDIA H100 80GB HBM3", "fp16", "fp16", 989.4),
    ("Tesla T4", "off", "fp32", 8.1),
])
def test_gpu_peak_from_the_one_table(name, amp, precision, tflops):
    assert flops.gpu_precision(amp, name) == precision
    assert flops.gpu_peak_flops(name, precision, 8) == pytest.approx(8 * tflops * 1e12)
    assert flops.gpu_peak_flops(name, precision, 1) == devices.peak_flops(name, precision)


def test_unknown_gpu_has_no_peak():
    assert flops.gpu_precision("off", "Imaginary GPU 9000") == "fp32"
    assert flops.gpu_peak_flops("Imaginary GPU 9000", "fp32", 4) is None


@pytest.mark.parametrize("size, batch", [(224, 1), (224, 2), (448, 1)])  # sizes a multiple of 32
def test_resnet50_forward_macs_match_the_published_figure(size, batch):
    paddle = pytest.importorskip("paddle")
    from fleetbench.train import trace

    model = paddle.vision.models.resnet50()
    model.eval()
    counter = trace.count_forward_macs(model)
    with paddle.no_grad():
        model(paddle.rand([batch, 3, size, size]))
        per_sample = counter.forward_macs / counter.batch
        model(paddle.rand([batch, 3, size, size]))  # the hooks came off after the first forward
    assert counter.batch == batch and counter.forward_macs / counter.batch == per_sample
    expected = 4.09e9 * (size / 224) ** 2  # He et al. (2016) and torchvision: ~4.1 GMAC at 224x224
    assert per_sample == pytest.approx(expected, rel=0.01)
    if size == 224 and batch == 1:
        # paddle.flops counts the same convolutions and linear layer, plus norms, activations and pooling
        assert paddle.flops(model, [1, 3, 224, 224]) == pytest.approx(per_sample, rel=0.01)


def test_attention_and_transposed_convolutions_are_counted():
    paddle = pytest.importorskip("paddle")
    from fleetbench.train import trace

    attention = paddle.nn.MultiHeadAttention(embed_dim=16, num_heads=2)
    counter = trace.count_forward_macs(attention)
    attention(paddle.rand([2, 5, 16]))  # self-attention: 4 projections, Q K^T and the weighted sum
    assert counter.forward_macs == 4 * flops.linear_macs(2 * 5 * 16, [16, 16]) + flops.attention_macs(2, 5, 5, 16)
    up = paddle.nn.Conv2DTranspose(4, 6, 3)
    counter = trace.count_forward_macs(up)
    up(paddle.rand([1, 4, 8, 8]))
    assert counter.forward_macs == 4 * 8 * 8 * 6 * 9


def test_transformer_macs_by_layers_and_width():
    # BERT-Large at 128 tokens: 24 x (12 x 1024^2 x 128 + 2 x 128^2 x 1024) = 39.5 GMAC a sequence
    assert flops.transformer_forward_macs(24, 1024, 128) == pytest.approx(39.46e9, rel=1e-3)


def test_published_records_naming_a_gpu_get_mfu():
    from util import REPO

    from fleetbench.perfmodel import published
    from fleetbench.store import results

    seen = over = 0
    for path in sorted((REPO / "results" / "reference").glob("*.jsonl")):
        for record in results.load(str(path)):
            m = published.complete(record)["metrics"]
            if not record["config"].get("gpu"):  # ddl-benchmarks' table names no GPU: no peak to hold it to
                assert m.get("mfu") is None
                continue
            above = [d for d in m["derived"] if d.startswith("no mfu: the table's throughput is")]
            if above:  # PyTorch BERT on DGX-1, fp32 seq 512: 19 sequences/s is 1.22x a V100's fp32 peak
                over += 1
                assert m.get("mfu") is None and "x the V100" in above[0]
                continue
            if "peak_flops" not in m:  # a model no FLOPs count covers (Transformer-XL): said so, no MFU
                assert m.get("mfu") is None and any(d.startswith("no mfu: no forward FLOPs count") for d in m["derived"])
                continue
            seen += 1
            gpu = record["config"]["gpu"]  # fp32 is held to TF32 where the GPU has it (Paddle's and PyTorch's default)
            precision = {"tf32": "tf32", "amp": "fp16", "amp_o2": "fp16",
                         "fp32": flops.gpu_precision("off", gpu)}[record["config"]["precision"]]
            peak = devices.peak_flops(record["config"]["gpu"], precision) * record["world_size"]
            assert m["peak_flops"] == pytest.approx(peak)
            assert m["mfu"] == pytest.approx(m["model_flops_per_sample"] * record["metrics"]["throughput"] / peak)
            # (NVIDIA's BERT runs unpad their sequences, so MFU counted on seq_len tokens reads high: up to 0.85)
            assert 0.05 < m["mfu"] <= 1 and any(d.startswith("mfu (") for d in m["derived"])
    assert seen >= 10 and over == 2  # dle-pytorch-bert-dgx1's two fp32 seq-512 rows (1 and 8 GPUs)
    rn50 = published.complete(results.load(str(REPO / "results/reference/dle-paddle-rn50.jsonl"))[0])["metrics"]
    assert rn50["model_flops_per_sample"] == pytest.approx(6 * 4.089e9)
