"""How much of a step's all-reduce hides behind backward, from the model alone: the order and
sizes of its gradients, when each is ready, the bucketing the method uses and the link.

Backward runs the layers in reverse; a gradient is ready when the last layer that uses its
parameter has run backward (a tied embedding: at the very end). A bucket is sent when its last
gradient is ready, and buckets go one after another on the link (NCCL serialises the collectives
of one communicator). This is NCCL's case, whose all-reduce runs on its own stream beside backward;
gloo (CPU) runs each bucket's all-reduce to its end on the thread that runs backward, so nothing
hides there (GLOO_SERIAL: measured by the step breakdown, train/phases.py):

    start_k = max(ready_k, end_(k-1)),   end_k = start_k + call(bytes_k)
    exposed = max(0, end_last - backward)

ready_k = backward x (share of the backward FLOPs done when bucket k's last gradient is ready);
backward = BACKWARD_SHARE x the step's compute. Buckets (BUCKET): one a gradient (wfbp), or
gradients merged in ready order up to a cap (Paddle's DataParallel and PyTorch DDP: 25 MiB, the
first bucket 1 MiB; Horovod's tensor fusion: 64 MiB), or all after backward (bsp: nothing hides).
A record may set the cap (`config.comm_buffer_mb`, `config.bucket_mb`).

The gradient order (ORDER_FILE) is computed once from the Paddle models of the registry's
benchmarks at their presets by tools/gradient_order.py (each trainable tensor's fp32 bytes and the
share of backward FLOPs done when it is ready); a published record may give its own
(`metrics.grad_tensor_bytes`, in ready order, and optionally `metrics.grad_ready`). Not modelled:
compute slowed by communication kernels running beside it, and priorities (ByteScheduler).
"""
from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

ORDER_FILE = Path(__file__).with_name("gradient_order.json")
MIB = 2 ** 20
# Backward's share of a step's compute (point, fewest, most): 2/3 of forward + backward by FLOPs
# (backward computes the input and the weight gradient, each about a forward), less the optimizer
# update and the input pipeline, put at 10% of the step (0 to 25%).
BACKWARD_SHARE = (0.6, 0.5, 2 / 3)
BUCKET = {"wfbp": (0, 0), "wfbp-ps": (0, 0), "bytescheduler-ps": (0, 0), "mgwfbp": (25, 1), "grad_merge": (25, 1)}  # (cap MiB, first bucket MiB)
FRAMEWORK_BUCKET = {"horovod": (64, 64)}  # tensor fusion: HOROVOD_FUSION_THRESHOLD's default
OVERLAPPED = tuple(BUCKET)
# Why a CPU cell's overlapped method is predicted as exposed as a post-backward one: measured on
# 2-rank ResNet50 mgwfbp/wfbp/grad_merge runs (every reducer call inside backward and on its thread:
# step_breakdown's comm_in_backward = comm_blocking = comm) and read in Paddle's source
# (ProcessGroupGloo::AllReduce runs its task in the call).
GLOO_SERIAL = ("gloo runs each bucket's all-reduce on the backward thread (measured: step breakdown's "
               "comm_blocking = comm): nothing hides")


@dataclasses.dataclass(frozen=True)
class Order:
    """Gradients in the order backward makes them ready: (fp32 bytes, share of backward done)."""
    tensors: tuple
    source: str

    @property
    def total(self) -> float:
        return float(sum(b for b, _ in self.tensors))


@functools.lru_cache(maxsize=1)
def _table() -> dict:
    return json.loads(ORDER_FILE.read_text()) if ORDER_FILE.exists() else {}


def registered(benchmark: str, preset: str | None) -> Order | None:
    entry = _table().get(f"{benchmark} {preset or 'full'}")
    if entry is None:
        return None
    return Order(tuple((b, r) for b, r in entry["tensors"]), f"gradient order of {benchmark} {preset or 'full'} "
                 "(tools/gradient_order.py, from the Paddle model)")


def given(metrics: dict) -> Order | None:
    """An order the record gives: sizes in ready order, readiness spread evenly unless given."""
    sizes = metrics.get("grad_tensor_bytes")
    if not sizes:
        return None
    ready = metrics.get("grad_ready") or [(i + 1) / len(sizes) for i in range(len(sizes))]
    return Order(tuple(zip(sizes, ready)), "gradient sizes given in the record")


def bucket_caps(method: str, config: dict) -> tuple[float, float]:
    """(cap, first bucket) in bytes of the method's buckets; (0, 0): one call a gradient."""
    cap, first = BUCKET[method]
    framework = str(config.get("framework") or "").lower()
    for name, sizes in FRAMEWORK_BUCKET.items():
        if name in framework:
            cap, first = sizes
    given_mb = config.get("comm_buffer_mb") or config.get("bucket_mb")
    if given_mb and method != "wfbp":
        cap, first = float(given_mb), min(first, float(given_mb))
    return cap * MIB, first * MIB


def buckets(order: Order, scale: float, caps: tuple[float, float]) -> list[tuple[float, float]]:
    """(bytes sent, share of backward done when ready) of each call; bytes x `scale` (precision)."""
    cap, first = caps
    out, size, limit = [], 0.0, first or cap
    for nbytes, ready in order.tensors:
        size += nbytes * scale
        if size >= limit or not cap:
            out.append((size, ready))
            size, limit = 0.0, cap
    if size:
        out.append((size, order.tensors[-1][1]))
    return out


def exposed_ms(calls: list[tuple[float, float]], backward_ms: float, call_ms) -> float:
    """Communication left after backward ends (module doc); `call_ms(bytes)` prices one call."""
    end = 0.0
    for nbytes, ready in calls:
        end = max(end, ready * backward_ms) + call_ms(nbytes)
    return max(0.0, end - backward_ms)


def best_merge_ms(order: Order, scale: float, backward_ms: float, call_ms) -> float:
    """The least exposure over a ladder of bucket caps (MG-WFBP merges to minimise it)."""
    ladder = [(0.0, 0.0)] + [(mb * MIB, min(1.0, mb) * MIB) for mb in (1, 4, 16, 25, 64, 256)]
    return min(exposed_ms(buckets(order, scale, caps), backward_ms, call_ms) for caps in ladder)


def solve_bandwidth(exposure_ms: float, exposed_at) -> float | None:
    """The bus bandwidth (GB/s) at which `exposed_at(bandwidth)` equals `exposure_ms`, by bisection
    in log-bandwidth between 0.01 and 10^4 GB/s; None when no bandwidth there exposes that much."""
    lo, hi = 0.01, 1e4
    if exposure_ms <= 0 or exposed_at(lo) < exposure_ms:
        return None
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if exposed_at(mid) > exposure_ms else (lo, mid)
    return (lo * hi) ** 0.5
