"""NVIDIA DeepLearningExamples' image-classification CNNs other than ResNet-50 and its translation
models (commit 729963dd) into schema-1 published records for `fleetbench explain --published`
(docs/validation/explain.md: the third held-out set; tables never used for fitting).

Selection rule, written down before any prediction was run on these tables:

    Third held-out set, rule written before any prediction on these tables:
    every training-throughput table of a README of github.com/NVIDIA/DeepLearningExamples at commit
    729963dd that (1) has rows at two or more GPU counts, (2) trains from scratch (training or
    pretraining; not fine-tuning, not inference), data-parallel only, (3) is of a model that is NOT
    in the first two sets -- image-classification CNNs other than ResNet-50 v1.5 (ResNeXt101-32x4d,
    SE-ResNeXt101-32x4d, EfficientNet and the like) and machine-translation models (Transformer,
    GNMT) -- whose every trainable tensor can be written from its published architecture and
    configuration as a `layers` model definition (fleetbench/perfmodel/modeldef.py) whose parameter count
    matches the count the README or the model's code states (within 0.5%), and (4) is not yet in
    results/reference/. A table that repeats another README's figures counts once, at the model's
    own README. Every printed figure of a selected table is a record; a cell printed N/A is not a
    figure. No table or cell is dropped after its result is seen; a table or model the rule selects
    but that cannot be described is listed in the docstring with the reason.

What it yields (read before anything was predicted): 29 tables in 9 READMEs, one file each, 198
records (a record is a printed throughput; the speedup, scaling and time columns are arithmetic on
them; the at-scale tables' 1-node rows repeat their README's 8-GPU figures and are kept, as
nvidia_dle_bert_txl.py keeps TF1 BERT's):

    KEY (dle-KEY.jsonl)    README (PATH)                                          tables: GPUs       records
    pytorch-resnext101     PyTorch/Classification/ConvNets/resnext101-32x4d       DGX A100, DGX-1 16G, 32G: 1, 8   12
    pytorch-se-resnext101  PyTorch/Classification/ConvNets/se-resnext101-32x4d    the same                         12
    pytorch-efficientnet   PyTorch/Classification/ConvNets/efficientnet           b0, b4, widese-b0, widese-b4:
                                                                                  DGX A100 1-64; DGX-1 16G, 32G 1, 8 64
    tf1-resnext101         TensorFlow/Classification/ConvNets/resnext101-32x4d    DGX A100, DGX-1: 1, 8; DGX-2 1, 16 12
    tf1-se-resnext101      TensorFlow/Classification/ConvNets/se-resnext101-32x4d the same                         12
    pytorch-transformer    PyTorch/Translation/Transformer                        DGX A100, DGX-1: 1, 4, 8; DGX-2 1-16 20
    pytorch-gnmt           PyTorch/Translation/GNMT                               the same shapes                  20
    tf2-efficientnet-v1    TensorFlow2/Classification/ConvNets/efficientnet_v1    B0, B4: DGX A100, DGX-1 1-64     28
    tf2-efficientnet-v2    TensorFlow2/Classification/ConvNets/efficientnet_v2    v2-S: DGX A100 1-16, DGX-1 1-32;
                                                                                  at scale 1 and 10 nodes (AMP)    18

    git -C DLE show 729963dd:PATH/README.md > /tmp/readme.md
    python -m fleetbench.perfmodel.sources.nvidia_dle_cnn_translation KEY /tmp/readme.md \
        > results/reference/dle-KEY.jsonl

Models (nvidia_dle_layers.py), parameters computed here = stated, and trainable tensors; "stated" is
the count the example's own model code builds, counted by instantiating it (no README states one;
the Transformer's train.py prints it as '| num. model params'): the PyTorch examples under PyTorch
2.13 CPU (tools/nvidia_dle_counts/pytorch_counts.py), the TF2 ones under TensorFlow 2.21 CPU with tf_keras
(tools/nvidia_dle_counts/tf2_counts.py), CUDA-only and logging imports stubbed (none holds a parameter).
TF1's graph (tf.contrib) does not run on TF 2; its ResNeXt code builds the PyTorch example's tensors
with two differences read from it (1001 classes, main.py; a squeeze-excitation of C // 16 units,
model/resnet.py se_ratio 16, where PyTorch's is a fixed 16), so its stated count is the PyTorch
code built with those two:

    ResNeXt101-32x4d (PyTorch)           44,177,704 = 44,177,704   314 tensors
    SE-ResNeXt101-32x4d (PyTorch)        45,251,128 = 45,251,128   446
    ResNeXt101-32x4d (TF1, 1001 classes) 44,179,753 = 44,179,753   314
    SE-ResNeXt101-32x4d (TF1)            48,957,465 = 48,957,465   446
    EfficientNet-B0 (PyTorch and TF2)     5,288,548 =  5,288,548   213 (TF2's built: the same)
    EfficientNet-B4 (PyTorch and TF2)    19,341,616 = 19,341,616   418 (TF2's built: the same)
    EfficientNet-WideSE-B0 (PyTorch)      8,423,848 =  8,423,848   213
    EfficientNet-WideSE-B4 (PyTorch)     34,927,246 = 34,927,246   418
    EfficientNet v2-S (TF2)              21,458,488 = 21,458,488   452
    Transformer big t2t, 33712 tokens   210,808,832 = 210,808,832  185 (one tied embedding)
    GNMT v2, 32320 tokens               160,671,297 = 160,671,297   44 (one embedding, both sides)

Selected but not described, so not converted: TensorFlow/Translation/GNMT (DGX A100 and DGX-1
tables, 8 figures): neither its README nor its code states a parameter count, and its TF1 graph
(tf.contrib, its own block LSTM cell with one bias where PyTorch's has two) cannot be built here to
count one, so no definition can be checked against a stated count. Not selected: GPUNet's
training tables (8 GPUs only: rule 1), the ConvNets summary READMEs (PyTorch/TensorFlow
Classification/ConvNets/README.md: 8-GPU rows, repeating the models' READMEs), the QAT table
(8 GPUs, fine-tuning a trained model), the training-accuracy, time-to-train and "Training time for
90 Epochs" tables (times, not throughputs), inference tables, JAX ViT (its README points
elsewhere; not a CNN), and two rows TF2's v2 README hides in HTML comments (not printed figures).

What a table does not print but a record needs is said in each record's `source.assumed`: the batch
a GPU where no table prints it (the example's config or benchmark script), how the framework
all-reduces (read from the example's code at 729963dd), tokens a sample for tokens/s, and the
systems (NVIDIA's datasheets, as nvidia_dle_frameworks.py's SYSTEMS). Every throughput is as printed.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from fleetbench.perfmodel.sources import nvidia_dle as dle  # the table reader, main
from fleetbench.perfmodel.sources import nvidia_dle_bert_txl as more  # published_record, table_under
from fleetbench.perfmodel.sources import nvidia_dle_frameworks as rule  # the DGX systems, Horovod's all-reduce as read
from fleetbench.perfmodel.sources import nvidia_dle_layers as models

DDP_CONVNETS = ("image_classification/training.py: DistributedDataParallel with its default 25 MiB buckets, "
                "overlapped with backward; torch.cuda.amp autocast keeps a float32 model: float32 gradients; no "
                "no_sync, so the all-reduce runs every micro-batch (optimizer_batch_size accumulates optimizer "
                "steps only: grad_merge_steps 1)")
APEX_DDP = ("apex.parallel.DistributedDataParallel (message_size 10,000,000 elements a bucket, overlapped with "
            "backward), all-reducing every backward: {}")
HOROVOD_TF2 = ("runtime/runner.py: hvd.DistributedOptimizer with Compression.fp16 (--hvd_fp16_compression is "
               "store_true with default True, so on in every run): float16 gradients at every precision; "
               "grad_accum_steps 1 (the benchmark scripts set none)")
TF2_BATCH = ("batch a GPU: the table prints none; efficientnet_{}/{}/training/*/train_benchmark_8x*.sh's "
             "--train_batch_size, taken the same at every GPU count (the tables are 'weak scaling')")
SOURCES = {
    "pytorch-resnext101": {
        "path": "PyTorch/Classification/ConvNets/resnext101-32x4d/README.md", "kind": "pt-convnet",
        "framework": "PyTorch 21.03 NGC (DDP, torch.cuda.amp)",
        "models": {None: ("ResNeXt101-32x4d", models.resnext())},
        "assumed": [DDP_CONVNETS, "batch a GPU: the table prints none; configs.yml resnext101-32x4d (DGX1V AMP "
                    "128, FP32 64; DGXA100 AMP 128, TF32 128)"],
        "batch": {(None, "dgx1"): (128, 64), (None, "dgxa100"): (128, 128)},
        "tables": {"##### Training performance: NVIDIA DGX A100 (8x A100 80GB)": "dgxa100-80",
                   "##### Training performance: NVIDIA DGX-1 16GB (8x V100 16GB)": "dgx1-16",
                   "##### Training performance: NVIDIA DGX-1 32GB (8x V100 32GB)": "dgx1-32"}},
    "pytorch-se-resnext101": {
        "path": "PyTorch/Classification/ConvNets/se-resnext101-32x4d/README.md", "kind": "pt-convnet",
        "framework": "PyTorch 21.03 NGC (DDP, torch.cuda.amp)",
        "models": {None: ("SE-ResNeXt101-32x4d", models.resnext(se="16"))},
        "assumed": [DDP_CONVNETS, "batch a GPU: the table prints none; configs.yml se-resnext101-32x4d (DGX1V AMP "
                    "112, FP32 64; DGXA100 AMP 128, TF32 128)"],
        "batch": {(None, "dgx1"): (112, 64), (None, "dgxa100"): (128, 128)},
        "tables": {"##### Training performance: NVIDIA DGX A100 (8x A100 80GB)": "dgxa100-80",
                   "##### Training performance: NVIDIA DGX-1 16GB (8x V100 16GB)": "dgx1-16",
                   "##### Training performance: NVIDIA DGX-1 32GB (8x V100 32GB)": "dgx1-32"}},
    "pytorch-efficientnet": {
        "path": "PyTorch/Classification/ConvNets/efficientnet/README.md", "kind": "pt-convnet",
        "framework": "PyTorch 21.03 NGC (DDP, torch.cuda.amp)",
        "models": {"efficientnet-b0": ("EfficientNet-B0", models.efficientnet_v1(1.0, 1.0, 224)),
                   "efficientnet-b4": ("EfficientNet-B4", models.efficientnet_v1(1.4, 1.8, 380)),
                   "efficientnet-widese-b0": ("EfficientNet-WideSE-B0", models.efficientnet_v1(1.0, 1.0, 224, True)),
                   "efficientnet-widese-b4": ("EfficientNet-WideSE-B4", models.efficientnet_v1(1.4, 1.8, 380, True))},
        "assumed": [DDP_CONVNETS, "batch a GPU: the table prints none; configs.yml (b0 and widese-b0: DGX1V-16G "
                    "AMP 128, FP32 64; DGX1V-32G 256, 128; DGXA100 256, 256; b4 and widese-b4: 32, 16; 64, 32; "
                    "128, 64), the same at every GPU count; the DGX-1 32GB table's text says it ran on 16GB "
                    "GPUs: taken as its heading and configs' DGX1V-32G say"],
        "batch": {**{(m, s): b for m in ("efficientnet-b0", "efficientnet-widese-b0")
                     for s, b in (("dgx1-16", (128, 64)), ("dgx1-32", (256, 128)), ("dgxa100", (256, 256)))},
                  **{(m, s): b for m in ("efficientnet-b4", "efficientnet-widese-b4")
                     for s, b in (("dgx1-16", (32, 16)), ("dgx1-32", (64, 32)), ("dgxa100", (128, 64)))}},
        "tables": {"##### Training performance: NVIDIA A100 (8x A100 80GB)": "dgxa100-80",
                   "##### Training performance: NVIDIA DGX-1 (8x V100 16GB)": "dgx1-16",
                   "##### Training performance: NVIDIA DGX-1 (8x V100 32GB)": "dgx1-32"}},
    "tf1-resnext101": {
        "path": "TensorFlow/Classification/ConvNets/resnext101-32x4d/README.md", "kind": "tf1-convnet",
        "framework": "TensorFlow 1 NGC 20.06 + Horovod, XLA",
        "models": {None: ("ResNeXt101-32x4d (TF, 1001 classes)", models.resnext(classes=1001))},
        "assumed": ["model/resnet.py: " + rule.HOROVOD_OVERLAP, "batch a GPU as the table prints it"],
        "tables": {"##### Training performance: NVIDIA DGX A100 (8x A100 40GB)": "dgxa100-40",
                   "##### Training performance: NVIDIA DGX-1 (8x V100 16G)": "dgx1-16",
                   "##### Training performance: NVIDIA DGX-2 (16x V100 32G)": "dgx2"}},
    "tf1-se-resnext101": {
        "path": "TensorFlow/Classification/ConvNets/se-resnext101-32x4d/README.md", "kind": "tf1-convnet",
        "framework": "TensorFlow 1 NGC 20.06 + Horovod, XLA",
        "models": {None: ("SE-ResNeXt101-32x4d (TF, 1001 classes)", models.resnext(classes=1001, se="c/16"))},
        "assumed": ["model/resnet.py: " + rule.HOROVOD_OVERLAP, "batch a GPU as the table prints it"],
        "tables": {"##### Training performance: NVIDIA DGX A100 (8x A100 40GB)": "dgxa100-40",
                   "##### Training performance: NVIDIA DGX-1 (8x V100 16G)": "dgx1-16",
                   "##### Training performance: NVIDIA DGX-2 (16x V100 32G)": "dgx2"}},
    "pytorch-transformer": {
        "path": "PyTorch/Translation/Transformer/README.md", "kind": "transformer",
        "framework": "PyTorch 22.06 NGC (apex DDP, torch.cuda.amp)",
        "models": {None: ("Transformer big (WMT14 en-de)", models.transformer_big())},
        "assumed": [APEX_DDP.format("fairseq/ddp_trainer.py; torch.cuda.amp autocast keeps a float32 model: "
                                    "float32 gradients; --update-freq 1 (its default; the scripts set none)"),
                    "scripts/run_*.sh: --arch transformer_wmt_en_de_big_t2t --share-all-embeddings; dictionary "
                    "33712 (README: 33708 types, with fairseq's specials padded to a multiple of 8; "
                    "run_preprocessing.sh --nwordssrc 33712)",
                    "'Batch size / GPU' is --max-tokens (run_DGX1_AMP.sh 5120, run_DGX1_FP32.sh 2560; DGX-2 10240 "
                    "and 5120): a bound on a batch's padded tokens, taken as the tokens of a micro-step "
                    "(config.batch_size tokens, tokens_per_sample 1); fairseq counts tokens/s over the batch's "
                    "target tokens, fewer, so the derived step is longer than the real one, alike at every "
                    "GPU count"],
        "tables": {"##### Training performance: NVIDIA DGX A100 (8x A100 40GB)": "dgxa100-40",
                   "##### Training performance: NVIDIA DGX-1 (8x V100 16GB)": "dgx1-16",
                   "##### Training performance: NVIDIA DGX-2 (16x V100 32GB)": "dgx2"}},
    "pytorch-gnmt": {
        "path": "PyTorch/Translation/GNMT/README.md", "kind": "gnmt",
        "framework": "PyTorch 20.06 NGC (apex DDP, apex amp O2)",
        "models": {None: ("GNMT v2 (WMT16 en-de)", models.gnmt())},
        "assumed": [APEX_DDP.format("seq2seq/train/trainer.py, with no delay between accumulated micro-batches, "
                                    "so grad_merge_steps 1 although --train-global-batch-size 1024 (2048 on 16 "
                                    "GPUs) makes the optimizer step every 1024 / (128 x GPUs) micro-batches; "
                                    "--math fp16 is apex amp O2: a float16 model, float16 gradients"),
                    "vocabulary 32320 (train.py's --synthetic-vocab default; the tokenizer pads the BPE-32000 "
                    "vocabulary to a multiple of 8)",
                    "tokens a sentence: 47.85 (source + target), the ratio of tokens/s to sentences/s in the "
                    "training log line the TensorFlow GNMT README prints for the same WMT16 en-de BPE data "
                    "(173461.27 / 3625.19); trainer.py's Tok/s counts source and target tokens"],
        "tokens_per_sample": 47.85,
        "tables": {"##### Training throughput: NVIDIA DGX A100 (8x A100 40GB)": "dgxa100-40",
                   "##### Training throughput: NVIDIA DGX-1 (8x V100 16GB)": "dgx1-16",
                   "##### Training throughput: NVIDIA DGX-2H (16x V100 32GB)": "dgx2"}},
    "tf2-efficientnet-v1": {
        "path": "TensorFlow2/Classification/ConvNets/efficientnet_v1/README.md", "kind": "tf2-effnet",
        "framework": "TensorFlow 2 NGC 21.09 + Horovod, XLA",
        "models": {"B0": ("EfficientNet-B0", models.efficientnet_v1(1.0, 1.0, 224)),
                   "B4": ("EfficientNet-B4", models.efficientnet_v1(1.4, 1.8, 380))},
        "assumed": [HOROVOD_TF2, TF2_BATCH.format("v1", "B0|B4") + " (B0: A100 AMP 1024, TF32 512; V100 AMP 512, "
                    "FP32 256; B4: 160, 80; 64, 32)"],
        "batch": {("B0", "dgxa100"): (1024, 512), ("B0", "dgx1"): (512, 256),
                  ("B4", "dgxa100"): (160, 80), ("B4", "dgx1"): (64, 32)},
        "tables": {("#### Training performance results for EfficientNet v1-B0",
                    "##### Training performance: NVIDIA DGX A100 (8x A100 80GB)"): ("B0", "dgxa100-80"),
                   ("#### Training performance results for EfficientNet v1-B0",
                    "##### Training performance: NVIDIA DGX-1 (8x V100 32GB)"): ("B0", "dgx1-32"),
                   ("#### Training performance results for EfficientNet v1-B4",
                    "##### Training performance: NVIDIA DGX A100 (8x A100 80GB)"): ("B4", "dgxa100-80"),
                   ("#### Training performance results for EfficientNet v1-B4",
                    "##### Training performance: NVIDIA DGX-1 (8x V100 32GB)"): ("B4", "dgx1-32")}},
    "tf2-efficientnet-v2": {
        "path": "TensorFlow2/Classification/ConvNets/efficientnet_v2/README.md", "kind": "tf2-effnet",
        "framework": "TensorFlow 2 NGC 21.09 + Horovod, XLA",
        "models": {"S": ("EfficientNet v2-S", models.efficientnet_v2_s())},
        "assumed": [HOROVOD_TF2, TF2_BATCH.format("v2", "S") + " (A100 AMP 460, TF32 230; V100 AMP 128, FP32 64; "
                    "at scale 'the same set of hyperparameters', and 460x8x10 printed for DGX A100); images "
                    "300 px (the last training stage, as the README measures)",
                    "the DGX-1 table marks its rows DLCLUSTER, PBR, RNO (clusters): taken as the DGX-1 V100 32GB "
                    "nodes its heading names; the DGX A100 at-scale 10-node row trains with nvLAMB, its 1-node row "
                    "with RMSprop (the optimizer's update is not modelled)"],
        "batch": {("S", "dgxa100"): (460, 230), ("S", "dgx1"): (128, 64)},
        "tables": {("#### Training performance results for EfficientNet v2-S",
                    "##### Training performance: NVIDIA DGX A100 (8x A100 80GB)"): ("S", "dgxa100-80"),
                   ("#### Training performance results for EfficientNet v2-S",
                    "##### Training performance: NVIDIA DGX-1 (8x V100 32GB)"): ("S", "dgx1-32"),
                   ("#### Training EfficientNet v2-S at scale",
                    "##### 10x NVIDIA DGX-1 V100 (8x V100 32GB)"): ("S", "dgx1-32"),
                   ("#### Training EfficientNet v2-S at scale",
                    "##### 10x NVIDIA DGX A100 (8x A100 80GB)"): ("S", "dgxa100-80")}},
}
UNITS = {"pt-convnet": "images/s", "tf1-convnet": "images/s", "tf2-effnet": "images/s",
         "transformer": "tokens/s", "gnmt": "tokens/s"}
GRAD_DTYPE = {"tf2-effnet": "float16"}  # Horovod's fp16 compression, at every precision
LOW = {"gnmt": "amp_o2"}  # apex amp O2: a float16 model; the others keep float32 weights under amp


def _figure(text: str) -> float:
    """'1211 img/s', '29 911', '16,137' -> the number (a space or comma between thousands)."""
    return float(dle.NUMBER.search(re.sub(r"(?<=\d)[ ,](?=\d{3}\b)", "", text))[1])


def _shape(gpus: int, system: str) -> tuple[int, int]:
    per_node = rule.SYSTEMS[system][1]["gpus"]
    return (gpus // per_node, per_node) if gpus > per_node else (1, gpus)


def _throughput(row: dict, pattern: str) -> tuple[str, str] | None:
    """(column, cell) of the row's throughput column matching `pattern`; not a speedup, scaling, time or accuracy."""
    for key, value in row.items():
        if re.search(pattern, key, re.I) and not re.search(r"speedup|scaling|time|accuracy", key, re.I):
            return key, value
    return None


def _columns(row: dict) -> tuple[str | None, str | None, str | None]:
    """(full precision, its figure, the mixed-precision figure) of a row; the at-scale tables print
    no full-precision column."""
    full = _throughput(row, r"\b(TF32|FP32)\b")
    low = _throughput(row, r"throughput.*mixed")
    return (re.search(r"TF32|FP32", full[0])[0].lower() if full else None, full[1] if full else None,
            low[1] if low else None)


def _batches(spec: dict, model, system: str, row: dict) -> tuple[float, float]:
    """(mixed precision, full precision) batch a GPU: the table's where it prints one, else the spec's."""
    printed = dle._column(row, "Batch", "GPU")
    if printed is None:
        return spec["batch"].get((model, system)) or spec["batch"][(model, system.split("-")[0])]
    labelled = {label: int(n) for n, label in re.findall(r"(\d+)\s*\((\w+)\)", printed)}
    if labelled:  # '128 (TF) / 256 (AMP)', '64 (FP32) / 96 (AMP)'
        return labelled.pop("AMP"), labelled.popitem()[1]
    numbers = [int(n) for n in re.findall(r"\d+", printed)]
    return numbers[0], numbers[-1]  # '128'; the Transformer's '5120/2560': mixed precision first (its scripts)


def cells(key: str, spec: dict, heading, what, rows: list[dict]) -> list[dict]:
    """Every printed throughput of one table, as records."""
    model_key, system = what if isinstance(what, tuple) else (None, what)
    out = []
    for row in rows:
        model = dle._column(row, "Model") or model_key
        gpus = int(dle._column(row, "GPUs"))
        full, full_figure, low_figure = _columns(row)
        low_batch, full_batch = _batches(spec, model, system, row)
        for precision, printed, batch in ((LOW.get(spec["kind"], "amp"), low_figure, low_batch),
                                          (full, full_figure, full_batch)):
            if precision is None or printed is None or "N/A" in printed:
                continue  # the at-scale tables print mixed precision only
            out.append(_record(key, spec, heading, system, model, _shape(gpus, system), precision,
                               batch=batch, throughput=_figure(printed)))
    return out


def _record(key: str, spec: dict, heading, system: str, model, shape: tuple[int, int], precision: str,
            *, batch: float, throughput: float) -> dict:
    name, definition = spec["models"][model]
    kind = spec["kind"]
    config = {"model": name, "model_def": definition, "batch_size": batch, "precision": precision}
    derived = ["config.model_def: nvidia_dle_layers.py, from the example's architecture and configuration"]
    if kind == "transformer":
        config["tokens_per_sample"] = 1
        derived.append("config.batch_size: the table's batch a GPU in tokens (--max-tokens), one-token samples")
    elif kind == "gnmt":
        config["tokens_per_sample"] = spec["tokens_per_sample"]
    if kind in GRAD_DTYPE:
        config["grad_dtype"] = GRAD_DTYPE[kind]
    if kind in ("transformer", "gnmt"):  # apex DDP's 10M-element buckets, in the gradients' bytes
        config["bucket_mb"] = round(1e7 * (2 if precision == "amp_o2" else 4) / 2 ** 20, 2)
    title = " ".join(h.strip("# ") for h in (heading if isinstance(heading, tuple) else (heading,)))
    cell = f"{title} | {name} | {shape[0]} x {shape[1]} GPUs | batch {batch:g} | {precision}"
    return more.published_record(key, spec, rule.SYSTEMS[system], system.split("-")[0].upper(), shape, config,
                                 {"throughput": throughput, "unit": UNITS[kind], "repeats": None}, cell=cell,
                                 benchmark=key.split("-", 1)[1], method="mgwfbp", derived=derived)


def convert(key: str, text: str) -> list[dict]:
    spec = SOURCES[key]
    out = []
    for heading, what in spec["tables"].items():
        rows = more.table_under(text, *heading) if isinstance(heading, tuple) else dle.table_after(text, heading)
        out += cells(key, spec, heading, what, rows)
    return out


def main(argv=None) -> int:
    return dle.main(argv, SOURCES, convert, "python -m fleetbench.perfmodel.sources.nvidia_dle_cnn_translation")


if __name__ == "__main__":
    sys.exit(main())
