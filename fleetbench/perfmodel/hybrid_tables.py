"""Published tables of hybrid-parallel GPT training (fleetbench/presets/published/*.yaml), each
cell predicted by perfmodel/hybrid.py and listed with its error: `fleetbench plan --validate`.

A table file names its cluster, the defaults of its cells, which keys were assumed rather than
read (listed in every cell's note), the FLOPs its TFLOP/s counts (`flops`: the recomputation whose
forward it includes: Megatron's Table 1 counts full recomputation's, MFU tables none). Its role,
`fit` (the model's constants were fitted on it) or `check` (never used for fitting), is
results/reference/manifest.yaml's (hybrid_tables). A
published figure in tokens/s a GPU (`unit: tokens/s/gpu`) or seconds an iteration (`unit:
s/iteration`) is converted to TFLOP/s with measure/flops.py. Every row becomes a cell; a row the model cannot price (a split check() refuses, a
set field it does not read, a GPU it lacks)
is listed with its reason, never dropped.

Fit (FIT, run by `fit()`; its result is written into perfmodel/hybrid.py's EFF_MAX, EFF_HALF_WIDTH by
hand): least squares on the relative errors of the `fit` tables' cells, a grid over the two
constants; the `check` tables then say how well the fit carries to other tables.
"""
from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import yaml

from fleetbench.measure import devices
from fleetbench.measure.registry import PRESET_DIR
from fleetbench.perfmodel import hybrid, hybrid_search, manifest

TABLES_DIR = PRESET_DIR / "published"
WITHIN = 0.15  # the acceptance: >= 85% of cells within 15%, median <= 7%
SHAPE_KEYS = ("layers", "hidden", "heads", "seq", "vocab", "ffn", "gated", "flash")
SPLIT_KEYS = ("micro_batch", "global_batch", "recompute", "sharding_stage", "sequence_parallel", "interleave")
# read here, not by the model: the cell, its figure, and figures listed beside it (memory, a cross-check MFU)
CELL_KEYS = ("name", "published", "gpus", "tp", "pp", "memory_mib", "mfu_readme")


@dataclasses.dataclass(frozen=True)
class Cell:
    table: str
    role: str
    name: str
    published: float          # TFLOP/s a GPU, counted as the table counts
    predicted: float | None   # the same, predicted; None: not priced (note says why)
    note: str

    @property
    def error(self) -> float | None:
        return None if self.predicted is None else (self.predicted - self.published) / self.published


def load(path: Path) -> dict:
    table = yaml.safe_load(Path(path).read_text())
    table["file"] = Path(path).name
    table["role"] = manifest.hybrid_role(table["file"])  # fit or check: results/reference/manifest.yaml
    return table


def tables(directory: Path = TABLES_DIR) -> list[dict]:
    return [load(p) for p in sorted(Path(directory).glob("*.yaml"))]


# the newer fields a cell may set, read into the model (the tables helper's names)
MODEL_KEYS = ("kv_heads", "head_dim", "experts", "top_k", "moe_ffn", "shared_experts", "dense_layers", "cp", "ep",
              "stage_layers", "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap", "ep_a2a_overlap",
              "shard_group", "precision", "etp")
# read, and priced as the model's nearest configuration; each is named in the cell's note
APPROXIMATED = {
    "balance": "router balance {} priced as a balanced router (imbalance 1)",
    "moe_dispatcher": "dispatcher {} priced as NCCL's all-to-all",
    "pipeline_layout": "pipeline layout not read by the table: stages balanced, the remainder on the middle ones",
    "recompute_modules": "recompute of {} not priced (no recomputed forward counted)",
}
FP8_RECIPES = ("fp8", "fp8-cs", "fp8-rowwise", "fp8-blockwise", "mxfp8")  # the GEMMs in FP8; scale granularity not priced
OVERLAP_KEYS = {"grad_reduce": "overlap_grad_reduce", "param_gather": "overlap_param_gather", "tp_comm": "tp_comm_overlap",
                "ep_a2a": "ep_a2a_overlap"}


def _moe(values: dict) -> hybrid.Moe | None:
    if not values.get("experts"):
        return None
    return hybrid.Moe(int(values["experts"]), int(values["top_k"]), values.get("moe_ffn"),
                      int(values.get("shared_experts") or 0), int(values.get("dense_layers") or 0))


def _stages(values: dict, layers: int, pp: int) -> tuple | None:
    given = values.get("stage_layers")
    if given:
        return hybrid.fold_stages(tuple(int(x) for x in str(given).split(",")), pp)
    return None if layers % pp == 0 else hybrid_search.balanced_stages(layers, pp)


def _cell_inputs(table: dict, row: list) -> tuple:
    values = dict(table.get("defaults") or {}, **dict(zip(table["columns"], row)))
    shape = hybrid.Shape(**{k: values[k] for k in SHAPE_KEYS if k in values}, kv_heads=values.get("kv_heads"),
                         head_dim=values.get("head_dim"), moe=_moe(values))
    tp, pp, cp = int(values.get("tp", 1)), int(values.get("pp", 1)), int(values.get("cp") or 1)
    if tp == 1:  # Megatron turns sequence parallelism off without TP
        values["sequence_parallel"] = False
    overlap = frozenset(k for k, key in OVERLAP_KEYS.items() if values.get(key))
    split = hybrid.Split(tp=tp, pp=pp, dp=int(values["gpus"]) // (tp * pp * cp),
                        **{k: values[k] for k in SPLIT_KEYS if k in values and values[k] is not None},
                        cp=cp, ep=int(values.get("ep") or 1), stage_layers=_stages(values, shape.layers, pp),
                        overlap=overlap, shard_group=values.get("shard_group"),
                        etp=None if values.get("etp") in (None, tp) else int(values["etp"]))
    cluster = dict(table["cluster"])
    if values.get("precision") in FP8_RECIPES:
        cluster["precision"] = "fp8"
    return values, shape, split, hybrid.Cluster(**cluster)


def approximations(values: dict) -> list[str]:
    """What of the cell the model prices as its nearest configuration, in words."""
    found = [APPROXIMATED[k].format(values[k]) for k in APPROXIMATED if values.get(k) not in (None, False)]
    if values.get("precision") in FP8_RECIPES[1:]:
        found.append(f"precision {values['precision']} priced as FP8 GEMMs (scale granularity not priced)")
    return found


def tflops_per_gpu(table: dict, values: dict, shape: hybrid.Shape, figure: float) -> float:
    """A published figure as TFLOP/s a GPU, counted by the table's FLOPs convention (`flops`):
    tokens/s a GPU x FLOPs a token, or an iteration's FLOPs (global batch x seq tokens) / (seconds
    x GPUs); a table in TFLOP/s is taken as printed."""
    per_token = shape.flops_per_token(table["flops"])
    if table.get("unit") == "tokens/s/gpu":
        return figure * per_token / 1e12
    if table.get("unit") == "s/iteration":
        return int(values["global_batch"]) * shape.seq * per_token / (figure * int(values["gpus"])) / 1e12
    return figure


def unexpressed(values: dict, cluster: hybrid.Cluster) -> str | None:
    """Why the model cannot express this cell: a field it does not read, set (null and false are
    what the model assumes: a cell priced as if its GQA, FP8 or experts were absent would be a wrong
    figure, not a miss), or a GPU it lacks."""
    known = set(SHAPE_KEYS) | set(SPLIT_KEYS) | set(CELL_KEYS) | set(MODEL_KEYS) | set(APPROXIMATED)
    if values.get("precision") not in (None, "bf16", "fp16") + FP8_RECIPES:
        return f"cannot be expressed: precision {values['precision']}"
    unread = [f"{k} {v}" for k, v in values.items() if k not in known and v not in (None, False)]
    if unread:
        return "cannot be expressed: the model reads no " + ", ".join(unread)
    if devices.lookup(cluster.gpu) is None:
        return f"cannot be expressed: GPU {cluster.gpu} is not in measure/devices.py"
    return None


def cells(table: dict) -> list[Cell]:
    out = []
    assumed = ", ".join(table.get("assumed") or []) or "nothing"
    for row in table["rows"]:
        values, shape, split, cluster = _cell_inputs(table, row)
        published = float(values["published"])
        published = tflops_per_gpu(table, values, shape, published)
        why = unexpressed(values, cluster) or hybrid.check(shape, split, cluster)
        found = None if why else hybrid.predict(shape, split, cluster)
        predicted = found.tflops_per_gpu(table["flops"]) if found else None
        note = why or "; ".join([split.label()] + approximations(values) + [f"assumed: {assumed}"])
        if found and values.get("memory_mib"):
            note += (f"; memory {found.memory_gib * 1024:.0f} MiB predicted, {values['memory_mib']} published "
                     "(not in the error)")
        out.append(Cell(table["file"], table["role"], str(values["name"]), published, predicted, note))
    return out


def summary(found: list[Cell]) -> dict:
    errors = [abs(c.error) for c in found if c.error is not None]
    return {"cells": len(found), "priced": len(errors),
            "within_15pct": sum(e <= WITHIN for e in errors) / len(found) if found else 0.0,
            "median_abs_error": statistics.median(errors) if errors else None}


FIT_GRID = {"EFF_MAX": [0.5 + 0.01 * i for i in range(46)], "EFF_HALF_WIDTH": [0.0, 64.0, 128.0, 256.0, 512.0],
            "MEM_TRAFFIC": [0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0]}


def fit() -> dict:
    """The constants of FIT_GRID that give the `fit` tables' cells the least mean squared relative
    error (module doc), with that error. Restores the model's constants before returning."""
    chosen = [t for t in tables() if t["role"] == "fit"]
    saved = {k: getattr(hybrid, k) for k in FIT_GRID}
    best = None
    try:
        for half in FIT_GRID["EFF_HALF_WIDTH"]:
            for traffic in FIT_GRID["MEM_TRAFFIC"]:
                for top in FIT_GRID["EFF_MAX"]:
                    hybrid.EFF_MAX, hybrid.EFF_HALF_WIDTH, hybrid.MEM_TRAFFIC = top, half, traffic
                    errors = [c.error for t in chosen for c in cells(t) if c.error is not None]
                    loss = statistics.fmean(e * e for e in errors)
                    if best is None or loss < best["loss"]:
                        best = {"EFF_MAX": top, "EFF_HALF_WIDTH": half, "MEM_TRAFFIC": traffic, "loss": loss}
    finally:
        for k, v in saved.items():
            setattr(hybrid, k, v)
    return best
