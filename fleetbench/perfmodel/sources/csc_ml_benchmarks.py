"""CSC's published ml-benchmarks table (github.com/mvsjober/ml-benchmarks at d5c4253c, `results.md`) into
schema-1 published records for `fleetbench explain --published`, written as DLPerf's (dlperf). Held out;
selection rule: docs/validation/explain-held-out-csc.md.

    git -C ML_BENCHMARKS show d5c4253c418e74811ea38367d165b4af84cd8fb2:results.md > results/reference/csc_ml_benchmarks_results.md
    python -m fleetbench.perfmodel.sources.csc_ml_benchmarks csc-ml-benchmarks results/reference/csc_ml_benchmarks_results.md > results/reference/csc-ml-benchmarks.jsonl

Rows entered: the ResNet-50 benchmarks on Mahti and Puhti; `entered()` says why any other row is not.
"""
from __future__ import annotations

import sys
import uuid
from pathlib import Path

from fleetbench.perfmodel.sources import markdown_tables as md
from fleetbench.store import results

COMMIT = "d5c4253c418e74811ea38367d165b4af84cd8fb2"
URL = f"https://github.com/mvsjober/ml-benchmarks/blob/{COMMIT}/results.md"
PER_NODE = 4  # the page's Slurm scripts: 4 GPUs a node, one task a GPU
CLUSTERS = {  # the GPUs and the nodes' InfiniBand as CSC documents them (assumed: not on the page)
    "mahti": {"gpu": "A100-SXM4-40GB", "network": {"profile": "ib200-4nic", "rate_gbit": 200, "transport": "rdma",
                                                    "nics": 4, "label": "4x 200 Gb/s HDR InfiniBand a node (CSC's Mahti documentation)"}},
    "puhti": {"gpu": "V100-SXM2-32GB", "network": {"profile": "ib100-2nic", "rate_gbit": 100, "transport": "rdma",
                                                    "nics": 2, "label": "2x 100 Gb/s HDR100 InfiniBand a node (CSC's Puhti documentation)"}},
}
ASSUMED = [
    "ResNet-50 (the benchmarks' default --model resnet50), batch 32 a GPU (their default -b; the run scripts set none)",
    "DDP, Lightning DDP, DeepSpeed and Horovod all-reduce gradients overlapped with backward (mgwfbp); fp16 rows: "
    "torch.amp autocast with float32 parameters, so float32 gradients",
    "4 GPUs a node on NVLink (the page's Slurm scripts: --gres=gpu:...:4, 4 tasks a node); the node's InfiniBand "
    "as CSC documents its clusters (not printed on the page)",
    "Img/sec as printed, one run a cell (no spread published)",
]


def entered(row: dict) -> str | None:
    """Why a row is not entered (the rule), or None."""
    if row["Cluster"].strip() not in CLUSTERS:
        return f"cluster {row['Cluster'].strip()}: a GPU the model has no figures for"
    if row["Benchmark"].startswith("run_clm"):
        return "run_clm: a language model whose size the page does not print"
    if md.number(row["Img/sec"]) is None:
        return f"no figure ({row['Img/sec']})"
    return None


def _record(row: dict) -> dict:
    cluster, gpus = row["Cluster"].strip(), int(row["GPUs"])
    nodes, per_node = (gpus // PER_NODE, PER_NODE) if gpus >= PER_NODE else (1, gpus)
    precision = "amp" if "fp16" in row["Benchmark"] else "fp32"
    variant = f"{row['Benchmark']} | {row['Framework']} | {cluster} | {row['Date']}"
    config = {"model": "ResNet-50", "batch_size": 32, "precision": precision, "device": "GPU",
              "gpu": CLUSTERS[cluster]["gpu"], "framework": f"{row['Framework']} ({row['Benchmark'].split(',')[0]})",
              "variant": variant}
    if precision == "amp":
        config["grad_dtype"] = "float32"
    cell = f"{variant} | {gpus} GPUs"
    record = {
        "schema": results.SCHEMA, "time": f"{row['Date']}T00:00:00+00:00", "benchmark": "resnet50",
        "mode": "collective", "method": "mgwfbp", "preset": None, "config": config, "nodes": nodes,
        "devices_per_node": per_node, "world_size": gpus,
        "network": dict(CLUSTERS[cluster]["network"]) if nodes > 1 else None,
        "metrics": {"throughput": md.number(row["Img/sec"]), "unit": "images/s", "repeats": None},
        "topology": {"intra_node": "nvlink", "gpus": PER_NODE}, "env": None, "git": None, "error": None,
        "source": {"kind": "published", "name": "csc-ml-benchmarks", "url": URL, "cell": cell,
                   "citation": f"CSC mvsjober/ml-benchmarks results.md (commit {COMMIT[:8]})",
                   "assumed": list(ASSUMED), "derived": ["nodes: GPUs / 4 from 4 GPUs up (the Slurm scripts)"]},
    }
    record["id"] = uuid.uuid5(uuid.NAMESPACE_URL, f"{URL}#{cell}").hex
    results.validate(record, f"csc-ml-benchmarks: {cell}")
    return record


def rows(text: str) -> list[dict]:
    (table,) = [t for t in md.tables(text) if "Img/sec" in t.header]
    return [dict(zip(table.header, r)) for r in table.rows]


def convert(key: str, text: str) -> list[dict]:
    return [_record(r) for r in rows(text) if entered(r) is None]


SOURCES = {"csc-ml-benchmarks": URL}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in SOURCES:
        print("usage: python -m fleetbench.perfmodel.sources.csc_ml_benchmarks csc-ml-benchmarks FILE", file=sys.stderr)
        return 2
    sys.stdout.write("".join(results.dumps(r) + "\n" for r in convert(args[0], Path(args[1]).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
