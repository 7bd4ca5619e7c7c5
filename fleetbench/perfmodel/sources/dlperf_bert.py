"""DLPerf's BERT-Base pretraining tables (the fifth held-out set: rule in docs/validation/explain.md, *The fifth
held-out set*, committed before this converter) of PaddlePaddle, TensorFlow 2 and
MXNet, each framework's own code, into schema-1 published records for `fleetbench explain --published`.

    git -C DLPERF show c89430bac64f64caabb0445ff7eb80175641454c:PATH > /tmp/t        (PATH in SOURCES)
    python -m fleetbench.perfmodel.sources.dlperf_bert KEY /tmp/t > results/reference/KEY.jsonl

    KEY                  source (Oneflow-Inc/DLPerf at c89430ba)   tables  records
    dlperf-paddle-bert   PaddlePaddle/bert/README.md               7       38 (FP16 tables: no 1 x 2 row)
    dlperf-tf2-bert      TensorFlow/bert/README.md                 11      66
    dlperf-mxnet-bert    MxNet/BERT/README.md                      6       36

Source: https://github.com/Oneflow-Inc/DLPerf/tree/c89430bac64f64caabb0445ff7eb80175641454c
Every printed throughput of a selected table is one record (the speedup columns are arithmetic on
them). The table reader is dlperf.py's (the same repository's Markdown); what a table does
not print but a record needs -- the sequence length, how the framework all-reduces and in what
dtype, the GPU, topology and network -- is read from DLPerf's scripts beside each README and its
environment section, and said in each record's `source.assumed`.
"""
from __future__ import annotations

import re
import sys
import uuid
from pathlib import Path

from fleetbench.store import results
from fleetbench.perfmodel.sources import dlperf

DLPERF = dlperf.DLPERF
COMMIT = dlperf.DLPERF_COMMIT
SEQ_LEN = 128  # every DLPerf BERT script: max_seq_len / --max_seq_length 128, 20 predictions a sequence
SOURCES = {
    "dlperf-paddle-bert": {
        "url": DLPERF + "PaddlePaddle/bert/README.md",
        "citation": f"Oneflow-Inc/DLPerf PaddlePaddle/bert/README.md (commit {COMMIT[:8]})",
        "framework": "PaddlePaddle 1.8.3, PaddleNLP pretrain_language_models/BERT (fleet collective)",
        "method": "mgwfbp", "amp_grad": "float32",
        "assumed": ["PaddleNLP 1.8 BERT train.py under fleet collective: one NCCL all-reduce a gradient as "
                    "backward makes it, on its own stream: overlapped (mgwfbp); use_fp16 (mixed_precision "
                    "decorate) keeps float32 master parameters, so float32 gradients",
                    "seq 128: DLPerf's scripts/single_node_train.sh and multi_node_train.sh for bert_base "
                    "(max_seq_len 128), no gradient accumulation", dlperf.DLPERF_ENV]},
    "dlperf-tf2-bert": {
        "url": DLPERF + "TensorFlow/bert/README.md",
        "citation": f"Oneflow-Inc/DLPerf TensorFlow/bert/README.md (commit {COMMIT[:8]})",
        "framework": "TensorFlow 2.3.0, tensorflow/models r2.3 official/nlp/bert (MultiWorkerMirroredStrategy)",
        "method": "bsp", "amp_grad": "float32",
        "assumed": ["tensorflow/models r2.3 official/nlp/bert run_pretraining.py with "
                    "--distribution_strategy=multi_worker_mirrored (DLPerf's scripts/single_node_train.sh): "
                    "the gradients all-reduced in apply_gradients, after backward: post-backward (bsp); "
                    "--dtype=fp16 is the mixed_float16 policy, float32 variables, so float32 gradients",
                    "seq 128: --max_seq_length=128 in single_node_train.sh, no gradient accumulation",
                    dlperf.DLPERF_ENV]},
    "dlperf-mxnet-bert": {
        "url": DLPERF + "MxNet/BERT/README.md",
        "citation": f"Oneflow-Inc/DLPerf MxNet/BERT/README.md (commit {COMMIT[:8]})",
        "framework": "MXNet 1.6.0, gluon-nlp 0.10 scripts/bert run_pretraining + Horovod 0.19.5",
        "method": "mgwfbp", "amp_grad": "float16",
        "assumed": ["gluon-nlp run_pretraining.py --comm_backend horovod: Horovod's all-reduce a parameter "
                    "pushed into MXNet's dependency engine, run as soon as backward has written that "
                    "gradient: overlapped (mgwfbp), fused by Horovod's cycle",
                    "FP16: --dtype float16 casts the network to float16 (float32 master weights in the "
                    "optimizer), so float16 gradients",
                    "seq 128: DLPerf's pretrain.sh (--max_seq_length 128, --accumulate 1)", dlperf.DLPERF_ENV]},
}
BATCH = re.compile(r"batch[ _]size\s*=\s*(\d+)", re.IGNORECASE)


def _record(key: str, shape: tuple[int, int], precision: str, batch: int, throughput: float,
            variant: str) -> dict:
    """One printed throughput as a record of BERT-Base at seq 128; the variant keeps a table's cells
    from pooling with another table's of the same precision and batch (XLA, loss scaling)."""
    spec, (nodes, per_node) = SOURCES[key], shape
    config = {"model": "BERT-Base", "batch_size": batch, "precision": precision, "seq_len": SEQ_LEN,
              "device": "GPU", "gpu": "V100-SXM2-16GB", "framework": spec["framework"], "variant": variant}
    if precision == "amp":
        config["grad_dtype"] = spec["amp_grad"]
    cell = f"{variant} | {nodes} x {per_node} GPUs | batch {batch} | {precision}"
    record = {
        "schema": results.SCHEMA, "time": "2020-09-01T00:00:00+00:00", "benchmark": "bert_large",
        "mode": "collective", "method": spec["method"], "preset": None, "config": config, "nodes": nodes,
        "devices_per_node": per_node, "world_size": nodes * per_node,
        "network": dict(dlperf.IB_ONE_NIC) if nodes > 1 else None,
        "metrics": {"throughput": throughput, "unit": "sequences/s", "repeats": None},
        "topology": dict(dlperf.TOPOLOGY), "env": None, "git": None, "error": None,
        "source": {"kind": "published", "name": key, "citation": spec["citation"], "url": spec["url"],
                   "cell": cell, "assumed": list(spec["assumed"]),
                   "derived": ["devices_per_node: the table's gpu_num / node_num (DLPerf prints the total)",
                               "unit: the table's samples/s, a sample being one sequence of 128 tokens"]},
    }
    record["id"] = uuid.uuid5(uuid.NAMESPACE_URL, f"{spec['url']}#{cell}").hex
    results.validate(record, f"{key}: {cell}")
    return record


def _precision(headings: list[str]) -> str:
    """The nearest heading naming FP16 or FP32: a '### ... FP32' section may follow a '## ... FP16' one
    at a higher level, which then still stands in the path."""
    named = [h for h in headings if re.search(r"FP16|FP32|AMP", h, re.IGNORECASE)]
    return dlperf._precision(named[-1:] or headings)


def markdown_tables(key: str, text: str) -> list[dict]:
    """Every table whose header has node_num, under its headings ('## BERT-Base FP16', '### batch
    size=64 & without xla'): the precision from the headings, the batch from the nearest one."""
    records = []
    for rows, headings in dlperf.node_tables(text):
        batch = next(int(m[1]) for h in reversed(headings) if (m := BATCH.search(h)))
        variant = " / ".join(headings)
        if re.search(r"[\u3000-\u9fff]", variant):
            raise SystemExit(f"{key}: a heading in Chinese: {variant!r}")
        for row in rows:
            nodes, gpus = int(row["node_num"]), int(row["gpu_num"])
            if gpus % nodes:
                raise SystemExit(f"{key}: {row}: GPUs not a whole number a node")
            speed = next(v for k, v in row.items() if k.startswith("samples/s"))
            records.append(_record(key, (nodes, gpus // nodes), _precision(headings), batch,
                                   float(speed), variant))
    return records


def main(argv: list[str] | None = None) -> int:
    return dlperf.cli(argv, "python -m fleetbench.perfmodel.sources.dlperf_bert", SOURCES, markdown_tables)


if __name__ == "__main__":
    sys.exit(main())
