"""PaddleFleetX's multi-node ResNet-50 benchmark (github.com/PaddlePaddle/PaddleFleetX at 2524271e,
docs/source/paddle_fleet_rst/fleet_benchmark_resnet50_cn.rst: reStructuredText tables) into schema-1
published records for `fleetbench explain --published`, written as DLPerf's (dlperf: same V100
clusters' kind, the same record). Selection rule: docs/validation/explain.md, *The fourth held-out set*.

    git -C FLEETX show 2524271ea94f37e9b0aa1859c5b1384d5b3770af:docs/source/paddle_fleet_rst/fleet_benchmark_resnet50_cn.rst > /tmp/t
    python -m fleetbench.perfmodel.sources.paddle_fleetx fleetx-paddle-rn50 /tmp/t > results/reference/fleetx-paddle-rn50.jsonl

    KEY                    source                                                 tables  records
    fleetx-paddle-rn50     PaddleFleetX fleet_benchmark_resnet50_cn.rst           3       33 (no 1-GPU row)
"""
from __future__ import annotations

import re
import sys

from fleetbench.perfmodel.sources.dlperf import NUMBER, _record, cli

FLEETX_COMMIT = "2524271ea94f37e9b0aa1859c5b1384d5b3770af"
FLEETX = f"https://github.com/PaddlePaddle/PaddleFleetX/blob/{FLEETX_COMMIT}/"
SOURCES = {
    "fleetx-paddle-rn50": {
        "url": FLEETX + "docs/source/paddle_fleet_rst/fleet_benchmark_resnet50_cn.rst", "kind": "rst",
        "citation": "PaddlePaddle PaddleFleetX, docs/source/paddle_fleet_rst/fleet_benchmark_resnet50_cn.rst "
                    f"(commit {FLEETX_COMMIT[:8]}), Resnet50 benchmark",
        "time": "2020-10-06T00:00:00+00:00", "gpu": "V100-SXM2-32GB",
        "framework": "PaddlePaddle 2.0 static graph, fleet collective (NCCL 2.4.7, DALI 0.24)",
        "method": "mgwfbp", "amp_grad": "float32",
        "assumed": ["fleet collective all-reduces each gradient as backward makes it, fused and on its own "
                    "stream (nccl_comm_num 1): overlapped (mgwfbp); dist_strategy.amp (O1) keeps float32 "
                    "parameters, so float32 gradients",
                    "GPU: the table says 8x Tesla V100; V100-SXM2-32GB from PaddleFleetX benchmark/paddle/"
                    "README.md, which names the same X-Man 2.0 hosts, CPU and topology",
                    "the 'auto' table (dist_strategy.auto = True) taken as AMP: its 1 x 8 cells at batch 32 and "
                    "64 are the AMP table's to the digit",
                    "Images/s a cluster, the median of 7 runs (100 steps after 20), as printed"],
        "tables": [("fp32", "FP32"), ("amp", "AMP"), ("amp", "auto (dist_strategy.auto)")]},
}


def rst_tables(key: str, spec: dict, text: str) -> list[dict]:
    """FleetX: the simple reStructuredText tables 'batch / node | 1 x 1 | 1 x 8 | ...', in the
    order SOURCES names them; an empty cell (1 x 1) is no figure."""
    tables = _rst_blocks(text.splitlines())
    if len(tables) != len(spec["tables"]):
        raise SystemExit(f"{key}: {len(tables)} tables, SOURCES names {len(spec['tables'])}")
    records = []
    for (precision, variant), (header, rows) in zip(spec["tables"], tables):
        shapes = [tuple(int(n) for n in NUMBER.findall(h)) for h in header[1:]]
        for row in rows:
            for shape, value in zip(shapes, row[1:]):
                if value:
                    records.append(_record(key, spec, shape, precision, int(row[0]), float(value), variant))
    return records


def _rst_blocks(lines: list[str]) -> list[tuple[list[str], list[list[str]]]]:
    """Each simple table: the '=== ===' rule gives the column spans; header, then rows."""
    out, i = [], 0
    while i < len(lines):
        if not re.fullmatch(r"=+( +=+)+ *", lines[i]):
            i += 1
            continue
        spans = [m.span() for m in re.finditer(r"=+", lines[i])]
        # a column's text may run past its rule (the last column's does): cut at the next column's start
        cuts = [(start, spans[n + 1][0] if n + 1 < len(spans) else None) for n, (start, _) in enumerate(spans)]
        split = lambda line: [line[a:b].strip() for a, b in cuts]  # noqa: E731
        header, rows, i = split(lines[i + 1]), [], i + 3
        while i < len(lines) and not lines[i].startswith("="):
            rows.append(split(lines[i]))
            i += 1
        out.append((header, rows))
        i += 1
    return out


def convert(key: str, text: str) -> list[dict]:
    return rst_tables(key, SOURCES[key], text)


def main(argv: list[str] | None = None) -> int:
    return cli(argv, "python -m fleetbench.perfmodel.sources.paddle_fleetx", SOURCES, convert)


if __name__ == "__main__":
    sys.exit(main())
