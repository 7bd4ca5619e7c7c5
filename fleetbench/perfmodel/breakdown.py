"""The step time of a multi-device training cell taken apart, and the scaling efficiency lost to
each part. Definitions (all in ms per step; docs/guide/explain.md says why):

  compute       the median rank's step time minus its reader wait in the method=none control of
                the same shape (ranks run free there, each at its own speed, sharing the machine as
                in the measured cell); without a control, the 1-device run's times its core
                sharing at the cell's shape (analysis.scaling) when a thread-scaling curve was
                measured, else the 1-device run's as it is, and then core sharing cannot be told
                from communication (both land in exposed communication)
  imbalance     slowest minus median rank step time of the control (in a synchronised cell every
                rank waits for the slowest, so its own per-rank times are equal)
  reader        the cell's reader wait per step (slowest rank)
  exposed comm  measured(method) - measured(none): what synchronisation costs the step
  predicted     the gradient bytes through the all-reduce link model (alphabeta)
  overlap       predicted - exposed: communication hidden behind computation (negative: the
                all-reduce cost more than the link model says)
  explained     compute + exposed + imbalance + reader; it must equal measured within 5%
                (ACCOUNTING_TOLERANCE): the parts come from two runs, and a difference means a part
                is counted twice or the reader behaves differently under synchronisation

Efficiency = 1-device step / cell step (per-rank work is the same, so this equals
throughput(N) / (N x throughput(1))); the loss 1 - efficiency splits exactly into contention
(compute - 1-device compute), communication (exposed), imbalance, reader (beyond the 1-device
run's) and what the accounting left unexplained.
"""
from __future__ import annotations

from fleetbench.perfmodel import cells as cellmod
from fleetbench.perfmodel import gradbytes, links, scaling
from fleetbench.perfmodel.cells import Cell

ACCOUNTING_TOLERANCE = 0.05
PARTS = ("compute_ms", "exposed_comm_ms", "imbalance_ms", "reader_ms")
LOSSES = ("contention", "communication", "imbalance", "reader", "unexplained")


def work_key(cell: Cell) -> str:
    """What the calibration (host cost, overlap window) keys a work by: the model at its preset, and
    a published table's framework, precision, batch and sequence (its runtime and build aside)."""
    config = cell.config
    return repr((cell.source, cell.benchmark, cell.preset, config.get("framework"), config.get("precision"),
                 config.get("model"), config.get("batch_size") if cell.source else None, config.get("seq_len")))


def identity(cell: Cell) -> dict:
    return {"benchmark": cell.benchmark, "preset": cell.preset, "method": cell.method,
            "network": cell.network, "nodes": cell.shape.nodes,
            "devices_per_node": cell.shape.devices_per_node, "world_size": cell.shape.world_size,
            "runs": cell.runs, "excluded": cell.excluded, "unit": cell.unit, "source": cell.source,
            "framework": cell.framework, "precision": cell.precision, "batch": cell.config.get("batch_size"),
            "model": cell.config.get("model"), "sync_every": cell.sync_every, "work_key": work_key(cell),
            "circumstances": {"paddle": cell.work[4], "device": cell.work[5], "host": cell.work[6]},
            "config": cell.config, "files": list(cell.files), "mfu": cell.mfu, "measured_parts": cell.measured_parts,
            "gpu": cell.gpu}


def _base_parts(cell: Cell, control: Cell | None, single: Cell | None, sharing: float) -> dict:
    """compute, imbalance, exposed communication: from the control, else from the 1-device run
    times the core sharing of the cell's shape (1.0 when it is not measured)."""
    if control is not None:
        return {"compute_ms": control.median_rank_ms - control.median_reader_ms,
                "imbalance_ms": control.max_rank_ms - control.median_rank_ms,
                "exposed_comm_ms": cell.step_ms - control.step_ms}
    return {"compute_ms": single.step_ms * sharing - single.median_reader_ms,
            "imbalance_ms": cell.max_rank_ms - cell.median_rank_ms,
            "exposed_comm_ms": cell.step_ms - single.step_ms * sharing}


def _sharing(cell: Cell, single: Cell | None, cells: list[Cell], found) -> tuple[float, str]:
    """Core sharing of the 1-device run at the cell's shape, when measured (on this work or
    borrowed from other works on the host); an assumed linear one is not used here. GPU work:
    node sharing from the 1-node run against a known node link (perfmodel/node.py)."""
    if single is None:
        return 1.0, ""
    if cell.gpu:
        shared = found is not None and found.sharing != 1.0 and found.sharing_per_node == cell.shape.devices_per_node
        return (found.sharing, f"x{found.sharing:.3f} node sharing (from the 1-node run)") if shared else (1.0, "")
    factor, note, kind = scaling.core_sharing(single, cell.shape, cell.emulated, cells)
    return (factor, note) if kind != scaling.ASSUMED and note else (1.0, "")


def _losses(out: dict, single: Cell, has_control: bool) -> dict:
    """Shares of the cell's step time the 1-device run did not spend; they sum to 1 - efficiency."""
    total = out["measured_step_ms"]
    compute_1 = single.step_ms - single.median_reader_ms
    shares = {"contention": (out["compute_ms"] - compute_1) if has_control else 0.0,
              "communication": out["exposed_comm_ms"], "imbalance": out["imbalance_ms"],
              "reader": out["reader_ms"] - single.median_reader_ms,
              "unexplained": total - out["explained_step_ms"]}
    return {name: value / total for name, value in shares.items()}


def predicted_comm(cell: Cell, comm: list, cells: list[Cell] = (), found=None) -> tuple[float | None, str, str, float]:
    """(ms, link description, problem, latency share) of the cell's gradient collectives per step."""
    if cell.comm_bytes is None:
        return None, "", "the records carry no gradient bytes per step (comm_bytes_per_step)", 0.0
    found = found or links.link_for(cell, cell.network, cell.shape, list(cells), comm)
    link, problem = found.link, found.problem
    if link is None:
        return None, "", problem, 0.0
    ranks = cell.shape.world_size
    return (gradbytes.comm_ms(link, cell.traffic, ranks), link.describe(), "",
            gradbytes.latency_share(link, cell.traffic, ranks))


def breakdown(cell: Cell, cells: list[Cell], comm: list) -> dict:
    """The breakdown of one multi-device training cell (see the module docstring)."""
    out = identity(cell)
    out.update({"measured_step_ms": cell.step_ms, "measured_step_std_ms": cell.step_std_ms,
                "throughput": cell.throughput, "notes": []})
    control, control_note = cellmod.find_control(cell, cells)
    single = cellmod.find_single(cell, cells)
    if control is None and single is None:
        out["notes"].append("no method=none control and no 1-device run of this work: no breakdown")
        return out
    found = links.link_for(cell, cell.network, cell.shape, list(cells), comm) if cell.comm_bytes is not None else None
    sharing, sharing_note = (1.0, "") if control else _sharing(cell, single, cells, found)
    out.update(_base_parts(cell, control, single, sharing))
    out["reader_ms"] = cell.reader_ms
    out["compute_source"] = control_note if control else (
        f"1-device run ({single.method}) {sharing_note}" if sharing_note else
        f"1-device run ({single.method}); no method=none control and no measured thread scaling, "
        "so core sharing is counted in exposed communication")
    out["explained_step_ms"] = sum(out[part] for part in PARTS)
    out["accounting_error"] = out["explained_step_ms"] / cell.step_ms - 1
    out["accounting_ok"] = abs(out["accounting_error"]) <= ACCOUNTING_TOLERANCE
    comm_ms, link_text, problem, latency = predicted_comm(cell, comm, cells, found)
    out.update({"predicted_comm_ms": comm_ms, "link": link_text or None, "comm_buckets": cell.comm_buckets,
                "latency_share": latency,
                "comm_bytes": cell.traffic.sent_bytes if cell.traffic else None})  # really sent
    if cell.traffic and cell.traffic.note:
        out["notes"].append(cell.traffic.note)
    if problem:
        out["notes"].append(f"no predicted communication: {problem}")
    out["overlap_ms"] = None if comm_ms is None else comm_ms - out["exposed_comm_ms"]
    out["overlap_fraction"] = (out["overlap_ms"] / comm_ms) if comm_ms else None
    out["contention_ms"] = None
    out["efficiency"] = out["losses"] = None
    if single is not None:
        out["efficiency"] = single.step_ms / cell.step_ms
        out["losses"] = _losses(out, single, control is not None or sharing != 1.0)
        if control is not None or sharing != 1.0:
            out["contention_ms"] = out["compute_ms"] - (single.step_ms - single.median_reader_ms)
    else:
        out["notes"].append("no 1-device run of this work: no efficiency")
    return out


def training_cells(cells: list[Cell]) -> list[Cell]:
    """The cells a breakdown is made for: several devices, a real training method."""
    return [c for c in cells if c.shape.world_size > 1 and not c.control]


# A part whose prediction is off by more than this share of the measured step is named as missing.
PART_TOLERANCE = 0.15
PART_NAMES = {"compute_ms": "compute", "exposed_comm_ms": "exposed comm", "imbalance_ms": "imbalance",
              "reader_ms": "reader"}


def parts_check(b: dict) -> dict | None:
    """For a cell whose runs took their steps apart: each part predicted beside measured (ms a
    step) and the part that misses most, named when it is off by more than PART_TOLERANCE of the
    measured step. Predicted parts: the control's compute, imbalance and reader (the model's base)
    and, for exposed communication, what the predicted step holds beyond them."""
    measured = b.get("measured_parts")
    if not measured or b.get("predicted_step_ms") is None or b.get("compute_ms") is None:
        return None
    predicted = {p: b.get(p) or 0.0 for p in ("compute_ms", "imbalance_ms", "reader_ms")}
    predicted["exposed_comm_ms"] = b["predicted_step_ms"] - sum(predicted.values())
    off = {p: predicted[p] - measured[p] for p in cellmod.MEASURED_PARTS}
    worst = max(off, key=lambda p: abs(off[p]))
    missing = worst if abs(off[worst]) > PART_TOLERANCE * b["measured_step_ms"] else None
    return {"predicted": predicted, "measured": dict(measured), "off_ms": off, "misses": missing}
