"""The accelerators fleetbench knows by name: peak dense FLOP/s per precision, memory, NVLink.

One table for every reader: MFU beside a throughput (the record's device, a published table's GPU),
`fleetbench plan` (memory per GPU, the tensor-parallel all-reduce over NVLink) and `explain`. Pure
data, no Paddle, no tools: a device is named by what `nvidia-smi` prints ("Tesla V100-SXM2-32GB",
"NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3") or by a short name ("V100", "a100-40gb").

Figures are the vendors' datasheet peaks for *dense* math (no 2:4 sparsity), per GPU, boost clock:
- V100 SXM2: fp32 15.7, tensor fp16 125 TFLOP/s; NVLink 2, 6 links x 25 GB/s each way.
- V100 PCIe: fp32 14, tensor fp16 112.
- A100 SXM4: fp32 19.5, tf32 156, fp16/bf16 312; NVLink 3, 12 links x 25 GB/s each way.
- A100 PCIe: the same math; NVLink bridge pairs only (none assumed).
- A800 / H800: A100 / H100 math with NVLink cut to 8 links (200 / 200 GB/s each way).
- H100 SXM5: fp32 67, tf32 494.7, fp16/bf16 989.4; NVLink 4, 18 links x 25 GB/s each way.
- H100 PCIe: fp32 51, tf32 378, fp16/bf16 756.
- FP8 (E4M3/E5M2 tensor cores, Hopper on): H100 SXM5 1978.9, H100 PCIe 1513, H800 1978.9; H200 SXM
  the H100's math (fp32 67, tf32 494.7, bf16 989.4, fp8 1978.9) with 141 GB of HBM3e at 4.8 TB/s,
  NVLink 4 (450 GB/s each way); B200 (HGX B200, 1000 W: the 8-GPU board's sparse figures / 8 / 2):
  fp32 75, tf32 1125, fp16/bf16 2250, fp8 4500, 180 GB of HBM3e at 8 TB/s, NVLink 5 (900 GB/s each way).
- GB200 and GB300 (a Blackwell GPU of the NVL72 rack, 1200 W: the rack's sparse figures / 72 / 2):
  GB200 fp32 80, tf32 1250, bf16 2500, fp8 5000, 186 GB HBM3e at 8 TB/s; GB300 the same bf16 and
  fp8 (its gain is FP4), fp32 75, 288 GB; both NVLink 5, 72 GPUs a domain (`--gpus-per-node 72`).
- A10: fp32 31.2, tf32 62.5, fp16 125. T4: fp32 8.1, fp16 65. P100 SXM2: fp32 10.6, fp16 21.2.
- K80 (one of the board's two GK210 GPUs, boost): fp32 4.37, no fp16 math faster than fp32.
A CPU has no row: its peak is measured on the rank's threads (the diagnose probe's GEMM).
"""
from __future__ import annotations

import dataclasses
import functools
import re

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")


@dataclasses.dataclass(frozen=True)
class Device:
    name: str                # the short name tables and flags use
    tflops: dict             # precision -> peak dense TFLOP/s (fp32 and fp16 at least)
    memory_gib: tuple        # the memory sizes it is sold with, GiB (the first is the default)
    nvlink_GBps: float = 0.0  # NVLink bandwidth one GPU sends per direction, GB/s (0: PCIe only)
    pattern: str = ""        # a regular expression nvidia-smi's name matches (case ignored)

    def peak_tflops(self, precision: str) -> float:
        """Peak dense TFLOP/s at `precision`; bf16 falls back to fp16, tf32 to fp32; fp8 only where
        the GPU has FP8 tensor cores (KeyError otherwise, as a missing fp16 is)."""
        fallback = {"bf16": "fp16", "tf32": "fp32"}
        if precision == "fp8":
            return self.tflops["fp8"]
        return self.tflops.get(precision) or self.tflops[fallback.get(precision, "fp32")]


TABLE = (
    Device("GB300", {"fp32": 75.0, "tf32": 1250.0, "fp16": 2500.0, "bf16": 2500.0, "fp8": 5000.0}, (288,), 900.0,
           r"\bgb300\b"),
    Device("GB200", {"fp32": 80.0, "tf32": 1250.0, "fp16": 2500.0, "bf16": 2500.0, "fp8": 5000.0}, (186,), 900.0,
           r"\bgb200\b"),
    Device("B200", {"fp32": 75.0, "tf32": 1125.0, "fp16": 2250.0, "bf16": 2250.0, "fp8": 4500.0}, (180,), 900.0,
           r"\bb200\b"),
    Device("H200", {"fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9}, (141,), 450.0,
           r"\bh200\b"),
    Device("H100-SXM", {"fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9}, (80,), 450.0,
           r"\bh100\b(?!.*pcie)"),
    Device("H100-PCIe", {"fp32": 51.0, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0, "fp8": 1513.0}, (80,), 0.0,
           r"\bh100\b.*pcie"),
    Device("H800", {"fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9}, (80,), 200.0,
           r"\bh800\b"),
    Device("A100-SXM", {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0}, (80, 40), 300.0,
           r"\ba100\b(?!.*pcie)"),
    Device("A100-PCIe", {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0}, (80, 40), 0.0,
           r"\ba100\b.*pcie"),
    Device("A800", {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0}, (80, 40), 200.0, r"\ba800\b"),
    Device("V100-SXM", {"fp32": 15.7, "fp16": 125.0}, (32, 16), 150.0, r"\bv100\b(?!.*pcie)"),
    Device("V100-PCIe", {"fp32": 14.0, "fp16": 112.0}, (32, 16), 0.0, r"\bv100\b.*pcie"),
    Device("A10", {"fp32": 31.2, "tf32": 62.5, "fp16": 125.0, "bf16": 125.0}, (24,), 0.0, r"\ba10\b"),
    Device("T4", {"fp32": 8.1, "fp16": 65.0}, (16,), 0.0, r"\bt4\b"),
    Device("P100", {"fp32": 10.6, "fp16": 21.2}, (16,), 80.0, r"\bp100\b"),
    Device("K80", {"fp32": 4.37}, (12,), 0.0, r"\bk80\b"),
)
_ALIASES = {"h100": "H100-SXM", "a100": "A100-SXM", "v100": "V100-SXM"}


def known() -> str:
    return ", ".join(d.name for d in TABLE)


@functools.lru_cache(maxsize=256)  # pure, and `fleetbench plan`'s search asks it hundreds of thousands of times
def lookup(name: str | None) -> Device | None:
    """The device a name means: a short name of TABLE (any case, '-SXM' optional) or what
    nvidia-smi prints; None for a name it does not know (a CPU, a GPU not in the table)."""
    if not name:
        return None
    key = name.strip().lower()
    for d in TABLE:
        if key == d.name.lower():
            return next(x for x in TABLE if x.name == _ALIASES.get(key, d.name))
    if key in _ALIASES:
        return next(d for d in TABLE if d.name == _ALIASES[key])
    size = re.search(r"(\d+)\s*gb", key)
    stripped = re.sub(r"[-_ ]?\d+\s*gb\b", "", key) if size else key
    if stripped in _ALIASES:
        return next(d for d in TABLE if d.name == _ALIASES[stripped])
    return next((d for d in TABLE if re.search(d.pattern, key)), None)


@functools.lru_cache(maxsize=256)
def memory_gib(name: str) -> float | None:
    """The memory of the device a name means: the size it names ('A100-40GB'), else its default."""
    device = lookup(name)
    if device is None:
        return None
    size = re.search(r"(\d+)\s*gb", name.lower())
    return float(size.group(1)) if size and int(size.group(1)) in device.memory_gib else float(device.memory_gib[0])


def peak_flops(name: str | None, precision: str = "fp32") -> float | None:
    """Peak dense FLOP/s (not tera) of the device a name means at `precision`, or None."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    device = lookup(name)
    return device.peak_tflops(precision) * 1e12 if device else None


# Memory bandwidth a GPU, GB/s (vendors' datasheets), by TABLE name and memory size where the two
# sizes differ (A100 40GB: HBM2 1555; 80GB: HBM2e 2039 SXM, 1935 PCIe). `fleetbench plan` prices
# a layer's memory-bound work (norms, dropout, softmax, activations) with it.
HBM_GBPS = {"GB300": 8000.0, "GB200": 8000.0, "B200": 8000.0, "H200": 4800.0, "H100-SXM": 3350.0, "H100-PCIe": 2000.0, "H800": 3350.0, "A100-SXM": {80: 2039.0, 40: 1555.0},
            "A100-PCIe": {80: 1935.0, 40: 1555.0}, "A800": {80: 2039.0, 40: 1555.0}, "V100-SXM": 900.0,
            "V100-PCIe": 900.0, "A10": 600.0, "T4": 320.0, "P100": 732.0, "K80": 240.0}


@functools.lru_cache(maxsize=256)
def hbm_GBps(name: str) -> float | None:
    """Memory bandwidth of the device a name means (its memory size's, 'A100-40GB'), or None."""
    device = lookup(name)
    if device is None:
        return None
    value = HBM_GBPS[device.name]
    return value[int(memory_gib(name))] if isinstance(value, dict) else value
