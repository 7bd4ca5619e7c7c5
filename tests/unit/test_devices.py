"""The accelerator table: nvidia-smi's names and short names find their row; peaks by precision."""
import pytest

from fleetbench.measure import devices


@pytest.mark.parametrize("name, row", [
    ("Tesla V100-SXM2-32GB", "V100-SXM"), ("Tesla V100-SXM2-16GB", "V100-SXM"),
    ("Tesla V100-PCIE-16GB", "V100-PCIe"), ("NVIDIA A100-SXM4-80GB", "A100-SXM"),
    ("NVIDIA A100-SXM4-40GB", "A100-SXM"), ("NVIDIA A100-PCIE-40GB", "A100-PCIe"),
    ("NVIDIA A100 80GB PCIe", "A100-PCIe"), ("NVIDIA H100 80GB HBM3", "H100-SXM"),
    ("NVIDIA H100 PCIe", "H100-PCIe"), ("NVIDIA H800", "H800"), ("NVIDIA A800-SXM4-80GB", "A800"),
    ("Tesla T4", "T4"), ("NVIDIA A10", "A10"), ("Tesla K80", "K80"), ("Tesla P100-SXM2-16GB", "P100"),
    ("NVIDIA H200", "H200"), ("NVIDIA B200", "B200"), ("h200", "H200"),
    ("v100", "V100-SXM"), ("A100", "A100-SXM"), ("a100-40gb", "A100-SXM"), ("h100-sxm", "H100-SXM"),
])
def test_names_find_their_row(name, row):
    assert devices.lookup(name).name == row


@pytest.mark.parametrize("name", [None, "", "AMD EPYC 7B13", "NVIDIA GeForce RTX 4090", "A1000"])
def test_unknown_names_have_no_row(name):
    assert devices.lookup(name) is None
    assert devices.peak_flops(name) is None


def test_peaks_by_precision_with_fallbacks():
    assert devices.peak_flops("V100", "fp16") == 125e12
    assert devices.peak_flops("V100", "bf16") == 125e12     # no bf16 row: the fp16 one
    assert devices.peak_flops("V100", "tf32") == 15.7e12    # no TF32 on Volta: fp32
    assert devices.peak_flops("A100", "tf32") == 156e12
    assert devices.peak_flops("H100", "bf16") == 989.4e12
    assert devices.peak_flops("K80", "fp16") == 4.37e12
    assert devices.peak_flops("H100", "fp8") == 1978.9e12   # FP8 tensor cores: twice bf16, dense
    assert devices.peak_flops("B200", "fp8") == 2 * devices.peak_flops("B200", "bf16") == 4500e12
    with pytest.raises(KeyError):                            # no FP8 before Hopper, and no fallback
        devices.peak_flops("A100", "fp8")
    with pytest.raises(ValueError, match="fp4"):
        devices.peak_flops("H100", "fp4")


def test_memory_from_the_name_or_the_default():
    assert devices.memory_gib("NVIDIA A100-SXM4-40GB") == 40
    assert devices.memory_gib("A100") == 80
    assert devices.memory_gib("Tesla V100-SXM2-16GB") == 16
    assert devices.memory_gib("Tesla V100-SXM2-48GB") == 32   # not a size it is sold with
    assert devices.memory_gib("RTX") is None
