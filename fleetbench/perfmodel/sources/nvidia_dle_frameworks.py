"""NVIDIA DeepLearningExamples' BERT, Transformer-XL and ResNet-50 tables (commit 729963dd) of the
frameworks and systems nvidia_dle and nvidia_dle_bert_txl leave out (DGX-1, BioBERT, TF1
Transformer-XL, ResNet-50 with ASP), into schema-1 published records for `fleetbench explain
--published` (docs/validation/explain.md: the second held-out set).

Selection rule, written down before any prediction was run on these tables:

    Every training-throughput table of a README of github.com/NVIDIA/DeepLearningExamples at
    commit 729963dd that (1) has rows at two or more GPU counts, (2) trains from scratch
    (pretraining or training; not fine-tuning, not inference) a model fleetbench describes
    without approximation -- ResNet-50 v1.5 and BERT-Large / BERT-Base (the registry),
    Transformer-XL base or large on WikiText-103 (config.model_def kind transformer_xl) --
    data-parallel only, and (3) is not yet in results/reference/. A table that only repeats
    another README's figures (PyTorch/Classification/ConvNets/README.md's side-by-side summary)
    counts once, at the model's own README. Every printed figure of a selected table is a
    record; a cell printed N/A is not a figure. No table or cell is dropped after its result.

That gives 17 tables in 8 READMEs, one file each (KEY below):

    git -C DLE show 729963dd:PATH > /tmp/readme.md
    python -m fleetbench.perfmodel.sources.nvidia_dle_frameworks KEY /tmp/readme.md > results/reference/dle-KEY.jsonl

for KEY, PATH in SOURCES. What a table does not print but a record needs is said in each record's
`source.assumed`: how the framework all-reduces (read from the example's scripts at 729963dd), the
batch where the table prints none (the example's config), and the systems (NVIDIA's datasheets:
DGX-1V 8 V100 SXM2 in an NVLink hybrid cube mesh with 4 x 100 Gb/s EDR InfiniBand; DGX-2/DGX-2H 16
V100 SXM3 on NVSwitch with 8 x 100 Gb/s EDR; DGX A100 8 A100 on NVSwitch with 8 x 200 Gb/s HDR).
Every throughput is taken as printed.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from fleetbench.perfmodel.sources import nvidia_dle as dle  # the table reader
from fleetbench.perfmodel.sources import nvidia_dle_bert_txl as more  # the Transformer-XL definitions, the DGX-2 network


DGX1_NET = {"profile": "dgx1-ib", "rate_gbit": 100, "transport": "rdma", "nics": 4,
            "label": "4x 100 Gb/s EDR InfiniBand a node (DGX-1V datasheet)"}
SYSTEMS = {  # gpu, topology, network (multi-node rows only)
    "dgx1-16": ("V100-SXM2-16GB", {"intra_node": "nvlink", "gpus": 8}, DGX1_NET),
    "dgx1-32": ("V100-SXM2-32GB", {"intra_node": "nvlink", "gpus": 8}, DGX1_NET),
    "dgx2": ("V100-SXM3-32GB", {"intra_node": "nvswitch", "gpus": 16}, more.DGX2_NET),
    "dgxa100-40": ("A100-SXM4-40GB", {"intra_node": "nvswitch", "gpus": 8}, dle.DGXA100_NET),
    "dgxa100-80": ("A100-SXM4-80GB", {"intra_node": "nvswitch", "gpus": 8}, dle.DGXA100_NET),
}
HOROVOD_BERT = ("run_pretraining.py/optimization.py: Horovod all-reduce after the last accumulated micro-batch "
                "(allreduce_post_accumulation): post-backward, tensor fusion; with mixed precision hvd "
                "Compression.fp16, so float16 gradients")
HOROVOD_OVERLAP = ("hvd.DistributedOptimizer without compression: float32 gradients (TF1's automatic mixed "
                   "precision keeps float32 variables), one all-reduce a gradient as backward makes it, fused "
                   "by Horovod's cycle: overlapped (mgwfbp)")
DDP_TXL = ("pytorch/train.py: DistributedDataParallel (25 MiB buckets, overlapped with backward); --fp16 with apex "
           "amp O2 (its default opt level): a float16 model, float16 gradients; benchmark runs accumulate nothing")
SOURCES = {
    "tf1-biobert": {
        "path": "TensorFlow/LanguageModeling/BERT/biobert/README.md", "kind": "bert", "model": "BERT-Base",
        "framework": "TensorFlow 1 NGC 19.08 + Horovod (BioBERT)", "low": "amp", "low_grad": "float16",
        "assumed": [HOROVOD_BERT, "BERT-Base uncased (the README's default pretraining model)",
                    "accumulation: the table prints none; biobert/scripts/run_biobert.sub's defaults "
                    "(num_accumulation_steps 128 in phase 1, seq 128; 512 in phase 2, seq 512), the same at every "
                    "node count (the table's 'weak scaling')"],
        "accumulation": {128: 128, 512: 512},
        "tables": {"###### Pre-training training performance: multi-node on DGX-1 16G": "dgx1-16",
                   "###### Pre-training training performance: multi-node on DGX-2H 32G": "dgx2"}},
    "tf1-bert-dgx1": {
        "path": "TensorFlow/LanguageModeling/BERT/README.md", "kind": "bert", "model": "BERT-Large",
        "framework": "TensorFlow 1 NGC 20.06 + Horovod", "low": "amp", "low_grad": "float16",
        "assumed": [HOROVOD_BERT],
        "tables": {"###### Pre-training training performance: single-node on DGX-1 16GB": "dgx1-16",
                   "###### Pre-training training performance: single-node on DGX-1 32GB": "dgx1-32"}},
    "pytorch-bert-dgx1": {
        "path": "PyTorch/LanguageModeling/BERT/README.md", "kind": "pytorch-bert", "model": "BERT-Large",
        "framework": "PyTorch 21.11 NGC (DDP, one bucket)", "low": "amp", "low_grad": "float16",
        "assumed": ["BERT-Large pretraining with LAMB; the all-reduce runs once an accumulated batch, after its "
                    "last backward", "scripts/run_pretraining.sh: allreduce_post_accumulation_fp16=true, so the "
                    "fp16 model's gradients are all-reduced in float16; DDP with one bucket as large as the "
                    "GPU's memory: the all-reduce starts when backward ends"],
        "tables": {"###### Pre-training NVIDIA DGX-1 With 32G": "dgx1-32"}},
    "pytorch-txl-dgxa100-dgx1": {
        "path": "PyTorch/LanguageModeling/Transformer-XL/README.md", "kind": "txl",
        "framework": "PyTorch 20.06 NGC (DDP, apex AMP O2)", "low": "amp_o2", "low_grad": None,
        "assumed": [DDP_TXL, "model: README's hyperparameter table and pytorch/wt103_{base,large}.yaml (as "
                    "nvidia_dle_bert_txl.py's Transformer-XL records)"],
        "tables": {("##### Training performance: NVIDIA DGX A100 (8x A100 40GB)", "###### Base model"):
                   ("dgxa100-40", "base"),
                   ("##### Training performance: NVIDIA DGX A100 (8x A100 40GB)", "###### Large model"):
                   ("dgxa100-40", "large"),
                   ("##### Training performance: NVIDIA DGX-1 (8x V100 16GB)", "###### Base model"):
                   ("dgx1-16", "base"),
                   ("##### Training performance: NVIDIA DGX-1 (8x V100 16GB)", "###### Large model"):
                   ("dgx1-16", "large")}},
    "tf1-txl": {
        "path": "TensorFlow/LanguageModeling/Transformer-XL/README.md", "kind": "txl",
        "framework": "TensorFlow 1 NGC 20.06 + Horovod", "low": "amp", "low_grad": None, "method": "mgwfbp",
        "assumed": ["tf/main.py: " + HOROVOD_OVERLAP + "; sparse_as_dense; batch_chunk 1 (no accumulation)",
                    "model: tf/run_wt103_base.sh (n_layer 16, d_model 512, n_head 8, d_head 64, d_inner 2048, "
                    "div_val 1, tgt_len 192, proj_share_all_but_first: tie_projs [F, T, T, T]); cutoffs "
                    "taken as the PyTorch example's (19997/39997/199997; TF's corpus-info reads 20000/40000/"
                    "200000: 3 tokens a cluster, under 0.01% of the parameters)"],
        "tables": {("##### Training performance: NVIDIA DGX A100 (8x A100 40GB)", None): ("dgxa100-40", "base"),
                   ("##### Training performance: NVIDIA DGX-1 (8x V100 16GB)", "###### Base model"):
                   ("dgx1-16", "base"),
                   ("##### Training performance: NVIDIA DGX-2 (16x V100 32GB)", "###### Base model"):
                   ("dgx2", "base")}},
    "pytorch-rn50": {
        "path": "PyTorch/Classification/ConvNets/resnet50v1.5/README.md", "kind": "rn50", "model": "ResNet-50 v1.5",
        "framework": "PyTorch 21.03 NGC (DDP, torch.cuda.amp)", "low": "amp", "method": "mgwfbp",
        "assumed": ["image_classification/training.py: DistributedDataParallel with its default 25 MiB buckets, "
                    "overlapped with backward; torch.cuda.amp autocast keeps a float32 model: float32 gradients; "
                    "no no_sync, so the all-reduce runs every micro-batch (optimizer_batch_size accumulates "
                    "optimizer steps only: grad_merge_steps 1)",
                    "batch a GPU: the table prints none; configs.yml resnet50 (DGX1V AMP 256, FP32 112; "
                    "DGXA100 AMP 256, TF32 256)"],
        "batch": {"dgx1-16": (256, 112), "dgx1-32": (256, 112), "dgxa100-80": (256, 256)},
        "tables": {"##### Training performance: NVIDIA DGX A100 (8x A100 80GB)": "dgxa100-80",
                   "##### Training performance: NVIDIA DGX-1 16GB (8x V100 16GB)": "dgx1-16",
                   "##### Training performance: NVIDIA DGX-1 32GB (8x V100 32GB)": "dgx1-32"}},
    "tf1-rn50": {
        "path": "TensorFlow/Classification/ConvNets/resnet50v1.5/README.md", "kind": "rn50",
        "model": "ResNet-50 v1.5", "framework": "TensorFlow 1 NGC 20.06 + Horovod, XLA", "low": "amp",
        "method": "mgwfbp",
        "assumed": ["model/resnet.py: " + HOROVOD_OVERLAP, "batch a GPU as the table prints it"],
        "tables": {"##### Training performance: NVIDIA DGX A100 (8x A100 40GB)": "dgxa100-40",
                   "##### Training performance: NVIDIA DGX-1 (8x V100 16G)": "dgx1-16",
                   "##### Training performance: NVIDIA DGX-2 (16x V100 32G)": "dgx2"}},
    "paddle-rn50-asp": {
        "path": "PaddlePaddle/Classification/RN50v1.5/README.md", "kind": "asp", "model": "ResNet-50 v1.5",
        "framework": "PaddlePaddle NGC (static graph, fleet fused all-reduce)", "method": "mgwfbp",
        "assumed": ["256 images a GPU (the README's training setup); --amp without --use-pure-fp16: float32 "
                    "gradients; program.py fuses gradients into 16 MB all-reduces (fuse_grad_size_in_MB)",
                    "ASP (2:4 structured sparsity) masks the weights; the gradients all-reduced are the dense "
                    "ones, so the same bytes (config.asp keeps the two columns apart)"],
        "tables": {"##### Training performance of Automatic SParsity: NVIDIA DGX A100 (8x A100 80GB)": "dgxa100-80"}},
}


def _record(key: str, spec: dict, system: str, shape: tuple[int, int], config: dict, metrics: dict, cell: str,
            *, method: str, benchmark: str, derived: list[str]) -> dict:
    return more.published_record(key, spec, SYSTEMS[system], system.split("-")[0].upper(), shape, config, metrics,
                                 cell=cell, benchmark=benchmark, method=method, derived=derived)


def _number(text: str) -> float:
    return float(dle.NUMBER.search(text.replace(",", ""))[1])


def _two(text: str) -> tuple[float, float]:
    numbers = [float(n) for n in dle.NUMBER.findall(text.replace(",", " "))]
    if len(numbers) == 1:
        return numbers[0], numbers[0]
    if len(numbers) != 2:
        raise SystemExit(f"cell {text!r}: expected one or two numbers")
    return numbers[0], numbers[1]


def _full(row: dict) -> str:
    return "tf32" if dle._column(row, "Throughput - TF32") else "fp32"


def bert_rows(key: str, spec: dict, heading: str, system: str, rows: list[dict]) -> list[dict]:
    """TF1's tables (BERT-Large single-node, BioBERT multi-node): pairs printed mixed precision first."""
    out = []
    per_gpus = SYSTEMS[system][1]["gpus"]
    for row in rows:
        nodes = int(dle._column(row, "Nodes") or 1)
        per_node = per_gpus if dle._column(row, "Nodes") else int(dle._column(row, "GPUs"))
        seq = int(float(dle._column(row, "Sequence Length")))
        batch = _two(dle._column(row, "Batch size / GPU"))
        printed = dle._column(row, "Gradient Accumulation")
        steps = _two(printed) if printed else (spec["accumulation"][seq],) * 2
        full = _full(row)
        figures = (dle._column(row, "Throughput - mixed"), dle._column(row, f"Throughput - {full.upper()}"))
        for i, precision in enumerate((spec["low"], full)):
            config = {"model": spec["model"], "batch_size": int(batch[i]), "grad_merge_steps": int(steps[i]),
                      "seq_len": seq, "precision": precision}
            if i == 0:
                config["grad_dtype"] = spec["low_grad"]
            cell = f"{heading.strip('# ')} | {nodes} x {per_node} GPUs | seq {seq} | {precision}"
            derived = ["config.batch_size: the table's batch a GPU (a micro-batch)"]
            if not printed:
                derived.append(f"config.grad_merge_steps: {int(steps[i])}, run_biobert.sub's default (not printed)")
            out.append(_record(key, spec, system, (nodes, per_node), config,
                               {"throughput": _number(figures[i]), "unit": "sequences/s", "repeats": None},
                               cell, method="bsp", benchmark="bert_large", derived=derived))
    return out


def pytorch_bert_rows(key: str, spec: dict, heading: str, system: str, rows: list[dict]) -> list[dict]:
    """PyTorch's DGX-1 table: pairs printed FP32 first; its 'Batch size / GPU' is the accumulated batch."""
    out = []
    for row in rows:
        gpus = int(dle._column(row, "GPUs"))
        seq = int(float(dle._column(row, "Sequence length")))
        accumulated = _two(dle._column(row, "Batch size / GPU"))
        steps = _two(dle._column(row, "Accumulation steps"))
        figures = (dle._column(row, "Throughput - FP32"), dle._column(row, "Throughput - mixed"))
        for i, precision in enumerate(("fp32", spec["low"])):
            micro = accumulated[i] / steps[i]
            config = {"model": spec["model"], "batch_size": int(micro), "grad_merge_steps": int(steps[i]),
                      "seq_len": seq, "precision": precision}
            if precision != "fp32":
                config["grad_dtype"] = spec["low_grad"]
            cell = f"{heading.strip('# ')} | 1 x {gpus} GPUs | seq {seq} | {precision}"
            derived = [f"config.batch_size: the table's 'Batch size / GPU' {accumulated[i]:g} is the accumulated "
                       f"batch (as the DGX A100 table's column of that name): / {steps[i]:g} accumulation steps"]
            out.append(_record(key, spec, system, (1, gpus), config,
                               {"throughput": _number(figures[i]), "unit": "sequences/s", "repeats": None},
                               cell, method="bsp", benchmark="bert_large", derived=derived))
    return out


def txl_rows(key: str, spec: dict, heading: tuple, what: tuple, rows: list[dict]) -> list[dict]:
    system, size = what
    out = []
    for row in rows:
        gpus = int(dle._column(row, "GPUs"))
        full = _full(row)
        for precision, column in ((spec["low"], "Throughput - Mixed precision"), (full, f"Throughput - {full}")):
            printed = dle._column(row, column)
            if printed is None or "N/A" in printed:
                continue  # not a figure: the table ran no such cell
            config = {"model": f"Transformer-XL {size} (WikiText-103)", "model_def": dict(more.TXL_DEFS[size]),
                      "batch_size": int(dle._column(row, "Batch Size / GPU")), "precision": precision,
                      "seq_len": more.TXL_DEFS[size]["seq_len"]}
            name = " ".join(h.strip("# ") for h in heading if h)
            cell = f"{name} | 1 x {gpus} GPUs | batch {config['batch_size']} | {precision}"
            out.append(_record(key, spec, system, (1, gpus), config,
                               {"throughput": _number(printed), "unit": "tokens/s", "repeats": None},
                               cell, method=spec.get("method", "mgwfbp"), benchmark="transformer_xl",
                               derived=["config.batch_size: the table's batch a GPU (a micro-batch)"]))
    return out


def rn50_rows(key: str, spec: dict, heading: str, system: str, rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        gpus = int(dle._column(row, "GPUs"))
        full = _full(row)
        if spec.get("batch"):
            low_batch, full_batch = spec["batch"][system]
        else:  # "128 (FP32) / 256 (AMP)" or "256"
            text = dle._column(row, "Batch Size / GPU")
            amp = re.search(r"(\d+)\s*\(AMP\)", text)
            single = re.search(r"(\d+)\s*\((?:FP32|TF32)\)", text)
            low_batch = int(amp[1]) if amp else int(_number(text))
            full_batch = int(single[1]) if single else int(_number(text))
        for precision, column, batch in ((spec["low"], "Throughput - mixed precision", low_batch),
                                         (full, f"Throughput - {full.upper()}", full_batch)):
            config = {"model": spec["model"], "batch_size": batch, "precision": precision}
            cell = f"{heading.strip('# ')} | {gpus} GPUs | {precision}"
            out.append(_record(key, spec, system, (1, gpus), config,
                               {"throughput": _number(dle._column(row, column)), "unit": "images/s",
                                "repeats": None}, cell, method=spec["method"], benchmark="resnet50",
                               derived=["config.batch_size: the batch a GPU (no accumulation of the all-reduce)"]))
    return out


def asp_rows(key: str, spec: dict, heading: str, system: str, rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        gpus = int(dle._column(row, "GPUs"))
        for asp, column in ((False, "Throughput - mixed precision"), (True, "Throughput - mixed precision+ASP")):
            printed = next(v for k, v in row.items() if k.strip() == column)
            config = {"model": spec["model"], "batch_size": 256, "precision": "amp", "bucket_mb": 16, "asp": asp}
            cell = f"{heading.strip('# ')} | {gpus} GPUs | amp{' + ASP' if asp else ''}"
            out.append(_record(key, spec, system, (1, gpus), config,
                               {"throughput": _number(printed), "unit": "images/s", "repeats": None},
                               cell, method=spec["method"], benchmark="resnet50",
                               derived=["config.batch_size: the README's training setup (256 a GPU)"]))
    return out


def convert(key: str, text: str) -> list[dict]:
    spec = SOURCES[key]
    kind = spec["kind"]
    if kind == "txl":
        return [r for h, what in spec["tables"].items() for r in txl_rows(key, spec, h, what, _table(text, h))]
    rows = {"bert": bert_rows, "pytorch-bert": pytorch_bert_rows, "rn50": rn50_rows, "asp": asp_rows}[kind]
    return [r for h, system in spec["tables"].items() for r in rows(key, spec, h, system, dle.table_after(text, h))]


def _table(text: str, heading: tuple) -> list[dict]:
    """The table after heading[1] under heading[0]; the first table under heading[0] without one."""
    if heading[1]:
        return more.table_under(text, heading[0], heading[1])
    lines = text.splitlines()
    at = lines.index(heading[0])
    block = []
    for line in lines[at + 1:]:
        if line.strip().startswith("|"):
            block.append(line)
        elif block:
            break
    head = [c.strip().strip("*") for c in block[0].strip().strip("|").split("|")]
    return [dict(zip(head, [c.strip() for c in line.strip().strip("|").split("|")])) for line in block[2:]]


def main(argv=None) -> int:
    return dle.main(argv, SOURCES, convert, "python -m fleetbench.perfmodel.sources.nvidia_dle_frameworks")


if __name__ == "__main__":
    sys.exit(main())
