"""Convert the published ddl-benchmarks table (NAME, URL below) into schema-1 records.

    python -m fleetbench.perfmodel.sources.ddl_benchmarks SEED.md > results/reference/ddl-benchmarks-2020-05-29.jsonl

Each "mean +- std" cell becomes one published record carrying mean and std as printed; the
"Baseline" column (one value per DNN) becomes one single-device record per DNN. Nothing is
computed or typed in here: every number comes from the table. Column meaning and the other
decisions are explained in docs/guide/results.md ("Reference results").
"""
from __future__ import annotations

import re
import sys
import uuid

from fleetbench.measure import registry
from fleetbench.store import results

NAME = "ddl-benchmarks-2020-05-29"
CITATION = ("HKBU-HPML/ddl-benchmarks, results/2020-05-29/README.md (Shi et al., "
            "Communication-Efficient Distributed Deep Learning: Survey, Evaluation, and Challenges)")
URL = "https://github.com/HKBU-HPML/ddl-benchmarks/blob/master/results/2020-05-29/README.md"
# The rows hold 4 values after Baseline although the header names 5 GPU counts; the values are
# for 4, 8, 16 and 32 GPUs (docs/guide/results.md says how we know).
GPU_COUNTS = (4, 8, 16, 32)
GPUS_PER_NODE = 4
BENCHMARKS = {"ResNet-50": ("resnet50", "images/s"), "BERT-Large": ("bert_large", "samples/s"),
              "BERT-Base": ("bert_base", "samples/s")}
NETWORKS = {
    "10GbE with TCP/IP": {"profile": "10gbe", "rate_gbit": 10, "transport": "tcp"},
    "100GbIB with RDMA": {"profile": "100gbib-rdma", "rate_gbit": 100, "transport": "rdma"},
    "100GbE with TCP/IP": {"profile": "100gbe", "rate_gbit": 100, "transport": "tcp"},
}
CELL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*\+-\s*(\d+(?:\.\d+)?)\s*$")


def parse_rows(text: str) -> list[list[str]]:
    """Data rows of the markdown table (header and separator dropped), cells stripped."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "DNN" or set("".join(cells)) <= set("- "):
            continue
        rows.append(cells)
    return rows


def record(dnn, bs, connection, method, mode, gpus, metrics, *, note):
    benchmark, _ = BENCHMARKS[dnn]
    network = None if connection is None else dict(NETWORKS[connection], label=connection)
    rec = {
        "schema": results.SCHEMA, "time": "2020-05-29T00:00:00+00:00",
        "benchmark": benchmark, "mode": mode, "method": method, "preset": None,
        "config": {"model": dnn, "batch_size": bs, "device": "GPU"},
        "nodes": max(1, gpus // GPUS_PER_NODE), "devices_per_node": min(gpus, GPUS_PER_NODE),
        "world_size": gpus, "network": network, "metrics": metrics,
        "env": None, "topology": None, "git": None, "error": None,
        "source": {"kind": "published", "name": NAME, "citation": CITATION, "url": URL,
                   "cell": note},
    }
    # Stable ids: converting the same table twice gives the same file.
    rec["id"] = uuid.uuid5(uuid.NAMESPACE_URL, f"{URL}#{note}").hex
    results.validate(rec, f"{NAME}: {note}")
    return rec


def convert(text: str) -> list[dict]:
    rows = parse_rows(text)
    out, baselines = [], {}
    for cells in rows:
        dnn, bs, connection, method, baseline, *values = cells
        if len(values) != len(GPU_COUNTS):
            raise SystemExit(f"row {cells[:4]}: expected {len(GPU_COUNTS)} values after Baseline, "
                             f"got {len(values)}")
        unit = BENCHMARKS[dnn][1]
        mode = "ps" if method.endswith("-PS") else "collective"
        baselines.setdefault(dnn, set()).add((int(bs), baseline))
        for gpus, value in zip(GPU_COUNTS, values):
            match = CELL.match(value)
            if not match:
                raise SystemExit(f"row {cells[:4]}: cell {value!r} is not 'mean +- std'")
            metrics = {"throughput": float(match[1]), "unit": unit,
                       "throughput_std": float(match[2]), "std_ddof": 0, "repeats": None}
            note = f"{dnn} | {bs} | {connection} | {method} | {gpus} GPUs"
            out.append(record(dnn, int(bs), connection, method, mode, gpus, metrics, note=note))
    for dnn, values in baselines.items():
        if len(values) != 1:
            raise SystemExit(f"{dnn}: rows disagree on Baseline ({sorted(values)})")
        (bs, baseline), = values
        metrics = {"throughput": float(baseline), "unit": BENCHMARKS[dnn][1], "repeats": None}
        out.append(record(dnn, bs, None, registry.SINGLE, "collective", 1, metrics,
                          note=f"{dnn} | {bs} | Baseline (1 GPU)"))
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        records = convert(handle.read())
    sys.stdout.write("".join(results.dumps(r) + "\n" for r in records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
