"""Megatron-Core's MoE best-practice tables (github.com/yanring/Megatron-MoE-ModelZoo at e8650517,
`best_practice/qwen3/readme.md`) into hybrid-parallel tables for `fleetbench plan --validate`, held
out (role check). Selection rule: docs/validation/plan-held-out.md. (`best_practice/deepseek-v3/
readme.md`, also selected, holds no table: nothing to enter.)

    git -C ZOO show e8650517d60d71ab73fc6b3b0388cac4ba435181:best_practice/qwen3/readme.md > results/reference/megatron-moe-modelzoo/qwen3-readme.md
    python -m fleetbench.perfmodel.sources.megatron_moe_modelzoo KEY results/reference/megatron-moe-modelzoo/qwen3-readme.md > fleetbench/presets/published/KEY.yaml

    KEY                  tables of the page                              cells
    moe-zoo-qwen3-h100   H100 (step times), H100 long context (TFLOPS)   6 + 8 (forced balance and dropless)
    moe-zoo-qwen3-gb200  GB200 (TFLOPS)                                  3
    moe-zoo-qwen3-gb300  GB300 (TFLOPS)                                  1

Figures. The H100 table's step time becomes tokens a second a GPU, GBS x seq / (step x GPUs), no
formula needed. The other tables print only TFLOP/s a GPU, counted by Megatron-LM's
`num_floating_point_operations` (megatron/training/training.py at 001b00c2, GQA + MoE branch), so
they are turned back into tokens with that formula (`mcore_flops_per_token`):

    6 s_tok [ h (3 f_moe k) L_moe + h (3 f_sh) L_moe + L (h (q + 2 kv) + q s + q h) + h V ]

per token (x3 forward and backward, x2 a multiply-add; SwiGLU's 3 matrices; q = heads x head_dim,
kv = kv_heads x head_dim; causal attention counted as half the s x s square: q s; no router). The
H100 table checks it: its first row's step time gives 1,663 tokens/s a GPU, x 148.0 GFLOP a token
(the formula) = 246.2 TFLOP/s against the 245 printed. Shapes and settings from the model configs
and scripts of the same commit (model_configs/benchmarking/Qwen3-*.yaml, best_practice/qwen3/*.sh).
"""
from __future__ import annotations

import sys

from fleetbench.perfmodel.sources import markdown_tables as md

COMMIT = "e8650517d60d71ab73fc6b3b0388cac4ba435181"
URL = f"https://github.com/yanring/Megatron-MoE-ModelZoo/blob/{COMMIT}/best_practice/qwen3/readme.md"
# model_configs/benchmarking/Qwen3-*.yaml: GQA with an explicit head width, every layer MoE, SwiGLU experts
MODELS = {
    "235B": {"layers": 94, "hidden": 4096, "heads": 64, "kv_heads": 4, "head_dim": 128, "experts": 128, "top_k": 8,
             "moe_ffn": 1536, "shared_experts": None, "dense_layers": 0, "linear_attention_layers": None,
             "mtp_layers": None},
    "Next-80B-A3B": {"layers": 48, "hidden": 2048, "heads": 16, "kv_heads": 2, "head_dim": 256, "experts": 512,
                     "top_k": 10, "moe_ffn": 512, "shared_experts": 1, "dense_layers": 0,
                     "linear_attention_layers": 36, "mtp_layers": 1},  # gated delta net in 3 of 4 layers
}
COMMON = {"vocab": 151936, "gated": True, "flash": True, "sequence_parallel": True, "etp": 1}
CLUSTERS = {  # the page: NVLink 4, InfiniBand 8 x 50 GB/s a node; GB200/GB300 NVL72 racks
    "h100": {"gpu": "H100-SXM", "gpus_per_node": 8, "nics": 8, "nic_gbit": 400.0, "precision": "bf16"},
    "gb200": {"gpu": "GB200", "gpus_per_node": 72, "nics": 72, "nic_gbit": 400.0, "precision": "bf16"},
    "gb300": {"gpu": "GB300", "gpus_per_node": 72, "nics": 72, "nic_gbit": 800.0, "precision": "bf16"},
}
RECOMPUTE = {"norm, act": "layernorm, moe_act", "norm, act, shared_expert": "layernorm, moe_act, shared_experts",
             "layernorm moe": "layernorm, moe"}
ASSUMED = [
    "235B: --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split (its model config): "
    "layers + 2 over pp x vpp virtual stages, the first and last one layer short (stage_layers lists the virtual stages in order)",
    "overlap-grad-reduce and overlap-param-gather on with the distributed optimizer (the 235B model config)",
    "the long-context table's commands set no micro-batch: 1 (sbatch_benchmarking.sh's scripts export MBS=1)",
    "GB200/GB300 rows: one NVL72 rack as the node (the page: NVLink domain 72)",
]


def mcore_flops_per_token(model: dict, seq: int) -> float:
    """Megatron-LM's training FLOPs a token for a GQA MoE model (module doc); no linear attention."""
    h, q, kv = model["hidden"], model["heads"] * model["head_dim"], model["kv_heads"] * model["head_dim"]
    mlp = h * 3 * model["moe_ffn"] * (model["top_k"] + (model["shared_experts"] or 0))
    attention = h * (q + 2 * kv) + q * seq + q * h
    return 6.0 * (model["layers"] * (mlp + attention) + h * COMMON["vocab"])


def stage_layers(layers: int, pp: int, vpp: int, account_for_ends: bool) -> str | None:
    """Layers a virtual stage in order; None when the split is even (no embedding or loss counted)."""
    stages = pp * vpp
    if pp == 1 or not account_for_ends:
        return None
    per, rest = divmod(layers + 2, stages)
    if rest:
        raise SystemExit(f"{layers} layers + 2 do not divide among {stages} virtual stages")
    return ",".join(str(per - 1 if i in (0, stages - 1) else per) for i in range(stages))


def _cell(name: str, model: str, gpus: int, split: dict, published: float) -> dict:
    cell = {"name": name, "gpus": gpus, **MODELS[model], **COMMON, "seq": 4096, "tp": 1, "pp": 1, "cp": None, "ep": 1,
            "interleave": 1, "stage_layers": None, "micro_batch": 1, "global_batch": None, "recompute": "none",
            "recompute_modules": None, "sharding_stage": 1, "precision": None, "overlap_grad_reduce": None,
            "overlap_param_gather": None, "ep_a2a_overlap": None, "moe_dispatcher": None, "balance": None, **split}
    cell["published"] = published
    return cell


def _h100_rows(table: md.MdTable) -> list[dict]:
    col = {name: i for i, name in enumerate(table.header)}
    out = []
    for row in table.rows:
        if not row[col["#GPUs"]]:  # a section heading ("Cross-node EP strategy"), no figure
            continue
        get = lambda name: row[col[name]]  # noqa: E731
        model, gpus, pp, vpp = get("Model"), int(get("#GPUs")), int(get("PP")), int(get("VPP"))
        big = model == "235B"
        step, gbs, seq = float(get("Step time (sec)")), int(get("GBS")), int(get("SEQ LEN"))
        recompute = get("recompute")
        notes = get("Notes")
        split = {"seq": seq, "tp": int(get("TP")), "pp": pp, "cp": int(get("CP")) if int(get("CP")) > 1 else None,
                 "ep": int(get("EP")), "interleave": vpp, "stage_layers": stage_layers(MODELS[model]["layers"], pp, vpp, big),
                 "micro_batch": int(get("MBS")), "global_batch": gbs,
                 "recompute": "full" if recompute == "full" else "none",
                 "recompute_modules": RECOMPUTE.get(recompute), "sharding_stage": 3 if get("FSDP") == "On" else 1,
                 "overlap_grad_reduce": True if big else None, "overlap_param_gather": True if big else None,
                 "ep_a2a_overlap": True if "1f1b overlap" in notes else None, "moe_dispatcher": get("Dispatcher"),
                 "balance": "forced" if "1f1b overlap" in notes else None}
        name = (f"{model} {get('Dispatcher')} tp{get('TP')} pp{pp} vpp{vpp} ep{get('EP')} dp{get('DP')}"
                f"{' fsdp' if get('FSDP') == 'On' else ''} mbs{get('MBS')} {recompute or 'no recompute'}"
                f"{' ' + notes if notes else ''} ({step:g} s, {get('Per GPU TF')} TF)")
        out.append(_cell(name, model, gpus, split, round(gbs * seq / (step * gpus), 1)))
    return out


def _long_context_rows(table: md.MdTable) -> list[dict]:
    out = []
    for gpu, seq, nodes, tp, cp, gbs, tflops in table.rows:
        forced, dropless = (md.number(part) for part in tflops.split("/"))
        for balance, figure in (("forced", forced), ("dropless", dropless)):
            seq_n, gpus = int(seq), 8 * int(nodes)
            split = {"seq": seq_n, "tp": int(tp), "pp": 8, "cp": int(cp) if int(cp) > 1 else None, "ep": 8,
                     "interleave": 4, "stage_layers": stage_layers(94, 8, 4, True), "global_batch": int(gbs),
                     "recompute_modules": RECOMPUTE["layernorm moe"], "overlap_grad_reduce": True,
                     "overlap_param_gather": True, "moe_dispatcher": "DeepEP", "balance": balance}
            tokens = figure * 1e12 / mcore_flops_per_token(MODELS["235B"], seq_n)
            out.append(_cell(f"235B long context seq {seq} tp{tp} cp{cp} {balance} ({figure:g} TF)", "235B", gpus,
                             split, round(tokens, 1)))
    return out


def _gb_rows(table: md.MdTable) -> list[dict]:
    col = {name: i for i, name in enumerate(table.header)}
    out = []
    for row in table.rows:
        get = lambda name: row[col[name]]  # noqa: E731
        # a GB200/GB300 compute tray (the page's node) holds 4 GPUs; the rack's NVLink domain 72
        seq, pp, vpp, gpus = int(get("SEQ_LEN")), int(get("PP")), int(get("VPP")), 4 * int(get("NNODES"))
        precision = get("Precision").lower()
        split = {"seq": seq, "tp": int(get("TP")), "pp": pp, "cp": int(get("CP")) if int(get("CP")) > 1 else None,
                 "ep": int(get("EP")), "interleave": vpp, "stage_layers": stage_layers(94, pp, vpp, True),
                 "micro_batch": int(get("MBS")), "global_batch": int(get("GBS")),
                 "precision": None if precision == "bf16" else precision, "overlap_grad_reduce": True,
                 "overlap_param_gather": True, "moe_dispatcher": "HybridEP", "balance": "forced"}
        figure = float(get("TFLOPS"))
        tokens = figure * 1e12 / mcore_flops_per_token(MODELS["235B"], seq)
        out.append(_cell(f"235B {get('GPU')} {get('Precision')} seq {seq} tp{get('TP')} pp{pp} vpp{vpp} cp{get('CP')} "
                         f"ep{get('EP')} {get('Notes') or ''}".rstrip() + f" ({figure:g} TF)", "235B", gpus, split,
                         round(tokens, 1)))
    return out


def cells_of(key: str, text: str) -> list[dict]:
    tables = md.tables(text)
    if len(tables) != 4:
        raise SystemExit(f"expected 4 tables (H100, long context, GB200, GB300), found {len(tables)}")
    if key == "moe-zoo-qwen3-h100":
        return _h100_rows(tables[0]) + _long_context_rows(tables[1])
    return _gb_rows(tables[2] if key == "moe-zoo-qwen3-gb200" else tables[3])


SOURCES = {"moe-zoo-qwen3-h100": "h100", "moe-zoo-qwen3-gb200": "gb200", "moe-zoo-qwen3-gb300": "gb300"}


def convert(key: str, text: str) -> str:
    cells = cells_of(key, text)
    comment = (f"Megatron-Core MoE best practice, Qwen3 ({URL}): every row of its {SOURCES[key].upper()} table(s), converted by\n"
               f"`python -m fleetbench.perfmodel.sources.megatron_moe_modelzoo {key}` (its docstring: how each figure was read,\n"
               "the FLOP formula that turns a printed TFLOP/s back into tokens). Held out (role check); rule:\n"
               "docs/validation/plan-held-out.md. A cell's name keeps the printed step time or TFLOP/s.")
    meta = {"source": "Megatron-MoE-ModelZoo best_practice/qwen3/readme.md", "url": URL, "commit": COMMIT,
            "flops": "none", "unit": "tokens/s/gpu", "cluster": CLUSTERS[SOURCES[key]], "assumed": ASSUMED}
    return md.table_yaml(comment, meta, cells)


def main(argv: list[str] | None = None) -> int:
    return md.main("fleetbench.perfmodel.sources.megatron_moe_modelzoo", SOURCES, convert, argv)


if __name__ == "__main__":
    sys.exit(main())
