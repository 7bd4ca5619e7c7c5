"""NeMo Megatron-Bridge's published pre-training performance (github.com/NVIDIA-NeMo/Megatron-Bridge at
067f987d, `Megatron-Bridge/docs/performance-summary-archive.md`, the 26.04.01 container's section) into hybrid-parallel
tables for `fleetbench plan --validate`, held out (role check). Selection rule:
docs/validation/plan-held-out.md (its DGX-H100 and DGX-B200 rows; DGX-GB200, GB300 and B300 rows not
entered, by the rule).

    git -C BRIDGE show 067f987df03b8355b03192d88d70f1709fedf51a:./docs/performance-summary-archive.md > results/reference/megatron-bridge/performance-summary-archive.md
    python -m fleetbench.perfmodel.sources.megatron_bridge KEY results/reference/megatron-bridge/performance-summary-archive.md > fleetbench/presets/published/KEY.yaml

    KEY                 rows
    mbridge-2604-h100   DGX-H100 rows of 26.04.01 (Nemotron_3_Nano listed, not entered: see below)
    mbridge-2604-b200   DGX-B200 rows of 26.04.01 (Nemotron_3_Nano and _Super listed, not entered)

Figures: "Tokens / sec / GPU" as printed (the Model TFLOP/s beside it is kept in the cell's name). The
models' shapes are their published configs (Llama 3 70B / 3.1 405B, Qwen3-30B-A3B / 235B-A22B,
GPT-OSS-120B, DeepSeek-V3); precision as the recipes name it (H100 "FP8" is Transformer Engine's
current scaling, `fp8_cs` in perf_recipes/*/h100/*.py). Nemotron 3 Nano and Super are hybrid
Mamba-2/attention MoE models whose shapes were not read in this session: their rows are listed in
docs/validation/plan-held-out.md as not entered (no plan flag of the issue can express a Mamba layer).
"""
from __future__ import annotations

import sys

from fleetbench.perfmodel.sources import markdown_tables as md

COMMIT = "067f987df03b8355b03192d88d70f1709fedf51a"
URL = f"https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/{COMMIT}/docs/performance-summary-archive.md"
RELEASE = "## 26.04.01 NeMo Container"
DENSE = {"experts": None, "top_k": None, "moe_ffn": None, "shared_experts": None, "dense_layers": None}
MODELS = {  # the models' published configs
    "LLAMA3_70B": {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "head_dim": None, "ffn": 28672,
                   "vocab": 128256, **DENSE},
    "LLAMA3.1_405B": {"layers": 126, "hidden": 16384, "heads": 128, "kv_heads": 8, "head_dim": None, "ffn": 53248,
                      "vocab": 128256, **DENSE},
    "Qwen3_30B_a3B": {"layers": 48, "hidden": 2048, "heads": 32, "kv_heads": 4, "head_dim": 128, "ffn": 6144,
                      "vocab": 151936, "experts": 128, "top_k": 8, "moe_ffn": 768, "shared_experts": None,
                      "dense_layers": 0},
    "Qwen3_235B_a22B": {"layers": 94, "hidden": 4096, "heads": 64, "kv_heads": 4, "head_dim": 128, "ffn": 12288,
                        "vocab": 151936, "experts": 128, "top_k": 8, "moe_ffn": 1536, "shared_experts": None,
                        "dense_layers": 0},
    "GPT OSS 120B": {"layers": 36, "hidden": 2880, "heads": 64, "kv_heads": 8, "head_dim": 64, "ffn": 2880,
                     "vocab": 201088, "experts": 128, "top_k": 4, "moe_ffn": 2880, "shared_experts": None,
                     "dense_layers": 0, "sliding_window": "128 tokens in every second layer, attention sinks"},
    "DeepSeekV3": {"layers": 61, "hidden": 7168, "heads": 128, "kv_heads": None, "head_dim": None, "ffn": 18432,
                   "vocab": 129280, "experts": 256, "top_k": 8, "moe_ffn": 2048, "shared_experts": 1,
                   "dense_layers": 3, "mla": "q_lora 1536, kv_lora 512, qk 128 + rope 64, v 128", "mtp_layers": 1},
}
NOT_ENTERED = ("Nemotron_3_Nano", "Nemotron_3_Super")  # hybrid Mamba-2/attention MoE: shapes not read
CLUSTERS = {  # DGX H100 / B200: 8 GPUs, 8 x 400 Gb/s InfiniBand
    "DGX-H100": {"gpu": "H100-SXM", "gpus_per_node": 8, "nics": 8, "nic_gbit": 400.0, "precision": "bf16"},
    "DGX-B200": {"gpu": "B200", "gpus_per_node": 8, "nics": 8, "nic_gbit": 400.0, "precision": "bf16"},
}
PRECISION = {"BF16": None, "FP8": "fp8-cs", "MXFP8": "mxfp8", "NVFP4": "nvfp4"}
ASSUMED = ["the page prints no recomputation or overlap: none entered (the recipes set them per model; not read here)",
           "MoE rows: the page's footnote: experts force-balanced, token-dropless (balance forced)",
           "the data-parallel degree: GPUs / (tp x pp x cp); the distributed optimizer (sharding stage 1) as every "
           "Megatron-Bridge pre-training recipe sets it"]


def release_section(text: str) -> str:
    start = text.index(RELEASE)
    end = text.find("\n## ", start + len(RELEASE))
    return text[start:end if end > 0 else None]


def _model_tables(section: str) -> list[tuple[str, md.MdTable]]:
    """(model, table) for each '#### Model: NAME' heading of the section."""
    return [(t.caption.split("Model:", 1)[1].strip(), t) for t in md.tables(section) if "Model:" in t.caption]


def _cell(model: str, row: dict) -> dict:
    shape = MODELS[model]
    moe = shape["experts"] is not None
    pp, vp = int(row["PP"]), (1 if row["VP"] == "n/a" else int(row["VP"]))
    tp, cp, gpus = int(row["TP"]), int(row["CP"]), int(row["#-GPUs"])
    uneven = shape["layers"] % (pp * vp) != 0
    cell = {"name": (f"{model} {row['Precision']} {gpus} GPUs tp{tp} pp{pp} cp{cp} vp{row['VP']} ep{row['EP']}"
                     f" mbs{row['MBS']} ({row['Model TFLOP / sec / GPU']} TF)"),
            "gpus": gpus, **{k: v for k, v in shape.items()}, "seq": int(row["Sequence Length"]), "gated": True,
            "flash": True, "tp": tp, "pp": pp, "cp": cp if cp > 1 else None,
            "ep": int(row["EP"]) if moe else None, "interleave": vp,
            "pipeline_layout": (f"{shape['layers']} layers on {pp} x {vp} virtual stages: uneven, the recipe's split not read"
                                if uneven else None),
            "sequence_parallel": tp > 1, "micro_batch": int(row["MBS"]), "global_batch": int(row["GBS"]),
            "sharding_stage": 3 if int(row.get("FSDP", "0") or 0) else 1,
            "precision": PRECISION[row["Precision"]], "balance": "forced" if moe else None,
            "published": md.number(row["Tokens / sec / GPU"])}
    return cell


def cells_of(key: str, text: str) -> list[dict]:
    system = {"mbridge-2604-h100": "DGX-H100", "mbridge-2604-b200": "DGX-B200"}[key]
    out = []
    for model, table in _model_tables(release_section(text)):
        for values in (dict(zip(table.header, r)) for r in table.rows):
            if values["System"] == system and model not in NOT_ENTERED:
                out.append(_cell(model, values))
    return out


def not_entered(text: str) -> list[str]:
    """The DGX-H100/B200 rows of the release this converter does not enter (NOT_ENTERED), as printed."""
    return [f"{model}: " + " | ".join(r) for model, t in _model_tables(release_section(text)) if model in NOT_ENTERED
            for r in t.rows if r[0] in CLUSTERS]


SOURCES = {"mbridge-2604-h100": "DGX-H100", "mbridge-2604-b200": "DGX-B200"}


def convert(key: str, text: str) -> str:
    comment = (f"NeMo Megatron-Bridge performance summary, 26.04.01 container ({URL}): every {SOURCES[key]}\n"
               f"pre-training row but the Nemotron ones (listed in docs/validation/plan-held-out.md), converted by\n"
               f"`python -m fleetbench.perfmodel.sources.megatron_bridge {key}`. Tokens/s a GPU as printed; the\n"
               "printed model TFLOP/s is kept in the name. Held out (role check); rule: docs/validation/plan-held-out.md.")
    meta = {"source": "Megatron-Bridge/docs/performance-summary-archive.md, 26.04.01", "url": URL, "commit": COMMIT,
            "flops": "none", "unit": "tokens/s/gpu", "cluster": CLUSTERS[SOURCES[key]], "assumed": ASSUMED}
    return md.table_yaml(comment, meta, cells_of(key, text))


def main(argv: list[str] | None = None) -> int:
    return md.main("fleetbench.perfmodel.sources.megatron_bridge", SOURCES, convert, argv)


if __name__ == "__main__":
    sys.exit(main())
