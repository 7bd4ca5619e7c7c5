"""`--predict` and `--validate`: specs, the cells they predict, and the check against cells the
fit did not use, where nothing is left out in silence: every held-out record that gives no
prediction is a row saying why (a failed run, parameter-server training, a 1-device run, a work
no fitted cell shares, a method the model does not know).

A row names its cell as a reader must to tell cells apart: model, framework, precision, batch a
device (x accumulation), method, network, nodes x devices (`name`).
"""
from __future__ import annotations

import itertools
import statistics

from fleetbench.perfmodel import breakdown as bd
from fleetbench.perfmodel import cells as cellmod
from fleetbench.perfmodel import specs
from fleetbench.perfmodel import manifest, ps, published
from fleetbench.perfmodel.cells import Cell, Shape
from fleetbench.perfmodel.predict import Target, calibrate, predict_range, work_values
from fleetbench.measure.repeats import experiment

FILTER_KEYS = ("benchmark", "preset", "method")
CHANGE_KEYS = ("nodes", "devices_per_node", "network", "rate_gbit", "transport", "efficiency", "nics")
SELECT_KEYS = FILTER_KEYS + ("network", "nodes", "devices_per_node", "world_size")
LISTS = ("nodes", "rate_gbit", "devices_per_node")  # keys a what-if grid may give several values of
WITHIN = 0.15
# Tables whose cells informed a constant of the model (role: fit in results/reference/manifest.yaml);
# every other table is held out: converted and reported before any change
FITTED_TABLES = manifest.fitted()
SpecError = specs.SpecError


def parse_spec(text: str, allowed: tuple, flag: str) -> dict:
    """`key=value,key=value` (or space separated) into a dict; SpecError names the flag."""
    spec = {}
    for part in text.replace(",", " ").split():
        key, sep, value = part.partition("=")
        if not sep or key not in allowed or not value:
            raise SpecError(f"{flag} {text!r}: expected key=value pairs with keys from "
                            f"{', '.join(allowed)} (got {part!r})")
        if key in ("nodes", "devices_per_node", "world_size", "nics"):
            if not value.isdigit() or int(value) < 1:
                raise SpecError(f"{flag} {text!r}: {key} must be an integer >= 1 (got {value!r})")
            value = int(value)
        elif key in ("rate_gbit", "efficiency", "transport"):
            value = specs.value(key, value, f"{flag} {text!r}")
        spec[key] = value
    if not spec:
        raise SpecError(f"{flag}: expected key=value pairs (keys: {', '.join(allowed)})")
    return spec


def expand(text: str) -> list[str]:
    """`nodes=1,2,4,rate_gbit=10,25,100` (a what-if grid) into one spec per combination; a bare
    value extends the list of the key (of LISTS) right before it."""
    lists: dict[str, list[str]] = {}
    rest: list[str] = []
    last = None
    for part in text.replace(",", " ").split():
        key, sep, value = part.partition("=")
        if not sep and last in LISTS:
            lists[last].append(part)
            continue
        last = key if sep else None
        if sep and key in LISTS:
            lists.setdefault(key, []).append(value)
        else:
            rest.append(part)
    if all(len(v) <= 1 for v in lists.values()):
        return [text]
    keys = list(lists)
    return [" ".join([f"{k}={v}" for k, v in zip(keys, combo)] + rest)
            for combo in itertools.product(*(lists[k] for k in keys))]


def _matches(values: dict, spec: dict) -> bool:
    return all(str(values.get(k) if values.get(k) is not None else "local") == str(v)
               for k, v in spec.items())


def cell_values(cell: Cell) -> dict:
    return {"benchmark": cell.benchmark, "preset": cell.preset, "method": cell.method,
            "network": cell.network, "nodes": cell.shape.nodes, "sync_every": cell.sync_every,
            "devices_per_node": cell.shape.devices_per_node, "world_size": cell.shape.world_size,
            **work_values(cell)}


def name(values: dict) -> str:
    """A cell as a reader tells it apart: model [framework, precision, batch] method network shape."""
    work = [str(values[k]) for k in ("framework", "precision") if values.get(k)]
    if values.get("batch"):
        k = values.get("sync_every") or 1
        work.append(f"batch {values['batch']}" + (f"x{k}" if k > 1 else ""))
    model = " ".join(str(p) for p in (values.get("model") or values["benchmark"], values.get("preset") or "") if p)
    shape = f"{values['nodes']}x{values['devices_per_node']}"
    return " ".join(p for p in (model, f"[{', '.join(work)}]" if work else "", values["method"],
                                values.get("network") or "local", shape) if p)


def predict_spec(records: list[dict], spec: dict) -> list[dict]:
    """Every measured training cell of `records` passing the spec's filters, with its changes applied."""
    cells, comm = cellmod.pool(records)
    return predict_cells(cells, comm, calibrate([bd.breakdown(c, cells, comm) for c in bd.training_cells(cells)]),
                         spec)


def predict_cells(cells: list[Cell], comm: list, cal: dict, spec: dict) -> list[dict]:
    """Every measured training cell passing the spec's filters, with its changes applied; `cal`
    calibrated on the breakdowns of `cells` (predict.calibrate)."""
    filters = {k: v for k, v in spec.items() if k in FILTER_KEYS}
    out, seen = [], set()
    for ref in bd.training_cells(cells):
        if not _matches(cell_values(ref), filters):
            continue
        shape = Shape(spec.get("nodes", ref.shape.nodes), spec.get("devices_per_node", ref.shape.devices_per_node))
        # a link rate replaces the network: the same target whatever network the cell ran on
        network = spec.get("network", None if "rate_gbit" in spec else ref.network)
        target = Target(ref.method, None if network == "local" else network, shape, spec.get("rate_gbit"),
                        spec.get("transport"), spec.get("efficiency"), spec.get("nics"))
        key = (ref.work, ref.sync_every, target)
        if key not in seen:
            seen.add(key)
            row = predict_range(target, ref, cells, comm, cal)
            out.append(dict(row, from_cell=ref.label, sync_every=ref.sync_every,
                            cell=name(dict(row, sync_every=ref.sync_every))))
    return out


def _reference(target: Cell, fitted: list[Cell]) -> Cell | None:
    """A fitted cell of the target's work: of its method first (same network, nearest size), else
    any training run of the work (its 1-device run: the overlap model needs no cell of the method)."""
    same = [c for c in fitted if not c.control and cellmod.same_work(c, target)]
    return min(same, key=lambda c: (c.method != target.method, c.shape.world_size == 1, c.network != target.network,
                                    abs(c.shape.world_size - target.shape.world_size)), default=None)


def record_values(record: dict) -> dict:
    values = {k: record.get(k) for k in SELECT_KEYS}
    values["network"] = experiment.network_name(record.get("network"))
    return values


def _row(cell: Cell, fitted: list[Cell], comm: list, cal: dict, node_prior: bool = True) -> dict:
    values = cell_values(cell)
    row = {"cell": name(values), "measured_step_ms": cell.step_ms, "predicted_step_ms": None, "error": None,
           "notes": [], **values, "measured_throughput": cell.throughput}
    ref = _reference(cell, fitted)
    if ref is None:
        row["not_predicted"] = "no fitted cell of this work (model, framework, precision, batch)"
        return row
    if cellmod.find_single(ref, fitted) is None and not any(c.control and cellmod.same_work(c, ref) for c in fitted):
        row["not_predicted"] = "no fitted 1-device run or control of this work: no compute to start from"
        return row
    target = Target(cell.method, cell.network, cell.shape, sync_every=cell.sync_every,
                    network_rate=(cell.rate_gbit, cell.transport, cell.nics, cell.sockets) if cell.rate_gbit
                    else None, node_prior=node_prior)
    prediction = predict_range(target, ref, fitted, comm, cal, emulated=cell.emulated)
    row.update(predicted_step_ms=prediction["predicted_step_ms"], from_cell=ref.label, notes=prediction["notes"],
               predicted_throughput=prediction["predicted_throughput"],
               predicted_throughput_range=prediction.get("predicted_throughput_range"))
    if prediction["predicted_step_ms"] is None:
        row["not_predicted"] = next((n for n in prediction["notes"] if n.startswith(("no link", "base: no",
                                                                                   "no gradient bytes"))),
                                    "the model gave no step time")
    else:
        row["error"] = prediction["predicted_step_ms"] / cell.step_ms - 1
        row["throughput_error"] = prediction["predicted_throughput"] / cell.throughput - 1
    return row


def _dropped(records: list[dict], cells: list[Cell]) -> list[dict]:
    """A row for every held-out experiment that is not a multi-device training cell, with why."""
    pooled = {c.label for c in cells}
    rows, seen = [], set()
    for record in records:
        exp = experiment.of(record)
        if exp in seen or record["mode"] == "comm" or record["method"] == cellmod.CONTROL:
            continue
        seen.add(exp)
        why = published.not_modelled(record)
        if why is None and record["world_size"] == 1:
            why = "1 device: no all-reduce to predict (a baseline)"
        if why is None:
            continue
        values = {k: record.get(k) for k in ("benchmark", "preset", "method", "nodes", "devices_per_node")}
        values.update(network=exp.network, **{k: (record.get("config") or {}).get(c) for k, c in
                                              (("framework", "framework"), ("precision", "precision"),
                                               ("batch", "batch_size"), ("model", "model"))})
        rows.append({"cell": name(values), "not_predicted": why, "predicted_step_ms": None, "error": None,
                     "notes": [], "source": experiment.source_name(record), **values})
    return [r for r in rows if r["cell"] not in pooled]


def validate(records: list[dict], selector: dict, node_prior: bool = True, pool: cellmod.Pool | None = None) -> list[dict]:
    """Fit on the records the selector picks; predict every other training cell; compare. Every
    held-out record gives a row: predicted, or not with why. `node_prior` off: a GPU cell predicted
    from one GPU alone assumes no node sharing (to fit the prior, perfmodel/fit_node_prior.py).
    `pool`: the one that pooled `records` already (its cells are reused)."""
    pool = pool or cellmod.Pool()
    fit_records = [r for r in records if _matches(record_values(r), selector)]
    rest = [r for r in records if not _matches(record_values(r), selector)]
    fitted, comm = pool(fit_records)
    held_out, _ = pool(rest)
    cal = calibrate([bd.breakdown(c, fitted, comm) for c in bd.training_cells(fitted)])
    rows = [_row(cell, fitted, comm, cal, node_prior) for cell in bd.training_cells(held_out)]
    ps_rows = ps.predict(fit_records, rest)  # parameter-server cells measured here
    rest = [r for r in rest if not (r["mode"] == "ps" and r["nodes"] > 1 and not published.is_published(r))]
    return rows + ps_rows + _dropped(rest, bd.training_cells(held_out))


def in_range(row: dict) -> bool | None:
    """Whether the measured throughput fell inside the prediction's range (None: no range)."""
    bounds = row.get("predicted_throughput_range")
    if row.get("throughput_error") is None or not bounds:
        return None
    return min(bounds) <= row["measured_throughput"] <= max(bounds)


def totals(rows: list[dict]) -> list[dict]:
    """Cells, predicted, within 15% and inside their range, over the tables that informed the
    model's constants (`fitted`) and over the rest (`held out`); measured-here cells apart."""
    out = []
    for group in ("fitted", "held out", "measured here"):
        members = [r for r in rows if _group(r.get("source")) == group]
        scored = [r for r in members if r.get("throughput_error") is not None]
        ranged = [in_range(r) for r in scored if in_range(r) is not None]
        if members:
            out.append({"group": group, "cells": len(members), "predicted": len(scored),
                        "within": sum(abs(r["throughput_error"]) <= WITHIN for r in scored),
                        "ranged": len(ranged), "in_range": sum(ranged)})
    return out


def _group(source: str | None) -> str:
    if not source:
        return "measured here"
    return "fitted" if source in FITTED_TABLES else "held out"


def summary(rows: list[dict]) -> list[dict]:
    """Per source table: cells, predicted, within 15% of the measured or published throughput,
    inside the predicted range, median |error| of the throughput, the worst cells."""
    out = []
    for source, group in itertools.groupby(sorted(rows, key=lambda r: r.get("source") or ""),
                                           key=lambda r: r.get("source") or ""):
        group = list(group)
        scored = [r for r in group if r.get("throughput_error") is not None]
        errors = [abs(r["throughput_error"]) for r in scored]
        out.append({"source": source or "measured here", "cells": len(group), "predicted": len(scored),
                    "within": sum(e <= WITHIN for e in errors),
                    "in_range": sum(bool(in_range(r)) for r in scored),
                    "ranged": sum(in_range(r) is not None for r in scored),
                    "median_error": statistics.median(errors) if errors else None,
                    "worst": sorted(scored, key=lambda r: -abs(r["throughput_error"]))[:3],
                    "not_predicted": [r for r in group if r.get("throughput_error") is None]})
    return out
