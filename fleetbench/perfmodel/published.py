"""Records that lack what the breakdown takes apart, completed from what they do carry: published
reference records (`fleetbench explain --published`) and GPU records without gradient sizes.

    step time        per-device batch x world size / throughput (a step: one micro-batch a device),
                     in samples (images/s, samples/s, sequences/s, examples/s), or in tokens
                     (tokens/s, words/s) with config.tokens_per_sample (or config.seq_len) tokens
                     a sample
    gradient bytes   the record's own (metrics.grad_bytes: float32 bytes of the trainable
                     parameters, or metrics.grad_tensor_bytes), else measure/registry.GRADIENTS of
                     the model: config.model matched by name or alias (MODELS, ALIASES) to the
                     registered benchmark and preset that define the same network; then scaled to
                     the bytes a gradient element travels in (perfmodel/gradbytes: config.precision,
                     config.grad_dtype)
    sync             config.grad_merge_steps micro-batches a device between all-reduces (gradient
                     accumulation, default 1): the bytes and calls a step sends are divided by it
    all-reduce calls one per gradient tensor for wfbp (its definition), else one per bucket of
                     Paddle's fused size (train/methods: 128 MiB after backward, 25 MiB overlapped)
    device           a published record's "GPU" (or no device: published tables are GPU tables)
                     becomes config.runtime.device, so that the model takes its backend as NCCL
                     (cells.Cell.gpu); config.device "CPU" keeps gloo

Every derived figure is named in `metrics.derived`, so no one mistakes it for a measured one. A
published record the model cannot read (unknown model without gradient bytes, unknown precision,
tokens without tokens a sample, no batch size) is refused in one line (PublishedError).
"""
from __future__ import annotations

import copy
import json
import math
import re

from fleetbench import cmdline
from fleetbench.measure import flops, registry
from fleetbench.perfmodel import gradbytes, modeldef

# Published model names -> (registered benchmark, preset) of the same network. BERT-Base is the
# bert_large script at preset `base` (12 layers, hidden 768: its presets file).
MODELS = {"ResNet-50": ("resnet50", "full"), "BERT-Large": ("bert_large", "full"),
          "BERT-Base": ("bert_large", "base")}
# Other spellings of the same networks (compared lower-case, letters and digits only). ResNet-50
# v1.5 moves a stride, not a parameter; the uncased BERTs are the registry's (vocabulary 30522).
ALIASES = {"resnet50": "ResNet-50", "rn50": "ResNet-50", "resnet50v15": "ResNet-50", "resnet50v1": "ResNet-50",
           "bertlarge": "BERT-Large", "bertlargeuncased": "BERT-Large", "bertbase": "BERT-Base",
           "bertbaseuncased": "BERT-Base"}
# ddl-benchmarks' all-reduce methods are fleetbench's methods of the same definition (train/methods.py);
# others (ByteScheduler, the PS rows) keep their published names and are listed as not predicted.
METHODS = {"BSP-A2A": "bsp", "WFBP-A2A": "wfbp", "MG-WFBP": "mgwfbp", "BSP-PS": "bsp-ps", "WFBP-PS": "wfbp-ps",
           "ByteScheduler-PS": "bytescheduler-ps"}
# A synchronous parameter server (BytePS as ddl-benchmarks runs it: the workers of a node aggregate
# first; as many servers as worker nodes, on hosts of their own, byteps/launch.sh): each worker node
# pushes S to the servers and pulls S back a step, whatever the nodes. A published synchronous PS
# cell is predicted as the all-reduce of its method (post-backward, or one call a tensor
# overlapped), from its own 1-node run (the node's aggregation), with the inter-node rate scaled so
# the ring's 2(n-1)/n S takes S's time (links.servers_apart). docs/guide/explain.md, PS.
# ByteScheduler over the PS sends a tensor's partitions by priority as backward makes them: at
# least what one call a tensor hides (its priority scheduling into the next forward is not modelled).
SYNC_PS = ("bsp-ps", "wfbp-ps", "bytescheduler-ps")
COUNTED_BY_BATCH = ("images/s", "samples/s", "examples/s", "sequences/s")
COUNTED_IN_TOKENS = ("tokens/s", "words/s")
MIB = 2 ** 20
BUCKET_MIB = {"bsp": 128, "fp16_allreduce": 128}  # Paddle's fused_allreduce_gradients bucket
OVERLAPPED_BUCKET_MIB = 25  # Paddle DataParallel's default comm_buffer_size


class PublishedError(cmdline.UserError):
    """A published record the model cannot read; the message is one line naming it."""


def is_published(record: dict) -> bool:
    return ((record.get("source") or {}).get("kind")) == "published"


def _where(record: dict) -> str:
    source = record.get("source") or {}
    return f"published record {source.get('name', '?')} [{source.get('cell') or record.get('id')}]"


def _key(name: str) -> str:
    """A model name compared: lower-case letters and digits, a remark in brackets dropped."""
    return re.sub(r"[^a-z0-9]", "", re.sub(r"\(.*?\)|\[.*?\]", "", str(name).lower()))


def known_models() -> str:
    return "; ".join(f"{name} ({', '.join(a for a, n in ALIASES.items() if n == name)})" for name in MODELS)


def model_of(record: dict) -> tuple[str, str | None] | None:
    """(benchmark, preset) whose registered model the record trained, or None when not known."""
    model = (record.get("config") or {}).get("model")
    if model is None:
        return record["benchmark"], record.get("preset")
    name = model if model in MODELS else ALIASES.get(_key(model))
    return MODELS.get(name) if name else None


def calls_per_step(method: str, grad_bytes: float, tensors: int) -> int:
    if method in ("wfbp", "wfbp-ps", "bytescheduler-ps"):
        return tensors
    return max(1, math.ceil(grad_bytes / (BUCKET_MIB.get(method, OVERLAPPED_BUCKET_MIB) * MIB)))


def tokens_per_sample(config: dict) -> float | None:
    value = config.get("tokens_per_sample") or config.get("seq_len")
    return float(value) if value else None


def _step_ms(record: dict) -> float:
    metrics, config = record["metrics"], record.get("config") or {}
    batch, unit = config.get("batch_size"), metrics.get("unit")
    where = _where(record)
    if not batch:
        raise PublishedError(f"{where}: config.batch_size missing (samples a device a step are needed "
                             "for the step time)")
    per_sample = 1.0
    if unit in COUNTED_IN_TOKENS:
        per_sample = tokens_per_sample(config)
        if not per_sample:
            raise PublishedError(f"{where}: metrics.unit {unit} needs config.tokens_per_sample (or "
                                 "config.seq_len): the tokens in one sample")
    elif unit not in COUNTED_BY_BATCH:
        raise PublishedError(f"{where}: metrics.unit {unit!r}: a training throughput is one of "
                             f"{', '.join(COUNTED_BY_BATCH + COUNTED_IN_TOKENS)}")
    if not metrics.get("throughput"):
        raise PublishedError(f"{where}: metrics.throughput must be above 0")
    return 1e3 * batch * per_sample * record["world_size"] / metrics["throughput"]


def sizes_of(record: dict) -> tuple[float, int, str]:
    """(float32 gradient bytes, tensors, where from) of the record's model; PublishedError if none."""
    metrics = record.get("metrics") or {}
    if metrics.get("grad_tensor_bytes"):
        sizes = metrics["grad_tensor_bytes"]
        return float(sum(sizes)), len(sizes), "gradient sizes given in the record"
    if metrics.get("grad_bytes") and is_published(record):
        tensors = metrics.get("grad_tensors") or 1
        return float(metrics["grad_bytes"]), int(tensors), "gradient bytes given in the record"
    model = model_of(record)
    sizes = registry.gradients(*model) if model else None
    if sizes is None:
        raise PublishedError(f"{_where(record)}: config.model {record['config'].get('model', record['benchmark'])!r}: "
                             f"no gradient sizes known (known models: {known_models()}); give "
                             "its definition (config.model_def, or --model-def FILE), config.params or "
                             "metrics.grad_bytes (float32 bytes of its trainable parameters)")
    return float(sizes[0]), sizes[1], f"registry gradients of {' '.join(p for p in model if p)}"


def sync_every(record: dict) -> int:
    """Micro-steps a device runs between all-reduces: gradient accumulation of a published table,
    or our grad_merge method's steps."""
    config = record.get("config") or {}
    if is_published(record) or record.get("method") == "grad_merge":
        return max(1, int(config.get("grad_merge_steps") or 1))
    return 1


def _derive_bytes(out: dict, record: dict) -> list[str]:
    m, config = out["metrics"], out["config"]
    where = _where(record) if is_published(record) else f"record {record.get('id')}"
    element, _, _, why = gradbytes.precision_bytes(config, where)
    fp32_bytes, tensors, source = sizes_of(out)
    k = sync_every(record)
    m["grad_bytes"], m["grad_tensors"] = fp32_bytes * element / 4, tensors
    m["comm_bytes_per_step"] = m["grad_bytes"] / k
    m["comm_buckets_per_step"] = calls_per_step(out["method"], m["grad_bytes"], tensors) / k
    per = f", once every {k} micro-steps" if k > 1 else ""
    return [f"comm_bytes_per_step, comm_buckets_per_step ({source}; {why}{per})"]


def _from_definition(out: dict, where: str) -> list[str]:
    """A model outside the registry given by its definition (config.model_def, perfmodel/modeldef)
    or its parameter count (config.params): its gradient sizes and readiness, written into the
    copy's metrics as a record that gives its own would carry them."""
    m, config = out["metrics"], out.get("config") or {}
    model = model_of(out)
    if m.get("grad_tensor_bytes") or m.get("grad_bytes") or (model and registry.gradients(*model)):
        return []
    if config.get("model_def"):
        try:
            m["grad_tensor_bytes"], m["grad_ready"] = modeldef.gradients(config["model_def"], where)
        except modeldef.ModelDefError as exc:
            raise PublishedError(str(exc)) from None
        return [f"grad_tensor_bytes, grad_ready (from config.model_def, kind {config['model_def'].get('kind')}: "
                f"{sum(m['grad_tensor_bytes']) / 4e6:.1f} M parameters in {len(m['grad_tensor_bytes'])} tensors)"]
    if config.get("params"):
        m["grad_tensor_bytes"], m["grad_ready"] = modeldef.gradients({"kind": "params", "params": config["params"]},
                                                                    where)
        return [f"grad_tensor_bytes (config.params {config['params']}: 100 equal tensors, ready evenly through "
                "backward: the order is not known)"]
    return []


def complete(record: dict) -> dict:
    """A copy of `record` with the step time, gradient sizes and calls it lacks derived (and
    named in metrics.derived); the record itself when there is nothing to derive."""
    metrics = record.get("metrics") or {}
    out = copy.deepcopy(dict(record))  # a loaded Record is read-only: complete a plain copy of its JSON object
    m, derived = out["metrics"], []
    if is_published(record):
        out["method"] = METHODS.get(record["method"], record["method"])
        gradbytes.precision_name(out["config"].get("precision"), _where(record))
        device = str(out["config"].get("device") or "GPU").upper()
        if device.startswith("GPU"):  # a published table that does not say ran on GPUs (they all do)
            out["config"].setdefault("runtime", {})["device"] = "gpu"
        if record["mode"] == "ps" and out["method"] in SYNC_PS:
            out["mode"] = "collective"
            derived.append(f"mode collective: synchronous parameter server {record['method']} with as many servers "
                           "as worker nodes on hosts of their own, predicted through the all-reduce model with a "
                           "worker node's S each way a step (links.servers_apart)")
        if metrics.get("step_time_ms") is None and out["mode"] == "collective":
            m["step_time_ms"] = _step_ms(record)
            derived.append("step_time_ms (batch x world size / throughput)")
    elif metrics.get("step_time_ms") is None:
        return record
    if metrics.get("comm_bytes_per_step") is None and out["method"] != "none" and out["mode"] == "collective":
        derived += _from_definition(out, _where(record) if is_published(record) else f"record {record.get('id')}")
        try:
            derived += _derive_bytes(out, record)
        except PublishedError:
            if is_published(record):
                raise
    if is_published(record) and m.get("mfu") is None:
        derived += _derive_mfu(out, record)
    if not derived:
        return record if not is_published(record) else out
    m["derived"] = derived
    return out


def _work_key(record: dict) -> tuple:
    config = {k: v for k, v in (record.get("config") or {}).items() if k != "grad_merge_steps"}
    return (record["source"].get("name"), record["benchmark"], json.dumps(config, sort_keys=True, default=str))


FROM_NODE = "a 1-GPU step taken as the 1-node run's micro-step"  # marks single_from_node's records


def from_node(record: dict) -> bool:
    """A 1-GPU record single_from_node derived from a 1-node run (it carries that node's sharing)."""
    return any(str(d).startswith(FROM_NODE) for d in (record.get("source") or {}).get("derived") or [])


def single_from_node(records: list[dict]) -> list[dict]:
    """A derived 1-GPU record for every published work that has a 1-node run but no 1-GPU run (a
    table that benchmarks one batch across nodes only): its step is the 1-node run's micro-step,
    so the node's all-reduce and node sharing are taken as compute and the model starts from the
    1-node cell (docs/guide/explain.md, "Compute from the 1-node cell"). Said in `source.derived`."""
    pub = [r for r in records if is_published(r) and r["mode"] == "collective" and r.get("error") is None]
    singles = {_work_key(r) for r in pub if r["world_size"] == 1}
    out, seen = [], set()
    for record in sorted(pub, key=lambda r: r["world_size"]):
        key = _work_key(record)
        if record["nodes"] != 1 or record["world_size"] == 1 or key in singles or key in seen:
            continue
        seen.add(key)
        single = copy.deepcopy(dict(record))
        single.update(devices_per_node=1, world_size=1, id=f"{record['id']}-1gpu")
        single["metrics"]["throughput"] = record["metrics"]["throughput"] / record["world_size"]
        single["metrics"].pop("throughput_std", None)
        single["source"] = dict(record["source"], cell=f"{record['source'].get('cell')} (1 GPU from the node)",
                                derived=list(record["source"].get("derived") or []) + [
                                    f"{FROM_NODE}: no 1-GPU run of this work "
                                    "is published, so the node's all-reduce and sharing are counted as compute"])
        out.append(single)
    return out


# a published precision (gradbytes.precision_name's) -> the peak it is held to; fp32: TF32 where the GPU has it
PEAK_PRECISION = {"tf32": "tf32", "amp": "fp16", "amp_o2": "fp16", "bf16": "bf16"}


def _derive_mfu(out: dict, record: dict) -> list[str]:
    """MFU of a published record that names its GPU (config.gpu) and a network of known size
    (flops.PUBLISHED_FORWARD_MACS); nothing for one that does not."""
    config, m = out["config"], out["metrics"]
    model, gpu = model_of(record), config.get("gpu")
    name = next((n for n, target in MODELS.items() if model == target and n in flops.PUBLISHED_FORWARD_MACS), None)
    if gpu and name is None:  # a model whose FLOPs no count here gives (Transformer-XL): said, not guessed
        return [f"no mfu: no forward FLOPs count for {config.get('model', record['benchmark'])!r} "
                f"(measure/flops.PUBLISHED_FORWARD_MACS)"]
    if not gpu or name is None or m.get("unit") not in COUNTED_BY_BATCH:
        return []
    canonical = gradbytes.precision_name(config.get("precision"), _where(record))
    at = PEAK_PRECISION.get(canonical) or flops.gpu_precision("off", gpu)
    peak = flops.gpu_peak_flops(gpu, at, record["world_size"])
    per_sample = flops.training_flops(flops.PUBLISHED_FORWARD_MACS[name](config))
    if peak is None:
        return []
    mfu = flops.mfu(per_sample, m["throughput"], peak)
    if mfu > 1:  # more FLOP/s than the GPUs have: the count is not what ran (a utilisation cannot pass 1)
        why = ("counted on the whole sequence (NVIDIA's BERT skips padding: fewer FLOPs ran)" if "seq_len" in config
               else "as counted here: fewer ran")
        return [f"no mfu: the table's throughput is {mfu:.2f}x the {gpu} {at} peak x {record['world_size']} for "
                f"{name}'s FLOPs {why}"]
    m.update(model_flops_per_sample=per_sample, peak_flops=peak, peak_flops_source=f"devices.py: {gpu}, {at}", mfu=mfu)
    return [f"mfu ({name} forward MACs x 6; {gpu} {at} peak x {record['world_size']})"]


def adopt(records: list[dict], published: bool) -> list[dict]:
    """Records completed for the model: published ones only when asked (`published`), GPU records
    measured here always (a CPU record measured here has its own figures and is left alone); with
    a 1-GPU record derived for a published work that has only its 1-node run (single_from_node)."""
    out = []
    if published:
        records = records + single_from_node(records)
    for record in records:
        gpu = str(((record.get("config") or {}).get("runtime") or {}).get("device", "")).startswith("gpu")
        if record.get("error") is None and (published and is_published(record) or gpu and not is_published(record)):
            out.append(complete(record))
        else:
            out.append(record)
    return out


def not_modelled(record: dict) -> str | None:
    """Why a (completed) record can give no prediction, in one phrase; None when it can."""
    if record.get("error") is not None:
        return f"failed run: {str(record['error']).splitlines()[0][:80]}"
    if record["mode"] == "ps":
        return ("parameter-server training of a published table other than a synchronous PS (BytePS's) "
                f"({', '.join(k for k, v in METHODS.items() if v in SYNC_PS)}): not modelled")
    if record["mode"] != "collective":
        return None
    if (record.get("metrics") or {}).get("step_time_ms") is None:
        return "no step time (neither measured nor derivable: read published records with --published)"
    return None
