"""Step time and throughput of cells not measured, from the model alone; and its validation.

A prediction of a training cell (work, method, network, nodes x devices per node) is

    predicted = base + link(gradient bytes, calls) - hidden + host cost per byte x bytes

base: the method=none control's step time of that shape (compute + imbalance + reader), else the
nearest control (or the 1-device run) scaled by core sharing (analysis.scaling: from a measured
thread-scaling curve), else nothing. The link: cells.link_for; the bytes and calls a step really
sends: analysis.gradbytes. Calibration (`calibrate`), from measured
cells other than the one predicted: the host cost per byte is what a post-backward method's
exposed communication takes beyond the link model (packing gradients into buckets, scaling,
unpacking: host work the comm benchmark does not do), measured on the same work's bsp (or the
method's own) cells; the overlap of other methods is the time they hide (at most the link's),
whose largest value seen is the window backward offers: predicted exposure = link - min(window, link).
"""
from __future__ import annotations

import dataclasses

from fleetbench.analysis import breakdown as bd
from fleetbench.analysis import cells as cellmod
from fleetbench.analysis import gradbytes, links, scaling, specs
from fleetbench.analysis.cells import Cell, Shape
from fleetbench.measure import experiment

FILTER_KEYS = ("benchmark", "preset", "method")
CHANGE_KEYS = ("nodes", "devices_per_node", "network", "rate_gbit", "transport", "efficiency")
SELECT_KEYS = FILTER_KEYS + ("network", "nodes", "devices_per_node", "world_size")


SpecError = specs.SpecError  # predict.SpecError, as callers and tests know it


@dataclasses.dataclass(frozen=True)
class Target:
    method: str
    network: str | None
    shape: Shape
    rate_gbit: float | None = None
    transport: str | None = None  # of a link given by rate, or of the network (links.TRANSPORTS)
    efficiency: float | None = None  # share of the rate delivered, replacing the transport's

    def change(self) -> dict:
        return {"rate_gbit": self.rate_gbit, "transport": self.transport, "efficiency": self.efficiency}

    def describe(self, ref: Cell) -> str:
        net = f"rate {self.rate_gbit:g} Gbit/s" if self.rate_gbit else (self.network or "local")
        return " ".join(p for p in (ref.benchmark, ref.preset or "", self.method, net, str(self.shape)) if p)


# ---- calibration from measured cells -------------------------------------------------------------

def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def calibrate(breakdowns: list[dict]) -> dict:
    """Host cost per byte of the post-backward methods, by work and method and by method alone, and
    the overlap window (ms hidden) of the others, by work and method only: how much a backward
    hides depends on its length and on the order its gradients come in (CTR's embedding gradient,
    most of its calls, comes last and hides nothing), which another work does not tell.
    Latency-bound cells teach neither: their hidden time and host cost are differences against a
    per-call latency that varies several-fold between runs (gradbytes.LATENCY_BOUND)."""
    usable = [b for b in breakdowns if b.get("predicted_comm_ms") and b.get("comm_bytes")
              and b.get("latency_share", 0.0) < gradbytes.LATENCY_BOUND]
    host: dict = {}
    works: dict = {}  # key -> the works whose cells gave its host cost
    for b in usable:
        if b["method"] in cellmod.POST_BACKWARD:
            per_byte = (b["exposed_comm_ms"] - b["predicted_comm_ms"]) / b["comm_bytes"]
            for key in ((b["benchmark"], b["preset"], b["method"]), b["method"]):
                host.setdefault(key, []).append(per_byte)
                works.setdefault(key, set()).add(f"{b['benchmark']} {b['preset'] or ''}".strip())
    cal = {"host": {key: _mean(v) for key, v in host.items()}, "window": {}, "host_works": works}
    for b in usable:
        if b["method"] not in cellmod.POST_BACKWARD:
            per_byte, _ = host_for(b["benchmark"], b["preset"], b["method"], cal)
            hidden = b["predicted_comm_ms"] + per_byte * b["comm_bytes"] - b["exposed_comm_ms"]
            hidden = min(b["predicted_comm_ms"], max(0.0, hidden))
            # Backward hides at most its own length, whatever the link. A cell that hid all of
            # its link shows only a lower bound of that window: the largest one seen is the best.
            key = (b["benchmark"], b["preset"], b["method"])
            cal["window"][key] = max(cal["window"].get(key, 0.0), hidden)
    return cal


def host_for(benchmark: str, preset, method: str, cal: dict) -> tuple[float, str]:
    """(ms per byte, where from): the same work's cells of the method, else of bsp; else any
    work's. By work first: the same bytes cost more host time beside larger activations."""
    for key in ((benchmark, preset, method), (benchmark, preset, "bsp"), method, "bsp"):
        if key in cal["host"]:
            value = cal["host"][key]
            if isinstance(key, tuple):
                return value, f"host cost {value * 1e9:.3g} ms/GB measured on other {' '.join(p for p in key if p)} cells"
            works = ", ".join(sorted(cal.get("host_works", {}).get(key, ())))
            return value, (f"host cost {value * 1e9:.3g} ms/GB borrowed from other works' {key} cells "
                           f"({works}): this work has no {key} cell to measure its own")
    return 0.0, "no other bsp cell with a predicted communication: host cost taken as 0"


def overlap_for(benchmark: str, preset, method: str, cal: dict) -> tuple[float, str]:
    """(ms of communication backward can hide, where from): the same work's window, else none,
    which makes the prediction an upper bound (calibrate says why no other work's is borrowed)."""
    if method in cellmod.POST_BACKWARD:
        return 0.0, f"{method} all-reduces after backward: no overlap"
    key = (benchmark, preset, method)
    if key in cal["window"]:
        value = cal["window"][key]
        return value, f"overlap window {value:.1f} ms measured on other {method} cells of this work"
    return 0.0, (f"no other {method} cell of this work measured its overlap: none assumed, so this "
                 "step time is an upper bound")


# ---- the model ----------------------------------------------------------------------------------

def base_for(ref: Cell, shape: Shape, emulated: bool, cells: list[Cell]) -> tuple[float | None, str]:
    """(compute + imbalance + reader in ms, where from) for `ref`'s work at `shape`."""
    controls = [c for c in cells if c.control and cellmod.same_work(c, ref)]
    exact = [c for c in controls if c.shape == shape]
    if exact:
        return exact[0].step_ms, f"control {shape}"
    near = sorted(controls, key=lambda c: (c.shape.devices_per_node != shape.devices_per_node,
                                           abs(c.shape.world_size - shape.world_size)))
    source = near[0] if near else cellmod.find_single(ref, cells)
    if source is None:
        return None, "no method=none control and no 1-device run of this work"
    scale, note, _ = scaling.core_sharing(source, shape, emulated, cells)
    what = f"control {source.shape}" if source.control else "1-device run"
    return source.step_ms * scale, f"{what} {note}".strip()


def predict(target: Target, ref: Cell, cells: list[Cell], comm: list, cal: dict,
            emulated: bool | None = None) -> dict:
    """Predicted step time (and throughput, efficiency) of `target` for the work and gradient
    bytes of `ref`, a measured training cell of the same method."""
    emulated = ref.emulated if emulated is None else emulated
    out = {"target": target.describe(ref), "predicted_step_ms": None, "predicted_throughput": None,
           "predicted_efficiency": None, "notes": [], **_target_values(target, ref)}
    base, base_note = base_for(ref, target.shape, emulated, cells)
    out["notes"].append(f"base: {base_note}")
    if target.shape.world_size == 1:
        comm_ms = 0.0
    elif ref.comm_bytes is None:
        comm_ms = None
        out["notes"].append("no gradient bytes per step in the records")
    else:
        # GPU work all-reduces with NCCL, CPU work with gloo; links derives what no record measured;
        # gradbytes counts what a step really sends (sparse rows, not a dense table)
        link, problem, link_notes = links.link_for(ref, target.network, target.shape, cells, comm,
                                                   target.change())
        comm_ms = gradbytes.comm_ms(link, ref.traffic, target.shape.world_size) if link else None
        out["notes"] += link_notes + [f"link: {link.describe()}" if link else f"no link: {problem}"]
        out["notes"] += [n for n in (ref.traffic.note, link and gradbytes.latency_note(
            link, ref.traffic, target.shape.world_size)) if n]
    window, overlap_note = overlap_for(ref.benchmark, ref.preset, target.method, cal)
    per_byte, host_note = host_for(ref.benchmark, ref.preset, target.method, cal)
    out["notes"] += [overlap_note, host_note]
    host_ms = per_byte * ref.traffic.sent_bytes if target.shape.world_size > 1 and ref.traffic else 0.0
    hidden = min(window, comm_ms) if comm_ms else 0.0
    out.update({"base_ms": base, "predicted_comm_ms": comm_ms, "hidden_ms": hidden, "host_ms": host_ms,
                "overlap_fraction": hidden / comm_ms if comm_ms else 0.0})
    if base is None or comm_ms is None:
        return out
    step = base + comm_ms - hidden + host_ms
    out["predicted_step_ms"] = step
    out["predicted_throughput"] = ref.units_per_rank_step * target.shape.world_size / step * 1e3
    single = cellmod.find_single(ref, cells)
    if single is not None:
        out["predicted_efficiency"] = single.step_ms / step
    return out


# ---- the measured cells explained -----------------------------------------------------------------

def explain(records: list[dict]) -> list[dict]:
    """Breakdown of every multi-device training cell, each with the step time the model predicts
    from its control, its gradient bytes and its comm record (overlap from the other cells)."""
    cells, comm = cellmod.pool(records)
    targets = bd.training_cells(cells)
    breakdowns = [bd.breakdown(c, cells, comm) for c in targets]
    for cell, b in zip(targets, breakdowns):
        others = [o for o in breakdowns if o is not b]
        target = Target(cell.method, cell.network, cell.shape)
        prediction = predict(target, cell, cells, comm, calibrate(others))
        b["predicted_step_ms"] = prediction["predicted_step_ms"]
        b["prediction_error"] = (None if prediction["predicted_step_ms"] is None
                                 else prediction["predicted_step_ms"] / cell.step_ms - 1)
        b["prediction_notes"] = prediction["notes"]
    return breakdowns


# ---- --predict and --validate ---------------------------------------------------------------------

def parse_spec(text: str, allowed: tuple, flag: str) -> dict:
    """`key=value,key=value` (or space separated) into a dict; SpecError names the flag."""
    spec = {}
    for part in text.replace(",", " ").split():
        key, sep, value = part.partition("=")
        if not sep or key not in allowed or not value:
            raise SpecError(f"{flag} {text!r}: expected key=value pairs with keys from "
                            f"{', '.join(allowed)} (got {part!r})")
        if key in ("nodes", "devices_per_node", "world_size"):
            if not value.isdigit() or int(value) < 1:
                raise SpecError(f"{flag} {text!r}: {key} must be an integer >= 1 (got {value!r})")
            value = int(value)
        elif key in ("rate_gbit", "efficiency", "transport"):
            value = specs.value(key, value, f"{flag} {text!r}")
        spec[key] = value
    if not spec:
        raise SpecError(f"{flag}: expected key=value pairs (keys: {', '.join(allowed)})")
    return spec


def expand_sizes(text: str) -> list[str]:
    """`nodes=2,4,8,network=10gbe` (a scaling curve) into one spec per node count; a spec of one
    size comes back as it is. A bare value extends the list only right after nodes=."""
    sizes: list[str] = []
    rest: list[str] = []
    last = None
    for part in text.replace(",", " ").split():
        key, sep, value = part.partition("=")
        if not sep and last == "nodes":
            sizes.append(part)
            continue
        last = key if sep else None
        (sizes.append(value) if key == "nodes" and sep else rest.append(part))
    if len(sizes) <= 1:
        return [text]
    return [" ".join([f"nodes={n}"] + rest) for n in sizes]


def _matches(values: dict, spec: dict) -> bool:
    return all(str(values.get(k) if values.get(k) is not None else "local") == str(v)
               for k, v in spec.items())


def _target_values(target: Target, ref: Cell) -> dict:
    """The predicted cell's identity, as _cell_values (charts group predictions by it)."""
    network = f"{target.rate_gbit:g} Gbit/s" if target.rate_gbit else target.network
    return {"benchmark": ref.benchmark, "preset": ref.preset, "method": target.method, "network": network,
            "nodes": target.shape.nodes, "devices_per_node": target.shape.devices_per_node,
            "world_size": target.shape.world_size}


def _cell_values(cell: Cell) -> dict:
    return {"benchmark": cell.benchmark, "preset": cell.preset, "method": cell.method,
            "network": cell.network, "nodes": cell.shape.nodes,
            "devices_per_node": cell.shape.devices_per_node, "world_size": cell.shape.world_size}


def predict_spec(records: list[dict], spec: dict) -> list[dict]:
    """Every measured training cell passing the spec's filters, with its changes applied."""
    cells, comm = cellmod.pool(records)
    cal = calibrate([bd.breakdown(c, cells, comm) for c in bd.training_cells(cells)])
    filters = {k: v for k, v in spec.items() if k in FILTER_KEYS}
    out, seen = [], set()
    for ref in bd.training_cells(cells):
        if not _matches(_cell_values(ref), filters):
            continue
        shape = Shape(spec.get("nodes", ref.shape.nodes), spec.get("devices_per_node", ref.shape.devices_per_node))
        # a link rate replaces the network: the same target whatever network the cell ran on
        network = spec.get("network", None if "rate_gbit" in spec else ref.network)
        target = Target(ref.method, None if network == "local" else network, shape, spec.get("rate_gbit"),
                        spec.get("transport"), spec.get("efficiency"))
        key = (ref.work, target)
        if key not in seen:
            seen.add(key)
            out.append(dict(predict(target, ref, cells, comm, cal), from_cell=ref.label))
    return out


def _reference(target: Cell, fitted: list[Cell]) -> Cell | None:
    """A fitted training cell of the target's work and method: same network first, nearest size."""
    same = [c for c in bd.training_cells(fitted) if c.method == target.method and cellmod.same_work(c, target)]
    return min(same, key=lambda c: (c.network != target.network,
                                    abs(c.shape.world_size - target.shape.world_size)), default=None)


def record_values(record: dict) -> dict:
    values = {k: record.get(k) for k in SELECT_KEYS}
    values["network"] = experiment.network_name(record.get("network"))
    return values


def validate(records: list[dict], selector: dict) -> list[dict]:
    """Fit on the records the selector picks; predict every other training cell; compare."""
    fit_records = [r for r in records if _matches(record_values(r), selector)]
    fitted, comm = cellmod.pool(fit_records)
    held_out, _ = cellmod.pool([r for r in records if not _matches(record_values(r), selector)])
    cal = calibrate([bd.breakdown(c, fitted, comm) for c in bd.training_cells(fitted)])
    rows = []
    for cell in bd.training_cells(held_out):
        ref = _reference(cell, fitted)
        row = {"cell": cell.label, "measured_step_ms": cell.step_ms, "predicted_step_ms": None,
               "error": None, "notes": [], **_cell_values(cell), "measured_throughput": cell.throughput}
        if ref is None:
            row["notes"].append("no fitted cell of this work and method")
        else:
            prediction = predict(Target(cell.method, cell.network, cell.shape), ref, cells=fitted,
                                 comm=comm, cal=cal, emulated=cell.emulated)
            row.update(predicted_step_ms=prediction["predicted_step_ms"], from_cell=ref.label,
                       notes=prediction["notes"], predicted_throughput=prediction["predicted_throughput"])
            if prediction["predicted_step_ms"] is not None:
                row["error"] = prediction["predicted_step_ms"] / cell.step_ms - 1
        rows.append(row)
    return rows
