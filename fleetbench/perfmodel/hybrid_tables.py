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
from fleetbench.perfmodel import hybrid, manifest

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


def _cell_inputs(table: dict, row: list) -> tuple:
    values = dict(table.get("defaults") or {}, **dict(zip(table["columns"], row)))
    shape = hybrid.Shape(**{k: values[k] for k in SHAPE_KEYS if k in values})
    tp, pp = int(values.get("tp", 1)), int(values.get("pp", 1))
    split = hybrid.Split(tp=tp, pp=pp, dp=int(values["gpus"]) // (tp * pp),
                        **{k: values[k] for k in SPLIT_KEYS if k in values})
    return values, shape, split, hybrid.Cluster(**table["cluster"])


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
    known = set(SHAPE_KEYS) | set(SPLIT_KEYS) | set(CELL_KEYS)
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
        note = why or f"{split.label()}; assumed: {assumed}"
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
