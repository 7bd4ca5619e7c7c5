"""FlagPerf's Megatron-Core LLM cases (github.com/FlagOpen/FlagPerf at 1b5a0303, `training/nvidia/*-megatron/
README.md`) into hybrid-parallel tables for `fleetbench plan --validate`, held out (role check). Selection
rule: docs/validation/plan-held-out.md.

    for c in llama3_8B llama3_70B llama2_70B mixtral_8x7B qwen1.5_MoE; do
        git -C FLAGPERF show 1b5a030398ab719e406f77877eb34c9599b17fd2:training/nvidia/$c-megatron/README.md > results/reference/flagperf/$c-megatron.md; done
    python -m fleetbench.perfmodel.sources.flagperf KEY results/reference/flagperf > fleetbench/presets/published/KEY.yaml

Every performance row of the five READMEs (ablations included) is a cell of the table of its GPU
(flagperf-a100, -h100, -h800, -a800); `token/p/s` (tokens a second a card) as printed, no formula. The
batch and sequence each README states in prose ("默认为 ...": micro-batch, sequence, global batch or
accumulation); a row's `fix_hp` overrides them (gbs=1760, GAS=1024). The starred row of llama3_8B
(no GPU named, memory and MFU starred) and the OOM row (no figure) are listed by `not_entered`.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from fleetbench.perfmodel.sources import markdown_tables as md

COMMIT = "1b5a030398ab719e406f77877eb34c9599b17fd2"
BASE = f"https://github.com/FlagOpen/FlagPerf/blob/{COMMIT}/training/nvidia/"
DENSE = {"experts": None, "top_k": None, "moe_ffn": None, "shared_experts": None, "shared_ffn": None}
CASES = {  # the models' published configs; batch and sequence as each README's prose states them
    "llama3_8B": ({"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336, "vocab": 128256, **DENSE},
                  {"seq": 8192, "micro_batch": 1, "global_batch": 512}),
    "llama3_70B": ({"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn": 28672, "vocab": 128256, **DENSE},
                   {"seq": 8192, "micro_batch": 1, "global_batch": 512}),
    "llama2_70B": ({"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn": 28672, "vocab": 32000, **DENSE},
                   {"seq": 4096, "micro_batch": 1, "accumulation": 44}),
    "mixtral_8x7B": ({"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336, "vocab": 32000,
                      "experts": 8, "top_k": 2, "moe_ffn": 14336, "shared_experts": None, "shared_ffn": None},
                     {"seq": 4096, "micro_batch": 3, "global_batch": 1200}),
    "qwen1.5_MoE": ({"layers": 24, "hidden": 2048, "heads": 16, "kv_heads": None, "ffn": 5632, "vocab": 151936,
                     "experts": 60, "top_k": 4, "moe_ffn": 1408, "shared_experts": 1, "shared_ffn": 5632},
                    {"seq": 8192, "micro_batch": 1, "global_batch": 512}),
}
GPUS = {"A100": "A100-SXM-80GB", "H100": "H100-SXM", "H800": "H800", "A800": "A800"}
CLUSTER = {"gpus_per_node": 8, "nics": 8, "precision": "bf16"}
NIC_GBIT = {"A100": 200.0, "A800": 200.0, "H100": 400.0, "H800": 400.0}
PRECISION = {"bf16": None, "amp": None, "bf16+fp8": "fp8", "fp32": "fp32", "fp16": "fp16"}
ASSUMED = ["`amp` taken as bf16 (the README's precision list names bf16; the adapter script not read)",
           "`bf16+fp8` as Transformer Engine FP8 (training_adapter_H100_fp8.sh; its recipe not read)",
           "Megatron's --recompute-activations (the READMEs' optimisation list): selective recomputation",
           "the NICs: 8 a node, 200 Gb/s (A100, A800; the README: InfiniBand 200Gb/s) or 400 Gb/s (H100, H800; not printed)"]


def _split(text: str) -> dict:
    found = dict((k.lower(), int(v)) for k, v in re.findall(r"(PP|DP|TP|EP)(\d+)", text))
    return {"tp": found["tp"], "pp": found["pp"], "ep": found.get("ep")}


def _row(case: str, values: dict) -> dict | None:
    shape, batch = CASES[case]
    where = re.match(r"\\?\*?(A100|H100|H800|A800)?.*?（(\d+)x(\d+)）", values["配置"])
    tps = md.number(values["token/p/s"])
    if where is None or where.group(1) is None or tps is None:
        return None
    nodes, per_node = int(where.group(2)), int(where.group(3))
    split, fix = _split(values["parallel"]), values.get("fix_hp", "")
    dp = nodes * per_node // (split["tp"] * split["pp"])
    gbs = batch.get("global_batch") or batch["micro_batch"] * batch["accumulation"] * dp
    override = re.search(r"(?:gbs|GBS)=(\d+)", fix)
    gbs = int(override.group(1)) if override else gbs
    moe = shape["experts"] is not None
    return {"name": f"{case} {values['配置']} {values['precision']} {values['parallel']} {fix}".strip(),
            "gpu": where.group(1), "gpus": nodes * per_node, **shape, "gated": True, "flash": True,
            "seq": batch["seq"], "tp": split["tp"], "pp": split["pp"], "ep": split["ep"] if moe else None,
            "sequence_parallel": False, "micro_batch": batch["micro_batch"], "global_batch": gbs,
            "recompute": "selective", "sharding_stage": 1, "precision": PRECISION[values["precision"]],
            "published": tps, "memory_mib": round(md.number(values["mem"]) * 1024) if md.number(values["mem"]) else None}


def _readme_rows(directory: Path) -> list[tuple[str, dict]]:
    out = []
    for case in CASES:
        for table in md.tables((Path(directory) / f"{case}-megatron.md").read_text()):
            if "token/p/s" in table.header:
                out += [(case, dict(zip(table.header, r))) for r in table.rows]
    return out


def not_entered(directory: Path) -> list[str]:
    return [f"{case}: " + " | ".join(v.values()) for case, v in _readme_rows(directory) if _row(case, v) is None]


def cells_of(key: str, directory: Path) -> list[dict]:
    gpu = key.split("-")[1].upper()
    cells = [c for c in (_row(case, v) for case, v in _readme_rows(directory)) if c and c["gpu"] == gpu]
    for c in cells:
        del c["gpu"]
    return cells


SOURCES = {f"flagperf-{g.lower()}": g for g in GPUS}


def convert(key: str, directory: Path) -> str:
    gpu = SOURCES[key]
    comment = (f"FlagPerf's Megatron-Core LLM cases ({BASE}), every performance row on {gpu}, converted by\n"
               f"`python -m fleetbench.perfmodel.sources.flagperf {key}` (its docstring: how each field was read).\n"
               "token/p/s as printed; memory GiB x 1024. Held out (role check); rule: docs/validation/plan-held-out.md.")
    meta = {"source": "FlagPerf training/nvidia/*-megatron/README.md", "url": BASE, "commit": COMMIT, "flops": "none",
            "unit": "tokens/s/gpu", "cluster": {"gpu": GPUS[gpu], **CLUSTER, "nic_gbit": NIC_GBIT[gpu]},
            "assumed": ASSUMED}
    return md.table_yaml(comment, meta, cells_of(key, directory))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in SOURCES:
        print(f"usage: python -m fleetbench.perfmodel.sources.flagperf {{{'|'.join(SOURCES)}}} DIRECTORY", file=sys.stderr)
        return 2
    sys.stdout.write(convert(args[0], Path(args[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
