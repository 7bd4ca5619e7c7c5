"""Every figure `fleetbench diagnose` produces, declared once: its name (units in the name, as
timm's), what it describes (a node, a link, the all-node job), the test that produces it, its
unit, which way is better, and, for a GPU node, how the node's devices combine into its figure.
A rule naming a metric not in this table is refused before any test runs (fleetbench.diagnose.judging.rules),
and a rule whose metric no test produced is reported `not measured`.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable

NODE_PROBE = "node probe (fleetbench.diagnose.probe node)"
LINK_PROBE = "link test (raw TCP between the pair's addresses)"
IPERF3 = "--iperf3: iperf3 between the pair"
PADDLE_PAIR = "--paddle-links: the comm benchmark on each pair"
PADDLE_ALL = "--paddle-links with 3 nodes or more: the comm benchmark on all nodes"
GPU_PROBE = "GPU probe (a CUDA build of Paddle with GPUs)"
NVIDIA_SMI = "nvidia-smi sampled under the GPU probe's load (GPU nodes)"
# how a GPU node's devices make its figure: one bad GPU slows every synchronous job on the node,
# so the node is its worst device; error counts add up
COMBINE = {"min": min, "max": max, "sum": sum}
# Beside a test's figures: {metric: % of the machine's CPU time others used while it was measured,
# the quietest of its measurements} (fleetbench.diagnose.probe). Not a metric: never judged itself.
OTHERS = "others_cpu_pct"


@dataclasses.dataclass(frozen=True)
class Metric:
    name: str
    scope: str          # node | link | cluster
    producer: str       # the test that produces it
    unit: str
    higher_is_better: bool = True
    combine: str = ""   # a GPU node's devices -> the node's figure: min | max | sum ("" : one figure a node)


TABLE = (
    Metric("matmul_gflops", "node", NODE_PROBE, "GFLOP/s"),
    Metric("triad_gbps", "node", NODE_PROBE, "GB/s"),
    Metric("train_images_per_s", "node", NODE_PROBE, "images/s"),
    Metric("link_gbps", "link", LINK_PROBE, "Gbit/s"),
    Metric("iperf3_gbps", "link", IPERF3, "Gbit/s"),
    Metric("sendrecv_busbw_GBps", "link", PADDLE_PAIR, "GB/s"),
    Metric("allreduce_busbw_GBps", "link", PADDLE_PAIR, "GB/s"),
    Metric("cluster_sendrecv_busbw_GBps", "cluster", PADDLE_ALL, "GB/s"),
    Metric("cluster_allreduce_busbw_GBps", "cluster", PADDLE_ALL, "GB/s"),
    Metric("gpu_matmul_fp32_tflops", "node", GPU_PROBE, "TFLOP/s", combine="min"),
    Metric("gpu_matmul_tf32_tflops", "node", GPU_PROBE, "TFLOP/s", combine="min"),  # compute capability 8.0+
    Metric("gpu_matmul_fp16_tflops", "node", GPU_PROBE, "TFLOP/s", combine="min"),
    Metric("gpu_mem_copy_gbps", "node", GPU_PROBE, "GB/s", combine="min"),
    Metric("gpu_sm_clock_ratio", "node", NVIDIA_SMI, "SM clock / its maximum", combine="min"),
    Metric("gpu_temperature_c", "node", NVIDIA_SMI, "°C", higher_is_better=False, combine="max"),
    Metric("gpu_ecc_uncorrected_errors", "node", NVIDIA_SMI, "errors", higher_is_better=False, combine="sum"),
    Metric("gpu_ecc_corrected_errors", "node", NVIDIA_SMI, "errors", higher_is_better=False, combine="sum"),
)
METRICS = {m.name: m for m in TABLE}


def known() -> str:
    """The metric names, for a one-line error."""
    return ", ".join(METRICS)


def node_of_devices(per_device: Iterable[dict]) -> dict:
    """A GPU node's figures from its devices' (each a dict of metric -> value or None): each metric
    combined as the table says; a metric no device reported is left out."""
    rows = list(per_device)
    out = {}
    for metric in (m for m in TABLE if m.combine):
        values = [r[metric.name] for r in rows if r.get(metric.name) is not None]
        if values:
            out[metric.name] = COMBINE[metric.combine](values)
    return out
