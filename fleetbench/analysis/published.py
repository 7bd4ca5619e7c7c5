"""Records that lack what the breakdown takes apart, completed from what they do carry: published
reference records (`fleetbench explain --published`) and GPU records without gradient sizes.

    step time        per-device batch x world size / throughput (a step is one batch per device),
                     only where the throughput counts what the batch counts (images, samples,
                     examples; not tokens)
    gradient bytes   measure/registry.GRADIENTS of the benchmark's model at its preset (computed
                     once from the Paddle model definition); a published model is matched to the
                     registered benchmark and preset that define the same network (MODELS)
    all-reduce calls one per gradient tensor for wfbp (its definition), else one per bucket of
                     Paddle's fused size (train/methods: 128 MiB after backward, 25 MiB overlapped)
    device           a published record's "GPU" becomes config.runtime.device, so that the model
                     takes its backend as NCCL (cells.Cell.gpu)

Every derived figure is named in `metrics.derived`, so no one mistakes it for a measured one.
"""
from __future__ import annotations

import copy
import math

from fleetbench.measure import registry

# The published table's model names -> (registered benchmark, preset) of the same network.
# BERT-Base is the bert_large script at preset `base` (12 layers, hidden 768: its presets file).
MODELS = {"ResNet-50": ("resnet50", "full"), "BERT-Large": ("bert_large", "full"),
          "BERT-Base": ("bert_large", "base")}
# ddl-benchmarks' all-reduce methods are fleetbench's methods of the same definition (train/methods.py);
# others (ByteScheduler, the PS rows) keep their published names and are predicted, if at all, as such.
METHODS = {"BSP-A2A": "bsp", "WFBP-A2A": "wfbp", "MG-WFBP": "mgwfbp"}
COUNTED_BY_BATCH = ("images/s", "samples/s", "examples/s", "sequences/s")
MIB = 2 ** 20
BUCKET_MIB = {"bsp": 128, "fp16_allreduce": 128}  # Paddle's fused_allreduce_gradients bucket
OVERLAPPED_BUCKET_MIB = 25  # Paddle DataParallel's default comm_buffer_size


def is_published(record: dict) -> bool:
    return ((record.get("source") or {}).get("kind")) == "published"


def _model_of(record: dict) -> tuple[str, str | None]:
    """(benchmark, preset) whose model the record trained."""
    model = (record.get("config") or {}).get("model")
    return MODELS.get(model, (record["benchmark"], record.get("preset")))


def calls_per_step(method: str, grad_bytes: float, tensors: int) -> int:
    if method == "wfbp":
        return tensors
    return max(1, math.ceil(grad_bytes / (BUCKET_MIB.get(method, OVERLAPPED_BUCKET_MIB) * MIB)))


def _step_ms(record: dict) -> float | None:
    metrics, batch = record["metrics"], (record.get("config") or {}).get("batch_size")
    if not batch or not metrics.get("throughput") or metrics.get("unit") not in COUNTED_BY_BATCH:
        return None
    return 1e3 * batch * record["world_size"] / metrics["throughput"]


def complete(record: dict) -> dict:
    """A copy of `record` with the step time, gradient sizes and calls it lacks derived (and
    named in metrics.derived); the record itself when there is nothing to derive."""
    metrics = record.get("metrics") or {}
    out = copy.deepcopy(record)
    m, derived = out["metrics"], []
    if is_published(record):
        out["method"] = METHODS.get(record["method"], record["method"])
        if str(out["config"].get("device", "")).upper() == "GPU":
            out["config"].setdefault("runtime", {})["device"] = "gpu"
    if metrics.get("step_time_ms") is None and _step_ms(record) is not None:
        m["step_time_ms"] = _step_ms(record)
        derived.append("step_time_ms (batch x world size / throughput)")
    sizes = registry.gradients(*_model_of(record))
    if metrics.get("comm_bytes_per_step") is None and sizes and out["method"] != "none":
        m["grad_bytes"], m["grad_tensors"] = sizes
        m["comm_bytes_per_step"] = float(sizes[0])
        m["comm_buckets_per_step"] = calls_per_step(out["method"], *sizes)
        derived.append("comm_bytes_per_step, comm_buckets_per_step (registry gradients of "
                       f"{' '.join(p for p in _model_of(record) if p)})")
    if not derived:
        return record if not is_published(record) else out
    m["derived"] = derived
    return out


def adopt(records: list[dict], published: bool) -> list[dict]:
    """Records completed for the model: published ones only when asked (`published`), GPU records
    measured here always (a CPU record measured here has its own figures and is left alone)."""
    out = []
    for record in records:
        gpu = str(((record.get("config") or {}).get("runtime") or {}).get("device", "")).startswith("gpu")
        if record.get("error") is None and (published and is_published(record) or gpu and not is_published(record)):
            out.append(complete(record))
        else:
            out.append(record)
    return out
