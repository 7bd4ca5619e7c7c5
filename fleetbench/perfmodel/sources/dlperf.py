"""DLPerf's multi-node ResNet-50 training tables (github.com/Oneflow-Inc/DLPerf at c89430ba: its
PaddlePaddle, PyTorch, MXNet and TensorFlow 2 READMEs) into schema-1 published records for
`fleetbench explain --published`; the markdown reader and record writer DLPerf's BERT tables
(dlperf_bert) and PaddleFleetX's (paddle_fleetx) share. Selection rule: docs/validation/explain.md, *The
fourth held-out set*.

    git -C DLPERF show c89430bac64f64caabb0445ff7eb80175641454c:PATH > /tmp/t        (PATH in SOURCES)
    python -m fleetbench.perfmodel.sources.dlperf KEY /tmp/t > results/reference/KEY.jsonl

    KEY                    source                                                 tables  records
    dlperf-paddle-rn50     DLPerf PaddlePaddle/resnet50v1.5/README.md             4       21
    dlperf-pytorch-rn50    DLPerf PyTorch/resnet50v1.5/README.md                  4       20
    dlperf-mxnet-rn50v1b   DLPerf MxNet/Classification/RN50v1b/README.md          2       12
    dlperf-tf2-rn50        DLPerf TensorFlow/resnet50v1.5/README.md               4       22

Every printed throughput of a selected table is one record (the speedup columns are arithmetic on
them). What a table does not print but a record needs -- how the framework all-reduces and in what
dtype, the GPU, topology and network -- is read from the source's own environment section and the
benchmarked code, and said in each record's `source.assumed`. The sources are not kept here; the
records cite them by URL at the commit.
"""
from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

from fleetbench.store import results

DLPERF_COMMIT = "c89430bac64f64caabb0445ff7eb80175641454c"
DLPERF = f"https://github.com/Oneflow-Inc/DLPerf/blob/{DLPERF_COMMIT}/"
# Both clusters' `nvidia-smi topo -m` (printed in their READMEs) show 8 V100 on NVLink (NV1/NV2, the
# hybrid cube mesh) and a single mlx5_0 NIC; both name 100 Gb/s (4X EDR) InfiniBand.
TOPOLOGY = {"intra_node": "nvlink", "gpus": 8}
IB_ONE_NIC = {"profile": "ib100-1nic", "rate_gbit": 100, "transport": "rdma", "nics": 1,
              "label": "1x 100 Gb/s EDR InfiniBand a node (the source's environment and nvidia-smi topo)"}
DLPERF_ENV = ("4 nodes of 8 Tesla V100-SXM2-16GB, NCCL 2.7.3, one 100 Gb/s EDR InfiniBand NIC a node "
              "(DLPerf reports/dlperf_benchmark_test_report_v1.md and the README's environment); the "
              "throughput is the median of the runs, 100 iterations after 20 warm-up ones, as printed")
SOURCES = {
    "dlperf-paddle-rn50": {
        "url": DLPERF + "PaddlePaddle/resnet50v1.5/README.md", "kind": "md",
        "citation": f"Oneflow-Inc/DLPerf PaddlePaddle/resnet50v1.5/README.md (commit {DLPERF_COMMIT[:8]})",
        "time": "2020-09-01T00:00:00+00:00", "gpu": "V100-SXM2-16GB",
        "framework": "PaddlePaddle 1.8.3, PaddleCV image_classification (fleet collective)",
        "method": "mgwfbp", "amp_grad": "float32",
        "assumed": ["PaddleCV 1.8 dist_train: fleet collective, one NCCL all-reduce a gradient as backward makes "
                    "it, on its own stream: overlapped (mgwfbp); fp16 via fluid.contrib.mixed_precision keeps "
                    "float32 master parameters, so float32 gradients", DLPERF_ENV]},
    "dlperf-pytorch-rn50": {
        "url": DLPERF + "PyTorch/resnet50v1.5/README.md", "kind": "md",
        "citation": f"Oneflow-Inc/DLPerf PyTorch/resnet50v1.5/README.md (commit {DLPERF_COMMIT[:8]})",
        "time": "2020-09-01T00:00:00+00:00", "gpu": "V100-SXM2-16GB",
        "framework": "PyTorch 1.6.0, pytorch/examples imagenet (DDP)", "method": "mgwfbp", "amp_grad": None,
        "assumed": ["pytorch/examples imagenet/main.py: DistributedDataParallel, 25 MiB buckets overlapped "
                    "with backward, float32 (the example has no AMP)",
                    "ResNet50 v1.5 in the heading; the example's torchvision resnet50 has ResNet-50's "
                    "parameters either way", DLPERF_ENV]},
    "dlperf-mxnet-rn50v1b": {
        "url": DLPERF + "MxNet/Classification/RN50v1b/README.md", "kind": "md",
        "citation": f"Oneflow-Inc/DLPerf MxNet/Classification/RN50v1b/README.md (commit {DLPERF_COMMIT[:8]})",
        "time": "2020-09-01T00:00:00+00:00", "gpu": "V100-SXM2-16GB",
        "framework": "MXNet 1.6.0, gluon-cv train_imagenet + Horovod 0.19.5", "method": "mgwfbp",
        "amp_grad": "float16",
        "assumed": ["Horovod's DistributedTrainer pushes one all-reduce a parameter into MXNet's dependency "
                    "engine, which runs it as soon as backward has written that gradient: overlapped "
                    "(mgwfbp), fused by Horovod's cycle",
                    "FP16: gluon-cv's --dtype float16 casts the network to float16 (multi_precision SGD "
                    "keeps float32 master weights), so float16 gradients",
                    "ResNet50 v1b has ResNet-50's parameters", DLPERF_ENV]},
    "dlperf-tf2-rn50": {
        "url": DLPERF + "TensorFlow/resnet50v1.5/README.md", "kind": "md",
        "citation": f"Oneflow-Inc/DLPerf TensorFlow/resnet50v1.5/README.md (commit {DLPERF_COMMIT[:8]})",
        "time": "2020-09-01T00:00:00+00:00", "gpu": "V100-SXM2-16GB",
        "framework": "TensorFlow 2.3.0, tensorflow/models r2.3 official resnet (MultiWorkerMirroredStrategy)",
        "method": "bsp", "amp_grad": "float32",
        "assumed": ["tensorflow/models r2.3 official/vision/image_classification: Keras with "
                    "MultiWorkerMirroredStrategy (NCCL collectives), which all-reduces the gradients in "
                    "apply_gradients, after backward: post-backward (bsp); the mixed_float16 policy keeps "
                    "float32 variables, so float32 gradients", DLPERF_ENV]},
}
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _record(key: str, spec: dict, shape: tuple[int, int], precision: str, batch: int, throughput: float,
            variant: str) -> dict:
    """One printed throughput as a record; the variant keeps a table's cells from pooling with
    another table's of the same model, precision and batch (the work key holds the config)."""
    nodes, per_node = shape
    config = {"model": "ResNet-50", "batch_size": batch, "precision": precision, "device": "GPU",
              "gpu": spec["gpu"], "framework": spec["framework"], "variant": variant}
    if precision == "amp" and spec["amp_grad"]:
        config["grad_dtype"] = spec["amp_grad"]
    cell = f"{variant} | {nodes} x {per_node} GPUs | batch {batch} | {precision}"
    record = {
        "schema": results.SCHEMA, "time": spec["time"], "benchmark": "resnet50", "mode": "collective",
        "method": spec["method"], "preset": None, "config": config, "nodes": nodes,
        "devices_per_node": per_node, "world_size": nodes * per_node,
        "network": dict(IB_ONE_NIC) if nodes > 1 else None,
        "metrics": {"throughput": throughput, "unit": "images/s", "repeats": None},
        "topology": dict(TOPOLOGY), "env": None, "git": None, "error": None,
        "source": {"kind": "published", "name": key, "citation": spec["citation"], "url": spec["url"],
                   "cell": cell, "assumed": list(spec["assumed"]),
                   "derived": ["devices_per_node: the table's GPUs / nodes (DLPerf prints the total)"
                               if spec["kind"] == "md" else "nodes and devices_per_node: the column's 'N x G'"]},
    }
    record["id"] = uuid.uuid5(uuid.NAMESPACE_URL, f"{spec['url']}#{cell}").hex
    results.validate(record, f"{key}: {cell}")
    return record


# Headings in Chinese, in English: a record's variant becomes a chart's label, and the charts' font
# (DejaVu Sans, report/style.py) has no CJK glyphs (a box a character, and a warning each).
ENGLISH = {"物理机环境内": "bare metal"}  # DLPerf PyTorch: "in the physical-machine environment"


def _heading(line: str) -> tuple[int, str] | None:
    """A Markdown heading, also one inside a list item ('- ### ...', '  - #### ...'): (level, text).
    A list item's heading nests under the plain headings above it (DLPerf's PyTorch README puts
    '- ### host' under '### FP32 & ... DataLoader'), so its level counts from 6."""
    match = re.match(r"^\s*(-\s+)?(#{1,6})\s+(.*\S)\s*$", line)
    if not match:
        return None
    return len(match[2]) + (6 if match[1] else 0), ENGLISH.get(match[3].strip(), match[3].strip())


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _precision(path: list[str]) -> str:
    # DLPerf's sections say FP32 or FP16 (mixed precision: fp16 compute, fp32 master weights)
    text = " ".join(path).upper()
    if "FP16" in text or "AMP" in text:
        return "amp"
    if "FP32" in text:
        return "fp32"
    raise SystemExit(f"no precision in headings {path!r}")


def node_tables(text: str) -> Iterator[tuple[list[dict], list[str]]]:
    """(rows as {column: cell}, headings from the precision's down) of every markdown table whose
    header has node_num, under its headings (DLPerf's READMEs; the fifth set's too)."""
    path: dict[int, str] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if (head := _heading(line)) is not None:
            level, title = head
            path = {k: v for k, v in path.items() if k < level}
            path[level] = title
            continue
        if "node_num" not in line or not line.strip().startswith("|"):
            continue
        names = _cells(line)
        headings = [path[k] for k in sorted(path) if k >= 2]
        headings = headings[next((n for n, h in enumerate(headings) if "FP" in h.upper()), 0):]
        rows = []
        for row in lines[i + 2:]:
            if not row.strip().startswith("|"):
                break
            rows.append(dict(zip(names, _cells(row))))
        yield rows, headings


def markdown_tables(key: str, spec: dict, text: str) -> list[dict]:
    """DLPerf: every node_num table's rows, under its headings (precision, batch, loader, workers:
    the variant)."""
    return [_markdown_row(key, spec, row, headings) for rows, headings in node_tables(text) for row in rows]


def _markdown_row(key: str, spec: dict, row: dict, headings: list[str]) -> dict:
    nodes = int(row["node_num"])
    per_node = int(row["gpu_num_per_node"]) if "gpu_num_per_node" in row else int(row["gpu_num"]) // nodes
    if "gpu_num" in row and int(row["gpu_num"]) != nodes * per_node:
        raise SystemExit(f"{key}: {row}: GPUs not a whole number a node")
    batch_text = row.get("batch_size_per_device") or next(
        m[1] for h in reversed(headings) if (m := re.search(r"batch[ _]size\s*=\s*(\d+)", h)))
    speed = next(v for k, v in row.items() if k.startswith("samples/s"))
    variant = " / ".join(headings)
    if re.search(r"[\u3000-\u9fff]", variant):
        raise SystemExit(f"{key}: a heading in Chinese with no English in ENGLISH: {variant!r}")
    return _record(key, spec, (nodes, per_node), _precision(headings), int(batch_text), float(speed), variant)


def convert(key: str, text: str) -> list[dict]:
    return markdown_tables(key, SOURCES[key], text)


def cli(argv: list[str] | None, prog: str, sources: dict, to_records) -> int:
    """`KEY FILE`: the records `to_records(key, text)` makes of that source's tables, on stdout
    (DLPerf's ResNet-50, BERT and PaddleFleetX converters')."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in sources:
        print(f"usage: {prog} {{{'|'.join(sources)}}} FILE", file=sys.stderr)
        return 2
    records = to_records(argv[0], Path(argv[1]).read_text(encoding="utf-8"))
    sys.stdout.write("".join(results.dumps(r) + "\n" for r in records))
    return 0


def main(argv: list[str] | None = None) -> int:
    return cli(argv, "python -m fleetbench.perfmodel.sources.dlperf", SOURCES, convert)


if __name__ == "__main__":
    sys.exit(main())
