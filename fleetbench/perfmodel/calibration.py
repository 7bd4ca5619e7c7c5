"""The model's error term, calibrated out of sample: what a GPU prediction's 80% range adds beyond
its inputs' range (perfmodel/ranges). Read from calibration.json beside this file, which
`python -m fleetbench.perfmodel.fit_calibration` writes (docs/guide/explain.md, "Ranges").

Two kinds of prediction err differently, and each has its own term:

    one node   from a table's 1-node cells: nothing measured what the framework loses across nodes,
               so the term holds that loss as the calibration tables showed it (by framework)
    anchored   from a measured multi-node anchor whose cost is carried forward (perfmodel/anchor)

A term is the 10th, 50th and 90th percentile of (measured / predicted step - 1) / scale over the
calibration tables' cells, each predicted in a leave-one-source-out fold (the fold's node-sharing
prior refitted without the source); the scale grows with what a prediction extrapolates across:
log2(2 x nodes) from one node, log2(2 x nodes / anchor's nodes) from an anchor. Pure: a JSON
table in, numbers out.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path

CALIBRATION = Path(__file__).with_name("calibration.json")
ONE_NODE, ANCHORED = "one node", "anchored"
KINDS = (ONE_NODE, ANCHORED)
FRAMEWORK_MIN_CELLS = 10  # a framework's own percentiles widen the term once this many cells show them


@dataclasses.dataclass(frozen=True)
class Spread:
    """(10th, 50th, 90th) percentile of a scaled step error over `cells` cells of `tables`."""
    low: float
    median: float
    high: float
    cells: int
    tables: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Term:
    """One kind's error term: over every calibration cell, and per framework family."""
    kind: str
    error: Spread
    by_framework: dict
    folds: tuple[str, ...]  # the sources left out in turn
    coverage: dict  # {"cells", "inside", "median_width", "median_abs_error"}: the folds' own figures


def framework_family(framework: str | None) -> str:
    """The framework a published config.framework names, by its first word (TensorFlow, PyTorch,
    PaddlePaddle, MXNet); `unknown` when the record names none."""
    return framework.split()[0] if framework else "unknown"


def scale(kind: str, nodes: int, anchor_nodes: int = 1) -> float:
    """What the term's percentiles are multiplied by at `nodes` (module doc)."""
    if kind == ANCHORED:
        return max(1.0, math.log2(2 * max(1, nodes) / max(1, anchor_nodes)))
    return math.log2(2 * max(1, nodes))


def _spread(data: dict) -> Spread:
    return Spread(data["low"], data["median"], data["high"], data["cells"], tuple(data.get("tables", ())))


@functools.lru_cache(maxsize=None)
def load(path: Path = CALIBRATION) -> dict[str, Term]:
    """{kind: Term} from the committed calibration."""
    data = json.loads(Path(path).read_text())
    return {kind: Term(kind, _spread(t["error"]), {f: _spread(s) for f, s in t["by_framework"].items()},
                       tuple(t["folds"]), t["coverage"]) for kind, t in data["terms"].items()}


def error(kind: str, framework: str | None = None) -> tuple[float, float]:
    """(low, high) scaled error of `kind`; from one node, joined with the framework's own where it
    is wider (what the framework lost across nodes on the tables seen is inside the range)."""
    term = load()[kind]
    low, high = term.error.low, term.error.high
    own = term.by_framework.get(framework_family(framework))
    if kind == ONE_NODE and own is not None and own.cells >= FRAMEWORK_MIN_CELLS:
        low, high = min(low, own.low), max(high, own.high)
    return low, high


def source_note(kind: str) -> str:
    """Where a range of `kind` came from, in a phrase."""
    term = load()[kind]
    return (f"80% range: model error {term.error.low:+.1%} to {term.error.high:+.1%} a scale step ({kind}: "
            f"{term.error.cells} cells of {len(term.error.tables)} tables, leave-one-source-out over "
            f"{len(term.folds)} sources, perfmodel/calibration.json)")


def unknown_cost_note(framework: str | None, nodes: int) -> str:
    """A prediction from one node: the framework's multi-node cost is not in its inputs; what it
    was on the calibration tables (by framework), which the range includes."""
    term = load()[ONE_NODE]
    family = framework_family(framework)
    own = term.by_framework.get(family)
    s = scale(ONE_NODE, nodes)
    seen = (f"on the calibration tables {family} cells ran {own.low * s:+.0%} to {own.high * s:+.0%} "
            f"(10th-90th percentile, median {own.median * s:+.0%}; {own.cells} cells of {len(own.tables)} tables) "
            f"of the model's step at {nodes} nodes") if own else \
        f"no calibration table is of {family}: every framework's cells ran {term.error.low * s:+.0%} to " \
        f"{term.error.high * s:+.0%} (10th-90th percentile) of the model's step at {nodes} nodes"
    return (f"from one node: the framework's multi-node cost is unknown (no multi-node run of this work "
            f"anchors it); {seen}; the 80% range includes it")


def summary(kind: str) -> dict:
    """What a prediction's range came from, as --json carries it: the kind, its term, the tables
    and sources that informed it, and the folds' own coverage."""
    term = load()[kind]
    return {"kind": kind, "low": term.error.low, "high": term.error.high, "cells": term.error.cells,
            "tables": len(term.error.tables), "set": "fleetbench/perfmodel/calibration.json (its tables named there)",
            "folds": list(term.folds),
            "cross_validated": {k: term.coverage.get(k) for k in ("cells", "inside", "median_width")}}


def describe() -> dict:
    """The calibration as --json carries it: each kind's term, folds and own coverage."""
    return {kind: {"error": dataclasses.asdict(t.error), "folds": list(t.folds), "coverage": t.coverage,
                   "by_framework": {f: dataclasses.asdict(s) for f, s in t.by_framework.items()}}
            for kind, t in load().items()}
