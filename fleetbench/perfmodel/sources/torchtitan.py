"""torchtitan's published benchmarks (github.com/pytorch/torchtitan at b5bcd76c, `benchmarks/*.md`) into
hybrid-parallel tables for `fleetbench plan --validate` (fleetbench/presets/published/torchtitan-*.yaml),
held out (role check). Selection rule: docs/validation/plan-held-out.md.

    git -C TORCHTITAN show b5bcd76c66d0acb1a08b176d9639425bc55e0b2a:benchmarks/FILE > results/reference/torchtitan/FILE
    python -m fleetbench.perfmodel.sources.torchtitan KEY results/reference/torchtitan/FILE > fleetbench/presets/published/KEY.yaml

    KEY                      FILE                                           cells
    torchtitan-2024-h100     llama3_h100_202412_torchtitan.md               18 (tables 1-6)
    torchtitan-2025-asynctp  asyncTP_llama3_h100_2025-06_torchtitan.md      12 (two tables, vanilla and async TP)
    torchtitan-2025-h200     llama3-8b_h200_202506_trainy-whitefiber.md     2

Every figure is tokens a second a GPU as printed (TPS/GPU), so no FLOP formula is needed to read
it: `fleetbench plan --validate` counts the published and the predicted tokens with the same FLOPs.
What a caption does not print is read from the training config of the torchtitan commit the page
names (seq_len 8192 for all three models; the activation-checkpointing mode) and from its code
(pipeline micro-batches = the pipeline degree; the default split of 126 layers over stages;
FSDP2 does not reshard after forward under pipeline parallelism).
"""
from __future__ import annotations

import re
import sys

from fleetbench.perfmodel.sources import markdown_tables as md

COMMIT = "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"
BASE = f"https://github.com/pytorch/torchtitan/blob/{COMMIT}/benchmarks/"
# Llama 3.1 (Meta's params.json, as torchtitan's llama3 model args): GQA with 8 K/V heads, SwiGLU
MODELS = {
    "8B": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336},
    "70B": {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn": 28672},
    "405B": {"layers": 126, "hidden": 16384, "heads": 128, "kv_heads": 8, "ffn": 53248},
}
COMMON = {"vocab": 128256, "seq": 8192, "gated": True, "flash": True}
CLUSTERS = {  # Grand Teton: 8 H100 96 GB HBM2e a host (500 W), 400 Gb/s RDMA a GPU
    "h100": {"gpu": "H100-SXM", "gpus_per_node": 8, "nics": 8, "nic_gbit": 400.0, "precision": "bf16",
             "memory_gib": 96.0},
    "h200": {"gpu": "H200", "gpus_per_node": 8, "nics": 8, "nic_gbit": 400.0, "precision": "bf16"},
}
PRECISION = {"None (bfloat16)": "bf16", "float8 tensorwise": "fp8", "float8 rowwise": "fp8-rowwise"}
ASSUMED = [
    "seq 8192: the page prints no sequence length outside the CP tables; torchtitan's llama3 train configs say 8192",
    "Float8 as torchao's Float8Linear with tensorwise dynamic scaling on nn.Linear (attention, norms, logits in bf16)",
    "torchtitan's per-op selective AC (it keeps SDPA's and every second matmul's output and recomputes the rest) "
    "entered as selective recomputation",
    "the tokens a second a GPU were read at one iteration (the 90th; the 100th for the H200 page): no spread published",
]


def stage_layers(layers: int, stages: int) -> str:
    """torchtitan's default split (pipelining_utils.generate_split_points): the first and last stages get
    layers // stages, the middle ones one more while the remainder lasts."""
    base, extra = divmod(layers, stages)
    sizes = [base]
    for _ in range(stages - 2):
        sizes.append(base + 1 if extra > 0 else base)
        extra -= 1 if extra > 0 else 0
    sizes.append(layers - sum(sizes))
    return ",".join(str(s) for s in sizes)


def _cell(name: str, model: str, gpus: int, split: dict, published: float, memory_gib: float | None) -> dict:
    cell = {"name": name, "gpus": gpus, **MODELS[model], **COMMON, "head_dim": None, "tp": 1, "pp": 1, "cp": None,
            "interleave": 1, "stage_layers": None, "sequence_parallel": False, "precision": "bf16",
            "tp_comm_overlap": None, **split, "published": published}
    cell["memory_mib"] = None if memory_gib is None else round(memory_gib * 1024)
    cell["precision"] = None if cell["precision"] == "bf16" else cell["precision"]  # null: the cluster's bf16
    return cell


def _fsdp_cp(text: str) -> tuple[int, int]:
    fsdp, cp = re.fullmatch(r"FSDP (\d+), CP (\d+)", text).groups()
    return int(fsdp), int(cp)


def llama3_h100_2024(tables: list[md.MdTable]) -> list[dict]:
    """Tables 1-6 of llama3_h100_202412_torchtitan.md, in page order."""
    if len(tables) != 7:  # six result tables and the versions table
        raise SystemExit(f"expected 7 tables, found {len(tables)}")
    t1, t2, t3, t4, t5, t6 = tables[:6]
    out = []
    for table, gpus, tag in ((t1, 8, "Table 1"), (t3, 128, "Table 3")):
        for techniques, tps, mem in table.rows:
            fp8 = "Float8" in techniques
            out.append(_cell(f"{tag} 8B {gpus} GPUs {techniques}", "8B", gpus,
                             {"micro_batch": 2, "global_batch": 2 * gpus, "recompute": "selective",
                              "sharding_stage": 3, "precision": "fp8" if fp8 else "bf16"}, md.number(tps), md.number(mem)))
    for parallel, seq, tps, mem in t2.rows:
        fsdp, cp = _fsdp_cp(parallel)
        out.append(_cell(f"Table 2 8B 8 GPUs {parallel} seq {seq}", "8B", 8,
                         {"seq": int(md.number(seq)), "cp": cp if cp > 1 else None, "micro_batch": 1, "global_batch": fsdp,
                          "recompute": "full", "sharding_stage": 3, "precision": "fp8"}, md.number(tps), md.number(mem)))
    for techniques, tps, mem in t4.rows:
        out.append(_cell(f"Table 4 70B 256 GPUs FSDP 32 TP 8 {techniques}", "70B", 256,
                         {"tp": 8, "sequence_parallel": True, "micro_batch": 16, "global_batch": 512, "recompute": "full",
                          "sharding_stage": 3, "precision": "fp8", "tp_comm_overlap": "AsyncTP" in techniques},
                         md.number(tps), md.number(mem)))
    for schedule, tps, mem in t5.rows:
        v = 2 if schedule.startswith("Interleaved") else 1
        out.append(_cell(f"Table 5 405B 512 GPUs FSDP 8 TP 8 PP 8 {schedule}", "405B", 512,
                         {"tp": 8, "pp": 8, "interleave": v, "stage_layers": stage_layers(126, 8 * v),
                          "sequence_parallel": True, "micro_batch": 4, "global_batch": 256, "recompute": "full",
                          "sharding_stage": 2, "precision": "fp8", "tp_comm_overlap": True}, md.number(tps), md.number(mem)))
    for parallel, seq, tps, mem in t6.rows:
        fsdp, cp = _fsdp_cp(parallel)
        out.append(_cell(f"Table 6 405B 512 GPUs TP 8 PP 8 {parallel} seq {seq}", "405B", 512,
                         {"seq": int(md.number(seq)), "tp": 8, "pp": 8, "cp": cp if cp > 1 else None,
                          "stage_layers": stage_layers(126, 8), "sequence_parallel": True, "micro_batch": 1,
                          "global_batch": 8 * fsdp, "recompute": "full", "sharding_stage": 2, "precision": "fp8",
                          "tp_comm_overlap": True}, md.number(tps), md.number(mem)))
    return out


def asynctp_h100_2025(tables: list[md.MdTable]) -> list[dict]:
    """The two tables of asyncTP_llama3_h100_2025-06_torchtitan.md: each row a recipe, vanilla and async TP."""
    settings = [("70B", 256, {"micro_batch": 16, "global_batch": 512, "recompute": "full"}),
                ("8B", 64, {"micro_batch": 12, "global_batch": 96, "recompute": "selective"})]
    out = []
    for table, (model, gpus, split) in zip(tables[:2], settings):
        for recipe, vanilla, async_tp, _speedup in table.rows:  # the speedup is arithmetic on the two
            for overlap, tps in ((False, vanilla), (True, async_tp)):
                out.append(_cell(f"{model} {gpus} GPUs FSDP {gpus // 8} TP 8 {recipe} {'async' if overlap else 'vanilla'} TP",
                                 model, gpus, {**split, "tp": 8, "sequence_parallel": True, "sharding_stage": 3,
                                               "precision": PRECISION[recipe], "tp_comm_overlap": overlap},
                                 md.number(tps), None))
    return out


def llama3_h200_2025(tables: list[md.MdTable]) -> list[dict]:
    """The one result table of llama3-8b_h200_202506_trainy-whitefiber.md (FSDP over all GPUs)."""
    out = []
    for nodes, tps, mem in tables[0].rows:
        gpus = 8 * int(nodes)
        out.append(_cell(f"8B {gpus} GPUs ({nodes} nodes) FSDP Float8", "8B", gpus,
                         {"micro_batch": 2, "global_batch": 2 * gpus, "recompute": "selective", "sharding_stage": 3,
                          "precision": "fp8"}, md.number(tps), md.number(mem)))
    return out


SOURCES = {
    "torchtitan-2024-h100": ("llama3_h100_202412_torchtitan.md", "h100", llama3_h100_2024,
                                    "torchtitan team, end of 2024 (torch 1963fc8, torchao eab345c, torchtitan 9dec370)"),
    "torchtitan-2025-asynctp": ("asyncTP_llama3_h100_2025-06_torchtitan.md", "h100", asynctp_h100_2025,
                                     "PyTorch team, June 2025 (torch 38410cf9, torchao 6243040, torchtitan 820504e)"),
    "torchtitan-2025-h200": ("llama3-8b_h200_202506_trainy-whitefiber.md", "h200", llama3_h200_2025,
                                    "Trainy on WhiteFiber, June 2025 (torchtitan e7c0cae)"),
}


def convert(key: str, text: str) -> str:
    file, cluster, reader, who = SOURCES[key]
    cells = reader(md.tables(text))
    comment = (f"torchtitan's published benchmark {file} ({BASE}{file}), by {who}: every row, converted by\n"
               f"`python -m fleetbench.perfmodel.sources.torchtitan {key}` (its docstring says how each field was read).\n"
               "Held out (role check, results/reference/manifest.yaml); rule: docs/validation/plan-held-out.md.\n"
               "TPS/GPU as printed (tokens a second a GPU), memory GiB as printed x 1024. The GPUs run at 500 W\n"
               "(gpu_power_w), not the 700 W of the H100 SXM they are priced as." if cluster == "h100" else
               f"torchtitan's published benchmark {file} ({BASE}{file}), by {who}: every row, converted by\n"
               f"`python -m fleetbench.perfmodel.sources.torchtitan {key}`. Held out (role check).\n"
               "TPS/GPU as printed, memory GiB x 1024; FSDP over all GPUs, local batch 2, the llama3 8B config's AC.")
    meta = {"source": f"torchtitan benchmarks/{file}", "url": BASE + file, "commit": COMMIT, "flops": "none",
            "unit": "tokens/s/gpu", "cluster": CLUSTERS[cluster],
            "gpu_power_w": 500 if cluster == "h100" else None, "assumed": ASSUMED}
    return md.table_yaml(comment, meta, cells)


def main(argv: list[str] | None = None) -> int:
    return md.main("fleetbench.perfmodel.sources.torchtitan", SOURCES, convert, argv)


if __name__ == "__main__":
    sys.exit(main())
