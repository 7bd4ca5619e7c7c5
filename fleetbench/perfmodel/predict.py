"""Step time and throughput of cells not measured, from the model alone, with a range.

A prediction of a training cell (work, method, network, nodes x devices per node) is, a micro-step,

    predicted = base + exposed(link, gradient bytes, calls) + host cost per byte x bytes

base: the method=none control's step time of that shape (compute + imbalance + reader), else the
nearest control (or the 1-device run) scaled by core sharing (analysis.scaling: from a measured
thread-scaling curve), for GPU work by node sharing (analysis.node); else nothing. The link:
links.link_for (NCCL's ring or tree for GPUs, perfmodel/nccl.py); the bytes and calls a step
really sends: analysis.gradbytes, scaled to the target's accumulation (a sync every k micro-steps
sends bytes/k a micro-step). Exposed: the whole all-reduce for post-backward methods; for
overlapped ones, on GPUs the overlap model (perfmodel/overlap: the gradients' order and sizes
against backward), on CPUs the window the work's other cells of the method hid (gloo computes on
the cores that train, which no model of backward alone captures), else nothing hidden (an upper
bound). Calibration (`calibrate`), from measured cells other than the one predicted: the host cost
per byte is what a post-backward method's exposed communication takes beyond the link model,
measured on the same work's cells, else on the same framework's (never another framework's).

Every prediction is made three times (perfmodel/ranges): every uncertain input at its fast end, as
it is, at its slow end; `predicted_step_range` and `predicted_throughput_range` carry the ends.
"""
from __future__ import annotations

import dataclasses

from fleetbench.perfmodel import breakdown as bd
from fleetbench.perfmodel import cells as cellmod
from fleetbench.perfmodel import gradbytes, links, node, overlap, published, ranges, scaling
from fleetbench.perfmodel.cells import Cell, Shape


@dataclasses.dataclass(frozen=True)
class Target:
    method: str
    network: str | None
    shape: Shape
    rate_gbit: float | None = None
    transport: str | None = None  # of a link given by rate, or of the network (links.TRANSPORTS)
    efficiency: float | None = None  # share of the rate delivered, replacing the transport's
    nics: int | None = None  # NICs a node for a link given by rate
    sync_every: int | None = None  # micro-steps between all-reduces (None: the reference cell's)
    network_rate: tuple | None = None  # (rate, transport, NICs) of `network` when no fitted record has it
    node_prior: bool = True  # from one GPU alone, assume node.prior (off: to fit it, perfmodel/fit_node_prior.py)

    def change(self) -> dict:
        return {"rate_gbit": self.rate_gbit, "transport": self.transport, "efficiency": self.efficiency,
                "nics": self.nics, "network_rate": self.network_rate}

    def describe(self, ref: Cell) -> str:
        net = f"rate {self.rate_gbit:g} Gbit/s" if self.rate_gbit else (self.network or "local")
        return " ".join(p for p in (ref.benchmark, ref.preset or "", self.method, net, str(self.shape)) if p)


# ---- calibration from measured cells -------------------------------------------------------------

def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _framework(b: dict) -> tuple:
    return b.get("source"), b.get("framework")


def calibrate(breakdowns: list[dict]) -> dict:
    """Host cost per byte of the post-backward methods (on CPU, of every method: gloo hides nothing),
    by work and method and by framework and method, and the overlap window (ms hidden) of the GPU
    cells of the others, by work and method only: how much a
    backward hides depends on its length and on the order its gradients come in, which another work
    does not tell. Latency-bound cells teach neither (gradbytes.LATENCY_BOUND), nor do cells that
    accumulate gradients (a sync every k > 1 micro-steps): their residual cannot be told per byte
    from per micro-step."""
    usable = [b for b in breakdowns if b.get("predicted_comm_ms") and b.get("comm_bytes")
              and b.get("latency_share", 0.0) < gradbytes.LATENCY_BOUND and (b.get("sync_every") or 1) == 1]
    host: dict = {}
    works: dict = {}  # key -> the works whose cells gave its host cost
    for b in usable:  # on CPU nothing hides (overlap.GLOO_SERIAL): every method's cells price its host cost
        if b["method"] in cellmod.POST_BACKWARD or not b.get("gpu"):
            per_byte = (b["exposed_comm_ms"] - b["predicted_comm_ms"]) / b["comm_bytes"]
            for key in ((b.get("work_key"), b["method"]), (_framework(b), b["method"])):
                host.setdefault(key, []).append(per_byte)
                works.setdefault(key, set()).add(f"{b['benchmark']} {b['preset'] or ''}".strip())
    cal = {"host": {key: _mean(v) for key, v in host.items()}, "window": {}, "host_works": works}
    for b in usable:
        if b["method"] not in cellmod.POST_BACKWARD and b.get("gpu"):
            per_byte, _ = host_for(b, b["method"], cal)
            hidden = b["predicted_comm_ms"] + per_byte * b["comm_bytes"] - b["exposed_comm_ms"]
            hidden = min(b["predicted_comm_ms"], max(0.0, hidden))
            # Backward hides at most its own length, whatever the link. A cell that hid all of
            # its link shows only a lower bound of that window: the largest one seen is the best.
            key = (b.get("work_key"), b["method"])
            cal["window"][key] = max(cal["window"].get(key, 0.0), hidden)
    return cal


def host_for(work: dict, method: str, cal: dict) -> tuple[float, str]:
    """(ms per byte, where from): the same work's cells of the method, else of bsp; else the same
    framework's (and source's) other works. By work first: the same bytes cost more host time
    beside larger activations; never across frameworks: another's reducer is another program."""
    label = f"{work['benchmark']} {work['preset'] or ''}".strip()
    fw = _framework(work)
    for key in ((work.get("work_key"), method), (work.get("work_key"), "bsp"), (fw, method), (fw, "bsp")):
        if key in cal["host"]:
            value = cal["host"][key]
            if key[0] == work.get("work_key"):
                return value, f"host cost {value * 1e9:.3g} ms/GB measured on other {label} {key[1]} cells"
            works = ", ".join(sorted(cal.get("host_works", {}).get(key, ())))
            who = f"of framework {fw[1]}" if fw[1] else (f"of table {fw[0]}" if fw[0] else "measured here")
            return value, (f"host cost {value * 1e9:.3g} ms/GB borrowed from other works' {key[1]} cells "
                           f"{who} ({works}): this work has no {key[1]} cell to measure its own")
    return 0.0, "no other bsp cell of this work or framework with a predicted communication: host cost taken as 0"


def window_for(work: dict, method: str, cal: dict) -> tuple[float | None, str]:
    """(ms of communication backward hid on the work's other cells of the method, where from)."""
    key = (work.get("work_key"), method)
    if key in cal["window"]:
        value = cal["window"][key]
        return value, f"overlap window {value:.1f} ms measured on other {method} cells of this work"
    return None, ""


# ---- the model ----------------------------------------------------------------------------------

def base_for(ref: Cell, shape: Shape, emulated: bool, cells: list[Cell],
             bound: str = ranges.POINT) -> tuple[float | None, str]:
    """(compute + imbalance + reader in ms, where from) for `ref`'s work at `shape`."""
    controls = [c for c in cells if c.control and cellmod.same_work(c, ref)]
    exact = [c for c in controls if c.shape == shape]
    if exact:
        return _spread(exact[0], bound), f"control {shape}"
    near = sorted(controls, key=lambda c: (c.shape.devices_per_node != shape.devices_per_node,
                                           abs(c.shape.world_size - shape.world_size)))
    source = near[0] if near else cellmod.find_single(ref, cells)
    if source is None:
        return None, "no method=none control and no 1-device run of this work"
    scale, note, _ = scaling.core_sharing(source, shape, emulated, cells)
    what = f"control {source.shape}" if source.control else "1-device run"
    return _spread(source, bound) * scale, f"{what} {note}".strip()


def _spread(cell: Cell, bound: str) -> float:
    return ranges.pick(bound, cell.step_ms - cell.step_std_ms, cell.step_ms, cell.step_ms + cell.step_std_ms)


def _traffic(ref: Cell, target: Target, bound: str) -> tuple[gradbytes.Traffic, int]:
    """What a micro-step of the target sends: the reference's traffic moved to the target's sync
    interval and method (its calls: published.calls_per_step), and to the fewest or most bytes an
    ambiguous precision sends at the bound."""
    k = target.sync_every or ref.sync_every
    point, low, high, _ = gradbytes.precision_bytes(ref.config, ref.label)
    scale = ref.sync_every / k * ranges.pick(bound, low / point, 1.0, high / point)
    t = ref.traffic
    calls = t.allreduce_calls * ref.sync_every
    tensors = ref.grad_tensors or (len(ref.order.tensors) if ref.order else None)
    if target.method != ref.method and tensors and not t.gather_calls:
        calls = published.calls_per_step(target.method, t.allreduce_bytes * ref.sync_every, tensors)
    return dataclasses.replace(t, allreduce_bytes=t.allreduce_bytes * scale, allreduce_calls=calls / k,
                               gather_bytes=t.gather_bytes * scale), k


def exposed_for(ref: Cell, method: str, comm_ms: float, sim: dict, cal: dict) -> tuple[float, str]:
    """(ms a micro-step the all-reduce adds to the step, why): module doc. `sim` holds the link,
    traffic, sync interval, base and bound the overlap model needs."""
    own_ms, own_note = node.method_cost(ref, method, sim["cells"], sim["node_link"], sim["bound"]) if ref.gpu \
        else (0.0, "")
    exposed, why = _exposed(ref, method, comm_ms, sim, cal)
    return max(exposed, own_ms / sim["k"]), why + (f"; {own_note}" if own_note else "")


def _exposed(ref: Cell, method: str, comm_ms: float, sim: dict, cal: dict) -> tuple[float, str]:
    """exposed_for without the method's own cost."""
    if method in cellmod.POST_BACKWARD:
        return comm_ms, f"{method} all-reduces after backward: no overlap"
    if method not in overlap.OVERLAPPED:
        return comm_ms, f"method {method} not modelled: taken as post-backward (an upper bound)"
    if not ref.gpu:
        return comm_ms, overlap.GLOO_SERIAL
    if ref.gpu and ref.order is not None:
        k, bound, link = sim["k"], sim["bound"], sim["link"]
        share, share_note = node.backward_share(ref, method, sim["cells"], sim["node_link"], bound)
        backward = sim["base"] * share
        scale = sim["traffic"].allreduce_bytes * k / ref.order.total
        price = lambda b: link.allreduce_ms(b, 1)  # noqa: E731  (one call of b bytes)
        if bound == ranges.FAST:
            per_sync = overlap.best_merge_ms(ref.order, scale, backward, price)
        else:
            calls = overlap.buckets(ref.order, scale, overlap.bucket_caps(method, ref.config))
            per_sync = overlap.exposed_ms(calls, backward, price)
        return per_sync / k, (f"overlap model: {per_sync:.1f} ms of {comm_ms * k:.1f} ms exposed after a "
                              f"{backward:.0f} ms backward ({ref.order.source})" + (f"; {share_note}" if share_note else ""))
    window, note = window_for(bd.identity(ref), method, cal)
    if window is not None:
        return comm_ms - min(window, comm_ms), note
    return comm_ms, (f"no gradient order of this work and no other {method} cell of it measured its "
                     "overlap: none assumed, so this step time is an upper bound")


def _comm(ref: Cell, target: Target, cells: list[Cell], comm: list, bound: str) -> tuple:
    """(ms a micro-step of the whole all-reduce or None, its link or None, traffic, k, sharing, notes,
    the node's link, whether sharing is the node-sharing prior)."""
    traffic, k = _traffic(ref, target, bound)
    found = links.link_for(ref, target.network, target.shape, cells, comm, target.change(), bound)
    link = found.link
    sharing = found.sharing if ref.gpu and found.sharing_per_node == target.shape.devices_per_node else 1.0
    notes = list(found.notes)
    alone = ref.gpu and found.one_gpu_alone  # nothing measured what the node's GPUs share
    prior = alone and target.node_prior
    if alone:
        sharing, note = node.prior(target.shape.devices_per_node, bound) if prior else (
            1.0, "no node sharing assumed (the prior off): this throughput is an upper bound")
        notes.append(note)
    notes += [f"link: {link.describe()}" if link else f"no link: {found.problem}"]
    notes += [n for n in (traffic.note, link and gradbytes.latency_note(link, traffic, target.shape.world_size)) if n]
    if k != ref.sync_every:
        notes.append(f"all-reduce once every {k} micro-steps (the reference cell's: every {ref.sync_every})")
    comm_ms = gradbytes.comm_ms(link, traffic, target.shape.world_size) if link else None
    return comm_ms, link, traffic, k, sharing, notes, found.node_link, prior


def predict(target: Target, ref: Cell, cells: list[Cell], comm: list, cal: dict,
            emulated: bool | None = None, bound: str = ranges.POINT) -> dict:
    """Predicted step time (and throughput, efficiency) of `target` for the work and gradient
    bytes of `ref`, a measured training cell of the same method, with every uncertain input at
    `bound` (ranges)."""
    emulated = ref.emulated if emulated is None else emulated
    out = {"target": target.describe(ref), "predicted_step_ms": None, "predicted_throughput": None,
           "predicted_efficiency": None, "notes": [], **_target_values(target, ref)}
    base, base_note = base_for(ref, target.shape, emulated, cells, bound)
    comm_ms, exposed, host_ms, sharing = 0.0, 0.0, 0.0, 1.0
    if target.shape.world_size > 1 and ref.comm_bytes is None:
        comm_ms = None
        out["notes"].append("no gradient bytes per step in the records")
    elif target.shape.world_size > 1:
        # GPU work all-reduces with NCCL, CPU work with gloo; links derives what no record measured;
        # gradbytes counts what a step really sends (sparse rows, not a dense table)
        comm_ms, link, traffic, k, sharing, notes, node_link, out["node_prior"] = _comm(ref, target, cells, comm,
                                                                                         bound)
        out["notes"] += notes
        if base is not None and comm_ms is not None:
            base *= sharing
            sim = {"link": link, "traffic": traffic, "k": k, "base": base, "bound": bound, "cells": cells,
                   "node_link": node_link}
            exposed, why = exposed_for(ref, target.method, comm_ms, sim, cal)
            per_byte, host_note = host_for(bd.identity(ref), target.method, cal)
            host_ms = per_byte * traffic.sent_bytes
            out["notes"] += [why, host_note]
    out["notes"].insert(0, f"base: {base_note}" + (f", x{sharing:.3f} node sharing" if sharing != 1.0 else ""))
    out.update({"base_ms": base, "predicted_comm_ms": comm_ms, "hidden_ms": (comm_ms or 0.0) - exposed,
                "host_ms": host_ms, "overlap_fraction": 1 - exposed / comm_ms if comm_ms else 0.0})
    if base is None or comm_ms is None:
        return out
    step = base + exposed + host_ms
    out["predicted_step_ms"] = step
    out["predicted_throughput"] = ref.units_per_rank_step * target.shape.world_size / step * 1e3
    single = cellmod.find_single(ref, cells)
    if single is not None:
        out["predicted_efficiency"] = single.step_ms / step
    return out


def predict_range(target: Target, ref: Cell, cells: list[Cell], comm: list, cal: dict,
                  emulated: bool | None = None) -> dict:
    """`predict` at the point, with `predicted_step_range` and `predicted_throughput_range` from
    the same prediction with every uncertain input at its fast and its slow end."""
    out = predict(target, ref, cells, comm, cal, emulated)
    if out["predicted_step_ms"] is None:
        return out
    ends = [predict(target, ref, cells, comm, cal, emulated, bound)["predicted_step_ms"]
            for bound in (ranges.FAST, ranges.SLOW)]
    low, high = min(ends + [out["predicted_step_ms"]]), max(ends + [out["predicted_step_ms"]])
    per_step = out["predicted_throughput"] * out["predicted_step_ms"]
    out["inputs_step_range"] = [low, high]
    if ref.gpu:  # the model's own error, calibrated on the fitted GPU tables (ranges.MODEL_ERROR),
        # widened by the node-sharing prior's spread where the prediction assumed it
        spread = node.prior_spread(target.shape.devices_per_node) if out.get("node_prior") else (1.0, 1.0)
        low, high = ranges.widened(out["predicted_step_ms"], low, high, target.shape.nodes, spread)
    out["predicted_step_range"] = [low, high]
    out["predicted_throughput_range"] = [per_step / high, per_step / low]
    return out


def _target_values(target: Target, ref: Cell) -> dict:
    """The predicted cell's identity, as cell_values (charts group predictions by it)."""
    network = f"{target.rate_gbit:g} Gbit/s" if target.rate_gbit else target.network
    return {"benchmark": ref.benchmark, "preset": ref.preset, "method": target.method, "network": network,
            "nodes": target.shape.nodes, "devices_per_node": target.shape.devices_per_node,
            "world_size": target.shape.world_size, **work_values(ref)}


def work_values(cell: Cell) -> dict:
    """What names a cell's work beyond benchmark and preset: framework, precision, batch, source."""
    config = cell.config
    return {"framework": config.get("framework"), "precision": config.get("precision"),
            "batch": config.get("batch_size"), "model": config.get("model"), "source": cell.source}


# ---- the measured cells explained -----------------------------------------------------------------

def explain(records: list[dict]) -> list[dict]:
    """Breakdown of every multi-device training cell of `records` (explain_cells)."""
    return explain_cells(*cellmod.pool(records))


def explain_cells(cells: list[Cell], comm: list) -> list[dict]:
    """Breakdown of every multi-device training cell, each with the step time the model predicts
    from its control, its gradient bytes and its comm record (overlap from the other cells)."""
    targets = bd.training_cells(cells)
    breakdowns = [bd.breakdown(c, cells, comm) for c in targets]
    for cell, b in zip(targets, breakdowns):
        others = [o for o in breakdowns if o is not b]
        target = Target(cell.method, cell.network, cell.shape)
        prediction = predict_range(target, cell, cells, comm, calibrate(others))
        b["predicted_step_ms"] = prediction["predicted_step_ms"]
        b["predicted_step_range"] = prediction.get("predicted_step_range")
        b["prediction_error"] = (None if prediction["predicted_step_ms"] is None
                                 else prediction["predicted_step_ms"] / cell.step_ms - 1)
        b["prediction_notes"] = prediction["notes"]
        b["predicted_host_ms"] = prediction.get("host_ms")  # what the calibration added beyond the link
        b["parts_check"] = bd.parts_check(b)  # predicted beside measured, part by part
    return breakdowns
