"""NVIDIA DeepLearningExamples' multi-node TF1 and TF2 BERT and PyTorch Transformer-XL tables (commit
729963dd, DGX-2 and DGX A100) into schema-1 published records for `fleetbench explain --published`:
converted and reported before any constant was changed for them.

    git -C DLE show 729963dd:TensorFlow/LanguageModeling/BERT/README.md > /tmp/tf1.md
    python -m fleetbench.perfmodel.sources.nvidia_dle_bert_txl tf1-bert /tmp/tf1.md > results/reference/dle-tf1-bert.jsonl
    git -C DLE show 729963dd:TensorFlow2/LanguageModeling/BERT/README.md > /tmp/tf2.md
    python -m fleetbench.perfmodel.sources.nvidia_dle_bert_txl tf2-bert /tmp/tf2.md > results/reference/dle-tf2-bert.jsonl
    git -C DLE show 729963dd:PyTorch/LanguageModeling/Transformer-XL/README.md > /tmp/txl.md
    python -m fleetbench.perfmodel.sources.nvidia_dle_bert_txl pytorch-txl /tmp/txl.md > results/reference/dle-pytorch-txl.jsonl

What each table does not print but a record needs is said in the record's `source.assumed`: how
the framework all-reduces (read from the example's scripts at that commit), the Transformer-XL
configuration (its README's hyperparameter table and pytorch/wt103_*.yaml, as config.model_def:
the model is not in fleetbench's registry), and the systems (NVIDIA's datasheets: DGX-2 and
DGX-2H 16 V100 on NVSwitch with 8 x 100 Gb/s EDR InfiniBand NICs; DGX A100 8 A100 on NVSwitch
with 8 x 200 Gb/s HDR InfiniBand). Every throughput is taken as printed; a pair "60 , 32" is the
mixed-precision and the FP32/TF32 figure, in that order, as the column titles say.
"""
from __future__ import annotations

import sys
import uuid
from pathlib import Path

from fleetbench.perfmodel.sources import nvidia_dle as dle  # the table reader and the DGX A100 network

from fleetbench.store import results

DGX2_NET = {"profile": "dgx2-ib", "rate_gbit": 100, "transport": "rdma", "nics": 8,
            "label": "8x 100 Gb/s EDR InfiniBand a node (DGX-2/DGX-2H datasheet)"}
SYSTEMS = {"dgx2": ("V100-SXM3-32GB", {"intra_node": "nvswitch", "gpus": 16}, DGX2_NET),
           "dgxa100": ("A100-SXM4-40GB", {"intra_node": "nvswitch", "gpus": 8}, dle.DGXA100_NET)}
HOROVOD = ("Horovod all-reduce after the last accumulated micro-batch (allreduce_post_accumulation): "
           "post-backward, tensor fusion; with mixed precision hvd Compression.fp16, so float16 gradients")
TXL = {"n_token": 267735, "cutoffs": [19997, 39997, 199997], "n_head": 16, "d_head": 64}
TXL_DEFS = {"large": dict(TXL, kind="transformer_xl", n_layer=18, d_model=1024, d_inner=4096, div_val=4,
                          tie_projs=[False, True, True, True], seq_len=384),
            "base": dict(TXL, kind="transformer_xl", n_layer=16, d_model=512, n_head=8, d_inner=2048, div_val=1,
                         tie_projs=[False, True, True, True], seq_len=192)}
SOURCES = {
    "tf1-bert": {"path": "TensorFlow/LanguageModeling/BERT/README.md", "kind": "bert",
                 "framework": "TensorFlow 1 NGC + Horovod", "low_grad": "float16",
                 "assumed": ["optimization.py: " + HOROVOD, "the DGX-2H multi-node table ran TensorFlow 19.08, the "
                             "single-node tables 20.06; its 1-node row repeats the single-node 16-GPU row "
                             "except at seq 512 mixed precision (577.79 against 513.43): both kept, pooled"],
                 "tables": {"###### Pre-training training performance: single-node on DGX-2 32GB": "dgx2",
                            "###### Pre-training training performance: multi-node on DGX-2H 32GB": "dgx2",
                            "###### Pre-training training performance: single-node on DGX A100 40GB": "dgxa100",
                            "###### Pre-training training performance: multi-node on DGX A100 40GB": "dgxa100"}},
    "tf2-bert": {"path": "TensorFlow2/LanguageModeling/BERT/README.md", "kind": "bert",
                 "framework": "TensorFlow 2 NGC 21.02 + Horovod", "low_grad": "float16",
                 "assumed": ["official/modeling/model_training_utils.py: " + HOROVOD],
                 "tables": {"##### Pre-training training performance: Single-node on NVIDIA DGX-2 V100 (16x V100 32GB)":
                            "dgx2",
                            "##### Pre-training training performance: Multi-node on NVIDIA DGX-2H V100 (16x V100 32GB)":
                            "dgx2",
                            "##### Pre-training training performance: Single-node on NVIDIA DGX A100 (8x A100 80GB)":
                            "dgxa100",
                            "##### Pre-training training performance: Multi-node on NVIDIA DGX A100 (8x A100 80GB)":
                            "dgxa100"}},
    "pytorch-txl": {"path": "PyTorch/LanguageModeling/Transformer-XL/README.md", "kind": "txl",
                    "framework": "PyTorch 20.06 NGC (DDP, apex AMP O2)",
                    "assumed": ["pytorch/train.py: DistributedDataParallel (25 MiB buckets, overlapped with "
                                "backward); --fp16 with apex amp O2 (its default opt level): a float16 model, float16 "
                                "gradients; benchmark runs (trainbench, --local_batch_size) accumulate nothing",
                                "model: README's hyperparameter table and pytorch/wt103_large.yaml (adaptive "
                                "embedding and softmax, div_val 4 for large, cutoffs 19997/39997/199997, tied)"],
                    "tables": {("##### Training performance: NVIDIA DGX-2H (16x V100 32GB)", "###### Base model"):
                               ("dgx2", "base"),
                               ("##### Training performance: NVIDIA DGX-2H (16x V100 32GB)", "###### Large model"):
                               ("dgx2", "large"),
                               ("##### Training performance: 8x NVIDIA DGX-2H (16x V100 32GB)", "###### Large model"):
                               ("dgx2", "large")}},
}


def published_record(key: str, spec: dict, machine: tuple, datasheet: str, shape: tuple[int, int], config: dict,
                     metrics: dict, *, cell: str, benchmark: str, method: str, derived: list[str]) -> dict:
    """One published DeepLearningExamples cell as a record; `machine`: (gpu, topology, network) of
    the system, `datasheet`: whose datasheet gave them. Also nvidia_dle_frameworks.py's."""
    nodes, per_node = shape
    gpu, topology, network = machine
    record = {
        "schema": results.SCHEMA, "time": "2024-04-04T00:00:00+00:00", "benchmark": benchmark,
        "mode": "collective", "method": method, "preset": None,
        "config": dict(config, framework=spec["framework"], device="GPU", gpu=gpu),
        "nodes": nodes, "devices_per_node": per_node, "world_size": nodes * per_node,
        "network": dict(network) if nodes > 1 else None, "metrics": metrics, "topology": dict(topology),
        "env": None, "git": None, "error": None,
        "source": {"kind": "published", "name": f"dle-{key}",
                   "citation": f"NVIDIA DeepLearningExamples {spec['path']} (commit {dle.COMMIT}), "
                               f"{cell.split(' | ')[0]}",
                   "url": dle.REPO + spec["path"], "cell": cell, "derived": derived,
                   "assumed": spec["assumed"] + [f"network and topology: NVIDIA {datasheet} datasheet, not "
                                                 "in the table"]},
    }
    record["id"] = uuid.uuid5(uuid.NAMESPACE_URL, f"{dle.REPO}{spec['path']}#{cell}").hex
    results.validate(record, f"dle {key}: {cell}")
    return record


def _record(key: str, spec: dict, system: str, shape: tuple[int, int], config: dict, metrics: dict,
            cell: str) -> dict:
    bert = spec["kind"] == "bert"
    return published_record(key, spec, SYSTEMS[system], system.upper(), shape, config, metrics, cell=cell,
                            benchmark="bert_large" if bert else "transformer_xl", method="bsp" if bert else "mgwfbp",
                            derived=["config.batch_size: the table's batch a GPU (a micro-batch)"])


def _pair(text: str) -> tuple[float, float]:
    numbers = [float(n) for n in dle.NUMBER.findall(text.replace(",", " "))]
    if len(numbers) != 2:
        raise SystemExit(f"cell {text!r}: expected two numbers (mixed precision, FP32)")
    return numbers[0], numbers[1]


def bert_rows(key: str, spec: dict, heading: str, system: str, rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        nodes = int(dle._column(row, "Num Nodes") or 1)
        per_node = SYSTEMS[system][1]["gpus"] if nodes > 1 or "multi" in heading.lower() else int(
            dle._column(row, "GPUs"))
        batch, steps = _pair(dle._column(row, "Batch size / GPU")), _pair(dle._column(row, "Gradient Accumulation"))
        seq = int(float(dle._column(row, "Sequence Length")))
        full = "tf32" if dle._column(row, "Throughput - TF32") else "fp32"
        figures = (dle._column(row, "Throughput - mixed"), dle._column(row, f"Throughput - {full.upper()}"))
        for i, precision in enumerate(("amp", full)):
            config = {"model": "BERT-Large", "batch_size": int(batch[i]), "grad_merge_steps": int(steps[i]),
                      "seq_len": seq, "precision": precision}
            if precision == "amp":
                config["grad_dtype"] = spec["low_grad"]
            metrics = {"throughput": float(figures[i]), "unit": "sequences/s", "repeats": None}
            cell = f"{heading.strip('# ')} | {nodes} x {per_node} GPUs | seq {seq} | {precision}"
            out.append(_record(key, spec, system, (nodes, per_node), config, metrics, cell))
    return out


def txl_rows(key: str, spec: dict, heading: tuple, what: tuple, rows: list[dict]) -> list[dict]:
    system, size = what
    out = []
    for row in rows:
        nodes = int(dle._column(row, "Nodes") or 1)
        per_node = 16 if dle._column(row, "Nodes") else int(dle._column(row, "GPUs"))
        for precision, column in (("amp_o2", "Mixed precision"), ("fp32", "FP32")):
            config = {"model": f"Transformer-XL {size} (WikiText-103)", "model_def": dict(TXL_DEFS[size]),
                      "batch_size": int(dle._column(row, "Batch Size / GPU")), "precision": precision,
                      "seq_len": TXL_DEFS[size]["seq_len"]}
            metrics = {"throughput": float(dle._column(row, f"Throughput - {column}").replace(",", "")),
                       "unit": "tokens/s", "repeats": None}
            cell = f"{heading[0].strip('# ')} {heading[1].strip('# ')} | {nodes} x {per_node} GPUs | {precision}"
            out.append(_record(key, spec, system, (nodes, per_node), config, metrics, cell))
    return out


def table_under(text: str, parent: str, heading: str) -> list[dict]:
    """The table after the first `heading` that follows `parent`."""
    at = text.splitlines().index(parent)
    return dle.table_after("\n".join(text.splitlines()[at:]), heading)


def convert(key: str, text: str) -> list[dict]:
    spec = SOURCES[key]
    if spec["kind"] == "bert":
        return [r for h, system in spec["tables"].items() for r in bert_rows(key, spec, h, system, dle.table_after(text, h))]
    return [r for h, what in spec["tables"].items() for r in txl_rows(key, spec, h, what, table_under(text, *h))]


def main(argv=None) -> int:
    return dle.main(argv, SOURCES, convert, "python -m fleetbench.perfmodel.sources.nvidia_dle_bert_txl")


if __name__ == "__main__":
    sys.exit(main())
