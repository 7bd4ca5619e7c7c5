"""Convert training-performance tables of NVIDIA's DeepLearningExamples READMEs into schema-1
published records (results/reference/dle-*.jsonl), for `fleetbench explain --published`.

    git -C DLE show 729963dd:PaddlePaddle/LanguageModeling/BERT/README.md > /tmp/readme.md
    python -m fleetbench.perfmodel.sources.nvidia_dle paddle-bert /tmp/readme.md > results/reference/dle-paddle-bert-dgxa100.jsonl

SOURCES names each table this reads (a README of github.com/NVIDIA/DeepLearningExamples at commit
729963dd), and what the table does not print but the record needs, each said in the
record's `source.assumed`: the framework and how it all-reduces (read from the example's scripts),
and the system's topology (NVIDIA's DGX datasheets: DGX A100 has 8 GPUs on NVSwitch (NVLink 3) and
8 single-port 200 Gb/s HDR InfiniBand NICs for compute; DGX-1V 8 V100 in an NVLink hybrid cube
mesh; DGX-2 16 V100 on NVSwitch). Every number of the table is taken as printed; the micro-batch
a GPU is derived (accumulated batch / accumulation steps) and named in `source.derived`.
The README is not kept here (a fetched file is not committed); the records cite it by URL.
"""
from __future__ import annotations

import re
import sys
import uuid

from fleetbench.store import results

COMMIT = "729963dd"
REPO = "https://github.com/NVIDIA/DeepLearningExamples/blob/" + COMMIT + "/"
DGXA100_NET = {"profile": "dgxa100-ib", "rate_gbit": 200, "transport": "rdma", "nics": 8,
               "label": "8x 200 Gb/s HDR InfiniBand a node (DGX A100 datasheet)"}
TOPOLOGY = {"dgxa100": {"intra_node": "nvswitch", "gpus": 8}, "dgx1": {"intra_node": "nvlink", "gpus": 8},
            "dgx2": {"intra_node": "nvswitch", "gpus": 16}}
GPU = {"dgxa100": "A100-SXM4-80GB", "dgx1": "V100-SXM2-16GB", "dgx2": "V100-SXM3-32GB"}
BERT_NOTE = ("BERT-Large pretraining with LAMB; the all-reduce runs once an accumulated batch, after its "
             "last backward")
SOURCES = {
    "paddle-bert": {
        "path": "PaddlePaddle/LanguageModeling/BERT/README.md", "model": "BERT-Large", "kind": "bert",
        "framework": "PaddlePaddle 22.12 NGC (static graph, fleet gradient merge, AMP O1)",
        "assumed": [BERT_NOTE, "scripts/run_pretraining.sh: --optimizer=Lamb, --amp without pure fp16 (O1): "
                    "float32 gradients all-reduced"],
        "tables": ["###### Pre-training NVIDIA DGX A100 (8x A100 80GB)",
                   "###### Pre-training NVIDIA DGX A100 (8x A100 80GB) Multi-node Scaling"]},
    "pytorch-bert": {
        "path": "PyTorch/LanguageModeling/BERT/README.md", "model": "BERT-Large", "kind": "bert",
        "framework": "PyTorch 21.11 NGC (DDP, one bucket)", "amp_grad_dtype": "float16",
        "assumed": [BERT_NOTE, "scripts/run_pretraining.sh: allreduce_post_accumulation_fp16=true, so the "
                    "fp16 model's gradients are all-reduced in float16; DDP with one bucket as large as the "
                    "GPU's memory: the all-reduce starts when backward ends"],
        "tables": ["###### Pre-training NVIDIA DGX A100 (8x A100 80GB)",
                   "###### Pre-training NVIDIA DGX A100 (8x A100 80GB) Multi-node Scaling"]},
}
RN50_NOTE = "ResNet-50 v1.5 (the parameters of ResNet-50: v1.5 moves a stride), one node"
SOURCES.update({
    "mxnet-rn50": {
        "path": "MxNet/Classification/RN50v1.5/README.md", "model": "ResNet-50 v1.5", "kind": "rn50",
        "framework": "MXNet NGC (kvstore device)", "method": "wfbp", "low": "amp_o2",
        "assumed": [RN50_NOTE, "benchmark.py -b is the batch a GPU (runner: 'batch size per GPU'); --dtype "
                    "float16 trains a float16 model with float32 master weights (the README's multi_precision): "
                    "float16 gradients; the device kvstore reduces each parameter as the engine makes its "
                    "gradient (one call a gradient, overlapped)"],
        "tables": {"##### Training performance: NVIDIA DGX A100 (8x A100 80GB)": ("dgxa100", 512, 512),
                   "##### Training performance: NVIDIA DGX-1 (8x V100 16GB)": ("dgx1", 192, 96),
                   "##### Training performance: NVIDIA DGX-2 (16x V100 32GB)": ("dgx2", 256, 128)}},
    "paddle-rn50": {
        "path": "PaddlePaddle/Classification/RN50v1.5/README.md", "model": "ResNet-50 v1.5", "kind": "rn50",
        "framework": "PaddlePaddle NGC (static graph, fleet fused all-reduce)", "method": "mgwfbp", "low": "amp",
        "bucket_mb": 16,
        "assumed": [RN50_NOTE, "256 images a GPU (the README's training setup); --amp without --use-pure-fp16 "
                    "(its commands): float32 gradients; program.py fuses gradients into 16 MB all-reduces "
                    "(fuse_grad_size_in_MB) with sync_nccl_allreduce, which may overlap less than modelled"],
        "tables": {"##### Training performance: NVIDIA DGX A100 (8x A100 80GB)": ("dgxa100", 256, 256)}},
})
NUMBER = re.compile(r"(\d+(?:\.\d+)?)")


def table_after(text: str, heading: str) -> list[dict]:
    """The markdown table that follows `heading` as {column title: cell text} rows."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == heading), None)
    if start is None:
        raise SystemExit(f"heading {heading!r} not found")
    block = []
    for line in lines[start + 1:]:
        if line.strip().startswith("|"):
            block.append(line)
        elif block:
            break
    rows = block
    head = [c.strip().strip("*") for c in rows[0].strip().strip("|").split("|")]
    out = []
    for line in rows[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        out.append(dict(zip(head, cells)))
    return out


def _pair(text: str) -> tuple[float, float]:
    """'64 and 32' -> (64, 32): the TF32 (or FP32) figure and the mixed-precision one."""
    numbers = [float(n) for n in NUMBER.findall(text)]
    if len(numbers) != 2:
        raise SystemExit(f"cell {text!r}: expected two numbers")
    return numbers[0], numbers[1]


def _column(row: dict, *words: str) -> str | None:
    key = next((k for k in row if all(w.lower() in k.lower() for w in words)), None)
    return row[key] if key is not None else None


def _record(spec: dict, key: str, shape: tuple[int, int], config: dict, metrics: dict, cell: str,
            system: str = "dgxa100") -> dict:
    nodes, per_node = shape
    multi = "Multi-node" in cell
    bert = spec["kind"] == "bert"
    record = {
        "schema": results.SCHEMA, "time": "2024-04-04T00:00:00+00:00", "benchmark": "bert_large" if bert else "resnet50",
        "mode": "collective", "method": spec.get("method", "bsp"), "preset": None,
        "config": dict(config, model=spec["model"], framework=spec["framework"], device="GPU", gpu=GPU[system]),
        "nodes": nodes, "devices_per_node": per_node, "world_size": nodes * per_node,
        "network": dict(DGXA100_NET) if multi else None, "metrics": metrics,
        "topology": dict(TOPOLOGY[system]), "env": None, "git": None, "error": None,
        "source": {"kind": "published", "name": f"dle-{key}" + ("-dgxa100" if bert else ""),
                   "citation": f"NVIDIA DeepLearningExamples {spec['path']} (commit {COMMIT}), {cell.split(' | ')[0]}",
                   "url": REPO + spec["path"], "cell": cell,
                   "derived": ["config.batch_size: the accumulated batch a GPU / its accumulation steps"],
                   "assumed": spec["assumed"] + [f"network and topology: NVIDIA {system.upper()} datasheet, not in "
                                                 "the table"]},
    }
    record["id"] = uuid.uuid5(uuid.NAMESPACE_URL, f"{REPO}{spec['path']}#{cell}").hex
    results.validate(record, f"dle {key}: {cell}")
    return record


def bert_rows(spec: dict, key: str, heading: str, rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        nodes = int(_column(row, "Nodes") or 1)
        per_node = int(_column(row, "GPUs / node") or _column(row, "GPUs"))
        steps = _pair(_column(row, "Accumulation steps"))
        accumulated = _pair(_column(row, "Accumulated Batch") or _column(row, "Batch size / GPU"))
        seq = int(float(_column(row, "Sequence length")))
        throughput = (_column(row, "Throughput - TF32") or _column(row, "TF32 Throughput"),
                      _column(row, "Throughput - mixed") or _column(row, "Mixed Precision Throughput"))
        for i, precision in enumerate(("tf32", "amp")):
            micro = accumulated[i] / steps[i]
            config = {"batch_size": int(micro), "grad_merge_steps": int(steps[i]),
                      "seq_len": seq, "precision": precision}
            if precision == "amp" and spec.get("amp_grad_dtype"):
                config["grad_dtype"] = spec["amp_grad_dtype"]
            metrics = {"throughput": float(throughput[i]), "unit": "sequences/s", "repeats": None}
            cell = f"{heading.strip('# ')} | {nodes} x {per_node} GPUs | seq {seq} | {precision}"
            record = _record(spec, key, (nodes, per_node), config, metrics, cell)
            if micro != int(micro):  # a typo in the table, kept as printed and said
                record["source"]["derived"].append(
                    f"accumulated batch {accumulated[i]:g} / {steps[i]:g} steps = {micro:.2f}: not a whole "
                    f"micro-batch (the table's own inconsistency), taken as {int(micro)}")
            out.append(record)
    return out


def rn50_rows(spec: dict, key: str, heading: str, rows: list[dict]) -> list[dict]:
    system, low_batch, full_batch = spec["tables"][heading]
    out = []
    for row in rows:
        gpus = int(_column(row, "GPUs"))
        full = "TF32" if _column(row, "Throughput - TF32") else "FP32"
        for precision, column, batch in ((spec["low"], "Throughput - mixed precision", low_batch),
                                         (full.lower(), f"Throughput - {full}", full_batch)):
            config = {"batch_size": batch, "precision": precision}
            if spec.get("bucket_mb"):
                config["bucket_mb"] = spec["bucket_mb"]
            metrics = {"throughput": float(NUMBER.search(_column(row, column))[1]), "unit": "images/s",
                       "repeats": None}
            cell = f"{heading.strip('# ')} | {gpus} GPUs | {precision}"
            out.append(_record(spec, key, (1, gpus), config, metrics, cell, system))
    return out


def convert(key: str, text: str) -> list[dict]:
    spec = SOURCES[key]
    rows = bert_rows if spec["kind"] == "bert" else rn50_rows
    return [r for heading in spec["tables"] for r in rows(spec, key, heading, table_after(text, heading))]


def main(argv=None, sources: dict = SOURCES, convert=convert, name: str = "python -m fleetbench.perfmodel.sources.nvidia_dle") -> int:
    """`NAME KEY README.md`: the records of that README's tables on stdout (nvidia_dle_bert_txl.py's too)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in sources:
        print(f"usage: {name} {{{'|'.join(sources)}}} README.md", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as handle:
        records = convert(argv[0], handle.read())
    sys.stdout.write("".join(results.dumps(r) + "\n" for r in records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
