"""Fit the model's error terms (perfmodel/calibration.json) out of sample: leave-one-source-out over
the calibration tables (role fit in results/reference/manifest.yaml; a source is one publisher's
table family, the manifest's `source`). Each fold refits what the fitting tools fit without the
source: the node-sharing prior (fit_node_prior: node.PRIOR) and the error terms; predicts the
source's tables with that prior, from their 1-node cells (the `one node` term) and from their
<= 2-node cells with the largest multi-node anchor carried (`anchored`, perfmodel/anchor); and
scores the source's cells against the 80% range the other sources' errors give. The committed
terms are the percentiles (scipy.stats.mstats.mquantiles) over every source's out-of-fold cells.

    python -m fleetbench.perfmodel.fit_calibration [--check] [results/reference]

--check: refit and compare with the committed file (exit 1 when it differs), writing nothing.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import statistics
import sys
from pathlib import Path

from scipy import stats

from fleetbench.perfmodel import calibration, manifest, node, published, validate

ANCHOR_SELECTOR = {"nodes": validate.Bound("<=", 2)}  # what a user has: 1 and 2 nodes


@dataclasses.dataclass(frozen=True)
class Scored:
    """One calibration cell: its scaled error, and what its range needs."""
    kind: str
    table: str
    source: str
    framework: str
    scaled: float  # (measured / predicted step - 1) / calibration.scale
    scale: float
    predicted_ms: float
    measured_ms: float
    inputs: tuple[float, float]  # the inputs' step range


def quantiles(values: list[float]) -> tuple[float, float, float]:
    """(10th, 50th, 90th) percentile, linear between order statistics."""
    low, mid, high = stats.mstats.mquantiles(values, prob=[0.1, 0.5, 0.9], alphap=1, betap=1)
    return float(low), float(mid), float(high)


@contextlib.contextmanager
def _prior(values: tuple[float, float, float]):
    """node.PRIOR set to a fold's refit while the fold's source is predicted."""
    saved = node.PRIOR
    node.PRIOR = values
    try:
        yield
    finally:
        node.PRIOR = saved


def _records(reference: Path, table: manifest.Table) -> list[dict]:
    lines = (reference / table.file).read_text().splitlines()
    return published.adopt([json.loads(line) for line in lines if line.strip()], True)


def _scored(row: dict, kind: str, table: manifest.Table) -> Scored:
    anchor_nodes = (row.get("anchor") or {}).get("nodes", 1)
    s = calibration.scale(kind, row["nodes"], anchor_nodes)
    error = row["measured_step_ms"] / row["predicted_step_ms"] - 1
    return Scored(kind, table.name, table.source, calibration.framework_family(row.get("framework")), error / s, s,
                  row["predicted_step_ms"], row["measured_step_ms"], tuple(row["inputs_step_range"]))


def table_cells(records: list[dict], table: manifest.Table) -> list[Scored]:
    """A table's cells as each kind predicts them: from its 1-node cells, and from its <= 2-node
    cells where a multi-node anchor carried its cost to more nodes than it has."""
    cells = [_scored(r, calibration.ONE_NODE, table) for r in validate.validate(records, {"nodes": 1})
             if r.get("predicted_step_ms") and r.get("inputs_step_range") and r["nodes"] > 1]
    return cells + [_scored(r, calibration.ANCHORED, table) for r in validate.validate(records, ANCHOR_SELECTOR)
                    if r.get("predicted_step_ms") and r.get("inputs_step_range") and r.get("anchor")
                    and r["nodes"] > r["anchor"]["nodes"]]


def _prior_rows(reference: Path, tables: list[manifest.Table]) -> dict[str, list[dict]]:
    """Per prior table, the rows fit_node_prior fits the prior on (its 1-GPU runs, the prior off)."""
    out = {}
    for t in tables:
        if t.name in node.PRIOR_TABLES:
            rows = validate.validate(_records(reference, t), {"world_size": 1}, node_prior=False)
            out[t.name] = [r for r in rows if r.get("predicted_step_ms") and r["nodes"] == 1
                           and r["devices_per_node"] > 1]
    return out


def folds(reference: Path) -> tuple[list[Scored], dict]:
    """Every calibration cell predicted out of its source's fold, and each fold's refit prior."""
    tables = [t for t in manifest.reference_tables().values() if t.role == "fit" and t.file.endswith(".jsonl")]
    prior_rows = _prior_rows(reference, tables)
    cells, priors = [], {}
    for source in sorted({t.source for t in tables}):
        rows = [r for name, rs in prior_rows.items() for r in rs if manifest_source(name) != source]
        priors[source] = node.prior_fit(rows) if rows else node.PRIOR
        with _prior(priors[source]):
            for t in (t for t in tables if t.source == source):
                cells += table_cells(_records(reference, t), t)
    return cells, priors


def manifest_source(name: str) -> str | None:
    return next((t.source for t in manifest.reference_tables().values() if t.name == name), None)


def bounds(train: list[Scored], framework: str, kind: str) -> tuple[float, float]:
    """(low, high) of `kind` from `train`, as calibration.error joins them."""
    low, _, high = quantiles([c.scaled for c in train])
    own = [c.scaled for c in train if c.framework == framework]
    if kind == calibration.ONE_NODE and len(own) >= calibration.FRAMEWORK_MIN_CELLS:
        own_low, _, own_high = quantiles(own)
        low, high = min(low, own_low), max(high, own_high)
    return low, high


def inside(cell: Scored, low: float, high: float) -> tuple[bool, float]:
    """(whether the measured step is in the 80% range, the range's high / low - 1)."""
    p = cell.predicted_ms
    lo, hi = min(cell.inputs[0], p * (1 + low * cell.scale)), max(cell.inputs[1], p * (1 + high * cell.scale))
    return lo <= cell.measured_ms <= hi, hi / lo - 1


def coverage(cells: list[Scored], kind: str) -> dict:
    """Each source's cells against the range the other sources give: over all, and per table."""
    mine = [c for c in cells if c.kind == kind]
    scored = []
    for c in mine:
        scored.append((c, *inside(c, *bounds([o for o in mine if o.source != c.source], c.framework, kind))))
    per_table = {}
    for table in sorted({c.table for c, *_ in scored}):
        group = [(ok, w, c) for c, ok, w in scored if c.table == table]
        per_table[table] = {"cells": len(group), "inside": sum(ok for ok, _, _ in group),
                            "median_width": statistics.median(w for _, w, _ in group),
                            "median_abs_error": statistics.median(abs(c.measured_ms / c.predicted_ms - 1)
                                                                  for *_, c in group)}
    return {"cells": len(scored), "inside": sum(ok for _, ok, _ in scored),
            "median_width": statistics.median(w for *_, w in scored),
            "median_abs_error": statistics.median(abs(c.measured_ms / c.predicted_ms - 1) for c, *_ in scored),
            "tables": per_table}


def _spread(cells: list[Scored]) -> dict:
    low, mid, high = quantiles([c.scaled for c in cells])
    return {"low": round(low, 4), "median": round(mid, 4), "high": round(high, 4), "cells": len(cells),
            "tables": sorted({c.table for c in cells})}


def fit(reference: Path) -> dict:
    """calibration.json's content."""
    cells, priors = folds(reference)
    terms = {}
    for kind in calibration.KINDS:
        mine = [c for c in cells if c.kind == kind]
        terms[kind] = {"error": _spread(mine), "folds": sorted({c.source for c in mine}),
                       "by_framework": {f: _spread([c for c in mine if c.framework == f])
                                        for f in sorted({c.framework for c in mine})},
                       "coverage": coverage(cells, kind)}
    return {"terms": terms, "fold_priors": {s: [round(v, 4) for v in p] for s, p in priors.items()},
            "written_by": "python -m fleetbench.perfmodel.fit_calibration"}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    rest = [a for a in argv if a != "--check"]
    reference = Path(rest[0]) if rest else manifest.MANIFEST.parent
    text = json.dumps(fit(reference), indent=1, sort_keys=True) + "\n"
    if check:
        same = text == calibration.CALIBRATION.read_text()
        print("calibration.json is what the tables give" if same else "calibration.json differs from a refit")
        return 0 if same else 1
    calibration.CALIBRATION.write_text(text)
    for kind, term in json.loads(text)["terms"].items():
        cov = term["coverage"]
        print(f"{kind}: {term['error']['low']:+.4f} / {term['error']['high']:+.4f} over {term['error']['cells']} cells; "
              f"cross-validated {cov['inside']} of {cov['cells']} inside ({cov['inside'] / cov['cells']:.0%}), "
              f"median width {cov['median_width']:.3f} against median |error| {cov['median_abs_error']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
