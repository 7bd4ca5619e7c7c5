"""The performance model's one façade: `explain(records, ...) -> Explanation`. Everything
`fleetbench explain` asks of the model happens here, once: the --predict and --validate texts
parsed, records completed (model definitions, published records adopted), their values checked
against what the records hold, the records pooled into cells once, every multi-device cell taken
apart, the cells asked for predicted, held-out cells validated and scored per table, what-if
tables, stragglers. report/ loads the records before and renders what this returns after; it
asks the model nothing else.

    found = explanation.explain(records, predict=["nodes=2,4"], selectors=["nodes=1"], published=True)
    found.cells, found.predicted, found.validations, found.whatif, found.stragglers
"""
from __future__ import annotations

import dataclasses

from fleetbench.perfmodel import cells as cellmod
from fleetbench.perfmodel import modeldef, published, stragglers, validate, whatif
from fleetbench.perfmodel import predict as prediction
from fleetbench.perfmodel import specs as spec_checks
from fleetbench.measure.repeats import experiment


@dataclasses.dataclass(frozen=True)
class Request:
    """What is asked of the model: --predict specs (grids expanded) and --validate selectors,
    parsed and checked for their form (SpecError); their values are checked against the records
    in explain()."""
    specs: list[dict]
    selectors: list[dict]
    selector_texts: list[str]
    target_efficiency: float | None = None
    anchor: dict | None = None  # --anchor: the records a --predict starts from (a selector)
    published: bool = False
    model_def: str | None = None
    straggler_pct: float = stragglers.DEFAULT_THRESHOLD_PCT


@dataclasses.dataclass(frozen=True)
class Validation:
    """One --validate selector's answer: its rows (every held-out cell, predicted or why not),
    per source table the scores (validate.summary), and over fitted and held-out tables (totals)."""
    selector: dict
    rows: list[dict]
    summary: list[dict]
    totals: list[dict]


@dataclasses.dataclass(frozen=True)
class Explanation:
    """The model's answer: `records` as it read them; `cells`, the breakdowns of the measured
    multi-device cells (kind measured, each with its `label`); `predicted`, the --predict cells
    (kind predicted); one Validation a selector; the what-if tables of a grid (whatif.tables);
    straggler lines; `networks`, the networks of the predictions in rate order (charts draw them so)."""
    records: list[dict]
    cells: list[dict]
    predicted: list[dict]
    validations: list[Validation]
    whatif: list[dict]
    stragglers: list[str]
    published_left_out: bool = False  # published records were read but not adopted (no --published)
    target_efficiency: float | None = None
    networks: tuple = ()

    def rows(self) -> list[dict]:
        """Every cell, predicted cell and validation row, in that order (--json)."""
        return self.cells + self.predicted + [r for v in self.validations for r in v.rows]

    @property
    def grid(self) -> bool:
        """Whether the predictions are a what-if grid (then printed as its tables, notes aside)."""
        return len(self.predicted) > 12 or self.target_efficiency is not None


def request(predict: list[str] = (), selectors: list[str] = (), target_efficiency: float | None = None,
            **options) -> Request:
    """The Request of --predict texts, --validate texts and --target-efficiency; SpecError (one line)
    on a spec of the wrong form. `options`: published, model_def, straggler_pct."""
    if target_efficiency is not None and not 0 < target_efficiency <= 1:
        raise validate.SpecError(f"--target-efficiency must be a share in (0, 1] (got {target_efficiency:g})")
    if target_efficiency is not None and not predict:
        raise validate.SpecError("--target-efficiency needs --predict (a grid of GPU counts and network rates)")
    specs = [validate.parse_spec(one, validate.FILTER_KEYS + validate.CHANGE_KEYS, "--predict")
             for s in predict for one in validate.expand(s)]
    parsed = [validate.parse_spec(s, validate.SELECT_KEYS, "--validate", compare=True) for s in selectors]
    anchor = options.pop("anchor", None)
    if anchor is not None and not predict:
        raise validate.SpecError("--anchor needs --predict: expected --predict SPEC beside it (the cells to predict from the anchors)")
    anchors = validate.parse_spec(anchor, validate.SELECT_KEYS, "--anchor", compare=True) if anchor else None
    return Request(specs, parsed, list(selectors), target_efficiency, anchors, **options)


def known_values(records: list[dict]) -> dict:
    """key -> the names a spec may use: the records' (network: its profile name), the registry's
    benchmarks, the emulator's network profiles and the cloud instances (perfmodel/links.INSTANCES)."""
    from fleetbench.perfmodel.links import INSTANCES  # pure table
    from fleetbench.emulate.netem_plan import PROFILES  # pure table
    from fleetbench.measure.registry import BENCHMARKS

    known: dict = {"benchmark": set(BENCHMARKS), "network": set(PROFILES) | set(INSTANCES)}
    for record in records:
        for key, value in validate.record_values(record).items():
            if key in known:
                known[key].add(str(value) if value is not None else "local")
    return known


def complete(records: list[dict], req: Request) -> list[dict]:
    """The records as the model reads them: model definitions applied, published records adopted."""
    if req.model_def:
        records = modeldef.apply(records, modeldef.read_table(req.model_def))
    return published.adopt(records, req.published)


def _check_fitted(text: str, rows: list[dict]) -> None:
    """A --validate that fits nothing, or leaves nothing to predict, validates nothing: refused."""
    if not rows:
        raise ValueError(f"--validate {text}: every cell matches it, none is left to predict "
                         "(expected a selector of some cells, e.g. nodes=1)")
    if not any(r.get("from_cell") for r in rows):
        raise ValueError(f"--validate {text}: fits no cell (no record matches it, or none of the predicted "
                         "cells' work and method); expected a selector of records these files hold, e.g. nodes=1")


def _validations(records: list[dict], req: Request, pool: cellmod.Pool) -> list[Validation]:
    """Each selector's rows, then each checked: a selector that validates nothing is refused."""
    rows = [[dict(r, kind="validation", selector=s) for r in validate.validate(records, s, pool=pool)]
            for s in req.selectors]
    for text, found in zip(req.selector_texts, rows):
        _check_fitted(text, found)
    return [Validation(s, found, validate.summary(found), validate.totals(found)) for s, found in zip(req.selectors, rows)]


def _check_values(records: list[dict], req: Request) -> None:
    """Every value a spec or selector names is one the records (or the known tables) hold."""
    known = known_values(records)
    for spec in req.specs:
        spec_checks.unknown(spec, known, "--predict")
    for selector in req.selectors:
        spec_checks.unknown(selector, known, "--validate")
    if req.anchor:
        spec_checks.unknown(req.anchor, known, "--anchor")


def explain(records: list[dict], predict: list[str] = (), selectors: list[str] = (),
            target_efficiency: float | None = None, **options) -> Explanation:
    """The model's whole answer over `records` to --predict texts, --validate texts and
    --target-efficiency (`options`: published, anchor, model_def, straggler_pct); ValueError (one
    line) on bad input (SpecError, RecordError, FitError), before anything is drawn or written."""
    req = request(predict, selectors, target_efficiency, **options)
    records = complete(records, req)
    _check_values(records, req)
    pool = cellmod.Pool()
    cells, comm = pool(records)
    measured = prediction.explain_cells(cells, comm)
    # --anchor: predictions start from the cells it picks alone, calibrated on those
    base, base_comm = pool(validate.anchored(records, req.anchor)) if req.anchor else (cells, comm)
    cal = prediction.calibrate(prediction.explain_cells(base, base_comm) if req.anchor else measured)
    predicted = [dict(r, kind="predicted", spec=s) for s in req.specs
                 for r in validate.predict_cells(base, base_comm, cal, s)]
    if req.anchor and not predicted:
        raise validate.SpecError(f"--anchor {req.anchor}: picks no training cell of these records to predict "
                                 "from (expected a selector of some cells, e.g. nodes<=2)")
    grid = len(predicted) > 12 or req.target_efficiency is not None
    return Explanation(records, label_cells([dict(c, kind="measured") for c in measured]), predicted,
                       _validations(records, req, pool),
                       whatif.tables(predicted, req.target_efficiency) if predicted and grid else [],
                       stragglers.report(records, req.straggler_pct),
                       not req.published and any(published.is_published(r) for r in records),
                       req.target_efficiency,
                       tuple(sorted({p["network"] or "local" for p in predicted}, key=whatif.network_order)))


def cell_name(cell: dict) -> str:
    if cell.get("label"):
        return cell["label"]
    if cell.get("framework") or cell.get("precision") or cell.get("model"):
        return validate.name(cell)  # a published table's cell: model, framework, precision, batch
    shape = f"{cell['nodes']}x{cell['devices_per_node']}"
    return " ".join(str(p) for p in (cell["benchmark"], cell["preset"] or "", cell["method"],
                                      cell["network"] or "local", shape) if p != "")


def label_cells(cells: list[dict]) -> list[dict]:
    """Each cell with a `label` no other cell shares: cells of the same name (from different files,
    builds or hosts, or differing in a config key) get what tells them apart in brackets."""
    groups: dict = {}
    for c in cells:
        groups.setdefault(cell_name(c), []).append(c)
    out = []
    for c in cells:
        group = groups[cell_name(c)]
        label = cell_name(c)
        if len(group) > 1:
            label += f" [{_difference(c, group)}]"
        out.append(dict(c, label=label))
    return out


def _difference(cell: dict, group: list[dict]) -> str:
    """What tells `cell` from the others of its name: build or machine, else the files it came
    from, else the first config keys whose values differ."""
    parts = [f"{k} {cell['circumstances'][k]}" for k in ("paddle", "device", "host")
             if len({str((g.get("circumstances") or {}).get(k)) for g in group}) > 1]
    if len({tuple(g.get("files") or ()) for g in group}) > 1:
        parts.append("from " + ", ".join(cell.get("files") or ["?"]))
    if not parts:
        flats = [experiment.flat_config(g.get("config") or {}) for g in group]
        keys = [k for k in experiment.differing([g.get("config") or {} for g in group]) if all(k in f for f in flats)]
        flat = experiment.flat_config(cell.get("config") or {})
        parts = [f"{k}={flat[k]}" for k in keys[:2]] or ["config recorded with other keys"]
    return "; ".join(parts)


def breakdowns(records: list[dict]) -> list[dict]:
    """The measured multi-device cells that have a breakdown (`fleetbench report`'s section)."""
    return label_cells([c for c in prediction.explain(records) if c.get("compute_ms") is not None])
